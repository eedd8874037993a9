//! The native API (`/v1`): threads, messages (execute and steer), the SSE event stream, abort with
//! drain, approvals, status, history, health and info. JSON in and out, snake_case.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use noetic_core::{
    AbortOptions, DeliveryMode, ExecuteOptions, Input, Item, Replay, Scope, SessionStatus,
};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::state::{AppState, Verdict, millis};

pub(crate) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/v1/health", get(health))
        .route("/v1/info", get(info))
        .route("/v1/threads", get(list_threads).post(create_thread))
        .route("/v1/threads/{thread_id}", get(thread_status))
        .route("/v1/threads/{thread_id}/items", get(items))
        .route("/v1/threads/{thread_id}/messages", post(post_message))
        .route("/v1/threads/{thread_id}/events", get(events))
        .route("/v1/threads/{thread_id}/abort", post(abort))
        .route("/v1/threads/{thread_id}/approvals", get(approvals))
        .route(
            "/v1/threads/{thread_id}/approvals/{approval_id}",
            post(decide),
        )
}

/// The JSON body of a request, or a 400 naming what is wrong, or a 413 over the body limit.
pub(crate) fn json_body<T: DeserializeOwned>(
    body: Result<Bytes, BytesRejection>,
) -> Result<T, ApiError> {
    let bytes = body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::too_large("the request body is over the server's limit")
        } else {
            ApiError::bad_request(format!("cannot read the request body: {rejection}"))
        }
    })?;
    let bytes = if bytes.is_empty() {
        Bytes::from_static(b"{}")
    } else {
        bytes
    };
    serde_json::from_slice(&bytes)
        .map_err(|error| ApiError::bad_request(format!("the request body: {error}")))
}

/// A thread id as a path segment: non-empty, at most 256 bytes, no control characters.
pub(crate) fn check_thread_id(thread_id: &str) -> Result<(), ApiError> {
    if thread_id.is_empty() || thread_id.len() > 256 || thread_id.chars().any(char::is_control) {
        return Err(ApiError::bad_request(
            "a thread id is 1 to 256 bytes without control characters",
        ));
    }
    Ok(())
}

async fn health() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

async fn info(State(state): State<Arc<AppState>>) -> Json<Value> {
    Json(json!({
        "name": state.harness.name(),
        "version": env!("CARGO_PKG_VERSION"),
        "adapters": ["native", "ai-sdk", "ag-ui"],
        "auth": state.config.token.is_some(),
        "limits": {
            "max_body_bytes": state.config.max_body_bytes,
            "max_message_bytes": state.config.max_message_bytes,
            "max_queue": state.config.max_queue,
        },
    }))
}

async fn list_threads(State(state): State<Arc<AppState>>) -> Json<Value> {
    Json(json!({"threads": state.list()}))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateThread {
    thread_id: Option<String>,
}

async fn create_thread(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body: CreateThread = json_body(body)?;
    let thread_id = body
        .thread_id
        .unwrap_or_else(|| format!("thread-{}", uuid::Uuid::new_v4().simple()));
    check_thread_id(&thread_id)?;
    let created = state.remember(&thread_id);
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(json!({"thread_id": thread_id}))).into_response())
}

/// A session status as JSON.
pub(crate) fn status_json(status: &SessionStatus) -> Value {
    match status {
        SessionStatus::Idle => json!({"status": "idle"}),
        SessionStatus::Queued { queued } => json!({"status": "queued", "queued": queued}),
        SessionStatus::Running {
            turn_id,
            started_at,
        } => json!({"status": "running", "turn_id": turn_id, "started_at_ms": millis(*started_at)}),
        SessionStatus::Draining { turn_id, deadline } => {
            json!({"status": "draining", "turn_id": turn_id, "deadline_ms": millis(*deadline)})
        }
        SessionStatus::Aborting { turn_id } => json!({"status": "aborting", "turn_id": turn_id}),
        SessionStatus::AwaitingApproval { turn_id, calls } => {
            json!({"status": "awaiting_approval", "turn_id": turn_id, "approvals": calls})
        }
        _ => json!({"status": "unknown"}),
    }
}

/// The thread's status as JSON, `here` saying whether this host runs its turn. On a host sharing
/// threads with others, a thread no turn of this host runs is described as the store has it: a
/// turn in flight (waiting for approvals when some are pending), messages pending, or idle.
pub(crate) async fn thread_state(state: &AppState, thread_id: &str) -> Result<Value, ApiError> {
    if let Some(engine) = &state.engine {
        // The engine runs the turns: it knows what runs; the store, what is queued.
        let status = engine.status(thread_id).await?;
        let body = match status.running {
            Some(turn_id) if status.pending_approvals.is_empty() => {
                json!({"status": "running", "turn_id": turn_id})
            }
            Some(turn_id) => json!({
                "status": "awaiting_approval",
                "turn_id": turn_id,
                "approvals": status.pending_approvals,
            }),
            None => json!({"status": "idle"}),
        };
        return Ok(body);
    }
    let scope = Scope::thread(thread_id.to_owned());
    let local = state.harness.status(scope.clone());
    if !state.harness.shares_threads() || !matches!(local, SessionStatus::Idle) {
        let mut body = status_json(&local);
        body["here"] = json!(state.harness.runs_turn_here(scope));
        return Ok(body);
    }
    let Some(stored) = state.harness.stored_thread(thread_id).await? else {
        return Ok(json!({"status": "idle", "here": false}));
    };
    let mut body = match stored.turn_in_flight {
        Some(turn_id) => {
            let calls = state.harness.pending_approvals(scope).await?;
            if calls.is_empty() {
                json!({"status": "running", "turn_id": turn_id})
            } else {
                json!({"status": "awaiting_approval", "turn_id": turn_id, "approvals": calls})
            }
        }
        None if stored.pending > 0 => json!({"status": "queued", "queued": stored.pending}),
        None => json!({"status": "idle"}),
    };
    body["here"] = json!(false);
    Ok(body)
}

async fn thread_status(
    State(state): State<Arc<AppState>>,
    Path(thread_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    state.known(&thread_id).await?;
    let scope = Scope::thread(thread_id.clone());
    let mut body = thread_state(&state, &thread_id).await?;
    body["thread_id"] = json!(thread_id);
    body["queue_len"] = json!(state.harness.queue_len(scope.clone()));
    body["usage"] = json!(state.harness.usage(scope));
    Ok(Json(body))
}

async fn items(
    State(state): State<Arc<AppState>>,
    Path(thread_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    state.known(&thread_id).await?;
    let scope = Scope::thread(thread_id.clone());
    if !state.harness.shares_threads() {
        // A thread of an earlier run of the server is read back before its history is asked for.
        state.harness.load_thread(&thread_id).await?;
    }
    // Wherever it runs: this host's, or the store's for a thread another host runs.
    let items = state.harness.thread_history(scope).await?;
    Ok(Json(json!({"items": items})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PostMessage {
    input: MessageInput,
    message_id: Option<String>,
    delivery: Option<DeliveryMode>,
    resource_id: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
pub(crate) enum MessageInput {
    Text(String),
    Items(Vec<Item>),
}

/// A message as the harness takes it, within the size limit.
pub(crate) fn message_input(input: MessageInput, limit: usize) -> Result<Input, ApiError> {
    let (size, input) = match input {
        MessageInput::Text(text) => (text.len(), Input::Text(text)),
        MessageInput::Items(items) => (
            serde_json::to_vec(&items).map_or(usize::MAX, |bytes| bytes.len()),
            Input::Items(items),
        ),
    };
    if size > limit {
        return Err(ApiError::too_large(format!(
            "the message is {size} bytes, over the limit of {limit}"
        )));
    }
    Ok(input)
}

/// What `POST …/messages` answers: `202` when the message was accepted now, `200` for a retried
/// id already accepted.
pub(crate) async fn accept(
    state: &AppState,
    thread_id: &str,
    input: Input,
    message_id: Option<String>,
    delivery: Option<DeliveryMode>,
    resource_id: Option<String>,
) -> Result<(StatusCode, String, bool), ApiError> {
    if state.closing() {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "SERVER_SHUTTING_DOWN",
            "the server is stopping",
        ));
    }
    check_thread_id(thread_id)?;
    let scope = Scope::thread(thread_id.to_owned());
    let message_id = message_id.unwrap_or_else(|| format!("msg-{}", uuid::Uuid::new_v4().simple()));
    if !state.first_time(thread_id, &message_id) {
        return Ok((StatusCode::OK, message_id, false));
    }
    if state.harness.queue_len(scope.clone()) >= state.config.max_queue {
        state.forget(thread_id, &message_id);
        return Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "SERVER_QUEUE_FULL",
            format!(
                "thread `{thread_id}` already has {} queued messages",
                state.config.max_queue
            ),
        ));
    }
    let busy = !matches!(state.harness.status(scope), SessionStatus::Idle);
    let mut options = ExecuteOptions::new()
        .thread_id(thread_id)
        .message_id(message_id.clone());
    if let Some(delivery) = delivery {
        options = options.delivery_mode(delivery);
    }
    if let Some(resource_id) = resource_id {
        options = options.resource_id(resource_id);
    }
    if let Err(error) = state.execute(input, options).await {
        state.forget(thread_id, &message_id);
        return Err(error.into());
    }
    Ok((StatusCode::ACCEPTED, message_id, busy))
}

async fn post_message(
    State(state): State<Arc<AppState>>,
    Path(thread_id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body: PostMessage = json_body(body)?;
    let input = message_input(body.input, state.config.max_message_bytes)?;
    let (status, message_id, queued) = accept(
        &state,
        &thread_id,
        input,
        body.message_id,
        body.delivery,
        body.resource_id,
    )
    .await?;
    let mut response = (
        status,
        Json(json!({
            "message_id": message_id,
            "queued": queued,
            "duplicate": status == StatusCode::OK,
        })),
    )
        .into_response();
    if let Ok(location) = HeaderValue::from_str(&format!(
        "/v1/threads/{}/events",
        percent_segment(&thread_id)
    )) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

/// `segment` percent-encoded for a URL path (unreserved characters kept).
pub(crate) fn percent_segment(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for byte in segment.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[derive(Deserialize)]
struct EventsQuery {
    after: Option<u64>,
    replay: Option<String>,
}

async fn events(
    State(state): State<Arc<AppState>>,
    Path(thread_id): Path<String>,
    Query(query): Query<EventsQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    check_thread_id(&thread_id)?;
    state.known(&thread_id).await?;
    let last_event_id = headers
        .get("last-event-id")
        .and_then(|value| value.to_str().ok())
        .map(|value| {
            value.trim().parse::<u64>().map_err(|_| {
                ApiError::bad_request(format!("Last-Event-ID `{value}` is not a sequence number"))
            })
        })
        .transpose()?;
    let replay = match (last_event_id.or(query.after), query.replay.as_deref()) {
        (Some(after), _) => Replay::After(after),
        (None, None | Some("current_turn")) => Replay::CurrentTurn,
        (None, Some("retained")) => Replay::Retained,
        (None, Some("none")) => Replay::None,
        (None, Some(other)) => {
            return Err(ApiError::bad_request(format!(
                "replay must be current_turn, retained or none, not `{other}`"
            )));
        }
    };
    Ok(crate::sse::native_stream(&state, &thread_id, replay))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AbortBody {
    reason: Option<String>,
    drain_ms: Option<u64>,
}

async fn abort(
    State(state): State<Arc<AppState>>,
    Path(thread_id): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let body: AbortBody = json_body(body)?;
    state.known(&thread_id).await?;
    let status = thread_state(&state, &thread_id).await?;
    if matches!(status["status"].as_str(), Some("idle" | "queued")) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "SERVER_NOT_RUNNING",
            format!("thread `{thread_id}` has no turn running"),
        ));
    }
    let mut options = AbortOptions::new().thread_id(thread_id.clone()).reason(
        body.reason
            .unwrap_or_else(|| "aborted over HTTP".to_owned()),
    );
    if let Some(drain) = body.drain_ms {
        options = options.drain(Duration::from_millis(drain));
    }
    if let Some(engine) = &state.engine {
        // The engine cuts the turn itself (no drain window: its rounds are journaled).
        engine.abort(&thread_id).await?;
        return Ok(Json(json!({"aborted": true, "drain_report": null})));
    }
    let report = state.harness.abort(options).await;
    Ok(Json(json!({"aborted": true, "drain_report": report})))
}

async fn approvals(
    State(state): State<Arc<AppState>>,
    Path(thread_id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    state.known(&thread_id).await?;
    let pending = state.pending_approvals(&thread_id).await?;
    Ok(Json(json!({"approvals": pending})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Decision {
    decision: DecisionKind,
    reason: Option<String>,
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "snake_case")]
enum DecisionKind {
    Approve,
    ApproveAlways,
    Reject,
}

async fn decide(
    State(state): State<Arc<AppState>>,
    Path((thread_id, approval_id)): Path<(String, String)>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let body: Decision = json_body(body)?;
    state.known(&thread_id).await?;
    let verdict = match body.decision {
        DecisionKind::Approve => Verdict::Approve { always: false },
        DecisionKind::ApproveAlways => Verdict::Approve { always: true },
        DecisionKind::Reject => {
            Verdict::Reject(body.reason.unwrap_or_else(|| "rejected".to_owned()))
        }
    };
    let request = state.decide(&thread_id, &approval_id, verdict).await?;
    // A decision on a thread of an earlier run of the server: read it back so its turn goes on.
    state.load(&thread_id).await?;
    Ok(Json(json!({"decided": request})))
}
