//! The built-in tools a workflow can name: `echo` and `now` always; `read_file`, `write_file` and
//! `list_dir` with `--allow-fs DIR`; `shell` with `--allow-shell`.
//!
//! The fs and shell tools reach the machine only through the harness's adapters
//! (`ctx.runtime().fs()` / `.shell()`: a `LocalFs` rooted at DIR and a `LocalShell` with cwd DIR,
//! see `workflow.rs`), so a path outside DIR is refused by the kernel-backed resolution, not by a
//! check here. A refused path or a timed-out command is the tool's error: the model sees it and the
//! run goes on.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use noetic_core::adapter::{EntryKind, FsError, ShellCommand, ShellStatus};
use noetic_core::{Tool, ToolContext, ToolError};
use schemars::JsonSchema;
use serde::Deserialize;
#[derive(Deserialize, JsonSchema)]
struct EchoArgs {
    /// The text to return.
    text: String,
}

#[derive(Deserialize, JsonSchema)]
struct NoArgs {}

#[derive(Deserialize, JsonSchema)]
struct PathArgs {
    /// A file or directory path.
    path: String,
}

#[derive(Deserialize, JsonSchema)]
struct WriteArgs {
    /// The file to write.
    path: String,
    /// The text to write.
    content: String,
}

#[derive(Deserialize, JsonSchema)]
struct ShellArgs {
    /// A command for `sh -c`, run in the allowed directory.
    command: String,
}

/// The most a file read returns, so a huge file cannot flood the model's context.
pub(crate) const MAX_READ_BYTES: usize = 256 * 1024;

/// A path as the model gave it, for the fs rooted at `root`: relative paths resolve against the
/// root; an absolute path inside the root becomes relative to it; any other absolute path is passed
/// on as it is, for the fs to refuse.
fn in_root(root: &Path, path: &str) -> String {
    match Path::new(path).strip_prefix(root) {
        Ok(rest) if rest.as_os_str().is_empty() => ".".to_owned(),
        Ok(rest) => rest.to_string_lossy().into_owned(),
        Err(_) => path.to_owned(),
    }
}

/// An fs error as the model sees it: the message and its stable code.
fn fs_error(error: FsError) -> ToolError {
    ToolError::new(format!("{error} [{}]", error.code()))
}

/// The tools enabled by the options: the fs tools when `fs_root` (the canonical `--allow-fs` DIR)
/// is given, the shell tool when `shell`.
pub(crate) fn builtins(fs_root: Option<&Path>, shell: bool) -> Vec<Tool> {
    let mut tools = vec![
        Tool::new(
            "echo",
            "Returns the given text unchanged",
            |args: EchoArgs, _ctx: ToolContext| async move { Ok::<_, ToolError>(args.text) },
        ),
        Tool::new(
            "now",
            "The current date and time in UTC (RFC 3339)",
            |_: NoArgs, _ctx: ToolContext| async move { Ok::<_, ToolError>(rfc3339_now()) },
        ),
    ];
    if let Some(root) = fs_root {
        let root: Arc<PathBuf> = Arc::new(root.to_owned());
        let at = root.clone();
        tools.push(Tool::new(
            "read_file",
            "Reads a UTF-8 text file in the allowed directory",
            move |args: PathArgs, call: ToolContext| {
                let path = in_root(&at, &args.path);
                async move {
                    let fs = call.ctx.runtime().fs();
                    let read = fs.read(&path, MAX_READ_BYTES).await.map_err(fs_error)?;
                    let mut text = String::from_utf8_lossy(&read.bytes).into_owned();
                    if read.truncated {
                        text.push_str(&format!("\n[truncated at {MAX_READ_BYTES} bytes]"));
                    }
                    Ok::<_, ToolError>(text)
                }
            },
        ));
        let at = root.clone();
        tools.push(Tool::new(
            "write_file",
            "Writes a UTF-8 text file in the allowed directory",
            move |args: WriteArgs, call: ToolContext| {
                let path = in_root(&at, &args.path);
                async move {
                    let fs = call.ctx.runtime().fs();
                    fs.write(&path, args.content.as_bytes())
                        .await
                        .map_err(fs_error)?;
                    Ok::<_, ToolError>(format!(
                        "wrote {} bytes to {}",
                        args.content.len(),
                        args.path
                    ))
                }
            },
        ));
        let at = root;
        tools.push(Tool::new(
            "list_dir",
            "Lists a directory in the allowed directory",
            move |args: PathArgs, call: ToolContext| {
                let path = in_root(&at, &args.path);
                async move {
                    let fs = call.ctx.runtime().fs();
                    let entries = fs.list(&path).await.map_err(fs_error)?;
                    let mut names: Vec<String> = entries
                        .into_iter()
                        .map(|entry| match entry.kind {
                            EntryKind::Dir => format!("{}/", entry.name),
                            _ => entry.name,
                        })
                        .collect();
                    names.sort();
                    Ok::<_, ToolError>(names.join("\n"))
                }
            },
        ));
    }
    if shell {
        tools.push(Tool::new(
            "shell",
            "Runs a shell command (sh -c) in the allowed directory and returns its output",
            |args: ShellArgs, call: ToolContext| async move {
                let shell = call.ctx.runtime().shell();
                let output = shell
                    .run(ShellCommand::new(args.command))
                    .await
                    .map_err(|error| ToolError::new(format!("{error} [{}]", error.code())))?;
                let text = format!(
                    "{}\nstdout:\n{}{}\nstderr:\n{}{}",
                    output.status,
                    String::from_utf8_lossy(&output.stdout),
                    if output.stdout_truncated {
                        "\n[stdout truncated]"
                    } else {
                        ""
                    },
                    String::from_utf8_lossy(&output.stderr),
                    if output.stderr_truncated {
                        "\n[stderr truncated]"
                    } else {
                        ""
                    },
                );
                match output.status {
                    // The model sees the error, with what the command printed before it was killed.
                    ShellStatus::TimedOut(_) => Err(ToolError::new(format!("command {text}"))),
                    _ => Ok::<_, ToolError>(text),
                }
            },
        ));
    }
    tools
}

/// The current UTC time as RFC 3339, without a date library: days since the epoch to a civil date.
fn rfc3339_now() -> String {
    let seconds = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    rfc3339(seconds)
}

fn rfc3339(seconds: u64) -> String {
    let days = (seconds / 86_400) as i64;
    let rest = seconds % 86_400;
    // Howard Hinnant's days-to-civil algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_798_761_600 + 3661), "2027-01-01T01:01:01Z");
    }

    #[test]
    fn absolute_paths_inside_the_root_become_relative_and_others_are_left_to_be_refused() {
        let root = Path::new("/srv/work");
        assert_eq!(in_root(root, "notes/a.txt"), "notes/a.txt");
        assert_eq!(in_root(root, "/srv/work/notes/a.txt"), "notes/a.txt");
        assert_eq!(in_root(root, "/srv/work"), ".");
        assert_eq!(in_root(root, "/srv/workshop/a.txt"), "/srv/workshop/a.txt");
        assert_eq!(in_root(root, "/etc/passwd"), "/etc/passwd");
        assert_eq!(in_root(root, "../x"), "../x");
    }

    #[test]
    fn fs_and_shell_tools_are_off_unless_enabled() {
        let names = |tools: Vec<Tool>| {
            tools
                .iter()
                .map(|tool| tool.name().to_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(builtins(None, false)), ["echo", "now"]);
        assert_eq!(
            names(builtins(Some(Path::new("/work")), true)),
            [
                "echo",
                "now",
                "read_file",
                "write_file",
                "list_dir",
                "shell"
            ]
        );
    }
}
