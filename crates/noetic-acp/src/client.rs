//! The agent's requests to the client: permissions (through the host), files (through the confined
//! fs adapter) and terminals (through the shell adapter). A capability the client did not advertise
//! answers method-not-found; every file and terminal request is reported to the host as served or
//! refused.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use noetic_core::acp::{AcpActivity, AcpPermissionRequest, AcpTurn, PermissionAnswer};
use noetic_core::adapter::{FsError, ShellCommand, ShellOutput, ShellStatus};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::rpc::{INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND, RESOURCE_NOT_FOUND, RpcError};
use crate::sync::lock;
use crate::updates;

/// The most of a file `fs/read_text_file` reads.
const MAX_READ: usize = 16 * 1024 * 1024;

/// What the client advertised in `initialize`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Advertised {
    pub(crate) read: bool,
    pub(crate) write: bool,
    pub(crate) terminal: bool,
}

impl Advertised {
    /// What a turn can offer: what the step allows and the harness can back.
    pub(crate) fn for_turn(turn: &AcpTurn<'_>) -> Self {
        let caps = &turn.config.client_capabilities;
        let files = turn.fs_root.is_some();
        Advertised {
            read: caps.read_text_file && files,
            write: caps.write_text_file && files,
            terminal: caps.terminal,
        }
    }

    pub(crate) fn to_json(self) -> Value {
        json!({"fs": {"readTextFile": self.read, "writeTextFile": self.write}, "terminal": self.terminal})
    }
}

/// Whether a request is a permission request (answered `cancelled` on a cancel, not -32800).
pub(crate) fn is_permission(method: &str) -> bool {
    method == "session/request_permission"
}

/// Answers one request of the agent.
pub(crate) async fn serve(
    turn: &AcpTurn<'_>,
    advertised: Advertised,
    terminals: &Terminals,
    session_id: &str,
    request_id: &Value,
    method: &str,
    params: Value,
) -> Result<Value, RpcError> {
    match method {
        "session/request_permission" => {
            let request = AcpPermissionRequest::new(
                session_id,
                request_id.to_string(),
                updates::tool_call(params.get("toolCall").unwrap_or(&Value::Null)),
                updates::options(&params),
            );
            Ok(match turn.host.permission(request).await {
                PermissionAnswer::Selected(option) => {
                    json!({"outcome": {"outcome": "selected", "optionId": option}})
                }
                PermissionAnswer::Cancelled => json!({"outcome": {"outcome": "cancelled"}}),
                PermissionAnswer::NoMatchingOption { allowed } => {
                    return Err(RpcError::new(
                        INVALID_PARAMS,
                        format!(
                            "the client's decision was to {} and no option of that kind was offered",
                            if allowed { "allow" } else { "reject" }
                        ),
                    ));
                }
            })
        }
        "fs/read_text_file" if advertised.read => read(turn, &params).await,
        "fs/write_text_file" if advertised.write => write(turn, &params).await,
        "terminal/create" if advertised.terminal => terminals.create(turn, &params),
        "terminal/output" if advertised.terminal => terminals.output(&params),
        "terminal/wait_for_exit" if advertised.terminal => terminals.wait(&params).await,
        "terminal/kill" if advertised.terminal => terminals.kill(&params),
        "terminal/release" if advertised.terminal => terminals.release(&params),
        _ => Err(RpcError::new(
            METHOD_NOT_FOUND,
            format!("method not found: {method}"),
        )),
    }
}

fn string<'v>(params: &'v Value, key: &str) -> Result<&'v str, RpcError> {
    params
        .get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::new(INVALID_PARAMS, format!("`{key}` is missing")))
}

/// The path relative to the fs root; a refusal is reported to the host.
fn confine(turn: &AcpTurn<'_>, method: &str, path: &str) -> Result<String, RpcError> {
    let refuse = |why: &str| {
        turn.host.activity(AcpActivity::new(
            method,
            Some(path.to_owned()),
            false,
            Some(why.to_owned()),
        ));
        RpcError::new(INVALID_PARAMS, format!("path `{path}`: {why}"))
    };
    if !Path::new(path).is_absolute() {
        return Err(refuse("not absolute"));
    }
    turn.confine(Path::new(path))
        .ok_or_else(|| refuse("it leads outside the sandbox root"))
}

/// An fs adapter error as the agent gets it (and the host hears of it).
fn fs_error(turn: &AcpTurn<'_>, method: &str, path: &str, error: &FsError) -> RpcError {
    turn.host.activity(AcpActivity::new(
        method,
        Some(path.to_owned()),
        false,
        Some(error.to_string()),
    ));
    match error {
        FsError::NotFound { .. } => RpcError::new(RESOURCE_NOT_FOUND, error.to_string()),
        FsError::PathRefused { .. } => RpcError::new(INVALID_PARAMS, error.to_string()),
        _ => RpcError::new(INTERNAL_ERROR, error.to_string()),
    }
}

async fn read(turn: &AcpTurn<'_>, params: &Value) -> Result<Value, RpcError> {
    const METHOD: &str = "fs/read_text_file";
    let path = string(params, "path")?;
    let relative = confine(turn, METHOD, path)?;
    let output = turn
        .fs
        .read(&relative, MAX_READ)
        .await
        .map_err(|error| fs_error(turn, METHOD, path, &error))?;
    let text = String::from_utf8_lossy(&output.bytes);
    let line = params.get("line").and_then(Value::as_u64);
    let limit = params.get("limit").and_then(Value::as_u64);
    let content = if line.is_some() || limit.is_some() {
        let skip = usize::try_from(line.unwrap_or(1).saturating_sub(1)).unwrap_or(usize::MAX);
        let take = limit
            .and_then(|limit| usize::try_from(limit).ok())
            .unwrap_or(usize::MAX);
        text.split_inclusive('\n')
            .skip(skip)
            .take(take)
            .collect::<String>()
    } else {
        text.into_owned()
    };
    turn.host
        .activity(AcpActivity::new(METHOD, Some(path.to_owned()), true, None));
    Ok(json!({"content": content}))
}

async fn write(turn: &AcpTurn<'_>, params: &Value) -> Result<Value, RpcError> {
    const METHOD: &str = "fs/write_text_file";
    let path = string(params, "path")?;
    let content = string(params, "content")?;
    let relative = confine(turn, METHOD, path)?;
    if let Some(parent) = Path::new(&relative).parent().and_then(Path::to_str)
        && !parent.is_empty()
    {
        turn.fs
            .create_dir_all(parent)
            .await
            .map_err(|error| fs_error(turn, METHOD, path, &error))?;
    }
    turn.fs
        .write(&relative, content.as_bytes())
        .await
        .map_err(|error| fs_error(turn, METHOD, path, &error))?;
    turn.host
        .activity(AcpActivity::new(METHOD, Some(path.to_owned()), true, None));
    Ok(Value::Null)
}

/// A terminal's end: its output and status, once it exited or was killed.
#[derive(Clone)]
struct Ended {
    output: Vec<u8>,
    exit_code: Option<i32>,
    signal: Option<String>,
}

struct Terminal {
    ended: watch::Receiver<Option<Ended>>,
    task: tokio::task::JoinHandle<()>,
    /// The most output `terminal/output` returns (the newest bytes kept).
    limit: Option<usize>,
    killed: watch::Sender<Option<Ended>>,
}

/// The terminals of one turn: shell commands running in the background. All of them are killed
/// when the turn ends (dropped).
#[derive(Default)]
pub(crate) struct Terminals {
    running: Mutex<HashMap<String, Terminal>>,
    next: AtomicU64,
}

/// `'…'`, safe for `sh`.
fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

fn is_name(name: &str) -> bool {
    !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit())
}

impl Terminals {
    fn create(&self, turn: &AcpTurn<'_>, params: &Value) -> Result<Value, RpcError> {
        const METHOD: &str = "terminal/create";
        let program = string(params, "command")?;
        let mut line = String::new();
        for variable in params
            .get("env")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let name = variable.get("name").and_then(Value::as_str).unwrap_or("");
            let value = variable.get("value").and_then(Value::as_str).unwrap_or("");
            if !is_name(name) {
                return Err(RpcError::new(
                    INVALID_PARAMS,
                    format!("`{name}` is not a variable name"),
                ));
            }
            line.push_str(&format!("{name}={} ", quote(value)));
        }
        line.push_str(&quote(program));
        for arg in params
            .get("args")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            line.push(' ');
            line.push_str(&quote(arg.as_str().unwrap_or_default()));
        }
        let cwd = match params.get("cwd").and_then(Value::as_str) {
            Some(cwd) => confine(turn, METHOD, cwd)?,
            None => turn.confine(&turn.cwd).unwrap_or_default(),
        };
        let mut command = ShellCommand::new(line);
        if !cwd.is_empty() {
            command = command.cwd(cwd);
        }
        let limit = params
            .get("outputByteLimit")
            .and_then(Value::as_u64)
            .and_then(|limit| usize::try_from(limit).ok());
        let id = format!("term-{}", self.next.fetch_add(1, Ordering::Relaxed));
        let (send, ended) = watch::channel(None);
        let shell = turn.shell.clone();
        let sender = send.clone();
        let task = tokio::spawn(async move {
            let end = match shell.run(command).await {
                Ok(output) => ended_of(output),
                Err(error) => Ended {
                    output: error.to_string().into_bytes(),
                    exit_code: Some(127),
                    signal: None,
                },
            };
            sender.send_if_modified(|slot| {
                if slot.is_none() {
                    *slot = Some(end);
                    true
                } else {
                    false
                }
            });
        });
        turn.host.activity(AcpActivity::new(
            METHOD,
            Some(program.to_owned()),
            true,
            None,
        ));
        lock(&self.running).insert(
            id.clone(),
            Terminal {
                ended,
                task,
                limit,
                killed: send,
            },
        );
        Ok(json!({"terminalId": id}))
    }

    fn with<T>(
        &self,
        params: &Value,
        body: impl FnOnce(&mut Terminal) -> T,
    ) -> Result<T, RpcError> {
        let id = string(params, "terminalId")?;
        let mut running = lock(&self.running);
        let terminal = running
            .get_mut(id)
            .ok_or_else(|| RpcError::new(INVALID_PARAMS, format!("no terminal `{id}`")))?;
        Ok(body(terminal))
    }

    fn output(&self, params: &Value) -> Result<Value, RpcError> {
        self.with(params, |terminal| {
            let ended = terminal.ended.borrow().clone();
            match ended {
                None => json!({"output": "", "truncated": false}),
                Some(ended) => {
                    let (output, truncated) = tail(&ended.output, terminal.limit);
                    json!({
                        "output": output,
                        "truncated": truncated,
                        "exitStatus": {"exitCode": ended.exit_code, "signal": ended.signal},
                    })
                }
            }
        })
    }

    async fn wait(&self, params: &Value) -> Result<Value, RpcError> {
        let mut ended = self.with(params, |terminal| terminal.ended.clone())?;
        let end = ended
            .wait_for(Option::is_some)
            .await
            .map_err(|_| RpcError::new(INTERNAL_ERROR, "the terminal is gone"))?
            .clone();
        let end = end.unwrap_or(Ended {
            output: Vec::new(),
            exit_code: None,
            signal: None,
        });
        Ok(json!({"exitCode": end.exit_code, "signal": end.signal}))
    }

    fn kill(&self, params: &Value) -> Result<Value, RpcError> {
        self.with(params, Terminal::stop)?;
        Ok(Value::Null)
    }

    fn release(&self, params: &Value) -> Result<Value, RpcError> {
        let id = string(params, "terminalId")?.to_owned();
        let terminal = lock(&self.running).remove(&id);
        match terminal {
            Some(mut terminal) => {
                terminal.stop();
                Ok(Value::Null)
            }
            None => Err(RpcError::new(INVALID_PARAMS, format!("no terminal `{id}`"))),
        }
    }
}

impl Terminal {
    /// Kills the command (dropping the shell adapter's future ends it and its group).
    fn stop(&mut self) {
        self.task.abort();
        self.killed.send_if_modified(|slot| {
            if slot.is_none() {
                *slot = Some(Ended {
                    output: Vec::new(),
                    exit_code: None,
                    signal: Some("SIGKILL".to_owned()),
                });
                true
            } else {
                false
            }
        });
    }
}

impl Drop for Terminals {
    fn drop(&mut self) {
        for terminal in lock(&self.running).values_mut() {
            terminal.stop();
        }
    }
}

fn ended_of(output: ShellOutput) -> Ended {
    let mut bytes = output.stdout;
    bytes.extend_from_slice(&output.stderr);
    let (exit_code, signal) = match output.status {
        ShellStatus::Exited(code) => (Some(code), None),
        ShellStatus::Signaled(signal) => (None, Some(format!("signal {signal}"))),
        ShellStatus::TimedOut(_) => (None, Some("SIGKILL".to_owned())),
        _ => (None, None),
    };
    Ended {
        output: bytes,
        exit_code,
        signal,
    }
}

/// The last `limit` bytes of `output` (cut on a character boundary), and whether it was cut.
fn tail(output: &[u8], limit: Option<usize>) -> (String, bool) {
    let text = String::from_utf8_lossy(output);
    match limit {
        Some(limit) if text.len() > limit => {
            let mut start = text.len() - limit;
            while !text.is_char_boundary(start) {
                start += 1;
            }
            (text[start..].to_owned(), true)
        }
        _ => (text.into_owned(), false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_is_cut_from_the_front_on_a_character_boundary() {
        assert_eq!(tail("héllo".as_bytes(), Some(4)), ("llo".to_owned(), true));
        assert_eq!(tail(b"hello", Some(10)), ("hello".to_owned(), false));
        assert_eq!(quote("it's"), r"'it'\''s'");
    }
}
