//! Command-line parsing. Hand-written: the grammar is small and a parser library would double the
//! CLI's build time.

use std::time::Duration;

/// The usage text, printed by `--help` and with usage errors.
pub(crate) const USAGE: &str = "\
usage:
  noetic run FLOW.json [PROMPT] [options]     run a workflow as the agent graph (prompt from stdin if absent)
  noetic resume ID --storage sqlite:PATH [options]   continue a durable run after a crash (or print
                                              its result again if it finished)
  noetic chat FLOW.json [options] [--jsonl]   a session reading messages from stdin while turns run
  noetic serve FLOW.json [options]            serve the workflow over HTTP: the native API, the AI SDK
                                              stream and a web page at / (until SIGTERM/SIGINT)
  noetic validate FLOW.json                   validate a workflow and print its step tree
  noetic spend --storage sqlite:PATH          print the paid calls left unpriced (cut off, crashed)
                                              as a JSON array
  noetic --version                            print the version

options:
  --provider openrouter|openai|anthropic|responses|chat|demo
                            the provider (default: openrouter with a key,
                            responses with --base-url, else the offline demo model)
  --base-url URL            the provider's base URL (required by responses and chat)
  --api-key-env NAME        the env var holding the API key (default: OPENROUTER_API_KEY /
                            OPENAI_API_KEY / ANTHROPIC_API_KEY)
  --model MODEL             the model of nodes that name none
  --thread ID               the session thread (default __default__)
  --name NAME               the harness name, prefix of framework event types (default noetic)
  --idle-timeout-ms N       the stream idle watchdog (default 120000)
  --events jsonl            print every stream event as one JSON object per line instead of the text
  --output json             (run) print the turn's response as one JSON object at the end
  --allow-fs DIR            enable the read_file, write_file and list_dir tools, confined to DIR
                            (relative paths resolve against DIR; absolute paths and symlinks only
                            when they stay inside it)
  --allow-shell             enable the shell tool (needs --allow-fs DIR): `sh -c` with cwd DIR, its
                            own process group, an allow-listed environment (no API keys)
  --shell-timeout-ms N      how long a shell command may run before its process group is killed
                            (default 30000)
  --shell-env NAME          pass the variable NAME on to shell commands too (repeatable)
  --mcp NAME=COMMAND        (run, resume, chat) start the MCP server COMMAND (one argument, split like a
                            shell) over stdio, and offer its tools to every model call as NAME__TOOL
                            (repeatable); its environment is an allow-list (no API keys)
  --mcp NAME=URL            the same for an MCP server at an http:// or https:// URL (streamable HTTP)
  --acp NAME=COMMAND        (run, resume, chat) register the ACP agent COMMAND (split like a shell) as
                            NAME, for `acp-agent` nodes whose `agent` is \"NAME\" (repeatable); it
                            runs in its own process group with a minimal environment (no API keys)
  --needs-approval TOOL     calls of TOOL (a built-in tool, or NAME__TOOL of an MCP server) wait for
                            a person's approval (repeatable): chat prints each request and takes
                            /approve ID or /reject ID REASON ({\"command\":\"approve\",\"approvalId\"}
                            with --jsonl); run cannot ask and exits 1 unless --approve-all (an
                            acp-agent node's `ask` permission requests are asked the same way)
  --approve-all             (run) approve every call that needs approval
  --storage sqlite:PATH     (run, resume, chat) record durably in a SQLite file: `run` prints
                            `execution: ID` on stderr before the first model request; `chat` keeps
                            its --thread across restarts, first finishing a turn a crash cut
  --storage postgres://URL  (serve) run as one of many identical hosts sharing the PostgreSQL database
                            at URL: each accepts messages for every thread and runs turns (unless
                            --accept-only); clients see a turn live from any host
  --accept-only             (serve, with postgres) accept and stream, but run no turns here
  --lease-ttl-ms N          (run, resume, chat) how long the execution's or thread's lease lasts
                            unless renewed (default 30000)
  --drain-ms N              (run, chat) on SIGTERM or SIGINT, let model rounds in flight finish for up to
                            N ms before stopping (a second signal stops at once); prints
                            `drain: {json}` on stderr; exit 128 + the signal's number either way
  --otlp-endpoint URL       export spans and metrics over OTLP to the collector at URL (its base URL,
                            as OTEL_EXPORTER_OTLP_ENDPOINT; the other OTEL_* variables still apply)
  --listen IP:PORT          (serve) where to listen (default 127.0.0.1:8787); any address but loopback
                            requires a bearer token
  --token TOKEN             (serve) the bearer token clients must send (or NOETIC_SERVE_TOKEN); on a
                            non-loopback address without one, one is generated and printed once
  --allow-host NAME         (serve) answer requests whose Host is NAME too (repeatable; loopback names
                            always)
  --cors-origin ORIGIN      (serve) let pages from ORIGIN call the API (CORS; repeatable)
  --max-queue N             (serve) messages a thread may have queued before 429 (default 64)
  --engine restate=URL      (serve, with --storage) run the turns on Restate, whose ingress is at URL:
                            this process serves the thread object to Restate and registers it; the
                            store is the threads' record and the event log clients stream from
  --restate-admin URL       (serve, with --engine) Restate's admin API (default: the ingress host, port 9070)
  --restate-endpoint IP:PORT (serve, with --engine) where this process serves the thread object to
                            Restate (default 127.0.0.1:9080); it must be reachable from Restate
  --jsonl                   (chat) read JSON lines: {\"input\", \"threadId\"?, \"deliveryMode\"?, \"messageId\"?} or {\"command\"}
                            ({\"command\":\"abort\",\"drainMs\":N} drains the running turn first)

chat commands (plain-line mode): a line is a next-turn message; /steer TEXT, /between TEXT,
/interrupt TEXT, /approve ID, /reject ID REASON, /abort, /status, /quit";

/// What to run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Command {
    Run {
        flow: String,
        prompt: Option<String>,
    },
    Chat {
        flow: String,
        jsonl: bool,
    },
    Serve {
        flow: String,
    },
    Validate {
        flow: String,
    },
    Resume {
        execution_id: String,
    },
    Spend,
    Help,
    Version,
}

/// The provider and run options shared by `run` and `chat`.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Options {
    pub(crate) provider: Option<String>,
    pub(crate) base_url: Option<String>,
    pub(crate) api_key_env: Option<String>,
    pub(crate) model: Option<String>,
    pub(crate) thread: Option<String>,
    pub(crate) name: Option<String>,
    pub(crate) idle_timeout: Option<Duration>,
    pub(crate) events_jsonl: bool,
    pub(crate) output_json: bool,
    /// `--allow-fs DIR`: the directory the fs tools (and the shell's cwd) are confined to.
    pub(crate) allow_fs: Option<std::path::PathBuf>,
    pub(crate) allow_shell: bool,
    /// `--shell-timeout-ms N`.
    pub(crate) shell_timeout: Option<Duration>,
    /// `--shell-env NAME`, each time given.
    pub(crate) shell_env: Vec<String>,
    /// `--storage sqlite:PATH`: the SQLite file of a durable run.
    pub(crate) storage: Option<std::path::PathBuf>,
    /// `--storage postgres://…` (serve): the database the hosts of a fleet share.
    pub(crate) postgres: Option<String>,
    /// `--accept-only` (serve, with postgres): run no turns on this host.
    pub(crate) accept_only: bool,
    pub(crate) lease_ttl: Option<Duration>,
    /// `--drain-ms N`: how long a signal lets the model rounds in flight finish.
    pub(crate) drain: Option<Duration>,
    /// `--mcp NAME=COMMAND|URL`, each time given: (name, command line or URL).
    pub(crate) mcp: Vec<(String, String)>,
    /// `--acp NAME=COMMAND`, each time given: (agent name, command line).
    pub(crate) acp: Vec<(String, String)>,
    /// `--needs-approval TOOL`, each time given.
    pub(crate) needs_approval: Vec<String>,
    /// `--approve-all`.
    pub(crate) approve_all: bool,
    /// `--listen IP:PORT` (serve).
    pub(crate) listen: Option<String>,
    /// `--token TOKEN` (serve).
    pub(crate) token: Option<String>,
    /// `--allow-host NAME`, each time given (serve).
    pub(crate) allow_host: Vec<String>,
    /// `--cors-origin ORIGIN`, each time given (serve).
    pub(crate) cors_origin: Vec<String>,
    /// `--max-queue N` (serve).
    pub(crate) max_queue: Option<usize>,
    /// `--otlp-endpoint URL`: the collector spans and metrics are exported to.
    pub(crate) otlp_endpoint: Option<String>,
    /// `--engine restate=URL` (serve): turns run on Restate, whose ingress is at URL.
    pub(crate) restate: Option<String>,
    /// `--restate-admin URL` (serve, with `--engine restate=…`).
    pub(crate) restate_admin: Option<String>,
    /// `--restate-endpoint IP:PORT` (serve, with `--engine restate=…`).
    pub(crate) restate_endpoint: Option<String>,
}

/// A `NAME=TARGET` value of `flag` (`--mcp`, `--acp`): NAME is `[A-Za-z0-9_-]` (an MCP server's
/// prefixes its tools; an ACP agent's is what `acp-agent` nodes name) and not in `known` yet.
fn named(
    flag: &str,
    what: &str,
    raw: &str,
    known: &[(String, String)],
) -> Result<(String, String), String> {
    let (name, target) = raw
        .split_once('=')
        .filter(|(name, target)| !name.is_empty() && !target.trim().is_empty())
        .ok_or_else(|| {
            let targets = if flag == "--mcp" {
                "NAME=COMMAND or NAME=URL"
            } else {
                "NAME=COMMAND"
            };
            format!("{flag} must be {targets}, not `{raw}`")
        })?;
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(format!(
            "{flag}: the {what} name `{name}` must be [A-Za-z0-9_-]"
        ));
    }
    if known.iter().any(|(other, _)| other == name) {
        return Err(format!("{flag}: the {what} name `{name}` is given twice"));
    }
    Ok((name.to_owned(), target.to_owned()))
}

/// Parses the arguments (without the program name).
///
/// # Errors
/// A message naming the offending argument.
pub(crate) fn parse(args: &[String]) -> Result<(Command, Options), String> {
    let mut options = Options::default();
    let mut positional = Vec::new();
    let mut jsonl = false;
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        let mut value = |name: &str| {
            iter.next()
                .cloned()
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match arg.as_str() {
            "-h" | "--help" => return Ok((Command::Help, options)),
            "-V" | "--version" => return Ok((Command::Version, options)),
            "--provider" => {
                let provider = value("--provider")?;
                if ![
                    "openrouter",
                    "openai",
                    "anthropic",
                    "responses",
                    "chat",
                    "demo",
                ]
                .contains(&provider.as_str())
                {
                    return Err(format!(
                        "--provider must be openrouter, openai, anthropic, responses, chat or demo, not `{provider}`"
                    ));
                }
                options.provider = Some(provider);
            }
            "--base-url" => options.base_url = Some(value("--base-url")?),
            "--api-key-env" => options.api_key_env = Some(value("--api-key-env")?),
            "--model" => options.model = Some(value("--model")?),
            "--thread" => options.thread = Some(value("--thread")?),
            "--name" => options.name = Some(value("--name")?),
            "--idle-timeout-ms" => {
                let raw = value("--idle-timeout-ms")?;
                let millis: u64 = raw.parse().map_err(|_| {
                    format!("--idle-timeout-ms must be a whole number, not `{raw}`")
                })?;
                if millis == 0 {
                    return Err("--idle-timeout-ms must be at least 1".to_owned());
                }
                options.idle_timeout = Some(Duration::from_millis(millis));
            }
            "--events" => match value("--events")?.as_str() {
                "jsonl" => options.events_jsonl = true,
                other => return Err(format!("--events supports `jsonl`, not `{other}`")),
            },
            "--output" => match value("--output")?.as_str() {
                "json" => options.output_json = true,
                other => return Err(format!("--output supports `json`, not `{other}`")),
            },
            "--allow-fs" => {
                let dir = value("--allow-fs")?;
                if dir.is_empty() || dir.starts_with("--") {
                    return Err(format!("--allow-fs needs a directory, not `{dir}`"));
                }
                options.allow_fs = Some(dir.into());
            }
            "--allow-shell" => options.allow_shell = true,
            "--shell-timeout-ms" => {
                let raw = value("--shell-timeout-ms")?;
                let millis: u64 = raw.parse().map_err(|_| {
                    format!("--shell-timeout-ms must be a whole number, not `{raw}`")
                })?;
                if millis == 0 {
                    return Err("--shell-timeout-ms must be at least 1".to_owned());
                }
                options.shell_timeout = Some(Duration::from_millis(millis));
            }
            "--shell-env" => {
                let name = value("--shell-env")?;
                if name.is_empty() || name.contains('=') || name.starts_with("--") {
                    return Err(format!("--shell-env needs a variable name, not `{name}`"));
                }
                options.shell_env.push(name);
            }
            "--mcp" => {
                let named = named("--mcp", "server", &value("--mcp")?, &options.mcp)?;
                options.mcp.push(named);
            }
            "--acp" => {
                let named = named("--acp", "agent", &value("--acp")?, &options.acp)?;
                options.acp.push(named);
            }
            "--needs-approval" => {
                let tool = value("--needs-approval")?;
                if tool.is_empty() || tool.starts_with("--") {
                    return Err(format!("--needs-approval needs a tool name, not `{tool}`"));
                }
                options.needs_approval.push(tool);
            }
            "--approve-all" => options.approve_all = true,
            "--jsonl" => jsonl = true,
            "--accept-only" => options.accept_only = true,
            "--storage" => {
                let raw = value("--storage")?;
                if raw.starts_with("postgres://") || raw.starts_with("postgresql://") {
                    options.postgres = Some(raw);
                    continue;
                }
                let path = raw
                    .strip_prefix("sqlite:")
                    .filter(|path| !path.is_empty())
                    .ok_or_else(|| {
                        format!("--storage must be sqlite:PATH or postgres://URL, not `{raw}`")
                    })?;
                options.storage = Some(path.into());
            }
            "--lease-ttl-ms" => {
                let raw = value("--lease-ttl-ms")?;
                let millis: u64 = raw
                    .parse()
                    .map_err(|_| format!("--lease-ttl-ms must be a whole number, not `{raw}`"))?;
                if millis == 0 {
                    return Err("--lease-ttl-ms must be at least 1".to_owned());
                }
                options.lease_ttl = Some(Duration::from_millis(millis));
            }
            "--drain-ms" => {
                let raw = value("--drain-ms")?;
                let millis: u64 = raw
                    .parse()
                    .map_err(|_| format!("--drain-ms must be a whole number, not `{raw}`"))?;
                options.drain = Some(Duration::from_millis(millis));
            }
            "--engine" => {
                let raw = value("--engine")?;
                let url = raw
                    .strip_prefix("restate=")
                    .filter(|url| url.starts_with("http://") || url.starts_with("https://"))
                    .ok_or_else(|| {
                        format!("--engine must be restate=http(s)://INGRESS, not `{raw}`")
                    })?;
                options.restate = Some(url.to_owned());
            }
            "--restate-admin" => options.restate_admin = Some(value("--restate-admin")?),
            "--restate-endpoint" => options.restate_endpoint = Some(value("--restate-endpoint")?),
            "--listen" => options.listen = Some(value("--listen")?),
            "--token" => options.token = Some(value("--token")?),
            "--allow-host" => options.allow_host.push(value("--allow-host")?),
            "--cors-origin" => {
                let origin = value("--cors-origin")?;
                if !(origin.starts_with("http://") || origin.starts_with("https://")) {
                    return Err(format!(
                        "--cors-origin must be an http:// or https:// origin, not `{origin}`"
                    ));
                }
                options.cors_origin.push(origin);
            }
            "--max-queue" => {
                let raw = value("--max-queue")?;
                let queue: usize =
                    raw.parse().ok().filter(|queue| *queue > 0).ok_or_else(|| {
                        format!("--max-queue must be a whole number above 0, not `{raw}`")
                    })?;
                options.max_queue = Some(queue);
            }
            "--otlp-endpoint" => {
                let url = value("--otlp-endpoint")?;
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(format!(
                        "--otlp-endpoint must be an http:// or https:// URL, not `{url}`"
                    ));
                }
                options.otlp_endpoint = Some(url);
            }
            flag if flag.starts_with("--") => return Err(format!("unknown option `{flag}`")),
            _ => positional.push(arg.clone()),
        }
    }
    if options.allow_shell && options.allow_fs.is_none() {
        return Err("--allow-shell needs --allow-fs DIR (the shell runs in DIR)".to_owned());
    }
    if !options.allow_shell && (options.shell_timeout.is_some() || !options.shell_env.is_empty()) {
        return Err("--shell-timeout-ms and --shell-env need --allow-shell".to_owned());
    }
    let mut positional = positional.into_iter();
    let command = match positional.next().as_deref() {
        None => return Ok((Command::Help, options)),
        Some("run") => {
            let flow = positional.next().ok_or("run needs a workflow file")?;
            let prompt = positional.next();
            Command::Run { flow, prompt }
        }
        Some("chat") => Command::Chat {
            flow: positional.next().ok_or("chat needs a workflow file")?,
            jsonl,
        },
        Some("serve") => Command::Serve {
            flow: positional.next().ok_or("serve needs a workflow file")?,
        },
        Some("validate") => Command::Validate {
            flow: positional.next().ok_or("validate needs a workflow file")?,
        },
        Some("resume") => {
            let execution_id = positional.next().ok_or("resume needs an execution id")?;
            if options.storage.is_none() {
                return Err("resume needs --storage sqlite:PATH".to_owned());
            }
            Command::Resume { execution_id }
        }
        Some("spend") => {
            if options.storage.is_none() {
                return Err("spend needs --storage sqlite:PATH".to_owned());
            }
            Command::Spend
        }
        Some(other) => return Err(format!("unknown command `{other}`")),
    };
    if matches!(command, Command::Validate { .. })
        && (options.storage.is_some() || options.lease_ttl.is_some())
    {
        return Err("--storage and --lease-ttl-ms apply to run, resume and chat".to_owned());
    }
    if !matches!(command, Command::Serve { .. }) && options.postgres.is_some() {
        return Err("--storage postgres://URL applies to serve only".to_owned());
    }
    if options.accept_only && options.postgres.is_none() {
        return Err(
            "--accept-only needs --storage postgres://URL (hosts sharing threads)".to_owned(),
        );
    }
    if options.restate.is_some() {
        if !matches!(command, Command::Serve { .. }) {
            return Err("--engine applies to serve only".to_owned());
        }
        if options.storage.is_none() && options.postgres.is_none() {
            return Err(
                "--engine restate=URL needs --storage (sqlite:PATH or postgres://URL): the threads' record"
                    .to_owned(),
            );
        }
        if options.accept_only {
            return Err(
                "--accept-only does not apply with --engine (Restate runs the turns)".to_owned(),
            );
        }
    } else if options.restate_admin.is_some() || options.restate_endpoint.is_some() {
        return Err("--restate-admin and --restate-endpoint need --engine restate=URL".to_owned());
    }
    if let Some(extra) = positional.next() {
        return Err(format!("unexpected argument `{extra}`"));
    }
    if let Some(provider @ ("responses" | "chat")) = options.provider.as_deref()
        && options.base_url.is_none()
    {
        return Err(format!("--provider {provider} needs --base-url"));
    }
    Ok((command, options))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn otlp_endpoint_takes_an_http_url_only() {
        let (_, options) =
            parse(&args("run flow.json --otlp-endpoint http://collector:4318")).unwrap();
        assert_eq!(
            options.otlp_endpoint.as_deref(),
            Some("http://collector:4318")
        );
        let error = parse(&args("run flow.json --otlp-endpoint collector:4318")).unwrap_err();
        assert!(
            error.contains("--otlp-endpoint must be an http://"),
            "{error}"
        );
        assert!(parse(&args("run flow.json --otlp-endpoint")).is_err());
    }

    #[test]
    fn parses_run_with_options() {
        let (command, options) = parse(&args(
            "run flow.json hello --model m --events jsonl --idle-timeout-ms 500",
        ))
        .unwrap();
        assert_eq!(
            command,
            Command::Run {
                flow: "flow.json".into(),
                prompt: Some("hello".into())
            }
        );
        assert_eq!(options.model.as_deref(), Some("m"));
        assert!(options.events_jsonl);
        assert_eq!(options.idle_timeout, Some(Duration::from_millis(500)));
    }

    #[test]
    fn parses_storage_lease_ttl_and_resume() {
        let (command, options) = parse(&args(
            "resume exec-1 --storage sqlite:/tmp/a.db --lease-ttl-ms 250",
        ))
        .unwrap();
        assert_eq!(
            command,
            Command::Resume {
                execution_id: "exec-1".into()
            }
        );
        assert_eq!(
            options.storage.as_deref(),
            Some(std::path::Path::new("/tmp/a.db"))
        );
        assert_eq!(options.lease_ttl, Some(Duration::from_millis(250)));
        assert!(
            parse(&args("resume exec-1"))
                .unwrap_err()
                .contains("--storage")
        );
        assert!(
            parse(&args("resume --storage sqlite:a.db"))
                .unwrap_err()
                .contains("execution id")
        );
        assert!(
            parse(&args("run f.json --storage postgres:x"))
                .unwrap_err()
                .contains("sqlite:PATH")
        );
        assert!(
            parse(&args("run f.json --storage sqlite:"))
                .unwrap_err()
                .contains("sqlite:PATH")
        );
        assert!(
            parse(&args("run f.json --lease-ttl-ms 0"))
                .unwrap_err()
                .contains("--lease-ttl-ms")
        );
    }

    #[test]
    fn chat_takes_storage_and_validate_refuses_it() {
        let (command, options) = parse(&args(
            "chat f.json --storage sqlite:a.db --thread t --lease-ttl-ms 300",
        ))
        .unwrap();
        assert!(matches!(command, Command::Chat { .. }));
        assert_eq!(options.thread.as_deref(), Some("t"));
        assert!(options.storage.is_some());
        assert!(
            parse(&args("validate f.json --storage sqlite:a.db"))
                .unwrap_err()
                .contains("run, resume and chat")
        );
    }

    #[test]
    fn rejects_bad_arguments_by_name() {
        assert!(parse(&args("run")).unwrap_err().contains("workflow file"));
        assert!(
            parse(&args("run f.json --provider nope"))
                .unwrap_err()
                .contains("--provider")
        );
        assert!(
            parse(&args("run f.json --bogus"))
                .unwrap_err()
                .contains("--bogus")
        );
        assert!(
            parse(&args("run f.json --idle-timeout-ms x"))
                .unwrap_err()
                .contains("--idle-timeout-ms")
        );
        assert!(
            parse(&args("frobnicate"))
                .unwrap_err()
                .contains("frobnicate")
        );
        assert!(
            parse(&args("run f.json --provider chat"))
                .unwrap_err()
                .contains("--base-url")
        );
        assert_eq!(
            parse(&args("chat f.json --jsonl")).unwrap().0,
            Command::Chat {
                flow: "f.json".into(),
                jsonl: true
            }
        );
    }

    #[test]
    fn parses_the_restate_engine_of_serve_and_refuses_it_without_a_store() {
        let (_, options) = parse(&args(
            "serve f.json --storage sqlite:t.db --engine restate=http://127.0.0.1:8080 --restate-admin http://127.0.0.1:9070 --restate-endpoint 127.0.0.1:9080",
        ))
        .unwrap();
        assert_eq!(options.restate.as_deref(), Some("http://127.0.0.1:8080"));
        assert_eq!(
            options.restate_admin.as_deref(),
            Some("http://127.0.0.1:9070")
        );
        assert_eq!(options.restate_endpoint.as_deref(), Some("127.0.0.1:9080"));
        let refused = |line: &str| parse(&args(line)).unwrap_err();
        assert!(refused("serve f.json --engine restate=http://x").contains("needs --storage"));
        assert!(
            refused("serve f.json --storage sqlite:t.db --engine temporal=x").contains("restate=")
        );
        assert!(
            refused("run f.json --storage sqlite:t.db --engine restate=http://x")
                .contains("serve only")
        );
        assert!(refused("serve f.json --restate-admin http://x").contains("need --engine"));
    }

    #[test]
    fn parses_named_acp_agents_like_mcp_servers() {
        let (_, options) = parse(&args("run f.json --acp coder=claude-code-acp")).unwrap();
        assert_eq!(
            options.acp,
            [("coder".to_owned(), "claude-code-acp".to_owned())]
        );
        assert!(
            parse(&args("run f.json --acp coder"))
                .unwrap_err()
                .contains("--acp must be NAME=COMMAND")
        );
        assert!(
            parse(&args("run f.json --acp a=x --acp a=y"))
                .unwrap_err()
                .contains("`a` is given twice")
        );
        assert!(
            parse(&args("run f.json --acp a.b=x"))
                .unwrap_err()
                .contains("[A-Za-z0-9_-]")
        );
    }

    #[test]
    fn parses_drain_ms_and_spend() {
        let (_, options) = parse(&args("run f.json hi --drain-ms 2500")).unwrap();
        assert_eq!(options.drain, Some(Duration::from_millis(2500)));
        assert!(
            parse(&args("run f.json --drain-ms soon"))
                .unwrap_err()
                .contains("--drain-ms")
        );
        assert_eq!(
            parse(&args("spend --storage sqlite:a.db")).unwrap().0,
            Command::Spend
        );
        assert!(parse(&args("spend")).unwrap_err().contains("--storage"));
    }
}
