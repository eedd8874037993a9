//! `noetic serve FLOW.json`: the workflow's harness over HTTP (`noetic-server`): the native API,
//! the AI SDK UI message stream and the web page, until SIGTERM or SIGINT.

use std::net::SocketAddr;

use noetic_server::{NoeticServer, ServeConfig, Token};
use serde_json::json;

use crate::Failure;
use crate::args::Options;
use crate::signals::Signals;
use crate::workflow::{read, setup_document};

/// Where `serve` listens unless `--listen` says otherwise.
pub(crate) const DEFAULT_LISTEN: &str = "127.0.0.1:8787";

/// The variable a token may come from instead of `--token` (which shows in `ps`).
pub(crate) const TOKEN_VAR: &str = "NOETIC_SERVE_TOKEN";

pub(crate) async fn serve(flow: &str, options: &Options) -> Result<(), Failure> {
    let mut signals = Signals::install()?;
    let listen: SocketAddr = options
        .listen
        .as_deref()
        .unwrap_or(DEFAULT_LISTEN)
        .parse()
        .map_err(|error| Failure::Usage(format!("--listen must be IP:PORT: {error}")))?;
    let given = match std::env::var(TOKEN_VAR) {
        Ok(value) if !value.is_empty() => Some(value),
        _ => options.token.clone(),
    };
    let token = given
        .map(Token::new)
        .transpose()
        .map_err(|error| Failure::Usage(format!("--token: {error}")))?;
    // Anything but loopback needs a token: one is made when none is given, and printed once.
    let (token, generated) = match token {
        Some(token) => (Some(token), false),
        None if !listen.ip().is_loopback() => (Some(Token::generate()), true),
        None => (None, false),
    };
    let mut config = ServeConfig::new();
    if let Some(token) = &token {
        config = config.token(token.clone());
    }
    if !listen.ip().is_unspecified() {
        config = config.allow_host(listen.ip().to_string());
    }
    for host in &options.allow_host {
        config = config.allow_host(host.clone());
    }
    for origin in &options.cors_origin {
        config = config.allow_origin(origin.clone());
    }
    if let Some(queue) = options.max_queue {
        config = config.max_queue(queue);
    }
    let document = read(flow)?;
    let setup = match &options.storage {
        Some(path) => {
            let store = noetic_storage_sqlite::SqliteStorage::open(path).await?;
            setup_document(flow, &document, options, Some(store)).await?
        }
        None => setup_document(flow, &document, options, None).await?,
    };
    let harness = setup.harness.clone();
    if options.storage.is_some() {
        // Turns a crash cut short, and messages no turn took, run again before anything new.
        let resumed = harness.recover().await?;
        if !resumed.is_empty() {
            eprintln!("resumed: {}", json!(resumed));
        }
    }
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|error| Failure::Usage(format!("--listen {listen}: cannot listen: {error}")))?;
    let bound = listener
        .local_addr()
        .map_err(|error| Failure::Usage(format!("--listen {listen}: {error}")))?;
    let server = NoeticServer::new(harness, config);
    match (&token, generated) {
        (Some(token), true) => eprintln!(
            "listening on http://{bound}/ (token generated for this run, shown once: open http://{bound}/#token={})",
            token.expose()
        ),
        (Some(_), false) => eprintln!("listening on http://{bound}/ (bearer token required)"),
        (None, _) => eprintln!("listening on http://{bound}/"),
    }
    let stop = async move {
        signals.next().await;
    };
    let report = server
        .serve(listener, stop, options.drain)
        .await
        .map_err(|error| Failure::Usage(format!("serving on {bound}: {error}")))?;
    for (thread, drain) in &report.drained {
        eprintln!("drain: {}", json!({"thread_id": thread, "report": drain}));
    }
    eprintln!("stopped");
    drop(setup);
    Ok(())
}
