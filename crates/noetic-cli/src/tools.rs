//! The built-in tools a workflow can name: `echo` and `now` always; `read_file`, `write_file` and
//! `list_dir` with `--allow-fs`; `shell` with `--allow-shell`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

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
    /// A command for `sh -c`.
    command: String,
}

/// How long a `shell` command may run.
const SHELL_TIMEOUT: Duration = Duration::from_secs(60);
/// The most a file read returns, so a huge file cannot flood the model's context.
const MAX_READ_BYTES: usize = 256 * 1024;

/// The tools enabled by the options.
pub(crate) fn builtins(allow_fs: bool, allow_shell: bool) -> Vec<Tool> {
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
    if allow_fs {
        tools.push(Tool::new(
            "read_file",
            "Reads a UTF-8 text file",
            |args: PathArgs, _ctx: ToolContext| async move {
                let text = tokio::fs::read_to_string(&args.path).await?;
                Ok::<_, ToolError>(text.chars().take(MAX_READ_BYTES).collect::<String>())
            },
        ));
        tools.push(Tool::new(
            "write_file",
            "Writes a UTF-8 text file",
            |args: WriteArgs, _ctx: ToolContext| async move {
                tokio::fs::write(&args.path, args.content.as_bytes()).await?;
                Ok::<_, ToolError>(format!(
                    "wrote {} bytes to {}",
                    args.content.len(),
                    args.path
                ))
            },
        ));
        tools.push(Tool::new(
            "list_dir",
            "Lists a directory",
            |args: PathArgs, _ctx: ToolContext| async move {
                let mut entries = tokio::fs::read_dir(&args.path).await?;
                let mut names = Vec::new();
                while let Some(entry) = entries.next_entry().await? {
                    let suffix = if entry.file_type().await?.is_dir() {
                        "/"
                    } else {
                        ""
                    };
                    names.push(format!("{}{suffix}", entry.file_name().to_string_lossy()));
                }
                names.sort();
                Ok::<_, ToolError>(names.join("\n"))
            },
        ));
    }
    if allow_shell {
        tools.push(Tool::new(
            "shell",
            "Runs a shell command (sh -c) and returns its output",
            |args: ShellArgs, _ctx: ToolContext| async move {
                let child = tokio::process::Command::new("sh")
                    .arg("-c")
                    .arg(&args.command)
                    .kill_on_drop(true)
                    .output();
                let output = tokio::time::timeout(SHELL_TIMEOUT, child)
                    .await
                    .map_err(|_| {
                        ToolError::new(format!(
                            "command timed out after {}s",
                            SHELL_TIMEOUT.as_secs()
                        ))
                    })??;
                Ok::<_, ToolError>(format!(
                    "exit status: {}\nstdout:\n{}\nstderr:\n{}",
                    output
                        .status
                        .code()
                        .map_or_else(|| "killed".to_owned(), |code| code.to_string()),
                    String::from_utf8_lossy(&output.stdout),
                    String::from_utf8_lossy(&output.stderr)
                ))
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
    fn fs_and_shell_tools_are_off_unless_enabled() {
        let names = |tools: Vec<Tool>| {
            tools
                .iter()
                .map(|tool| tool.name().to_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(builtins(false, false)), ["echo", "now"]);
        assert_eq!(
            names(builtins(true, true)),
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
