//! Threads shared by many hosts on one durable store: a host drives a thread it claimed
//! ([`crate::AgentHarness::serve`]) until the thread has no work left, then lets it go.
//!
//! Any host accepts a message by appending it to the thread's message log and marking the thread
//! runnable, in one commit, without holding the thread ([`accept_shared`](super::durable)). A serving
//! host claims a runnable thread (its lease), reads it back and runs its turns. While it holds the
//! thread it reads the messages other hosts accept — on a wake-up, or every poll interval — and
//! queues them (a steer joins the running turn at its next steer point). When the thread is idle it
//! clears the mark, looks once more for messages accepted meanwhile, and releases the lease.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::task::TaskTracker;

use super::Sessions;
use super::durable::ThreadJournal;
use super::runner::Session;
use crate::Error;
use crate::adapter::durable::Lease;
use crate::runtime::Runtime;
use crate::step::StepNode;

/// How a host's hold on a thread ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LetGo {
    /// Released: the thread had no work left, or the host stopped between turns (the work left stays
    /// marked for another host).
    Released,
    /// Another host took the thread (this one's lease lapsed): nothing more was written.
    Lost,
    /// The thread could not be read back or its store failed; its lease was released.
    Failed,
}

/// What a driver needs of its harness.
pub(crate) struct Drive {
    pub(crate) sessions: Arc<Sessions>,
    pub(crate) runtime: Arc<Runtime>,
    pub(crate) tasks: TaskTracker,
    pub(crate) graph: Arc<StepNode>,
    /// How often it looks for messages other hosts accepted without a wake-up.
    pub(crate) poll: Duration,
    /// Turns `true` when the host shuts down: no further turn starts.
    pub(crate) stop: watch::Receiver<bool>,
}

impl Drive {
    /// Reads back thread `thread_id`, claimed with `lease`, and drives it until it lets it go.
    pub(crate) async fn run(self, thread_id: String, lease: Lease) -> LetGo {
        tracing::info!(%thread_id, epoch = lease.epoch, "thread claimed");
        let outcome = self.claimed(&thread_id, lease).await;
        tracing::info!(%thread_id, ?outcome, "thread let go");
        outcome
    }

    async fn claimed(mut self, thread_id: &str, lease: Lease) -> LetGo {
        let Some(durability) = self.runtime.durability() else {
            return LetGo::Failed;
        };
        let loaded = match ThreadJournal::load_claimed(durability, thread_id, lease).await {
            Ok(loaded) => loaded,
            Err(error) => {
                tracing::error!(%thread_id, %error, "claimed thread not read back");
                return LetGo::Failed;
            }
        };
        let session = self.sessions.get_or_create(thread_id);
        {
            let _loading = session.loading.lock().await;
            if session.journal.get().is_some() {
                // Cannot happen while the lease is ours; never drive one session twice.
                tracing::error!(%thread_id, "claimed thread already resident");
                return LetGo::Failed;
            }
            session.install(loaded);
        }
        self.sessions.start_keeper(&self.runtime);
        session.start_runner(&self.runtime, &self.tasks, &self.graph);
        self.drive(&session).await
    }

    async fn drive(&mut self, session: &Arc<Session>) -> LetGo {
        let mut changes = session.changes();
        let mut stopping = *self.stop.borrow();
        if stopping {
            session.stop_after_turn();
        }
        loop {
            if session.state().evicted {
                return LetGo::Lost;
            }
            let ready = if stopping {
                session.is_between_turns()
            } else {
                session.is_idle()
            };
            if ready && let Some(outcome) = self.let_go(session, stopping).await {
                return outcome;
            }
            tokio::select! {
                changed = changes.changed() => {
                    if changed.is_err() {
                        return LetGo::Lost;
                    }
                }
                () = session.inbox_wake.notified() => self.refresh(session).await,
                () = tokio::time::sleep(self.poll) => self.refresh(session).await,
                changed = self.stop.changed(), if !stopping => {
                    stopping = changed.is_err() || *self.stop.borrow();
                    if stopping {
                        session.stop_after_turn();
                    }
                }
            }
        }
    }

    /// Queues what other hosts accepted since the last look.
    async fn refresh(&self, session: &Arc<Session>) {
        let Some(journal) = session.journal.get() else {
            return;
        };
        let mut writer = journal.writer().await;
        match journal.refresh(&mut writer).await {
            Ok(fresh) => session.absorb(&self.runtime, &self.tasks, &self.graph, fresh),
            Err(error) => {
                tracing::warn!(thread_id = %session.thread_id, %error, "could not read new messages");
            }
        }
        drop(writer);
        if let Some(durability) = self.runtime.durability() {
            super::remote::apply(&self.runtime, durability, session).await;
        }
    }

    /// Lets the thread go when it is still ready to: `None` when it is not (work arrived).
    async fn let_go(&self, session: &Arc<Session>, stopping: bool) -> Option<LetGo> {
        let journal = session.journal.get()?;
        let mut writer = journal.writer().await;
        let idle = session.is_idle();
        // Stopping, a thread with work queued is let go between turns, its mark kept: another host
        // claims it once the lease is released.
        let between_turns = stopping && session.is_between_turns();
        if !idle && !between_turns {
            return None;
        }
        if writer.end_unrecorded {
            // The store has a turn in flight that memory finished: the mark stays, and whoever
            // claims the thread next (this host too) reads it back and finishes it from the store.
            tracing::warn!(
                thread_id = %session.thread_id,
                "a turn's end was not recorded; the thread is let go to be read back"
            );
            session.finish_events().await;
            self.sessions.remove(session);
            journal.release(&writer).await;
            return Some(LetGo::Failed);
        }
        if idle {
            match journal.let_go(&mut writer).await {
                Ok(fresh) if fresh.is_empty() => {}
                // Stopping, what arrived stays for another host (the thread is marked again).
                Ok(_) if stopping => {}
                Ok(fresh) => {
                    session.absorb(&self.runtime, &self.tasks, &self.graph, fresh);
                    return None;
                }
                Err(error @ Error::LeaseLost { .. }) => {
                    tracing::warn!(thread_id = %session.thread_id, %error, "thread taken over");
                    self.sessions.remove(session);
                    return Some(LetGo::Lost);
                }
                Err(error) => {
                    tracing::error!(thread_id = %session.thread_id, %error, "could not let the thread go");
                    session.finish_events().await;
                    self.sessions.remove(session);
                    journal.release(&writer).await;
                    return Some(LetGo::Failed);
                }
            }
        }
        session.finish_events().await;
        self.sessions.remove(session);
        journal.release(&writer).await;
        Some(LetGo::Released)
    }
}

/// The thread lease names hosts claim (`thread/{id}`).
pub(crate) const THREAD_LEASES: &str = "thread/";

/// The thread a thread lease name (`thread/{id}`) names.
pub(crate) fn thread_of(lease_name: &str) -> Option<&str> {
    lease_name.strip_prefix(THREAD_LEASES)
}
