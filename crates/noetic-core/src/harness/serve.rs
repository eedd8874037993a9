//! Serving a thread space shared by many hosts: [`AgentHarness::serve`].
//!
//! Hosts built with [`AgentHarnessBuilder::shared_threads`](super::AgentHarnessBuilder::shared_threads)
//! on one durable store (PostgreSQL: `noetic-storage-postgres`) share its threads: any of them accepts
//! messages, and the ones that serve claim runnable threads, run their turns and let them go (see
//! `docs/scaling.md`).

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;

use super::AgentHarness;
use crate::adapter::durable::LeaseRequest;
use crate::checkpoint::now_ms;
use crate::session::{Drive, LetGo, StoredThread, THREAD_LEASES, thread_of};
use crate::{Error, Result};

/// How [`AgentHarness::serve`] runs.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServeOptions {
    /// How many threads this host drives at once (default 64); it claims no more until one is let go.
    pub max_threads: usize,
    /// How often the host looks for work and for messages other hosts accepted when no wake-up came
    /// (default 1 s). It bounds how late a missed notification is made up for, and how soon after a
    /// dead host's lease expires its threads are taken over.
    pub poll_interval: Duration,
    /// After shutdown is asked, how long running turns may go on (default 30 s). No new turn starts
    /// meanwhile; each thread is let go once its turn ends, its queue left for other hosts. A turn
    /// still running at the deadline keeps its lease until the lease expires (the process is expected
    /// to exit): another host then resumes it from its last checkpoint.
    pub drain: Duration,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            max_threads: 64,
            poll_interval: Duration::from_secs(1),
            drain: Duration::from_secs(30),
        }
    }
}

impl ServeOptions {
    /// Sets [`ServeOptions::max_threads`] (at least 1).
    pub fn max_threads(mut self, max_threads: usize) -> Self {
        self.max_threads = max_threads.max(1);
        self
    }

    /// Sets [`ServeOptions::poll_interval`].
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// Sets [`ServeOptions::drain`].
    pub fn drain(mut self, drain: Duration) -> Self {
        self.drain = drain;
        self
    }
}

/// What [`AgentHarness::serve`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServeReport {
    /// Threads claimed.
    pub claimed: u64,
    /// Threads let go: no work left, or shutdown between turns.
    pub released: u64,
    /// Threads another host took over (this host's lease lapsed, as when the process was paused).
    pub lost: u64,
    /// Threads that could not be read back or let go cleanly (logged).
    pub failed: u64,
    /// Threads still running a turn at the drain deadline.
    pub abandoned: u64,
}

impl AgentHarness {
    /// Runs this host as a worker of a thread space shared with other hosts, until `shutdown`
    /// resolves: it claims runnable threads (oldest first, up to [`ServeOptions::max_threads`]),
    /// runs their turns — a turn another host's crash interrupted resumes from its last checkpoint —
    /// queues the messages other hosts accept for them, renews their leases, and lets each go when
    /// it has no work left. Wake-ups come from the store ([`crate::DurableStore::wait_runnable`]:
    /// PostgreSQL's `LISTEN`); without one it polls every [`ServeOptions::poll_interval`].
    ///
    /// On shutdown it claims nothing more, starts no new turn, and waits up to
    /// [`ServeOptions::drain`] for running turns to end, letting each thread go (queued messages
    /// stay for other hosts).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] unless the harness was built with a durable store and
    /// [`crate::AgentHarnessBuilder::shared_threads`]; [`Error::NoStepConfigured`] without an agent
    /// graph. Store failures while claiming are logged and retried at the next poll.
    ///
    /// # Cancel safety
    /// Dropping the future stops claiming and driving; threads it held keep their leases until they
    /// expire (as if the process had died), and other hosts then take them over.
    pub async fn serve(
        &self,
        shutdown: impl Future<Output = ()>,
        options: ServeOptions,
    ) -> Result<ServeReport> {
        let graph = self.agent_graph_node().ok_or(Error::NoStepConfigured)?;
        let durability = self.shared_durability("serve")?.clone();
        let store = durability.store.clone();
        let ttl_ms = durability.lease_ttl.as_millis() as u64;
        let (stop_sender, stop) = watch::channel(false);
        let mut report = ServeReport::default();
        let mut drivers: JoinSet<LetGo> = JoinSet::new();
        // The sessions of the threads being driven, by lease name, to wake on a notification.
        let mut driving: HashMap<String, tokio::task::Id> = HashMap::new();
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            // Subscribed before claiming, so a mark set during the claims still wakes the wait.
            let wait = store.wait_runnable(options.poll_interval);
            while drivers.len() < options.max_threads {
                let request =
                    LeaseRequest::new(THREAD_LEASES, &durability.holder, ttl_ms, now_ms());
                match store.claim_runnable(request).await {
                    Ok(Some(lease)) => {
                        let Some(thread_id) = thread_of(&lease.name).map(str::to_owned) else {
                            continue;
                        };
                        report.claimed += 1;
                        let name = lease.name.clone();
                        let drive = Drive {
                            sessions: self.sessions().clone(),
                            runtime: self.runtime().clone(),
                            tasks: self.tasks().clone(),
                            graph: graph.clone(),
                            poll: options.poll_interval,
                            stop: stop.clone(),
                        };
                        let id = drivers.spawn(drive.run(thread_id, lease)).id();
                        driving.insert(name, id);
                    }
                    Ok(None) => break,
                    Err(error) => {
                        tracing::warn!(%error, "could not claim a thread");
                        break;
                    }
                }
            }
            tokio::select! {
                biased;
                () = &mut shutdown => break,
                woken = wait => self.wake(&woken.unwrap_or_default(), &driving),
                Some(done) = drivers.join_next_with_id(), if !drivers.is_empty() => {
                    count(&mut report, &mut driving, done);
                }
            }
        }
        let _ = stop_sender.send(true);
        let deadline = tokio::time::sleep(options.drain);
        tokio::pin!(deadline);
        while !drivers.is_empty() {
            tokio::select! {
                () = &mut deadline => break,
                Some(done) = drivers.join_next_with_id() => count(&mut report, &mut driving, done),
            }
        }
        report.abandoned = drivers.len() as u64;
        // Dropping the set aborts the drivers left; their turns' leases lapse.
        Ok(report)
    }

    /// Thread `thread_id` as the store holds it, read without taking it — on a host sharing threads,
    /// the way to see a thread another host runs (its history as its last turn left it, what is still
    /// pending, the last turn's output or error). `None` when nothing was recorded of it.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] without a durable store; [`Error::CheckpointCorrupt`] or
    /// [`Error::CheckpointSchemaMismatch`] naming a row that does not parse; storage errors.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn stored_thread(&self, thread_id: &str) -> Result<Option<StoredThread>> {
        let durability = self
            .runtime()
            .durability()
            .ok_or_else(|| Error::InvalidArgument {
                argument: "durable",
                message: "this harness has no durable store: build it with `.durable(store)`"
                    .to_owned(),
            })?;
        crate::session::read_stored(durability, thread_id).await
    }

    /// Refuses `operation` (which takes threads outside `serve`) on a harness sharing its threads.
    pub(super) fn not_shared(&self, operation: &'static str) -> Result<()> {
        if self.inner.shared_threads {
            return Err(Error::InvalidArgument {
                argument: "shared_threads",
                message: format!(
                    "`{operation}` takes threads outside `serve`, which a harness sharing its \
                     threads leaves to its serving hosts: read a thread with `stored_thread`"
                ),
            });
        }
        Ok(())
    }

    /// The durability of a harness sharing its threads, for `operation`.
    pub(super) fn shared_durability(
        &self,
        operation: &'static str,
    ) -> Result<&crate::checkpoint::Durability> {
        match self.runtime().durability() {
            Some(durability) if self.inner.shared_threads => Ok(durability),
            Some(_) => Err(Error::InvalidArgument {
                argument: "shared_threads",
                message: format!(
                    "`{operation}` needs a harness built with `.shared_threads()`: other hosts \
                     serving the same store would otherwise find its threads held"
                ),
            }),
            None => Err(Error::InvalidArgument {
                argument: "durable",
                message: format!(
                    "`{operation}` needs a durable store shared by the hosts: build the harness \
                     with `.durable(store).shared_threads()`"
                ),
            }),
        }
    }

    /// Wakes the drivers of the threads `woken` names (all of them when it names none).
    fn wake(&self, woken: &[String], driving: &HashMap<String, tokio::task::Id>) {
        let wake = |name: &str| {
            if let Some(session) = thread_of(name).and_then(|id| self.sessions().get(id)) {
                session.wake();
            }
        };
        if woken.is_empty() {
            driving.keys().for_each(|name| wake(name));
        } else {
            woken
                .iter()
                .filter(|name| driving.contains_key(*name))
                .for_each(|name| wake(name));
        }
    }
}

/// Counts a driver's end.
fn count(
    report: &mut ServeReport,
    driving: &mut HashMap<String, tokio::task::Id>,
    done: std::result::Result<(tokio::task::Id, LetGo), tokio::task::JoinError>,
) {
    let (id, outcome) = match done {
        Ok((id, outcome)) => (id, outcome),
        Err(error) => (error.id(), LetGo::Failed),
    };
    driving.retain(|_, driver| *driver != id);
    match outcome {
        LetGo::Released => report.released += 1,
        LetGo::Lost => report.lost += 1,
        LetGo::Failed => report.failed += 1,
    }
}
