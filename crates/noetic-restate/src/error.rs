//! The stable codes of `noetic-restate`, as [`noetic_core::Error::Adapter`] codes.

use noetic_core::Error;

/// The stable codes of this crate (rendered into `docs/errors.md` by `cargo xtask codegen`).
pub const CODES: &[(&str, &str)] = &[
    (
        "RESTATE_UNREACHABLE",
        "The Restate server's ingress or admin API did not answer (connection refused, timed out); the message names the URL.",
    ),
    (
        "RESTATE_REFUSED",
        "The Restate server answered a request with an error status; the message has the status and the server's answer.",
    ),
    (
        "RESTATE_TURN_FAILED",
        "A turn run on Restate ended with an error; the message carries the turn's own code and message.",
    ),
];

/// A failure of the kind `code`, with `message`.
pub(crate) fn error(code: &'static str, message: impl Into<String>) -> Error {
    Error::Adapter {
        code,
        source: message.into().into(),
    }
}
