//! # noetic-mcp
//!
//! [Model Context Protocol](https://modelcontextprotocol.io) servers as noetic connections, on the
//! official Rust SDK (`rmcp`, client side only). An [`McpServer`] is
//!
//! - a [`Connection`] whose operations are the server's tools, so a step's
//!   `.requires("calc", "add")` is checked before the first run (`CONNECTION_UNSATISFIED`);
//! - a [`ToolSource`]: `call_model(..).tools_from(server.clone())` (or the harness's
//!   `.tools_from(..)`, for every model call) offers the server's tools to the model with their JSON
//!   Schemas, named `<server>__<tool>` on the wire and mapped back exactly.
//!
//! A call's structured content (when present) or text is the function call's output; an MCP error, a
//! timeout ([`McpServerBuilder::call_timeout`], 60 s by default), a dead server or an `isError`
//! result is the call's error output, which the model sees — no tool failure fails the step. A call
//! whose run is cancelled (its future dropped: an abort, a cancelled context) or that timed out sends
//! the server `notifications/cancelled` for its request id, from a task of its own;
//! [`McpServer::shutdown`] waits for those (at most [`CANCEL_SEND_TIMEOUT`]) before it closes the
//! connection, so a stop followed at once by a shutdown still tells the server what to stop.
//!
//! The tool list is cached and refreshed when the server sends `notifications/tools/list_changed`
//! (or on [`McpServer::refresh`]); pagination is followed to the end.
//!
//! Transports: **stdio** ([`McpServer::stdio`]: a child process in a process group of its own, with
//! an allow-listed environment, its stderr logged through `tracing` under the target
//! `noetic_mcp::stderr`; [`McpServer::shutdown`] closes its stdin, then SIGTERM, then SIGKILL, and
//! kills what is left of its group) and **streamable HTTP** ([`McpServer::http`]: headers for auth,
//! an expired session re-initialised).
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use noetic_core::{AgentHarness, call_model};
//! use noetic_mcp::{McpCommand, McpServer};
//!
//! let calc = McpServer::stdio("calc", McpCommand::parse("calc", "calc-mcp-server --stdio")?)
//!     .connect()
//!     .await?;
//! let agent = call_model("assistant")
//!     .model("openai/gpt-4o")
//!     .tools_from(calc.clone())
//!     .requires("calc", "add")
//!     .build();
//! let harness = AgentHarness::builder("calculator")
//!     .connection(calc.clone())
//!     .agent_graph(agent)
//!     .build()?;
//! // … run it …
//! calc.shutdown().await;
//! # Ok(()) }
//! ```

mod cancel;
mod command;
mod error;
mod stdio;
mod tools;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use noetic_core::{Connection, Tool, ToolError, ToolSource};
use rmcp::model::{ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::{ClientHandler, RoleClient, ServiceExt as _};
use tokio::sync::{Notify, watch};

pub use cancel::CANCEL_SEND_TIMEOUT;
pub use command::{DEFAULT_ENV, McpCommand};
pub use error::{CODES, McpError};
use tools::{CallTarget, Snapshot, ToolFilter};

/// How long a call may take by default before it is cancelled and answered with a timeout.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// How long starting a server and its MCP initialization may take by default.
pub const DEFAULT_INIT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long [`McpServer::shutdown`] waits for the server to go after closing its input.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// How to reach a server.
#[derive(Clone)]
enum Transport {
    Stdio(McpCommand),
    Http {
        url: String,
        headers: Vec<(String, String)>,
    },
}

/// Configures and connects an [`McpServer`]; see [`McpServer::stdio`] and [`McpServer::http`].
#[must_use = "call .connect() to start the server"]
#[derive(Clone)]
pub struct McpServerBuilder {
    name: String,
    transport: Transport,
    filter: ToolFilter,
    call_timeout: Duration,
    init_timeout: Duration,
}

impl std::fmt::Debug for McpServerBuilder {
    // Header values (an `Authorization` token) are never shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut debug = f.debug_struct("McpServerBuilder");
        debug.field("name", &self.name);
        match &self.transport {
            Transport::Stdio(command) => debug.field("command", command),
            Transport::Http { url, headers } => debug.field("url", url).field(
                "headers",
                &headers.iter().map(|(name, _)| name).collect::<Vec<_>>(),
            ),
        };
        debug
            .field("filter", &self.filter)
            .field("call_timeout", &self.call_timeout)
            .finish()
    }
}

impl McpServerBuilder {
    fn new(name: String, transport: Transport) -> Self {
        McpServerBuilder {
            name,
            transport,
            filter: ToolFilter::default(),
            call_timeout: DEFAULT_CALL_TIMEOUT,
            init_timeout: DEFAULT_INIT_TIMEOUT,
        }
    }

    /// Offers only these tools (MCP names); the others stay hidden, and `.requires` on them fails.
    pub fn allow_tools(mut self, tools: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.filter.allow = Some(tools.into_iter().map(Into::into).collect());
        self
    }

    /// Never offers these tools (MCP names).
    pub fn deny_tools(mut self, tools: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.filter.deny.extend(tools.into_iter().map(Into::into));
        self
    }

    /// Calls of these tools (MCP names) wait for a person's approval before they run
    /// (`noetic_core::AgentHarness::approve`).
    pub fn needs_approval(mut self, tools: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.filter
            .needs_approval
            .extend(tools.into_iter().map(Into::into));
        self
    }

    /// How long one call may take before it is cancelled and answered with a timeout (default
    /// [`DEFAULT_CALL_TIMEOUT`]).
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// How long starting and initializing may take (default [`DEFAULT_INIT_TIMEOUT`]).
    pub fn init_timeout(mut self, timeout: Duration) -> Self {
        self.init_timeout = timeout;
        self
    }

    /// Sends `name: value` with every HTTP request (streamable HTTP only; ignored for stdio).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        if let Transport::Http { headers, .. } = &mut self.transport {
            headers.push((name.into(), value.into()));
        }
        self
    }

    /// Sends `Authorization: Bearer <token>` (streamable HTTP only).
    pub fn bearer(self, token: impl AsRef<str>) -> Self {
        let value = format!("Bearer {}", token.as_ref());
        self.header("authorization", value)
    }

    /// Starts (stdio) or reaches (HTTP) the server, initializes MCP and lists its tools.
    ///
    /// # Errors
    /// `MCP_CONFIG_INVALID` for a bad name, URL or header; `MCP_SPAWN_FAILED` when the command cannot
    /// start; `MCP_INIT_FAILED` when initialization fails or takes longer than the init timeout;
    /// `MCP_LIST_FAILED` when the first `tools/list` fails.
    pub async fn connect(self) -> Result<McpServer, McpError> {
        if self.name.is_empty()
            || !self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(McpError::Config {
                server: self.name,
                message: "a server's name must be non-empty `[A-Za-z0-9_-]` (it prefixes its tools' names)".to_owned(),
            });
        }
        let changed = Arc::new(Notify::new());
        let handler = Handler {
            changed: changed.clone(),
        };
        let (service, child) = match &self.transport {
            Transport::Stdio(command) => {
                let (service, child) =
                    stdio::connect(&self.name, command, handler, self.init_timeout).await?;
                (service, Some(child))
            }
            Transport::Http { url, headers } => (
                http_connect(&self.name, url, headers, handler, self.init_timeout).await?,
                None,
            ),
        };
        let target = CallTarget {
            server: Arc::from(self.name.as_str()),
            peer: service.peer().clone(),
            timeout: self.call_timeout,
            cancels: cancel::Cancels::default(),
        };
        let (changes, _) = watch::channel(0);
        let inner = Arc::new(Inner {
            name: self.name,
            target,
            filter: self.filter,
            snapshot: Mutex::new(Arc::new(Snapshot {
                tools: Arc::from(Vec::new()),
                names: Vec::new(),
            })),
            service: tokio::sync::Mutex::new(Some(service)),
            child,
            changes,
        });
        let server = McpServer { inner };
        if let Err(error) = server.refresh().await {
            server.shutdown().await;
            return Err(error);
        }
        server.watch_list_changes(changed);
        Ok(server)
    }
}

/// Connects over streamable HTTP.
async fn http_connect(
    server: &str,
    url: &str,
    headers: &[(String, String)],
    handler: Handler,
    init_timeout: Duration,
) -> Result<RunningService<RoleClient, Handler>, McpError> {
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

    let config_error = |message: String| McpError::Config {
        server: server.to_owned(),
        message,
    };
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(config_error(format!(
            "`{url}` is not an http:// or https:// URL"
        )));
    }
    let mut custom = std::collections::HashMap::new();
    for (name, value) in headers {
        let header = http::HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| config_error(format!("`{name}` is not a valid header name")))?;
        // The value is never echoed: it may be a token.
        let mut value = http::HeaderValue::from_str(value)
            .map_err(|_| config_error(format!("the value of header `{name}` is not valid")))?;
        value.set_sensitive(true);
        custom.insert(header, value);
    }
    let config = StreamableHttpClientTransportConfig::with_uri(url.to_owned())
        .custom_headers(custom)
        .reinit_on_expired_session(true);
    let transport = StreamableHttpClientTransport::from_config(config);
    match tokio::time::timeout(init_timeout, handler.serve(transport)).await {
        Ok(Ok(service)) => Ok(service),
        Ok(Err(error)) => Err(McpError::Init {
            server: server.to_owned(),
            message: format!("{url}: {error}"),
        }),
        Err(_) => Err(McpError::Init {
            server: server.to_owned(),
            message: format!("{url}: no answer within {} ms", init_timeout.as_millis()),
        }),
    }
}

/// The client side of the MCP session: declares no capability, and wakes the refresher on
/// `notifications/tools/list_changed`.
#[derive(Clone)]
struct Handler {
    changed: Arc<Notify>,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("noetic", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        // A stored permit: a change announced while a refresh runs is not lost.
        self.changed.notify_one();
    }
}

struct Inner {
    name: String,
    target: CallTarget,
    filter: ToolFilter,
    snapshot: Mutex<Arc<Snapshot>>,
    /// The running session; `None` once shut down.
    service: tokio::sync::Mutex<Option<RunningService<RoleClient, Handler>>>,
    /// The stdio server's process, when it is one.
    child: Option<stdio::ChildGroup>,
    /// Counts refreshes of the list.
    changes: watch::Sender<u64>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The session's own drop ends the server process (when a runtime is still there); the group
        // kill also ends what the server started.
        if let Some(child) = &self.child {
            child.kill_group();
        }
    }
}

/// A connected MCP server: a [`Connection`] (its operations are its tools) and a [`ToolSource`]
/// (its tools, named `<server>__<tool>`). Cheap to clone; the server stays up until
/// [`McpServer::shutdown`] or the last clone is dropped.
#[derive(Clone)]
pub struct McpServer {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("name", &self.inner.name)
            .field("tools", &self.snapshot().names)
            .finish_non_exhaustive()
    }
}

impl McpServer {
    /// A server started as a child process speaking MCP on its stdin and stdout.
    pub fn stdio(name: impl Into<String>, command: McpCommand) -> McpServerBuilder {
        McpServerBuilder::new(name.into(), Transport::Stdio(command))
    }

    /// A server reached over streamable HTTP at `url` (its MCP endpoint, `https://host/mcp`).
    pub fn http(name: impl Into<String>, url: impl Into<String>) -> McpServerBuilder {
        McpServerBuilder::new(
            name.into(),
            Transport::Http {
                url: url.into(),
                headers: Vec::new(),
            },
        )
    }

    /// The server a JSON workflow declares (`"connections": {"<name>": {"type": "mcp", …}}`): its
    /// `command` (stdio, with `passEnv`) or `url`, and its `allowTools` / `denyTools`.
    ///
    /// # Errors
    /// [`McpError::Config`] when the declaration names neither or both of `command` and `url`.
    pub fn declared(
        name: impl Into<String>,
        declaration: &noetic_core::workflow::McpDecl,
    ) -> Result<McpServerBuilder, McpError> {
        let name = name.into();
        let builder = match (&declaration.command, &declaration.url) {
            (Some(command), None) => {
                let Some((program, args)) = command.split_first() else {
                    return Err(McpError::Config {
                        server: name,
                        message: "`command` is empty".to_owned(),
                    });
                };
                let command = declaration.pass_env.iter().fold(
                    McpCommand::new(program.clone()).args(args),
                    |command, variable| command.pass_env(variable.clone()),
                );
                McpServer::stdio(name, command)
            }
            (None, Some(url)) => McpServer::http(name, url.clone()),
            _ => {
                return Err(McpError::Config {
                    server: name,
                    message: "declare exactly one of `command` and `url`".to_owned(),
                });
            }
        };
        let builder = match &declaration.allow_tools {
            Some(allowed) => builder.allow_tools(allowed.iter().cloned()),
            None => builder,
        };
        Ok(builder.deny_tools(declaration.deny_tools.iter().cloned()))
    }

    /// The server's name (the connection's name, and the prefix of its tools' names).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The MCP names of the tools offered now (after the allow and deny lists).
    pub fn tool_names(&self) -> Vec<String> {
        self.snapshot().names.clone()
    }

    /// The tools offered now, as noetic tools named `<server>__<tool>`.
    pub fn tools(&self) -> Arc<[Tool]> {
        self.snapshot().tools.clone()
    }

    /// A receiver that changes each time the tool list was read again (after a
    /// `notifications/tools/list_changed` or a [`McpServer::refresh`]).
    pub fn list_changes(&self) -> watch::Receiver<u64> {
        self.inner.changes.subscribe()
    }

    /// Reads the tool list again (every page).
    ///
    /// # Errors
    /// [`McpError::List`] (`MCP_LIST_FAILED`) when `tools/list` fails; the cached list is kept.
    pub async fn refresh(&self) -> Result<(), McpError> {
        let listed = self
            .inner
            .target
            .peer
            .list_all_tools()
            .await
            .map_err(|error| McpError::List {
                server: self.inner.name.clone(),
                message: error.to_string(),
            })?;
        let snapshot = tools::snapshot(listed, &self.inner.filter, &self.inner.target);
        *self.lock_snapshot() = Arc::new(snapshot);
        self.inner.changes.send_modify(|count| *count += 1);
        Ok(())
    }

    /// Calls the tool `tool` (its MCP name) directly, as a model's call would: the result's structured
    /// content or text, or the error text the model would see (an MCP error, a timeout, a dead
    /// server, an `isError` result). The arguments are not checked against the tool's schema here.
    ///
    /// # Errors
    /// The call's error output, as a [`ToolError`].
    ///
    /// # Cancel safety
    /// Dropping it once the request was sent sends the server `notifications/cancelled` for it (from
    /// a task of its own, which [`McpServer::shutdown`] waits for); the server may have run the tool
    /// already, or part of it.
    pub async fn call_tool(
        &self,
        tool: &str,
        arguments: serde_json::Value,
    ) -> Result<serde_json::Value, ToolError> {
        tools::call_tool(self.inner.target.clone(), tool.to_owned(), arguments).await
    }

    /// The stdio server's process id (the leader of its process group); `None` for HTTP.
    pub fn pid(&self) -> Option<u32> {
        self.inner.child.as_ref().and_then(stdio::ChildGroup::pid)
    }

    /// Whether the session is still up (the process alive, the HTTP session open).
    pub fn is_connected(&self) -> bool {
        !self.inner.target.peer.is_transport_closed()
    }

    /// Ends the session: first the `notifications/cancelled` of calls just dropped are written (at
    /// most [`CANCEL_SEND_TIMEOUT`]); then a stdio server's stdin is closed, then it gets SIGTERM,
    /// then SIGKILL (a few seconds each), and whatever is left of its process group is killed; an
    /// HTTP session is deleted. Idempotent.
    ///
    /// # Cancel safety
    /// Dropping it part way leaves the server to the drop of the last clone (the session dropped, a
    /// stdio server's process group killed); a cancellation not yet written may then be lost.
    pub async fn shutdown(&self) {
        // The cancellations of calls just dropped reach the server before its connection closes.
        self.inner.target.cancels.flush().await;
        let service = self.inner.service.lock().await.take();
        if let Some(mut service) = service {
            let _ = service.close_with_timeout(SHUTDOWN_GRACE).await;
        }
        // The server itself is gone (closed stdin, SIGTERM, SIGKILL): what it started is not.
        if let Some(child) = &self.inner.child {
            child.kill_group();
        }
    }

    fn snapshot(&self) -> Arc<Snapshot> {
        self.lock_snapshot().clone()
    }

    fn lock_snapshot(&self) -> std::sync::MutexGuard<'_, Arc<Snapshot>> {
        self.inner
            .snapshot
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Refreshes the list whenever the server says it changed, for as long as the server lives.
    fn watch_list_changes(&self, changed: Arc<Notify>) {
        let server = Arc::downgrade(&self.inner);
        let mut alive = self.inner.changes.subscribe();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = changed.notified() => {}
                    // The sender goes with the server.
                    result = alive.changed() => {
                        if result.is_err() {
                            return;
                        }
                        continue;
                    }
                }
                let Some(inner) = server.upgrade() else {
                    return;
                };
                let live = McpServer { inner };
                if let Err(error) = live.refresh().await {
                    tracing::warn!(server = %live.name(), code = error.code(), %error, "refreshing the MCP tool list failed");
                }
            }
        });
    }
}

impl Connection for McpServer {
    fn name(&self) -> &str {
        &self.inner.name
    }

    fn supports(&self, operation: &str) -> bool {
        self.snapshot().names.iter().any(|name| name == operation)
    }
}

impl ToolSource for McpServer {
    fn name(&self) -> &str {
        &self.inner.name
    }

    fn tools(&self) -> Arc<[Tool]> {
        self.snapshot().tools.clone()
    }
}
