//! Why an ACP turn failed, with stable codes. Every error reaches the step as
//! `noetic_core::Error::Adapter` with the code of its variant.

/// The stable codes of this crate (rendered into `docs/errors.md` by `cargo xtask codegen`).
pub const CODES: &[(&str, &str)] = &[
    (
        "ACP_SPAWN_FAILED",
        "An ACP agent's command could not be started (not found, not executable); the message names the program.",
    ),
    (
        "ACP_HANDSHAKE_FAILED",
        "An ACP agent did not answer `initialize` or `session/new` in time, or closed its stdout first; the message ends with its last stderr lines.",
    ),
    (
        "ACP_VERSION_UNSUPPORTED",
        "An ACP agent answered a protocol version other than 1 (the only one spoken); the process is closed.",
    ),
    (
        "ACP_AUTH_REQUIRED",
        "An ACP agent needs authentication (`session/new` answered -32000); noetic does not log agents in: do it once in a terminal.",
    ),
    (
        "ACP_AGENT_EXITED",
        "An ACP agent's process ended mid-turn; the message gives its exit code or signal and its last stderr lines.",
    ),
    (
        "ACP_PROTOCOL_VIOLATION",
        "An ACP agent wrote a line on stdout that is not a JSON-RPC message (the step's `lenient` option skips such lines instead).",
    ),
    (
        "ACP_AGENT_ERROR",
        "An ACP agent answered the prompt (or a setup request) with a JSON-RPC error; its code, message and data are given.",
    ),
    (
        "ACP_TIMEOUT",
        "An ACP agent sent nothing for the step's idle timeout during a turn; the turn was cancelled and the agent's process group killed.",
    ),
    (
        "ACP_CAPABILITY_UNSUPPORTED",
        "An `acp_agent` step asked for something the agent did not advertise (image or audio content, HTTP or SSE MCP servers); nothing was sent.",
    ),
];

/// An ACP turn could not run or did not end well.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AcpError {
    /// `ACP_SPAWN_FAILED`.
    #[error("ACP agent `{agent}`: cannot start `{program}`: {source}")]
    Spawn {
        /// The agent's name.
        agent: String,
        /// The program.
        program: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// `ACP_HANDSHAKE_FAILED`.
    #[error("ACP agent `{agent}`: handshake failed: {message}")]
    Handshake {
        /// The agent's name.
        agent: String,
        /// Why, with the last stderr lines.
        message: String,
    },
    /// `ACP_VERSION_UNSUPPORTED`.
    #[error("ACP agent `{agent}` speaks protocol version {version}; only version 1 is supported")]
    Version {
        /// The agent's name.
        agent: String,
        /// What it answered.
        version: String,
    },
    /// `ACP_AUTH_REQUIRED`.
    #[error(
        "ACP agent `{agent}` requires authentication ({message}); log it in once in a terminal, then retry"
    )]
    Auth {
        /// The agent's name.
        agent: String,
        /// The agent's message.
        message: String,
    },
    /// `ACP_AGENT_EXITED`.
    #[error("ACP agent `{agent}` exited mid-turn ({status}){}", stderr_suffix(.stderr))]
    Exited {
        /// The agent's name.
        agent: String,
        /// `exit code N`, `signal N` or `status unknown`.
        status: String,
        /// Its last stderr lines.
        stderr: String,
    },
    /// `ACP_PROTOCOL_VIOLATION`.
    #[error("ACP agent `{agent}` wrote a line that is not a JSON-RPC message: {line:?}")]
    Violation {
        /// The agent's name.
        agent: String,
        /// The line (at most 200 characters of it).
        line: String,
    },
    /// `ACP_AGENT_ERROR`.
    #[error("ACP agent `{agent}` answered `{method}` with error {code}: {message}{}", data_suffix(.data))]
    Agent {
        /// The agent's name.
        agent: String,
        /// The request answered.
        method: String,
        /// The JSON-RPC error code.
        code: i64,
        /// Its message.
        message: String,
        /// Its data.
        data: Option<serde_json::Value>,
    },
    /// `ACP_TIMEOUT`.
    #[error("ACP agent `{agent}` sent nothing for {idle:?} during a turn")]
    Timeout {
        /// The agent's name.
        agent: String,
        /// The idle timeout.
        idle: std::time::Duration,
    },
    /// `ACP_CAPABILITY_UNSUPPORTED`.
    #[error("ACP agent `{agent}` does not support {what}")]
    Capability {
        /// The agent's name.
        agent: String,
        /// What was asked for.
        what: String,
    },
}

fn stderr_suffix(stderr: &str) -> String {
    if stderr.is_empty() {
        String::new()
    } else {
        format!("; its stderr ended with:\n{stderr}")
    }
}

fn data_suffix(data: &Option<serde_json::Value>) -> String {
    data.as_ref()
        .map(|data| format!(" ({data})"))
        .unwrap_or_default()
}

impl AcpError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            AcpError::Spawn { .. } => "ACP_SPAWN_FAILED",
            AcpError::Handshake { .. } => "ACP_HANDSHAKE_FAILED",
            AcpError::Version { .. } => "ACP_VERSION_UNSUPPORTED",
            AcpError::Auth { .. } => "ACP_AUTH_REQUIRED",
            AcpError::Exited { .. } => "ACP_AGENT_EXITED",
            AcpError::Violation { .. } => "ACP_PROTOCOL_VIOLATION",
            AcpError::Agent { .. } => "ACP_AGENT_ERROR",
            AcpError::Timeout { .. } => "ACP_TIMEOUT",
            AcpError::Capability { .. } => "ACP_CAPABILITY_UNSUPPORTED",
        }
    }
}

impl From<AcpError> for noetic_core::Error {
    fn from(error: AcpError) -> Self {
        noetic_core::Error::Adapter {
            code: error.code(),
            source: Box::new(error),
        }
    }
}
