//! `LocalShell`: real `sh` processes in their own group, confined cwd, timeouts that leave no process
//! behind, capped output and an allow-listed environment.

use std::time::Duration;

use noetic_core::adapter::{ShellAdapter, ShellCommand, ShellStatus};
use noetic_platform_unix::{LocalFs, LocalShell};
use noetic_test_support::shell_conformance;

fn shell_in(dir: &std::path::Path) -> (LocalFs, LocalShell) {
    let fs = LocalFs::rooted(dir).expect("rooted");
    let shell = LocalShell::new(&fs);
    (fs, shell)
}

/// Whether process `pid` is gone (or a zombie waiting for its reaper: dead either way).
fn is_dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

#[tokio::test]
async fn a_local_shell_passes_the_shell_conformance_suite() {
    let dir = tempfile::tempdir().expect("temp dir");
    shell_conformance(&shell_in(dir.path()).1).await;
}

#[tokio::test]
async fn a_command_runs_in_the_root_with_its_exit_status_and_output() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir(dir.path().join("sub")).expect("sub");
    let (_fs, shell) = shell_in(dir.path());
    let output = shell
        .run(ShellCommand::new("pwd; echo oops >&2; exit 3"))
        .await
        .expect("runs");
    assert_eq!(output.status, ShellStatus::Exited(3));
    let root = std::fs::canonicalize(dir.path()).expect("canonical");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        root.to_string_lossy()
    );
    assert_eq!(output.stderr, b"oops\n");
    let output = shell
        .run(ShellCommand::new("cat; pwd").cwd("sub").stdin("fed\n"))
        .await
        .expect("runs");
    assert!(output.status.success());
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        format!("fed\n{}\n", root.join("sub").to_string_lossy())
    );
    let output = shell
        .run(ShellCommand::new("kill -9 $$"))
        .await
        .expect("runs");
    assert_eq!(output.status, ShellStatus::Signaled(9));
}

#[tokio::test]
async fn a_cwd_outside_the_root_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (_fs, shell) = shell_in(dir.path());
    for cwd in ["..", "/tmp", "missing"] {
        let error = shell
            .run(ShellCommand::new("touch ran").cwd(cwd))
            .await
            .expect_err(cwd);
        let expected = if cwd == "missing" {
            "FS_NOT_FOUND"
        } else {
            "FS_PATH_REFUSED"
        };
        assert_eq!(error.code(), expected, "{cwd}: {error}");
    }
    assert!(!dir.path().join("ran").exists());
}

#[tokio::test]
async fn a_command_past_its_timeout_is_killed_with_every_process_it_started() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (_fs, shell) = shell_in(dir.path());
    // A background child and a grandchild, both recording their pids, then the command blocks.
    let command =
        "sleep 60 & echo $! > bg.pid; sh -c 'sleep 60 & echo $! > grand.pid; wait' & wait";
    let output = shell
        .run(ShellCommand::new(command).timeout(Duration::from_millis(500)))
        .await
        .expect("runs");
    assert_eq!(
        output.status,
        ShellStatus::TimedOut(Duration::from_millis(500))
    );
    for file in ["bg.pid", "grand.pid"] {
        let pid: u32 = std::fs::read_to_string(dir.path().join(file))
            .expect("pid written")
            .trim()
            .parse()
            .expect("a pid");
        assert!(is_dead(pid), "{file}: process {pid} survived the timeout");
    }
}

#[tokio::test]
async fn what_a_finished_command_left_running_in_its_group_is_killed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (_fs, shell) = shell_in(dir.path());
    let output = shell
        .run(ShellCommand::new(
            "sleep 60 >/dev/null 2>&1 & echo $! > bg.pid; echo done",
        ))
        .await
        .expect("runs");
    assert_eq!(output.status, ShellStatus::Exited(0));
    assert_eq!(output.stdout, b"done\n");
    let pid: u32 = std::fs::read_to_string(dir.path().join("bg.pid"))
        .expect("pid")
        .trim()
        .parse()
        .expect("a pid");
    assert!(is_dead(pid), "process {pid} outlived its command");
}

#[tokio::test]
async fn output_is_capped_and_the_environment_is_an_allow_list() {
    let dir = tempfile::tempdir().expect("temp dir");
    let fs = LocalFs::rooted(dir.path()).expect("rooted");
    let shell = LocalShell::new(&fs)
        .output_cap(100)
        .env("GIVEN", "value")
        .pass_env("CARGO_PKG_NAME");
    let output = shell
        .run(ShellCommand::new(
            "head -c 5000 /dev/zero; head -c 300 /dev/zero >&2",
        ))
        .await
        .expect("runs");
    assert_eq!((output.stdout.len(), output.stdout_truncated), (100, true));
    assert_eq!((output.stderr.len(), output.stderr_truncated), (100, true));

    // Two of the test process's own variables beyond the allow-list (cargo sets several): only
    // the one passed on reaches the command.
    let extra: Vec<String> = std::env::vars_os()
        .filter_map(|(name, _)| name.into_string().ok())
        .filter(|name| !noetic_platform_unix::DEFAULT_ENV.contains(&name.as_str()))
        .collect();
    assert!(
        extra.len() >= 2,
        "the test process has variables of its own: {extra:?}"
    );
    let (passed, kept) = (extra[0].as_str(), extra[1].as_str());
    let output = LocalShell::new(&fs)
        .env("GIVEN", "value")
        .pass_env(passed)
        .run(ShellCommand::new("env"))
        .await
        .expect("runs");
    let env = String::from_utf8_lossy(&output.stdout);
    let names: Vec<&str> = env
        .lines()
        .filter_map(|line| line.split('=').next())
        .collect();
    assert!(names.contains(&"PATH"), "{env}");
    assert!(names.contains(&"GIVEN"), "{env}");
    assert!(names.contains(&passed), "{env}");
    assert!(!names.contains(&kept), "{env}");
    for name in &names {
        assert!(
            noetic_platform_unix::DEFAULT_ENV.contains(name)
                || ["GIVEN", passed, "PWD", "SHLVL", "_", "OLDPWD"].contains(name),
            "{name} leaked into the command's environment"
        );
    }
    // The values given with `env` stay out of `Debug`.
    let debug = format!("{:?}", LocalShell::new(&fs).env("TOKEN", "sk-secret"));
    assert!(!debug.contains("sk-secret"), "{debug}");
}
