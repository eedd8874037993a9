//! AG-UI 1.0 (the Agent–User Interaction protocol, CopilotKit's wire), so `@ag-ui/client`'s
//! `HttpAgent` (and CopilotKit through it) talks to a noetic harness:
//!
//! - `POST /v1/ag-ui` takes a `RunAgentInput` (`{threadId, runId, messages, tools, context, state,
//!   forwardedProps, resume}`) and answers with the run's events as SSE (`data: <event>` lines). The
//!   thread id is the thread; the server keeps the history, so only the trailing user messages of
//!   `messages` it has not taken yet count: their text becomes the thread's next message (the last
//!   one's id its idempotency key: a re-sent run streams that message's turn again). Posted while a
//!   turn runs, the message steers it (`forwardedProps.delivery`, as the native API's `delivery`;
//!   `between-rounds` by default) and the run follows that turn.
//! - A turn that waits for a person's approval ends the run with `RUN_FINISHED` whose outcome is
//!   `interrupt`: one interrupt per waiting call (`id` = the approval id, `reason: "tool_call"`,
//!   `toolCallId`, the tool's name and arguments in `metadata`). The next run answers them in
//!   `resume` (`{interruptId, status: "resolved", payload: {approved, reason?, always?}}`, or
//!   `status: "cancelled"` to reject) and streams the same turn going on.
//! - A new message while the thread waits for approvals is refused with `RUN_ERROR`
//!   (`SERVER_INTERRUPT_PENDING`), as AG-UI wants: resume first.
//!
//! `tools` (frontend tools), `context` and `state` are accepted and not used: the harness's tools
//! run on the server and its thread is its state.

mod events;
mod run;

use std::collections::HashSet;
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::post;
use noetic_core::{ApprovalRequest, DeliveryMode, Replay, Scope, SessionStatus};
use serde::Deserialize;
use serde_json::Value;

use crate::error::ApiError;
use crate::follow::{self, Target, running_turn};
use crate::native::{MessageInput, accept, check_thread_id, json_body, message_input};
use crate::state::{AppState, Verdict};
use events::{Event, frame};
use run::{AgUi, Gate};

pub(crate) fn routes() -> Router<Arc<AppState>> {
    Router::new().route("/v1/ag-ui", post(run_agent))
}

/// The `RunAgentInput` fields read (the others are accepted and ignored).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RunAgentInput {
    thread_id: String,
    /// Optional here (required by AG-UI): one is made up when missing.
    run_id: Option<String>,
    #[serde(default)]
    messages: Vec<Value>,
    forwarded_props: Option<Value>,
    resume: Option<Vec<Value>>,
}

/// A user message of `messages`, as far as it is read.
struct UserMessage {
    id: String,
    text: String,
}

/// A `resume` entry's answer to an interrupt.
struct Answer {
    approval_id: String,
    decision: Decision,
}

enum Decision {
    Approve { always: bool },
    Reject(String),
}

async fn run_agent(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let input: RunAgentInput = json_body(body)?;
    check_thread_id(&input.thread_id)?;
    let run_id = input
        .run_id
        .unwrap_or_else(|| format!("run-{}", uuid::Uuid::new_v4().simple()));
    let answers = resume_answers(input.resume.as_deref().unwrap_or_default())?;
    let messages = trailing_user_messages(&input.messages)?;
    let delivery = delivery(input.forwarded_props.as_ref())?;
    let thread_id = input.thread_id;
    let new: Vec<&UserMessage> = messages
        .iter()
        .filter(|message| !state.accepted(&thread_id, &message.id))
        .collect();
    if !answers.is_empty() {
        if !new.is_empty() {
            return Err(ApiError::bad_request(
                "a run with `resume` takes no new user message: resume the interrupts first, then send the message",
            ));
        }
        return resume(&state, &thread_id, &run_id, answers).await;
    }
    let Some(last) = messages.last() else {
        return Err(ApiError::bad_request(
            "no user message: `messages` must end with the user's new message (or `resume` must answer the interrupts)",
        ));
    };
    let scope = Scope::thread(thread_id.clone());
    let status = state.harness.status(scope.clone());
    if !new.is_empty()
        && let SessionStatus::AwaitingApproval { calls, .. } = &status
    {
        return Ok(interrupt_pending(calls));
    }
    // A retried run (every message taken already) follows the last one's turn again.
    let (message_id, text) = match new.as_slice() {
        [] => (last.id.clone(), last.text.clone()),
        [.., newest] => {
            let texts: Vec<&str> = new.iter().map(|message| message.text.as_str()).collect();
            (newest.id.clone(), texts.join("\n\n"))
        }
    };
    let input = message_input(MessageInput::Text(text), state.config.max_message_bytes)?;
    let delivery = delivery.or_else(|| {
        running_turn(&status)
            .is_some()
            .then_some(DeliveryMode::BetweenRounds)
    });
    // Subscribed before the message is accepted: its turn cannot start unseen.
    let events = follow::subscribe(&state, &thread_id, Replay::None);
    let (accepted, message_id, _) =
        accept(&state, &thread_id, input, Some(message_id), delivery, None).await?;
    for message in new.iter().rev().skip(1) {
        state.first_time(&thread_id, &message.id);
    }
    let events = if accepted == StatusCode::OK {
        // A retried run: its message's turn may already run (or be over).
        drop(events);
        follow::subscribe(&state, &thread_id, Replay::CurrentTurn)
    } else {
        events
    };
    let wire = AgUi::new(&thread_id, &run_id, state.harness.name(), None);
    Ok(follow::response(
        &state,
        &thread_id,
        events,
        Target::Message(message_id),
        wire,
    ))
}

/// A run answering interrupts: the decisions, and the rest of their turn.
async fn resume(
    state: &Arc<AppState>,
    thread_id: &str,
    run_id: &str,
    answers: Vec<Answer>,
) -> Result<Response, ApiError> {
    state.known(thread_id).await?;
    // Subscribed before deciding: the turn goes on as soon as it has its answer.
    let events = follow::subscribe(state, thread_id, Replay::CurrentTurn);
    let mut decided = HashSet::new();
    let mut unseen = HashSet::new();
    for answer in answers {
        let id = answer.approval_id;
        let verdict = match answer.decision {
            Decision::Approve { always } => Verdict::Approve { always },
            Decision::Reject(reason) => Verdict::Reject(reason),
        };
        let result = state.decide(thread_id, &id, verdict).await;
        match result {
            Ok(_) => {
                decided.insert(id.clone());
            }
            // Decided already (a retried run) or no longer waiting: the run shows what follows.
            Err(error) if error.code() == "APPROVAL_NOT_FOUND" => {}
            Err(error) => return Err(error.into()),
        }
        unseen.insert(id);
    }
    // A decision on a thread of an earlier run of the server: read it back so its turn goes on.
    state.load(thread_id).await?;
    let gate = Gate { unseen, decided };
    let wire = AgUi::new(thread_id, run_id, state.harness.name(), Some(gate));
    Ok(follow::response(
        state,
        thread_id,
        events,
        Target::Current,
        wire,
    ))
}

/// The run refused: the thread waits for approvals, which a run must `resume` first.
fn interrupt_pending(calls: &[ApprovalRequest]) -> Response {
    let ids: Vec<&str> = calls.iter().map(|call| call.approval_id.as_str()).collect();
    let event = Event::RunError {
        message: format!(
            "the thread waits for approvals ({}): answer them in `resume` before sending a message",
            ids.join(", ")
        ),
        code: "SERVER_INTERRUPT_PENDING".to_owned(),
    };
    follow::event_stream(Body::from(frame(&event)))
}

/// The user messages that end `messages` (after the last message of another role), in order.
fn trailing_user_messages(messages: &[Value]) -> Result<Vec<UserMessage>, ApiError> {
    let mut users = Vec::new();
    for (index, message) in messages.iter().enumerate().rev() {
        let field = |name: &str| format!("`messages[{index}].{name}`");
        let role = message["role"]
            .as_str()
            .ok_or_else(|| ApiError::bad_request(format!("{} must be a string", field("role"))))?;
        if role != "user" {
            break;
        }
        let id = message["id"]
            .as_str()
            .filter(|id| !id.is_empty())
            .ok_or_else(|| {
                ApiError::bad_request(format!("{} must be a non-empty string", field("id")))
            })?;
        let text = match &message["content"] {
            Value::String(text) => text.clone(),
            Value::Array(parts) => {
                let texts: Vec<&str> = parts
                    .iter()
                    .filter(|part| part["type"] == "text")
                    .filter_map(|part| part["text"].as_str())
                    .collect();
                texts.join("\n")
            }
            _ => {
                return Err(ApiError::bad_request(format!(
                    "{} must be a string or an array of content parts",
                    field("content")
                )));
            }
        };
        if text.is_empty() {
            return Err(ApiError::bad_request(format!(
                "{} has no text",
                field("content")
            )));
        }
        users.push(UserMessage {
            id: id.to_owned(),
            text,
        });
    }
    users.reverse();
    Ok(users)
}

/// The `resume` entries as decisions.
fn resume_answers(resume: &[Value]) -> Result<Vec<Answer>, ApiError> {
    let mut answers = Vec::new();
    for (index, entry) in resume.iter().enumerate() {
        let field = |name: &str| format!("`resume[{index}].{name}`");
        let approval_id = entry["interruptId"]
            .as_str()
            .filter(|id| !id.is_empty())
            .ok_or_else(|| {
                ApiError::bad_request(format!(
                    "{} must be a non-empty string",
                    field("interruptId")
                ))
            })?
            .to_owned();
        let payload = &entry["payload"];
        let decision = match entry["status"].as_str() {
            Some("cancelled") => Decision::Reject("cancelled".to_owned()),
            Some("resolved") => {
                if !payload["editedArgs"].is_null() {
                    return Err(ApiError::bad_request(format!(
                        "{}: editing a call's arguments is not supported; approve or reject it",
                        field("payload.editedArgs")
                    )));
                }
                let approved = payload["approved"].as_bool().ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "{} must be a boolean (the answer to a tool call's approval)",
                        field("payload.approved")
                    ))
                })?;
                if approved {
                    Decision::Approve {
                        always: payload["always"].as_bool().unwrap_or(false),
                    }
                } else {
                    let reason = payload["reason"].as_str().unwrap_or("rejected");
                    Decision::Reject(reason.to_owned())
                }
            }
            _ => {
                return Err(ApiError::bad_request(format!(
                    "{} must be `resolved` or `cancelled`",
                    field("status")
                )));
            }
        };
        answers.push(Answer {
            approval_id,
            decision,
        });
    }
    Ok(answers)
}

/// `forwardedProps.delivery`: how a message meets a running turn, as the native API's `delivery`.
fn delivery(forwarded: Option<&Value>) -> Result<Option<DeliveryMode>, ApiError> {
    match forwarded.map(|props| &props["delivery"]) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => serde_json::from_value(value.clone()).map(Some).map_err(|_| {
            ApiError::bad_request(
                "`forwardedProps.delivery` must be next-turn, between-rounds, next-item or interrupt",
            )
        }),
    }
}
