//! Errors as JSON with a stable code and the right HTTP status:
//! `{"error": {"code": "…", "message": "…"}}`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// The stable codes of this crate (rendered into `docs/errors.md` by `cargo xtask codegen`). Errors
/// of the harness keep their own codes (`APPROVAL_NOT_FOUND`, …).
pub const CODES: &[(&str, &str)] = &[
    (
        "SERVER_UNAUTHORIZED",
        "A request to `noetic serve` had no bearer token, or the wrong one (401). Send `Authorization: Bearer TOKEN`, or `?token=TOKEN` where a header cannot be set (EventSource).",
    ),
    (
        "SERVER_HOST_FORBIDDEN",
        "A request's `Host` header names a host the server does not answer to (403): a DNS-rebinding guard. Add the name with `--allow-host` when the server is reached under it.",
    ),
    (
        "SERVER_ORIGIN_FORBIDDEN",
        "A request came from a web page whose `Origin` is neither the server's own nor an allowed one (403). Add the origin with `--cors-origin`.",
    ),
    (
        "SERVER_NOT_FOUND",
        "No such route, or no such thread (404); the message names it.",
    ),
    (
        "SERVER_BAD_REQUEST",
        "A request body that is not the JSON the route takes, or a bad query parameter (400); the message names the field.",
    ),
    (
        "SERVER_BODY_TOO_LARGE",
        "A request body over the server's limit, or a message over the message size limit (413).",
    ),
    (
        "SERVER_QUEUE_FULL",
        "A thread already has as many queued messages as the server allows (429); retry once its turns have taken them.",
    ),
    (
        "SERVER_NOT_RUNNING",
        "An abort of a thread with no turn running (409).",
    ),
    (
        "SERVER_AWAITING_APPROVAL",
        "A user message posted to the AI SDK chat while the thread waits for tool approvals (409): answer them first (the assistant message with the approval responses), then send it.",
    ),
    (
        "SERVER_INTERRUPT_PENDING",
        "An AG-UI run brought a new message while the thread waits for tool approvals (`RUN_ERROR`): answer the open interrupts in the next run's `resume` first.",
    ),
    (
        "SERVER_SHUTTING_DOWN",
        "The server is stopping and takes no new message (503).",
    ),
];

/// An error answered as JSON.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    /// An error with `status`, `code` and `message`.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The stable code.
    pub fn code(&self) -> &'static str {
        self.code
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "SERVER_BAD_REQUEST", message)
    }

    pub(crate) fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "SERVER_NOT_FOUND", message)
    }

    pub(crate) fn too_large(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "SERVER_BODY_TOO_LARGE",
            message,
        )
    }
}

impl From<noetic_core::Error> for ApiError {
    fn from(error: noetic_core::Error) -> Self {
        let code = error.code();
        let status = match code {
            "APPROVAL_NOT_FOUND" | "NOT_FOUND" => StatusCode::NOT_FOUND,
            "CANCELLED" => StatusCode::CONFLICT,
            "INVALID_ARGUMENT" | "WORKFLOW_INVALID" | "STEERING_DENIED" => StatusCode::BAD_REQUEST,
            "LEASE_HELD" | "STORAGE_BUSY" => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError::new(status, code, error.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({"error": {"code": self.code, "message": self.message}});
        (self.status, axum::Json(body)).into_response()
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.code, self.status, self.message)
    }
}

impl std::error::Error for ApiError {}
