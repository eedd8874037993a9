//! `RestateClient`: a thread's turns through the Restate ingress, deployments and cancels through
//! the admin API — plain HTTP, no Restate crate needed on the client's side.

use std::time::Duration;

use noetic_core::{ApprovalDecision, Item, Result};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::error::error;
use crate::inbox::{Accepted, MessageInput, SteerOutcome, ThreadStatus};
use crate::thread::{AbortInput, TurnOutput};

/// How long a request to the server may take, except [`RestateClient::output`]'s wait.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// A turn accepted by Restate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnHandle {
    /// The thread the turn belongs to.
    pub thread: String,
    /// The invocation of the turn that answers the message (queued, running or ended).
    pub invocation_id: String,
    /// Whether an earlier `execute` (or steer) with the same message id was accepted already (this
    /// one was deduplicated).
    pub duplicate: bool,
}

/// A client of threads served on Restate ([`crate::RestateHost`]).
#[derive(Debug, Clone)]
pub struct RestateClient {
    http: reqwest::Client,
    ingress: String,
    admin: String,
}

impl RestateClient {
    /// A client of the server whose ingress is at `ingress_url` and admin API at `admin_url`.
    pub fn new(ingress_url: impl Into<String>, admin_url: impl Into<String>) -> Self {
        let trim = |url: String| url.trim_end_matches('/').to_owned();
        RestateClient {
            http: reqwest::Client::new(),
            ingress: trim(ingress_url.into()),
            admin: trim(admin_url.into()),
        }
    }

    /// Registers (or re-registers, `force`) the service endpoint at `service_url` with the server,
    /// so it sends invocations of `NoeticThread` there.
    ///
    /// # Errors
    /// `RESTATE_UNREACHABLE`, `RESTATE_REFUSED` (the server could not discover the endpoint).
    pub async fn register(&self, service_url: &str) -> Result<()> {
        let url = format!("{}/deployments", self.admin);
        let body = json!({"uri": service_url, "force": true});
        let _: Value = self.call(self.http.post(&url).json(&body), &url).await?;
        Ok(())
    }

    /// Sends the message `text` to `thread`, returning once the thread's inbox has it: it is the
    /// input of the thread's next turn, coalesced (in order) with the other messages sent before
    /// that turn begins, as a session's queued messages are. The handle names that turn.
    /// `message_id` makes it idempotent: the same id again (within the server's idempotency
    /// retention, a day by default, and among the inbox's last 256 messages and steers) is the same
    /// message, taken once (`duplicate`).
    ///
    /// # Errors
    /// `RESTATE_UNREACHABLE`, `RESTATE_REFUSED`.
    pub async fn execute(&self, thread: &str, text: &str, message_id: &str) -> Result<TurnHandle> {
        let url = format!(
            "{}/NoeticInbox/{}/execute/send",
            self.ingress,
            segment(thread)
        );
        let input = MessageInput {
            text: text.to_owned(),
            message_id: message_id.to_owned(),
        };
        // A one-way send (idempotent at the ingress), then its short answer.
        let sent: Value = self.post_keyed(&url, &input, message_id).await?;
        let inbox_call = sent["invocationId"]
            .as_str()
            .ok_or_else(|| error("RESTATE_REFUSED", format!("{url} answered {sent}")))?;
        let attach = format!(
            "{}/restate/invocation/{}/attach",
            self.ingress,
            segment(inbox_call)
        );
        let accepted: Accepted = self.call(self.http.get(&attach), &attach).await?;
        Ok(TurnHandle {
            thread: thread.to_owned(),
            invocation_id: accepted.invocation_id,
            duplicate: accepted.duplicate || sent["status"] == "PreviouslyAccepted",
        })
    }

    /// Steers `thread`'s running turn with the message `text`: it joins the turn before its next
    /// model request (between rounds; a round in flight is never cut) and is recorded there. With
    /// no turn running, or if the turn ends before its next request, the message joins the
    /// thread's next turn, as [`RestateClient::execute`]'s do. Idempotent by `message_id`, as
    /// `execute` is (the two share the inbox's memory of message ids).
    ///
    /// # Errors
    /// `RESTATE_UNREACHABLE`, `RESTATE_REFUSED`.
    pub async fn steer(&self, thread: &str, text: &str, message_id: &str) -> Result<SteerOutcome> {
        let url = format!("{}/NoeticInbox/{}/push", self.ingress, segment(thread));
        let input = MessageInput {
            text: text.to_owned(),
            message_id: message_id.to_owned(),
        };
        self.post_keyed(&url, &input, message_id).await
    }

    /// POSTs `body` to `url` with `key` as Restate's idempotency key.
    async fn post_keyed<T: DeserializeOwned>(
        &self,
        url: &str,
        body: &impl serde::Serialize,
        key: &str,
    ) -> Result<T> {
        let request = self
            .http
            .post(url)
            .header("idempotency-key", key)
            .json(body);
        self.call(request, url).await
    }

    /// What `thread` is doing: the turn running now, the steers and the gated calls waiting for
    /// it, and how its last turn ended. Answers while a turn runs.
    ///
    /// # Errors
    /// `RESTATE_UNREACHABLE`, `RESTATE_REFUSED`.
    pub async fn status(&self, thread: &str) -> Result<ThreadStatus> {
        let url = format!("{}/NoeticInbox/{}/status", self.ingress, segment(thread));
        self.call(self.http.post(&url), &url).await
    }

    /// Waits (at most `timeout`) for the turn's outcome.
    ///
    /// # Errors
    /// `RESTATE_TURN_FAILED` when the turn failed (its own code in the message);
    /// `RESTATE_UNREACHABLE` (also when `timeout` passed), `RESTATE_REFUSED`.
    pub async fn output(&self, turn: &TurnHandle, timeout: Duration) -> Result<TurnOutput> {
        let url = format!(
            "{}/restate/invocation/{}/attach",
            self.ingress,
            segment(&turn.invocation_id)
        );
        let request = self.http.get(&url).timeout(timeout);
        match self.send(request).await {
            Err(Refused::Status { status, body }) => {
                // The invocation's terminal error: `{"code": 409, "message": "CANCELLED: …"}`.
                let failure: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
                let message = failure["message"].as_str().unwrap_or(&body);
                Err(error(
                    "RESTATE_TURN_FAILED",
                    format!("turn {} failed ({status}): {message}", turn.invocation_id),
                ))
            }
            other => other.map_err(|refused| refused.into_error(&url)),
        }
    }

    /// Approves the gated call `approval_id` (`{invocation id}:{call id}`, as the
    /// `approval_requested` event names it) of a turn of `thread`. Sent before the turn waits, the
    /// decision is kept until it does.
    ///
    /// # Errors
    /// `RESTATE_UNREACHABLE`, `RESTATE_REFUSED` (also for a malformed id).
    pub async fn approve(&self, thread: &str, approval_id: &str) -> Result<()> {
        self.decide(thread, approval_id, &ApprovalDecision::Approved)
            .await
    }

    /// Rejects the gated call `approval_id`: it does not run, and its output (which the model reads)
    /// is `Tool call rejected: {reason}`.
    ///
    /// # Errors
    /// As [`RestateClient::approve`].
    pub async fn reject(&self, thread: &str, approval_id: &str, reason: &str) -> Result<()> {
        let decision = ApprovalDecision::Rejected {
            reason: reason.to_owned(),
        };
        self.decide(thread, approval_id, &decision).await
    }

    async fn decide(
        &self,
        thread: &str,
        approval_id: &str,
        decision: &ApprovalDecision,
    ) -> Result<()> {
        let url = format!("{}/NoeticThread/{}/decide", self.ingress, segment(thread));
        let mut body = serde_json::to_value(decision).unwrap_or(Value::Null);
        body["approval_id"] = Value::String(approval_id.to_owned());
        let _: Value = self.call(self.http.post(&url).json(&body), &url).await?;
        Ok(())
    }

    /// The thread's history as its last turn left it.
    ///
    /// # Errors
    /// `RESTATE_UNREACHABLE`, `RESTATE_REFUSED`.
    pub async fn history(&self, thread: &str) -> Result<Vec<Item>> {
        let url = format!("{}/NoeticThread/{}/history", self.ingress, segment(thread));
        self.call(self.http.post(&url), &url).await
    }

    /// Aborts the turn: Restate cancels its invocation, and the process running the turn, when it
    /// is the one Restate routes this request to (always, with one service process), cuts the
    /// round streaming now at once. Otherwise the cancel lands at the turn's next journaled step
    /// and the round in flight runs to its end first. The turn ends `CANCELLED` (its outcome a
    /// 409) and nothing after it runs.
    ///
    /// # Errors
    /// `RESTATE_UNREACHABLE`, `RESTATE_REFUSED`.
    pub async fn abort(&self, turn: &TurnHandle) -> Result<()> {
        let url = format!(
            "{}/NoeticThread/{}/abort",
            self.ingress,
            segment(&turn.thread)
        );
        let body = serde_json::to_value(AbortInput {
            invocation_id: turn.invocation_id.clone(),
        })
        .unwrap_or(Value::Null);
        let _: Value = self.call(self.http.post(&url).json(&body), &url).await?;
        Ok(())
    }

    async fn call<T: DeserializeOwned>(
        &self,
        request: reqwest::RequestBuilder,
        url: &str,
    ) -> Result<T> {
        self.send(request)
            .await
            .map_err(|refused| refused.into_error(url))
    }

    async fn send<T: DeserializeOwned>(
        &self,
        request: reqwest::RequestBuilder,
    ) -> std::result::Result<T, Refused> {
        let request = request
            .build()
            .map_err(|source| Refused::Unreachable(source.to_string()))?;
        let request = if request.timeout().is_none() {
            let mut request = request;
            *request.timeout_mut() = Some(REQUEST_TIMEOUT);
            request
        } else {
            request
        };
        let response = self
            .http
            .execute(request)
            .await
            .map_err(|source| Refused::Unreachable(source.to_string()))?;
        let status = response.status();
        let body = response
            .bytes()
            .await
            .map_err(|source| Refused::Unreachable(source.to_string()))?;
        if !status.is_success() {
            return Err(Refused::Status {
                status: status.as_u16(),
                body: String::from_utf8_lossy(&body).into_owned(),
            });
        }
        // A handler without a result answers with an empty body.
        let body: &[u8] = if body.is_empty() { b"null" } else { &body };
        serde_json::from_slice(body).map_err(|source| Refused::Status {
            status: status.as_u16(),
            body: format!("an answer that does not parse: {source}"),
        })
    }
}

/// Why a request got no usable answer.
enum Refused {
    Unreachable(String),
    Status { status: u16, body: String },
}

impl Refused {
    fn into_error(self, url: &str) -> noetic_core::Error {
        match self {
            Refused::Unreachable(why) => error("RESTATE_UNREACHABLE", format!("{url}: {why}")),
            Refused::Status { status, body } => {
                error("RESTATE_REFUSED", format!("{url}: {status}: {body}"))
            }
        }
    }
}

/// `text` as one URL path segment.
fn segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}
