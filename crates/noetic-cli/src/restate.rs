//! `noetic serve --engine restate=URL`: the served threads' turns run on Restate. This process is
//! a Restate deployment too (it serves the thread object on `--restate-endpoint` and registers it
//! with the admin API), so a turn Restate sends here runs in this process; any number of
//! `noetic serve` processes on the same Restate and the same store serve the same threads.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use noetic_core::adapter::durable::DurableStore;
use noetic_core::{
    AgentHarness, ApprovalDecision, DeliveryMode, Error, ExecuteOptions, Input, Item, Result,
};
use noetic_restate::{RestateClient, RestateHost, TurnHandle};
use noetic_server::{EngineStatus, TurnEngine};

use crate::Failure;
use crate::args::Options;

/// Where the thread object is served unless `--restate-endpoint` says otherwise.
pub(crate) const DEFAULT_ENDPOINT: &str = "127.0.0.1:9080";

/// Restate as the served threads' engine.
pub(crate) struct RestateEngine {
    client: RestateClient,
}

/// The text of a message for Restate, which takes text messages.
fn text_of(input: Input) -> Result<String> {
    let items = match input {
        Input::Text(text) => return Ok(text),
        Input::Item(item) => vec![item],
        Input::Items(items) => items,
        _ => Vec::new(),
    };
    let texts: Vec<String> = items.iter().filter_map(Item::text).collect();
    if texts.is_empty() || texts.len() != items.len() {
        return Err(Error::InvalidArgument {
            argument: "input",
            message: "threads on Restate take text messages only".to_owned(),
        });
    }
    Ok(texts.join("\n\n"))
}

impl TurnEngine for RestateEngine {
    fn execute(&self, input: Input, options: ExecuteOptions) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let text = text_of(input)?;
            let thread = options
                .thread_id
                .unwrap_or_else(|| noetic_core::DEFAULT_THREAD.to_owned());
            let message_id = options.message_id.ok_or_else(|| Error::InvalidArgument {
                argument: "message_id",
                message: "a message for Restate needs an id (its idempotency key)".to_owned(),
            })?;
            match options.delivery_mode.unwrap_or_default() {
                DeliveryMode::NextTurn => {
                    self.client.execute(&thread, &text, &message_id).await?;
                }
                // Restate's turns take steers between rounds; an interrupt is a steer too.
                _ => {
                    self.client.steer(&thread, &text, &message_id).await?;
                }
            }
            Ok(())
        })
    }

    fn abort<'a>(&'a self, thread_id: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let Some(invocation_id) = self.client.status(thread_id).await?.running else {
                return Ok(());
            };
            let turn = TurnHandle {
                thread: thread_id.to_owned(),
                invocation_id,
                duplicate: false,
            };
            self.client.abort(&turn).await
        })
    }

    fn status<'a>(&'a self, thread_id: &'a str) -> BoxFuture<'a, Result<EngineStatus>> {
        Box::pin(async move {
            let status = self.client.status(thread_id).await?;
            Ok(EngineStatus {
                running: status.running,
                pending_approvals: status.pending_approvals,
            })
        })
    }

    fn decide<'a>(
        &'a self,
        thread_id: &'a str,
        approval_id: &'a str,
        decision: ApprovalDecision,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            match decision {
                ApprovalDecision::Rejected { reason } => {
                    self.client.reject(thread_id, approval_id, &reason).await
                }
                _ => self.client.approve(thread_id, approval_id).await,
            }
        })
    }
}

/// The admin URL: `--restate-admin`, or the ingress's host on Restate's default admin port.
fn admin_url(ingress: &str, options: &Options) -> String {
    if let Some(admin) = &options.restate_admin {
        return admin.clone();
    }
    let (scheme, rest) = ingress.split_once("://").unwrap_or(("http", ingress));
    let host = rest.split('/').next().unwrap_or(rest);
    let host = host.rsplit_once(':').map_or(host, |(host, _)| host);
    format!("{scheme}://{host}:9070")
}

/// Serves `harness`'s graph to Restate as the thread object (recording threads in `store`) on
/// `--restate-endpoint`, registers it, and returns the engine the HTTP server sends turns to. The
/// deployment stops when `stopped` resolves.
pub(crate) async fn start(
    ingress: &str,
    options: &Options,
    harness: AgentHarness,
    store: Arc<dyn DurableStore>,
    stopped: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::result::Result<RestateEngine, Failure> {
    let endpoint = options
        .restate_endpoint
        .as_deref()
        .unwrap_or(DEFAULT_ENDPOINT);
    let listener = tokio::net::TcpListener::bind(endpoint)
        .await
        .map_err(|error| {
            Failure::Usage(format!(
                "--restate-endpoint {endpoint}: cannot listen: {error}"
            ))
        })?;
    let bound = listener
        .local_addr()
        .map_err(|error| Failure::Usage(format!("--restate-endpoint {endpoint}: {error}")))?;
    tokio::spawn(
        RestateHost::new(harness)
            .store(store)
            .serve(listener, stopped),
    );
    let admin = admin_url(ingress, options);
    let client = RestateClient::new(ingress, admin.clone());
    let deployment = format!("http://{bound}");
    client.register(&deployment).await?;
    eprintln!("restate: thread object at {deployment}, registered with {admin}");
    Ok(RestateEngine { client })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_admin_url_defaults_to_the_ingress_host_on_port_9070() {
        let options = Options::default();
        assert_eq!(
            admin_url("http://10.0.0.5:8080", &options),
            "http://10.0.0.5:9070"
        );
        assert_eq!(
            admin_url("https://restate.internal/", &options),
            "https://restate.internal:9070"
        );
        let given = Options {
            restate_admin: Some("http://admin:1".to_owned()),
            ..Options::default()
        };
        assert_eq!(admin_url("http://x:8080", &given), "http://admin:1");
    }

    #[test]
    fn only_text_messages_go_to_restate() {
        assert_eq!(text_of(Input::Text("hi".to_owned())).unwrap(), "hi");
        assert_eq!(
            text_of(Input::Items(vec![
                Item::user_text("a"),
                Item::user_text("b")
            ]))
            .unwrap(),
            "a\n\nb"
        );
        let refused = text_of(Input::Items(Vec::new())).unwrap_err();
        assert_eq!(refused.code(), "INVALID_ARGUMENT");
    }
}
