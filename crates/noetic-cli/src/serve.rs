//! `noetic serve FLOW.json`: the workflow's harness over HTTP (`noetic-server`): the native API,
//! the AI SDK UI message stream and the web page, until SIGTERM or SIGINT.

use std::net::SocketAddr;
use std::sync::Arc;

use noetic_core::adapter::durable::DurableStore;

use noetic_core::ServeOptions;
use noetic_server::{NoeticServer, ServeConfig, Token};
use serde_json::json;

use crate::Failure;
use crate::args::Options;
use crate::signals::Signals;
use crate::workflow::{Durable, read, setup_document};

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
    let durable = match (&options.storage, &options.postgres) {
        (Some(path), _) => {
            let store = noetic_storage_sqlite::SqliteStorage::open(path).await?;
            Some(if options.restate.is_some() {
                Durable::SharedSqlite(store)
            } else {
                Durable::Sqlite(store, true)
            })
        }
        (None, Some(url)) => Some(Durable::Postgres(
            noetic_storage_postgres::PostgresStorage::connect(url).await?,
        )),
        (None, None) => None,
    };
    // With an engine, the store is the threads' record: the engine writes, the harness reads.
    let record: Option<Arc<dyn DurableStore>> = match &durable {
        Some(Durable::SharedSqlite(store)) => Some(Arc::new(store.clone())),
        Some(Durable::Postgres(store)) if options.restate.is_some() => {
            Some(Arc::new(store.clone()))
        }
        _ => None,
    };
    let setup = setup_document(flow, &document, options, durable).await?;
    let harness = setup.harness.clone();
    if options.storage.is_some() && options.restate.is_none() {
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
    let (stopping, stopped) = tokio::sync::watch::channel(false);
    let server = match (&options.restate, record) {
        (Some(ingress), Some(store)) => {
            let mut stopped = stopped.clone();
            let deployment_stopped = async move {
                let _ = stopped.wait_for(|stop| *stop).await;
            };
            let engine =
                crate::restate::start(ingress, options, harness.clone(), store, deployment_stopped)
                    .await?;
            NoeticServer::on_engine(harness.clone(), config, Arc::new(engine))
        }
        _ => NoeticServer::new(harness.clone(), config),
    };
    match (&token, generated) {
        (Some(token), true) => eprintln!(
            "listening on http://{bound}/ (token generated for this run, shown once: open http://{bound}/#token={})",
            token.expose()
        ),
        (Some(_), false) => eprintln!("listening on http://{bound}/ (bearer token required)"),
        (None, _) => eprintln!("listening on http://{bound}/"),
    }
    // A host of a fleet also runs turns (unless --accept-only): claimed from the shared store,
    // drained and let go on the signal, for another host to carry on. With an engine, the engine
    // runs them.
    let fleet = (options.postgres.is_some() && !options.accept_only && options.restate.is_none())
        .then(|| {
            let harness = harness.clone();
            let mut stopped = stopped.clone();
            let mut serve_options = ServeOptions::default();
            if let Some(drain) = options.drain {
                serve_options = serve_options.drain(drain);
            }
            tokio::spawn(async move {
                harness
                    .serve(
                        async move {
                            let _ = stopped.wait_for(|stop| *stop).await;
                        },
                        serve_options,
                    )
                    .await
            })
        });
    let stop = async move {
        signals.next().await;
        let _ = stopping.send(true);
    };
    let report = server
        .serve(listener, stop, options.drain)
        .await
        .map_err(|error| Failure::Usage(format!("serving on {bound}: {error}")))?;
    if let Some(fleet) = fleet {
        match fleet.await {
            Ok(Ok(report)) => eprintln!(
                "fleet: {}",
                json!({
                    "claimed": report.claimed,
                    "released": report.released,
                    "lost": report.lost,
                    "failed": report.failed,
                    "abandoned": report.abandoned,
                })
            ),
            Ok(Err(error)) => eprintln!("fleet: error[{}]: {error}", error.code()),
            Err(error) => eprintln!("fleet: {error}"),
        }
    }
    for (thread, drain) in &report.drained {
        eprintln!("drain: {}", json!({"thread_id": thread, "report": drain}));
    }
    eprintln!("stopped");
    drop(setup);
    Ok(())
}
