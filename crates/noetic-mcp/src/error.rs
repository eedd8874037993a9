//! Why an MCP server could not be used, with stable codes.
//!
//! Only setting a server up fails this way: once connected, every failure of a call (an MCP error, a
//! timeout, a dead server) is that call's error output, which the model sees, never an error of the
//! step.

/// The stable codes of this crate (rendered into `docs/errors.md` by `cargo xtask codegen`).
pub const CODES: &[(&str, &str)] = &[
    (
        "MCP_CONFIG_INVALID",
        "An MCP server's declaration is malformed: an empty or unparsable command line, a bad URL or header, a server name that is not `[A-Za-z0-9_-]`.",
    ),
    (
        "MCP_SPAWN_FAILED",
        "A stdio MCP server's command could not be started (not found, not executable); the message names the server and the program.",
    ),
    (
        "MCP_INIT_FAILED",
        "An MCP server started (or its URL answered) but the MCP initialization failed or timed out; the message names the server and, for stdio, ends with its last stderr lines.",
    ),
    (
        "MCP_LIST_FAILED",
        "An MCP server's `tools/list` failed (at connect or on `refresh()`); the cached list is kept.",
    ),
];

/// An MCP server could not be set up or its tool list read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// A malformed declaration (`MCP_CONFIG_INVALID`).
    #[error("MCP server `{server}`: {message}")]
    Config {
        /// The server's name.
        server: String,
        /// What is wrong.
        message: String,
    },
    /// The command could not be started (`MCP_SPAWN_FAILED`).
    #[error("MCP server `{server}`: cannot start `{program}`: {source}")]
    Spawn {
        /// The server's name.
        server: String,
        /// The program.
        program: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The MCP initialization failed (`MCP_INIT_FAILED`).
    #[error("MCP server `{server}` did not initialize: {message}")]
    Init {
        /// The server's name.
        server: String,
        /// Why, with the server's last stderr lines for a stdio server.
        message: String,
    },
    /// `tools/list` failed (`MCP_LIST_FAILED`).
    #[error("MCP server `{server}`: listing its tools failed: {message}")]
    List {
        /// The server's name.
        server: String,
        /// Why.
        message: String,
    },
}

impl McpError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            McpError::Config { .. } => "MCP_CONFIG_INVALID",
            McpError::Spawn { .. } => "MCP_SPAWN_FAILED",
            McpError::Init { .. } => "MCP_INIT_FAILED",
            McpError::List { .. } => "MCP_LIST_FAILED",
        }
    }

    /// The server the error is about.
    pub fn server(&self) -> &str {
        match self {
            McpError::Config { server, .. }
            | McpError::Spawn { server, .. }
            | McpError::Init { server, .. }
            | McpError::List { server, .. } => server,
        }
    }
}

impl From<McpError> for noetic_core::Error {
    fn from(error: McpError) -> Self {
        noetic_core::Error::Adapter {
            code: error.code(),
            source: Box::new(error),
        }
    }
}
