//! A small MCP server (rmcp's server side) for testing MCP clients: over stdio (the
//! `noetic-mcp-test-server` binary of this crate, [`mcp_test_server_path`]) and over streamable HTTP
//! on loopback ([`McpTestServer::start_http`]).
//!
//! Tools: `add {a, b}` (the sum as text, `{"sum": …}` as structured content), `fail` (a tool error
//! result), `slow {ms}` (sleeps; notes a cancellation), `toggle` (adds or removes `extra` and sends
//! `notifications/tools/list_changed`), `extra`, `env {name}` (the variable's value, or `<unset>`),
//! `grandchild` (starts `sleep 300` and answers its pid), `die` (exits the process: stdio only),
//! `echo {text}` (says it back), `wait_for {event}` (returns the first line of the server's event
//! log containing `event`, once there is one: how a test over stdio waits for what the server saw).
//! `tools/list` pages two tools at a time, so clients must follow the cursor.
//!
//! What the server observed goes to its event log, one line each, in the order it happened:
//! `call NAME (request ID)`, `cancelled slow (request ID)` (the `slow` tool saw its cancellation),
//! `notification cancelled (request ID): REASON` (the handler of a `notifications/cancelled`), and
//! how the connection ended (`quit: …` when a stdio client closed stdin, `session deleted` when an
//! HTTP client deleted its session). Over HTTP a notification is handled after its POST was
//! answered, so its arrival is logged too: `posted notifications/cancelled (request ID)`.
//! [`request_id`] reads the id back from a line; [`assert_cancelled_before_close`] checks a log for
//! a call's cancellation before the connection's end.
//!
//! The log is in memory for the HTTP server ([`McpTestServer::events`]); the stdio binary appends it
//! to the file given by `--log FILE` or the `NOETIC_MCP_TEST_LOG` variable, which a test reads after
//! the server is gone ([`read_event_log`]), and with `--report HOST:PORT` also writes each line, as
//! it happens, to a TCP connection it opens to that address: a test that starts the server through
//! another program (the CLI) waits on that stream for what the server saw, without polling the file.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelledNotificationParam,
    ContentBlock, Implementation, JsonObject, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};
use tokio::sync::Notify;

/// How many tools one `tools/list` page holds.
const PAGE_SIZE: usize = 2;
/// The environment variable naming the stdio server's event log file (`--log FILE` wins over it).
pub const MCP_TEST_LOG: &str = "NOETIC_MCP_TEST_LOG";

/// The request id an event line names (`call slow (request 3)` → `3`), if it names one.
///
/// # Examples
/// ```
/// use noetic_test_support::mcp::request_id;
/// assert_eq!(request_id("notification cancelled (request 3): gone"), Some("3"));
/// assert_eq!(request_id("session deleted"), None);
/// ```
pub fn request_id(event: &str) -> Option<&str> {
    let (_, rest) = event.split_once("(request ")?;
    rest.split_once(')').map(|(id, _)| id)
}

/// Asserts that `events` (a server's log, in order) shows the server was told to cancel the request
/// of the first call of `tool`: a line starting with `arrived` (`notification cancelled` for the
/// stdio server's handler, `posted notifications/cancelled` for the HTTP server's arrival) naming
/// that call's request id, before the first line for which `closed` holds (the connection's end).
///
/// # Panics
/// When it does not, showing the events.
#[track_caller]
pub fn assert_cancelled_before_close(
    events: &[String],
    tool: &str,
    arrived: &str,
    closed: impl Fn(&str) -> bool,
) {
    let called = format!("call {tool} ");
    let call = events
        .iter()
        .find(|event| event.starts_with(&called))
        .unwrap_or_else(|| panic!("no call of {tool} in {events:#?}"));
    let id = request_id(call).unwrap_or_else(|| panic!("no request id in `{call}`"));
    let cancelled = events
        .iter()
        .position(|event| event.starts_with(arrived) && request_id(event) == Some(id))
        .unwrap_or_else(|| panic!("no `{arrived}` for request {id} in {events:#?}"));
    let end = events
        .iter()
        .position(|event| closed(event))
        .unwrap_or_else(|| panic!("the connection's end is not in {events:#?}"));
    assert!(
        cancelled < end,
        "the cancel of request {id} came after the connection closed: {events:#?}"
    );
}

/// Reads a stdio server's event log file (the lines it wrote, in order); empty when it wrote none.
///
/// # Panics
/// When the file exists but cannot be read.
pub fn read_event_log(path: &std::path::Path) -> Vec<String> {
    match std::fs::read_to_string(path) {
        Ok(text) => text.lines().map(str::to_owned).collect(),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(error) => panic!("cannot read the MCP test log {}: {error}", path.display()),
    }
}

fn object(value: Value) -> Arc<JsonObject> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(JsonObject::new()),
    }
}

fn tool(name: &'static str, description: &'static str, schema: Value) -> Tool {
    Tool::new(name, description, object(schema))
}

fn base_tools() -> Vec<Tool> {
    vec![
        tool(
            "add",
            "Adds two numbers",
            // `b` is checked by the server only: a call without it is the server's MCP error.
            json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                "required": ["a"]}),
        )
        .with_raw_output_schema(object(json!({"type": "object",
            "properties": {"sum": {"type": "number"}}, "required": ["sum"]}))),
        tool("fail", "Always fails", json!({"type": "object"})),
        tool(
            "slow",
            "Sleeps `ms` milliseconds",
            json!({"type": "object", "properties": {"ms": {"type": "integer"}}, "required": ["ms"]}),
        ),
        tool(
            "toggle",
            "Adds or removes the tool `extra`",
            json!({"type": "object"}),
        ),
        tool(
            "env",
            "Reads an environment variable of the server",
            json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}),
        ),
        tool(
            "grandchild",
            "Starts a long-lived child process of the server",
            json!({"type": "object"}),
        ),
        tool("die", "Exits the server process", json!({"type": "object"})),
        tool(
            "echo",
            "Says back the text it is given",
            json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
        ),
        tool(
            "wait_for",
            "Returns once the server's event log has a line containing `event`",
            json!({"type": "object", "properties": {"event": {"type": "string"}}, "required": ["event"]}),
        ),
    ]
}

/// Where a server writes what it observed.
#[derive(Clone, Default)]
struct EventLog {
    lines: Arc<Mutex<Vec<String>>>,
    changed: Arc<Notify>,
    file: Option<PathBuf>,
    /// The `--report` connection: each line as it happens.
    report: Option<Arc<Mutex<std::net::TcpStream>>>,
}

impl EventLog {
    /// Waits until a line satisfying `matches` is in the log, and returns the first such line.
    async fn wait_for(&self, matches: impl Fn(&str) -> bool) -> String {
        loop {
            // Registered before the check, so a line pushed in between still wakes it.
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let seen = self
                .lines
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .iter()
                .find(|line| matches(line))
                .cloned();
            if let Some(line) = seen {
                return line;
            }
            changed.await;
        }
    }

    fn push(&self, line: String) {
        if let Some(path) = &self.file
            && let Ok(mut file) = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
        {
            let _ = writeln!(file, "{line}");
        }
        if let Some(report) = &self.report {
            let _ = writeln!(
                report
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
                "{line}"
            );
        }
        eprintln!("mcp test server: {line}");
        self.lines
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(line);
        self.changed.notify_waiters();
    }
}

/// The server's handler: its tools and event log, shared by every session.
#[derive(Clone)]
struct TestServer {
    tools: Arc<Mutex<Vec<Tool>>>,
    log: EventLog,
}

impl TestServer {
    fn new(log: EventLog) -> Self {
        TestServer {
            tools: Arc::new(Mutex::new(base_tools())),
            log,
        }
    }

    fn tools(&self) -> std::sync::MutexGuard<'_, Vec<Tool>> {
        self.tools
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn number(arguments: Option<&JsonObject>, key: &str) -> Result<f64, ErrorData> {
    arguments
        .and_then(|arguments| arguments.get(key))
        .and_then(Value::as_f64)
        .ok_or_else(|| ErrorData::invalid_params(format!("`{key}` must be a number"), None))
}

fn text(value: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(value.into())])
}

impl ServerHandler for TestServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_server_info(Implementation::new("noetic-mcp-test-server", "0.1.0"))
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let start = match request.and_then(|request| request.cursor) {
            Some(cursor) => cursor
                .parse::<usize>()
                .map_err(|_| ErrorData::invalid_params("bad cursor", None))?,
            None => 0,
        };
        let tools = self.tools().clone();
        let end = (start + PAGE_SIZE).min(tools.len());
        let mut page = ListToolsResult::with_all_items(tools[start.min(end)..end].to_vec());
        if end < tools.len() {
            page.next_cursor = Some(end.to_string());
        }
        Ok(page)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        let id = context.id.clone();
        self.log.push(format!("call {name} (request {id})"));
        let arguments = request.arguments.as_ref();
        let result = match name.as_str() {
            "add" => {
                let sum = number(arguments, "a")? + number(arguments, "b")?;
                let mut result = text(sum.to_string());
                result.structured_content = Some(json!({ "sum": sum }));
                result
            }
            "fail" => CallToolResult::error(vec![ContentBlock::text("this tool always fails")]),
            "slow" => {
                let millis = number(arguments, "ms")?;
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(millis as u64)) => text(format!("slept {millis} ms")),
                    () = context.ct.cancelled() => {
                        self.log.push(format!("cancelled slow (request {id})"));
                        return Err(ErrorData::internal_error("cancelled", None));
                    }
                }
            }
            "toggle" => {
                let present = {
                    let mut tools = self.tools();
                    match tools.iter().position(|tool| tool.name == "extra") {
                        Some(index) => {
                            tools.remove(index);
                            false
                        }
                        None => {
                            tools.push(tool("extra", "Added by toggle", json!({"type": "object"})));
                            true
                        }
                    }
                };
                let _ = context.peer.notify_tool_list_changed().await;
                text(format!("extra present: {present}"))
            }
            "extra" if self.tools().iter().any(|tool| tool.name == "extra") => text("extra ran"),
            "env" => {
                let variable = arguments
                    .and_then(|arguments| arguments.get("name"))
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                text(std::env::var(variable).unwrap_or_else(|_| "<unset>".to_owned()))
            }
            "grandchild" => {
                let child = std::process::Command::new("sleep")
                    .arg("300")
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::null())
                    .spawn()
                    .map_err(|error| ErrorData::internal_error(error.to_string(), None))?;
                text(child.id().to_string())
            }
            "die" => std::process::exit(3),
            "wait_for" => {
                let wanted = arguments
                    .and_then(|arguments| arguments.get("event"))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                text(self.log.wait_for(|line| line.contains(&wanted)).await)
            }
            "echo" => {
                let said = arguments
                    .and_then(|arguments| arguments.get("text"))
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                text(format!("The MCP server heard: {said}"))
            }
            other => {
                return Err(ErrorData::invalid_params(
                    format!("no tool named `{other}`"),
                    None,
                ));
            }
        };
        Ok(result.into())
    }

    async fn on_cancelled(
        &self,
        notification: CancelledNotificationParam,
        _context: NotificationContext<RoleServer>,
    ) {
        let id = notification
            .request_id
            .map_or_else(|| "none".to_owned(), |id| id.to_string());
        self.log.push(format!(
            "notification cancelled (request {id}): {}",
            notification.reason.unwrap_or_default()
        ));
    }
}

/// Serves MCP on stdin/stdout until the client closes stdin (the `noetic-mcp-test-server` binary),
/// appending its event log to `log` (else to the file [`MCP_TEST_LOG`] names, if set) and, with
/// `report`, writing each line to a TCP connection to that address.
///
/// # Errors
/// When `report` cannot be reached, the client's initialize fails or the transport breaks.
pub async fn serve_stdio(
    log: Option<PathBuf>,
    report: Option<SocketAddr>,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    use rmcp::ServiceExt as _;
    let report = match report {
        Some(address) => Some(Arc::new(Mutex::new(std::net::TcpStream::connect(address)?))),
        None => None,
    };
    let log = EventLog {
        file: log.or_else(|| std::env::var_os(MCP_TEST_LOG).map(PathBuf::from)),
        report,
        ..EventLog::default()
    };
    log.push("started".to_owned());
    let running = TestServer::new(log.clone())
        .serve(rmcp::transport::stdio())
        .await?;
    let reason = running.waiting().await?;
    log.push(format!("quit: {reason:?}"));
    Ok(())
}

/// In front of the HTTP server: the bearer check, and the events only HTTP shows — a
/// `notifications/cancelled` as it arrives (`posted notifications/cancelled (request ID)`, before
/// the server answers the POST and hands it to the session, whose handler logs it later), and a
/// session's deletion (`session deleted`, once answered).
async fn http_front(
    expected: Option<Arc<str>>,
    log: EventLog,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::http::{Method, StatusCode};
    use axum::response::IntoResponse as _;
    let given = request
        .headers()
        .get("authorization")
        .and_then(|value| value.to_str().ok());
    if let Some(expected) = &expected
        && given != Some(&**expected)
    {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let method = request.method().clone();
    let request = if method == Method::POST {
        let (parts, body) = request.into_parts();
        let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
            return StatusCode::BAD_REQUEST.into_response();
        };
        let messages = match serde_json::from_slice::<Value>(&bytes) {
            Ok(Value::Array(batch)) => batch,
            Ok(message) => vec![message],
            Err(_) => Vec::new(),
        };
        for message in messages
            .iter()
            .filter(|message| message["method"] == "notifications/cancelled")
        {
            let id = &message["params"]["requestId"];
            let id = id.as_str().map_or_else(|| id.to_string(), str::to_owned);
            log.push(format!("posted notifications/cancelled (request {id})"));
        }
        axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes))
    } else {
        request
    };
    let response = next.run(request).await;
    if method == Method::DELETE {
        log.push("session deleted".to_owned());
    }
    response
}

/// The streamable HTTP test server on 127.0.0.1, requiring `Authorization: Bearer <token>` when
/// given one. Stops when dropped.
pub struct McpTestServer {
    address: SocketAddr,
    log: EventLog,
    sessions: Arc<rmcp::transport::streamable_http_server::session::local::LocalSessionManager>,
    stop: tokio_util::sync::CancellationToken,
}

impl std::fmt::Debug for McpTestServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpTestServer")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

impl McpTestServer {
    /// Starts the server on a free loopback port; with `bearer`, requests without
    /// `Authorization: Bearer <bearer>` get 401.
    ///
    /// # Panics
    /// When no loopback port can be bound.
    pub async fn start_http(bearer: Option<&str>) -> McpTestServer {
        use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
        use rmcp::transport::streamable_http_server::{
            StreamableHttpServerConfig, StreamableHttpService,
        };
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap_or_else(|error| panic!("mcp test server: cannot bind: {error}"));
        let address = listener
            .local_addr()
            .unwrap_or_else(|error| panic!("mcp test server: no address: {error}"));
        let log = EventLog::default();
        let server = TestServer::new(log.clone());
        let sessions = Arc::new(LocalSessionManager::default());
        let stop = tokio_util::sync::CancellationToken::new();
        let service = StreamableHttpService::new(
            move || Ok(server.clone()),
            sessions.clone(),
            StreamableHttpServerConfig::default().with_cancellation_token(stop.child_token()),
        );
        let expected: Option<Arc<str>> = bearer.map(|token| format!("Bearer {token}").into());
        let observed = log.clone();
        let router =
            axum::Router::new()
                .nest_service("/mcp", service)
                .layer(axum::middleware::from_fn(
                    move |request: axum::extract::Request, next: axum::middleware::Next| {
                        http_front(expected.clone(), observed.clone(), request, next)
                    },
                ));
        let until = stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, router)
                .with_graceful_shutdown(until.cancelled_owned())
                .await;
        });
        McpTestServer {
            address,
            log,
            sessions,
            stop,
        }
    }

    /// The MCP endpoint, `http://127.0.0.1:PORT/mcp`.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.address)
    }

    /// What the server observed so far, in order (see the [module docs](self) for the lines).
    pub fn events(&self) -> Vec<String> {
        self.log
            .lines
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Waits until an event satisfying `matches` is in the log, and returns the first such event.
    /// Unbounded: wrap it in a timeout naming what it waits for.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn wait_for_event(&self, matches: impl Fn(&str) -> bool) -> String {
        self.log.wait_for(matches).await
    }

    /// Forgets every session, as a server restart or a session timeout would: the next request
    /// with an old session id gets 404.
    pub async fn expire_sessions(&self) {
        self.sessions.sessions.write().await.clear();
    }

    /// Stops serving.
    pub fn stop(&self) {
        self.stop.cancel();
    }
}

impl Drop for McpTestServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The path of the `noetic-mcp-test-server` binary (stdio), next to the running test binary's
/// directory. `cargo test --workspace` builds it (this package's integration test needs it); a test
/// run of one other package does not build another package's binaries, so there it must have been
/// built before (`cargo build -p noetic-test-support --bin noetic-mcp-test-server`).
///
/// # Panics
/// When it is not there, saying how to build it.
pub fn mcp_test_server_path() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let exe = std::env::current_exe().unwrap_or_else(|error| panic!("no current exe: {error}"));
        // target/<profile>/deps/<test> (or examples/<example>) → target/<profile>/noetic-mcp-test-server
        let profile_dir = exe
            .parent()
            .and_then(std::path::Path::parent)
            .unwrap_or_else(|| panic!("unexpected test binary path {}", exe.display()));
        let path = profile_dir.join("noetic-mcp-test-server");
        assert!(
            path.exists(),
            "{} is missing: run `cargo test --workspace`, or build it first with \
             `cargo build -p noetic-test-support --bin noetic-mcp-test-server`",
            path.display()
        );
        path
    })
    .clone()
}
