//! Loading a workflow file into a harness, and `noetic validate`.

use noetic_core::workflow::{HydrateOptions, WorkflowDocument, WorkflowRegistry};
use std::path::{Path, PathBuf};

use noetic_acp::AcpClient;
use noetic_core::acp::AcpAgentCommand;
use noetic_core::workflow::ConnectionKind;
use noetic_core::{
    AgentHarness, CallModelDefaults, Environment, Error, EventLogOptions, ToolSource,
};
use noetic_mcp::{McpCommand, McpServer};
use noetic_platform_unix::{LocalFs, LocalShell};
use serde_json::Value;

use crate::Failure;
use crate::args::Options;
use crate::provider::{Chosen, choose};
use crate::tools::builtins;

/// A harness running a workflow, and the provider it owns (the demo server lives as long as this), and
/// the MCP servers it started and the ACP client its `acp-agent` nodes run on (both shut down when
/// this drops: see [`MCP_SHUTDOWN`]).
pub(crate) struct Setup {
    pub(crate) harness: AgentHarness,
    _demo: Option<noetic_providers::DemoModel>,
    mcp: Vec<McpServer>,
    acp: AcpClient,
}

/// How long the CLI gives its MCP servers to end when it is done with them, on every way out (an
/// answer, an error, a signal): first the `notifications/cancelled` of calls a stop dropped are
/// written (at most [`noetic_mcp::CANCEL_SEND_TIMEOUT`]), then each connection is closed (a stdio
/// server's stdin, an HTTP session deleted). A server still running after this is killed with its
/// process group. ACP agents kept alive across turns (`keepAlive: harness`) get the same window to
/// end on their stdin's end before theirs is killed.
const MCP_SHUTDOWN: std::time::Duration = std::time::Duration::from_secs(2);

impl Drop for Setup {
    fn drop(&mut self) {
        let servers = std::mem::take(&mut self.mcp);
        let acp = std::mem::take(&mut self.acp);
        if servers.is_empty() && acp.kept_sessions().is_empty() {
            return;
        }
        // Waiting is needed here, in a drop: every command's exit path (`?`, a signal) passes by it.
        // The CLI's runtime is multi-threaded, where blocking in place is allowed; elsewhere the
        // servers are only killed (when `servers` drops).
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if runtime.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread {
            return;
        }
        tokio::task::block_in_place(|| {
            runtime.block_on(async {
                let shutdowns =
                    futures_util::future::join_all(servers.iter().map(McpServer::shutdown));
                let both = futures_util::future::join(shutdowns, acp.close_sessions());
                let _ = tokio::time::timeout(MCP_SHUTDOWN, both).await;
            });
        });
    }
}

/// The MCP servers of a run: `--mcp` ones (offered to every model call) and the document's declared
/// `connections` (offered where a `callModel` names them).
struct McpServers {
    everywhere: Vec<McpServer>,
    declared: Vec<McpServer>,
}

/// Starts (or reaches) every `--mcp` server, then every server `document` declares, in order. A
/// server that cannot start or initialise is a runtime error (exit 1, `error[MCP_…]` naming it); the
/// ones already started are shut down.
async fn connect_mcp(
    options: &Options,
    document: &WorkflowDocument,
) -> Result<McpServers, Failure> {
    let mut builders = Vec::new();
    for (name, target) in &options.mcp {
        let builder = if target.starts_with("http://") || target.starts_with("https://") {
            McpServer::http(name.clone(), target.clone())
        } else {
            McpCommand::parse(name, target)
                .map(|command| McpServer::stdio(name.clone(), command))
                .map_err(|error| Failure::Usage(format!("--mcp {name}: {error}")))?
        };
        builders.push((true, builder.needs_approval(gated_of(options, name))));
    }
    for declared in document.connections.iter().flatten() {
        let ConnectionKind::Mcp(declaration) = &declared.kind else {
            continue;
        };
        if options.mcp.iter().any(|(name, _)| *name == declared.name) {
            return Err(Failure::Usage(format!(
                "--mcp {0}: the workflow declares a connection `{0}` too",
                declared.name
            )));
        }
        let builder = McpServer::declared(declared.name.clone(), declaration)
            .map_err(|error| Failure::Usage(format!("connection `{}`: {error}", declared.name)))?;
        builders.push((
            false,
            builder.needs_approval(gated_of(options, &declared.name)),
        ));
    }
    let mut servers = McpServers {
        everywhere: Vec::new(),
        declared: Vec::new(),
    };
    for (everywhere, builder) in builders {
        match builder.connect().await {
            Ok(server) if everywhere => servers.everywhere.push(server),
            Ok(server) => servers.declared.push(server),
            Err(error) => {
                for server in servers.everywhere.iter().chain(&servers.declared) {
                    server.shutdown().await;
                }
                return Err(Failure::Runtime(error.into()));
            }
        }
    }
    Ok(servers)
}

/// The ACP agents `--acp NAME=COMMAND` registers, each command line split like a shell's.
fn acp_agents(options: &Options) -> Result<Vec<(String, AcpAgentCommand)>, Failure> {
    options
        .acp
        .iter()
        .map(|(name, line)| {
            let words = shell_words::split(line).map_err(|error| {
                Failure::Usage(format!(
                    "--acp {name}: cannot split the command line `{line}`: {error}"
                ))
            })?;
            let mut words = words.into_iter();
            let program = words
                .next()
                .ok_or_else(|| Failure::Usage(format!("--acp {name}: the command is empty")))?;
            Ok((name.clone(), AcpAgentCommand::new(program, words)))
        })
        .collect()
}

/// A connection the document declares, before it is connected: no tools yet. Validation hydrates
/// against these, so a reference to a declared connection checks without starting anything.
struct Declared(String);

impl ToolSource for Declared {
    fn name(&self) -> &str {
        &self.0
    }

    fn tools(&self) -> std::sync::Arc<[noetic_core::Tool]> {
        std::sync::Arc::from(Vec::new())
    }
}

/// `registry` with a placeholder for every connection `document` declares.
fn with_declared(registry: WorkflowRegistry, document: &WorkflowDocument) -> WorkflowRegistry {
    document
        .connections
        .iter()
        .flatten()
        .fold(registry, |registry, connection| {
            registry.tool_source(connection.name.clone(), Declared(connection.name.clone()))
        })
}

/// An invalid workflow is a usage error (exit 2) whose message names the file and the JSON pointer.
fn invalid(flow: &str, error: &Error) -> Failure {
    Failure::Usage(format!("{flow}: error[{}]: {error}", error.code()))
}

pub(crate) fn read(flow: &str) -> Result<WorkflowDocument, Failure> {
    let text = std::fs::read_to_string(flow)
        .map_err(|error| Failure::Usage(format!("{flow}: cannot read: {error}")))?;
    WorkflowDocument::from_json(&text).map_err(|error| invalid(flow, &error))
}

/// The built-in tools the options enable, those named by `--needs-approval` gated.
fn registry(fs_root: Option<&Path>, shell: bool, gated: &[String]) -> WorkflowRegistry {
    builtins(fs_root, shell)
        .into_iter()
        .map(|tool| {
            let needs = gated.iter().any(|name| name == tool.name());
            tool.needs_approval(needs)
        })
        .fold(WorkflowRegistry::new(), WorkflowRegistry::tool)
}

/// Every `--needs-approval` name must be an enabled built-in tool or `NAME__TOOL` of a connected
/// MCP server that has TOOL: a typo must not leave a tool ungated.
fn check_gated(
    options: &Options,
    registry: &WorkflowRegistry,
    servers: &[McpServer],
) -> Result<(), Failure> {
    for name in &options.needs_approval {
        let builtin = registry.tool_named(name).is_some();
        let mcp = servers.iter().any(|server| {
            name.strip_prefix(server.name())
                .and_then(|rest| rest.strip_prefix("__"))
                .is_some_and(|tool| server.tool_names().iter().any(|known| known == tool))
        });
        if !builtin && !mcp {
            return Err(Failure::Usage(format!(
                "--needs-approval {name}: no such tool (a built-in tool the options enable, or NAME__TOOL of an --mcp server or a declared connection)"
            )));
        }
    }
    Ok(())
}

/// The tools of MCP server `server` that `--needs-approval NAME__TOOL` names.
fn gated_of<'a>(options: &'a Options, server: &'a str) -> impl Iterator<Item = String> + 'a {
    options.needs_approval.iter().filter_map(move |name| {
        name.strip_prefix(server)
            .and_then(|rest| rest.strip_prefix("__"))
            .map(str::to_owned)
    })
}

/// What the fs and shell tools reach: with `--allow-fs DIR`, a [`LocalFs`] rooted at DIR (the
/// canonical path returned with it) and, with `--allow-shell`, a [`LocalShell`] with cwd DIR, the
/// `--shell-timeout-ms` timeout and an allow-listed environment plus `--shell-env` names. Without
/// `--allow-fs`, the sandboxed defaults (no fs tools are registered then).
fn environment(options: &Options) -> Result<(Environment, Option<PathBuf>), Failure> {
    let Some(dir) = &options.allow_fs else {
        return Ok((Environment::new(), None));
    };
    let fs = LocalFs::rooted(dir)
        .map_err(|error| Failure::Usage(format!("--allow-fs {}: {error}", dir.display())))?;
    let root = fs.root().to_owned();
    let mut environment = Environment::new();
    if options.allow_shell {
        let mut shell = LocalShell::new(&fs).timeout(
            options
                .shell_timeout
                .unwrap_or(noetic_platform_unix::DEFAULT_TIMEOUT),
        );
        for name in &options.shell_env {
            shell = shell.pass_env(name.clone());
        }
        environment = environment.shell(shell);
    }
    Ok((environment.fs(fs), Some(root)))
}

/// The model given to nodes that name none while only validating.
const PLACEHOLDER_MODEL: &str = "(default model)";

fn hydrate_with(
    document: &WorkflowDocument,
    registry: &WorkflowRegistry,
    default_model: Option<String>,
) -> Result<noetic_core::Step<Value, Value>, Error> {
    let mut hydrate = HydrateOptions::new();
    hydrate.default_model = default_model;
    document.hydrate(registry, &hydrate)
}

/// Reads, validates and hydrates `flow`, and builds a harness running it on the chosen provider.
pub(crate) async fn setup(flow: &str, options: &Options) -> Result<Setup, Failure> {
    let document = read(flow)?;
    setup_document(flow, &document, options, None).await
}

/// Where a harness records durably.
pub(crate) enum Durable {
    /// One SQLite file, this process's alone; with an event log (`serve`: clients resume their
    /// streams across restarts) or without.
    Sqlite(noetic_storage_sqlite::SqliteStorage, bool),
    /// One PostgreSQL database whose threads this host shares with the others (`serve`).
    Postgres(noetic_storage_postgres::PostgresStorage),
    /// One SQLite file whose threads an engine runs (`serve --engine`): the harness only reads
    /// them and follows their event logs.
    SharedSqlite(noetic_storage_sqlite::SqliteStorage),
}

impl From<noetic_storage_sqlite::SqliteStorage> for Durable {
    fn from(store: noetic_storage_sqlite::SqliteStorage) -> Self {
        Durable::Sqlite(store, false)
    }
}

/// Validates and hydrates `document` (read from `flow`, which names it in errors), and builds a harness
/// running it on the chosen provider, durable on `durable` when given.
pub(crate) async fn setup_document(
    flow: &str,
    document: &WorkflowDocument,
    options: &Options,
    durable: Option<Durable>,
) -> Result<Setup, Failure> {
    let (environment, fs_root) = environment(options)?;
    let agents = acp_agents(options)?;
    let registry = registry(
        fs_root.as_deref(),
        options.allow_shell,
        &options.needs_approval,
    );
    // Validate before choosing the provider: an invalid workflow must not start the demo model, an
    // MCP server, or touch the network. The placeholder model lets nodes without one hydrate; the real
    // default is only known once the provider is chosen.
    hydrate_with(
        document,
        &with_declared(registry.clone(), document),
        Some(PLACEHOLDER_MODEL.to_owned()),
    )
    .map_err(|error| invalid(flow, &error))?;
    let mcp = connect_mcp(options, document).await?;
    let connected: Vec<McpServer> = mcp
        .everywhere
        .iter()
        .chain(&mcp.declared)
        .cloned()
        .collect();
    check_gated(options, &registry, &connected)?;
    let registry = mcp.declared.iter().fold(registry, |registry, server| {
        registry.tool_source(server.name().to_owned(), server.clone())
    });
    let Chosen {
        name,
        provider,
        default_model,
        _demo,
    } = choose(options).await?;
    // Nodes without a model use --model, else the provider's own (the demo model's), else fail.
    let graph = hydrate_with(document, &registry, options.model.clone().or(default_model))
        .map_err(|error| invalid(flow, &error))?;
    let mut defaults = CallModelDefaults::default().provider(name.clone());
    if let Some(idle) = options.idle_timeout {
        defaults = defaults.idle_timeout(idle);
    }
    let mut builder =
        AgentHarness::builder(options.name.clone().unwrap_or_else(|| "noetic".to_owned()))
            .agent_graph(graph)
            .provider(name, provider)
            .call_model_defaults(defaults)
            .workflow_registry(registry)
            .environment(environment);
    match durable {
        Some(Durable::Sqlite(store, event_log)) => {
            builder = builder
                .durable(store)
                .event_log(event_log.then(EventLogOptions::default));
        }
        Some(Durable::Postgres(store)) => builder = builder.durable(store).shared_threads(),
        Some(Durable::SharedSqlite(store)) => builder = builder.durable(store).shared_threads(),
        None => {}
    }
    // Idle until an `acp-agent` node runs: no process is started before.
    let acp = AcpClient::new();
    builder = builder.acp_runtime(acp.clone());
    for (name, command) in agents {
        builder = builder.acp_agent(name, command);
    }
    if let Some(ttl) = options.lease_ttl {
        builder = builder.lease_ttl(ttl);
    }
    for server in &mcp.everywhere {
        builder = builder.tools_from(server.clone());
    }
    for server in mcp.everywhere.iter().chain(&mcp.declared) {
        builder = builder.connection(server.clone());
    }
    let harness = builder.build()?;
    let mut servers = mcp.everywhere;
    servers.extend(mcp.declared);
    Ok(Setup {
        harness,
        _demo,
        mcp: servers,
        acp,
    })
}

/// `noetic validate`: check the file and print its step tree.
pub(crate) fn validate(flow: &str) -> Result<(), Failure> {
    let document = read(flow)?;
    // Validation does not need a real model: a placeholder lets nodes without one hydrate.
    let every_tool = with_declared(registry(Some(Path::new("/")), true, &[]), &document);
    hydrate_with(&document, &every_tool, Some(PLACEHOLDER_MODEL.to_owned()))
        .map_err(|error| invalid(flow, &error))?;
    let mut tree = String::new();
    print_tree(&document.to_value()["root"], 0, &mut tree);
    print!("{tree}");
    println!("{flow}: valid");
    Ok(())
}

/// One line per node: kind, id and the field that says most about it; children indented.
fn print_tree(node: &Value, depth: usize, out: &mut String) {
    let field = |name: &str| node.get(name).and_then(Value::as_str);
    let kind = field("kind").unwrap_or("?");
    let detail = match kind {
        "callModel" => field("model").map(|model| format!(" ({model})")),
        "invokeTool" => field("toolName").map(|tool| format!(" ({tool})")),
        "runCode" => field("execute").map(|code| format!(" ({code})")),
        "inParallel" => field("mode").map(|mode| format!(" ({mode})")),
        "subflow" => field("ref").map(|name| format!(" (ref {name})")),
        "acp-agent" => match node.get("agent") {
            Some(Value::String(name)) => Some(format!(" (agent {name})")),
            Some(agent) => agent
                .get("command")
                .and_then(Value::as_str)
                .map(|command| format!(" ({command})")),
            None => None,
        },
        _ => None,
    };
    out.push_str(&format!(
        "{}{kind} {}{}\n",
        "  ".repeat(depth),
        field("id").unwrap_or(""),
        detail.unwrap_or_default()
    ));
    for key in ["steps", "paths"] {
        for child in node
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            print_tree(child, depth + 1, out);
        }
    }
    for key in ["child", "body", "each", "step", "default"] {
        if let Some(child) = node.get(key).filter(|child| child.is_object()) {
            print_tree(child, depth + 1, out);
        }
    }
    for route in node
        .get("routes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(target) = route.get("target") {
            print_tree(target, depth + 1, out);
        }
    }
    if let Some(root) = node
        .get("document")
        .and_then(|document| document.get("root"))
    {
        print_tree(root, depth + 1, out);
    }
}
