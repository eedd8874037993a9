//! [`McpCommand`]: how a stdio MCP server is started, with an allow-listed environment.

use std::path::PathBuf;

use crate::McpError;

/// The variables a server's process gets from the host's environment by default: enough for a
/// program to run and find its tools, nothing that holds a key.
pub const DEFAULT_ENV: &[&str] = &[
    "PATH", "HOME", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TERM", "TZ", "USER", "LOGNAME",
    "TMPDIR",
];

/// A stdio MCP server's command: program, arguments, working directory and environment.
///
/// The environment is an allow-list: [`DEFAULT_ENV`], the names given to [`McpCommand::pass_env`]
/// (copied from the host when set), and the values given to [`McpCommand::env`]. Nothing else of the
/// host's environment reaches the server, so the harness's API keys stay out of it unless named.
#[derive(Clone, PartialEq, Eq)]
pub struct McpCommand {
    pub(crate) program: String,
    pub(crate) args: Vec<String>,
    pub(crate) pass_env: Vec<String>,
    pub(crate) env: Vec<(String, String)>,
    pub(crate) cwd: Option<PathBuf>,
}

impl std::fmt::Debug for McpCommand {
    // Values given with `env` may be secrets: only their names are shown.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpCommand")
            .field("program", &self.program)
            .field("args", &self.args)
            .field("pass_env", &self.pass_env)
            .field(
                "env",
                &self.env.iter().map(|(name, _)| name).collect::<Vec<_>>(),
            )
            .field("cwd", &self.cwd)
            .finish()
    }
}

impl McpCommand {
    /// Runs `program` (looked up on the server's `PATH` when it has no `/`).
    pub fn new(program: impl Into<String>) -> Self {
        McpCommand {
            program: program.into(),
            args: Vec::new(),
            pass_env: DEFAULT_ENV.iter().map(|name| (*name).to_owned()).collect(),
            env: Vec::new(),
            cwd: None,
        }
    }

    /// Splits `command_line` as a POSIX shell would split words (quotes and backslashes; no
    /// expansion, no pipes): the first word is the program.
    ///
    /// # Errors
    /// [`McpError::Config`] (`MCP_CONFIG_INVALID`) for an empty line or an unclosed quote.
    ///
    /// # Examples
    /// ```
    /// let command = noetic_mcp::McpCommand::parse("calc", "python3 -m 'my server' --port 1")?;
    /// assert_eq!(command.program(), "python3");
    /// assert_eq!(command.arguments(), ["-m", "my server", "--port", "1"]);
    /// # Ok::<(), noetic_mcp::McpError>(())
    /// ```
    pub fn parse(server: &str, command_line: &str) -> Result<Self, McpError> {
        let words = shell_words::split(command_line).map_err(|error| McpError::Config {
            server: server.to_owned(),
            message: format!("cannot split the command line `{command_line}`: {error}"),
        })?;
        let mut words = words.into_iter();
        let program = words.next().ok_or_else(|| McpError::Config {
            server: server.to_owned(),
            message: "the command is empty".to_owned(),
        })?;
        Ok(McpCommand::new(program).args(words))
    }

    /// Adds an argument.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Adds arguments.
    pub fn args(mut self, args: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Passes the host's variable `name` through (when set).
    pub fn pass_env(mut self, name: impl Into<String>) -> Self {
        self.pass_env.push(name.into());
        self
    }

    /// Sets the variable `name` to `value` in the server's environment.
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((name.into(), value.into()));
        self
    }

    /// Runs the server in `dir`.
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cwd = Some(dir.into());
        self
    }

    /// The program.
    pub fn program(&self) -> &str {
        &self.program
    }

    /// The arguments.
    pub fn arguments(&self) -> &[String] {
        &self.args
    }

    /// The process to spawn: a process group of its own (so the server's own children end with it),
    /// the allow-listed environment, stdin and stdout for MCP.
    pub(crate) fn to_tokio(&self) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(&self.program);
        command.args(&self.args).env_clear().process_group(0);
        for name in &self.pass_env {
            if let Some(value) = std::env::var_os(name) {
                command.env(name, value);
            }
        }
        for (name, value) in &self.env {
            command.env(name, value);
        }
        if let Some(dir) = &self.cwd {
            command.current_dir(dir);
        }
        command
    }
}
