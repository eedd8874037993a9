//! What a server allows: its token, the hosts and origins it answers, its size and queue limits.

/// The default request body limit: 1 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 1024 * 1024;
/// The default limit of one message's text: 256 KiB.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 256 * 1024;
/// The default number of messages a thread may have queued before `POST …/messages` answers 429.
pub const DEFAULT_MAX_QUEUE: usize = 64;

/// A bearer token. Its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// A token with this value (at least 16 characters: a guessable token protects nothing).
    ///
    /// # Errors
    /// A shorter value, with a message saying so.
    pub fn new(value: impl Into<String>) -> Result<Self, String> {
        let value = value.into();
        if value.chars().count() < 16 {
            return Err("a bearer token must be at least 16 characters".to_owned());
        }
        if value.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err("a bearer token cannot hold spaces or control characters".to_owned());
        }
        Ok(Token(value))
    }

    /// A fresh random token: 64 hex digits (two v4 UUIDs' random bits, from the OS).
    pub fn generate() -> Self {
        Token(format!(
            "{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        ))
    }

    /// The value, to print once or hand to a client.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// How a server is guarded and bounded. The default: no token (right for loopback only), the
/// loopback host names, no other origin, the default limits, the web page on.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ServeConfig {
    /// The bearer token every API request must present (`None`: none asked; only for a server on
    /// loopback).
    pub token: Option<Token>,
    /// Host names (without port) the `Host` header may name, besides `localhost`, `127.0.0.1` and
    /// `::1`.
    pub allowed_hosts: Vec<String>,
    /// Origins (`https://app.example.com`) whose pages may call the API, besides the server's own;
    /// CORS answers them. Empty: CORS off.
    pub allowed_origins: Vec<String>,
    /// The largest request body, in bytes.
    pub max_body_bytes: usize,
    /// The largest message text, in bytes.
    pub max_message_bytes: usize,
    /// How many messages a thread may have queued.
    pub max_queue: usize,
    /// Serve the web page at `/`.
    pub page: bool,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            token: None,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            max_queue: DEFAULT_MAX_QUEUE,
            page: true,
        }
    }
}

impl ServeConfig {
    /// The default configuration.
    pub fn new() -> Self {
        Self::default()
    }

    /// Requires `token` on every API request.
    pub fn token(mut self, token: Token) -> Self {
        self.token = Some(token);
        self
    }

    /// Answers requests whose `Host` names `host` too.
    pub fn allow_host(mut self, host: impl Into<String>) -> Self {
        self.allowed_hosts.push(host.into());
        self
    }

    /// Lets pages from `origin` call the API (CORS).
    pub fn allow_origin(mut self, origin: impl Into<String>) -> Self {
        self.allowed_origins
            .push(origin.into().trim_end_matches('/').to_owned());
        self
    }

    /// Sets the request body limit.
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self
    }

    /// Sets the message size limit.
    pub fn max_message_bytes(mut self, bytes: usize) -> Self {
        self.max_message_bytes = bytes;
        self
    }

    /// Sets the per-thread queue limit.
    pub fn max_queue(mut self, messages: usize) -> Self {
        self.max_queue = messages;
        self
    }

    /// Turns the web page at `/` off.
    pub fn without_page(mut self) -> Self {
        self.page = false;
        self
    }

    pub(crate) fn host_allowed(&self, name: &str) -> bool {
        matches!(name, "localhost" | "127.0.0.1" | "::1")
            || self
                .allowed_hosts
                .iter()
                .any(|allowed| allowed.eq_ignore_ascii_case(name))
    }

    pub(crate) fn origin_allowed(&self, origin: &str) -> bool {
        let origin = origin.trim_end_matches('/');
        self.allowed_origins
            .iter()
            .any(|allowed| allowed.eq_ignore_ascii_case(origin))
    }
}
