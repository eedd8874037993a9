//! Process groups and `/proc`: what the shell and the subprocess adapter know about the processes
//! they started.

use std::time::Duration;

use nix::sys::signal::killpg;
use nix::unistd::Pid;

/// How long a killed group may take to die before the caller goes on anyway.
pub(crate) const GRACE: Duration = Duration::from_secs(2);

/// One process as `/proc/<pid>/stat` describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProcStat {
    /// The state letter (`R`, `S`, `Z`, …).
    pub state: char,
    /// The process group.
    pub pgrp: i32,
    /// When it started, in clock ticks since boot (field 22): with the pid, it names one process
    /// for the machine's uptime, whatever reuses the pid later.
    pub start_ticks: u64,
}

/// `/proc/<pid>/stat` of `pid`, `None` when there is no such process (or no `/proc`).
pub(crate) fn stat(pid: i32) -> Option<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid pgrp …`; comm may hold spaces and parentheses, so split after the
    // last `)`: the rest starts at field 3.
    let (_, rest) = text.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some(ProcStat {
        state: fields.first()?.chars().next()?,
        pgrp: fields.get(2)?.parse().ok()?,
        start_ticks: fields.get(19)?.parse().ok()?,
    })
}

/// The live (not zombie) processes of group `group`, by `/proc`; `None` where `/proc` cannot be
/// read.
fn live_members(group: Pid) -> Option<Vec<ProcStat>> {
    let entries = std::fs::read_dir("/proc").ok()?;
    Some(
        entries
            .flatten()
            .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
            .filter_map(stat)
            .filter(|stat| stat.pgrp == group.as_raw() && stat.state != 'Z')
            .collect(),
    )
}

/// Whether a process of group `group` is alive (not a zombie), by `/proc`; `true` where `/proc`
/// cannot be read (the caller then waits out its grace).
pub(crate) fn has_live_member(group: Pid) -> bool {
    live_members(group).is_none_or(|members| !members.is_empty())
}

/// Polls `done` (1 ms, doubling to 20 ms between checks) until it holds or `grace` passes; whether
/// it held. `/proc` has no change notification, so waits on processes poll.
pub(crate) async fn poll_until(grace: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + grace;
    let mut pause = Duration::from_millis(1);
    loop {
        if done() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

/// Waits, at most [`GRACE`], until every live process of `group` is stopped (`stopped`) or none is
/// (`!stopped`): a signal is delivered asynchronously, and a pause or resume returns once it took.
pub(crate) async fn wait_stopped(group: Pid, stopped: bool) {
    let is_stopped = |stat: &ProcStat| matches!(stat.state, 'T' | 't');
    poll_until(GRACE, || match live_members(group) {
        Some(members) if stopped => members.iter().all(is_stopped),
        Some(members) => !members.iter().any(is_stopped),
        None => true,
    })
    .await;
}

/// Waits, at most `grace`, until no live process is left in `group`. A killed process that its
/// parent has not reaped yet (a zombie) counts as gone.
pub(crate) async fn wait_gone(group: Pid, grace: Duration) -> bool {
    poll_until(grace, || {
        killpg(group, None).is_err() || !has_live_member(group)
    })
    .await
}
