//! The Vercel AI SDK UI message stream (v6 chunks, `x-vercel-ai-ui-message-stream: v1`), so `useChat`
//! with `DefaultChatTransport` talks to a noetic harness unchanged:
//!
//! - `POST /v1/ai-sdk/chat` takes what the transport sends (`{id, messages, trigger, messageId}`;
//!   `{id, message}` too, for a `prepareSendMessagesRequest` that sends only the last message). The
//!   chat id is the thread; the server keeps the history, so only the last message counts: a user
//!   message's text parts become the thread's next message (its id the idempotency key: a re-POST
//!   streams that message's turn again, or just `start` + `finish` once it is over); an assistant
//!   message whose tool parts are `approval-responded` approves or rejects those calls, and the
//!   response goes on with the same turn. The response is that turn as the UI message stream, until
//!   it ends or waits for a person's approval (`tool-approval-request`, then `finish` with
//!   `tool-calls`: the turn stays parked). A new user message while the thread waits for approvals
//!   is refused (409 `SERVER_AWAITING_APPROVAL`): answer them first.
//! - `GET /v1/ai-sdk/chat/{id}/stream` resumes: `204` when nothing runs on the thread, else the
//!   running turn replayed from its start (the client's default `resumeStreamIsReplay`).
//!
//! Only v6 chunk types are sent; noetic events with no counterpart are transient
//! `data-noetic-<type>` parts. Regenerating is not offered (the thread's history is the server's).

mod chunks;
mod stream;

use std::collections::HashSet;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use noetic_core::{Replay, Scope, SessionStatus};
use serde::Deserialize;
use serde_json::Value;

use crate::error::ApiError;
use crate::follow::{self, Target};
use crate::native::{MessageInput, accept, check_thread_id, json_body, message_input};
use crate::state::{AppState, Verdict};
use stream::Plan;

pub(crate) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/v1/ai-sdk/chat", post(chat))
        .route("/v1/ai-sdk/chat/{thread_id}/stream", get(resume))
}

/// The body `DefaultChatTransport` posts (other fields, such as an app's own `body`, are ignored).
#[derive(Deserialize)]
struct ChatRequest {
    /// The chat id: the thread.
    id: String,
    /// The client's whole history; only the last message is read.
    #[serde(default)]
    messages: Vec<Value>,
    /// One message instead of the history.
    message: Option<Value>,
    /// `submit-message` or `regenerate-message`.
    trigger: Option<String>,
}

/// A `UIMessage`, as far as it is read.
#[derive(Deserialize)]
struct UiMessage {
    id: String,
    role: String,
    #[serde(default)]
    parts: Vec<Value>,
}

async fn chat(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let request: ChatRequest = json_body(body)?;
    check_thread_id(&request.id)?;
    if request.trigger.as_deref() == Some("regenerate-message") {
        return Err(ApiError::bad_request(
            "regenerating an answer is not supported: the server keeps the thread's history; send a new message",
        ));
    }
    let last = request
        .message
        .or_else(|| request.messages.into_iter().last())
        .ok_or_else(|| ApiError::bad_request("no message: `messages` is empty"))?;
    let last: UiMessage = serde_json::from_value(last)
        .map_err(|error| ApiError::bad_request(format!("the last message: {error}")))?;
    match last.role.as_str() {
        "user" => submit(&state, &request.id, last).await,
        "assistant" => answer_approvals(&state, &request.id, last).await,
        other => Err(ApiError::bad_request(format!(
            "the last message's role is `{other}`: a user message, or the assistant's with approval responses, is expected"
        ))),
    }
}

/// A user message: the thread's next message, and its turn as the response.
async fn submit(
    state: &Arc<AppState>,
    thread_id: &str,
    message: UiMessage,
) -> Result<Response, ApiError> {
    let text: Vec<&str> = message
        .parts
        .iter()
        .filter(|part| part["type"] == "text")
        .filter_map(|part| part["text"].as_str())
        .collect();
    let text = text.join("\n");
    if text.is_empty() {
        return Err(ApiError::bad_request("the last message has no text part"));
    }
    let input = message_input(MessageInput::Text(text), state.config.max_message_bytes)?;
    // A new message while the turn waits for a person would queue behind it, its response open
    // until the approvals are answered (and `useChat`'s own answer could not be sent meanwhile).
    let retried = state.accepted(thread_id, &message.id);
    if !retried
        && let SessionStatus::AwaitingApproval { calls, .. } =
            state.harness.status(Scope::thread(thread_id.to_owned()))
    {
        let ids: Vec<&str> = calls.iter().map(|call| call.approval_id.as_str()).collect();
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "SERVER_AWAITING_APPROVAL",
            format!(
                "thread `{thread_id}` waits for tool approvals ({}): answer them before sending a message",
                ids.join(", ")
            ),
        ));
    }
    // Subscribed before the message is accepted: its turn cannot start unseen.
    let events = follow::subscribe(state, thread_id, Replay::None);
    let message_id = (!message.id.is_empty()).then_some(message.id);
    let (status, message_id, _) = accept(state, thread_id, input, message_id, None, None).await?;
    let events = if status == StatusCode::OK {
        // A retried POST: its message's turn may already run (or be over).
        drop(events);
        follow::subscribe(state, thread_id, Replay::CurrentTurn)
    } else {
        events
    };
    let plan = Plan {
        target: Target::Message(message_id),
        message_id: None,
        shown: HashSet::new(),
        decided: None,
    };
    Ok(stream::response(state, thread_id, events, plan))
}

/// An assistant message with approval responses: the decisions, and the rest of their turn.
async fn answer_approvals(
    state: &Arc<AppState>,
    thread_id: &str,
    message: UiMessage,
) -> Result<Response, ApiError> {
    let mut shown = HashSet::new();
    let mut answers = Vec::new();
    for part in &message.parts {
        let kind = part["type"].as_str().unwrap_or("");
        if !(kind.starts_with("tool-") || kind == "dynamic-tool") {
            continue;
        }
        let Some(id) = part["approval"]["id"].as_str() else {
            continue;
        };
        shown.insert(id.to_owned());
        if part["state"] == "approval-responded" {
            let approved = part["approval"]["approved"].as_bool().ok_or_else(|| {
                ApiError::bad_request(format!("approval `{id}`: `approved` must be a boolean"))
            })?;
            let reason = part["approval"]["reason"].as_str().map(str::to_owned);
            answers.push((id.to_owned(), approved, reason));
        }
    }
    if answers.is_empty() {
        return Err(ApiError::bad_request(
            "the last message is the assistant's and answers no tool approval: send a user message",
        ));
    }
    state.known(thread_id).await?;
    // Subscribed before deciding: the turn goes on as soon as it has its answer.
    let events = follow::subscribe(state, thread_id, Replay::CurrentTurn);
    let mut decided = HashSet::new();
    for (id, approved, reason) in answers {
        let verdict = if approved {
            Verdict::Approve { always: false }
        } else {
            Verdict::Reject(reason.unwrap_or_else(|| "rejected".to_owned()))
        };
        let result = state.decide(thread_id, &id, verdict).await;
        match result {
            Ok(_) => {
                decided.insert(id);
            }
            // Decided already (a retried POST) or no longer waiting: the stream shows what follows.
            Err(error) if error.code() == "APPROVAL_NOT_FOUND" => {}
            Err(error) => return Err(error.into()),
        }
    }
    // A decision on a thread of an earlier run of the server: read it back so its turn goes on.
    state.load(thread_id).await?;
    let plan = Plan {
        target: Target::Current,
        message_id: Some(message.id),
        shown,
        decided: Some(decided),
    };
    Ok(stream::response(state, thread_id, events, plan))
}

async fn resume(
    State(state): State<Arc<AppState>>,
    Path(thread_id): Path<String>,
) -> Result<Response, ApiError> {
    check_thread_id(&thread_id)?;
    match state.known(&thread_id).await {
        Ok(()) => {}
        Err(error) if error.status() == StatusCode::NOT_FOUND => {
            return Ok(StatusCode::NO_CONTENT.into_response());
        }
        Err(error) => return Err(error),
    }
    let scope = Scope::thread(thread_id.clone());
    if matches!(state.harness.status(scope.clone()), SessionStatus::Idle) {
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    let events = follow::subscribe(&state, &thread_id, Replay::CurrentTurn);
    let plan = Plan {
        target: Target::Current,
        message_id: None,
        shown: HashSet::new(),
        decided: None,
    };
    Ok(stream::response(&state, &thread_id, events, plan))
}
