//! All sessions of a harness: the map by thread id, reading a durable thread back on first use,
//! renewing thread leases and evicting idle durable sessions.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Duration;

use tokio_util::task::TaskTracker;

use super::durable::ThreadJournal;
use super::runner::Session;
use crate::Result;
use crate::runtime::Runtime;
use crate::step::StepNode;

/// How long an idle durable session stays in memory by default.
pub const DEFAULT_SESSION_IDLE_TTL: Duration = Duration::from_secs(600);

/// All sessions of a harness, by thread id.
pub(crate) struct Sessions {
    map: Mutex<HashMap<String, Arc<Session>>>,
    /// How long an idle durable session stays in memory.
    idle_ttl: Duration,
    /// Whether the task renewing thread leases and evicting idle sessions runs.
    keeper: OnceLock<()>,
}

impl Default for Sessions {
    fn default() -> Self {
        Sessions::new(DEFAULT_SESSION_IDLE_TTL)
    }
}

impl Sessions {
    pub(crate) fn new(idle_ttl: Duration) -> Self {
        Sessions {
            map: Mutex::new(HashMap::new()),
            idle_ttl,
            keeper: OnceLock::new(),
        }
    }

    fn map(&self) -> MutexGuard<'_, HashMap<String, Arc<Session>>> {
        crate::sync::lock(&self.map)
    }

    /// The session of `thread_id`, created when missing.
    pub(crate) fn get_or_create(&self, thread_id: &str) -> Arc<Session> {
        self.map()
            .entry(thread_id.to_owned())
            .or_insert_with(|| Arc::new(Session::new(thread_id.to_owned())))
            .clone()
    }

    /// The session of `thread_id`, without creating one.
    pub(crate) fn get(&self, thread_id: &str) -> Option<Arc<Session>> {
        self.map().get(thread_id).cloned()
    }

    /// How many sessions exist.
    pub(crate) fn len(&self) -> usize {
        self.map().len()
    }

    /// The session of `thread_id`; on a durable runtime, read back from the store (and its
    /// unfinished work started on `tasks`) the first time this harness touches the thread.
    ///
    /// # Errors
    /// [`Error::LeaseHeld`] while another runtime holds the thread; corrupt rows; storage errors.
    pub(crate) async fn get_or_load(
        self: &Arc<Self>,
        runtime: &Arc<Runtime>,
        tasks: &TaskTracker,
        graph: Option<&Arc<StepNode>>,
        thread_id: &str,
    ) -> Result<Arc<Session>> {
        let session = self.get_or_create(thread_id);
        let Some(durability) = runtime.durability() else {
            return Ok(session);
        };
        if session.journal.get().is_none() {
            let _loading = session.loading.lock().await;
            if session.journal.get().is_none() {
                let loaded = ThreadJournal::load(durability, thread_id).await?;
                session.install(loaded);
                self.start_keeper(runtime);
            }
        }
        if let Some(graph) = graph {
            session.start_runner(runtime, tasks, graph);
        }
        Ok(session)
    }

    /// Takes `session` out of the map now (its host let the thread go): a caller still holding it
    /// finds it evicted; the thread's next use reads it back.
    pub(super) fn remove(&self, session: &Arc<Session>) {
        let mut map = self.map();
        session.state().evicted = true;
        session.retire();
        if map
            .get(&session.thread_id)
            .is_some_and(|resident| Arc::ptr_eq(resident, session))
        {
            map.remove(&session.thread_id);
        }
    }

    /// Evicts every durable session idle (no turn, no queue, no subscriber) for at least
    /// `older_than`: it leaves memory, its thread lease is released, and its next use reads it back.
    /// Returns how many were evicted.
    pub(crate) async fn evict_idle(&self, older_than: Duration, wait_for_writes: bool) -> usize {
        // Sessions only followed (another host runs their threads) hold nothing once unwatched.
        {
            let mut map = self.map();
            map.retain(|_, session| {
                let keep = !session.unwatched_follower();
                if !keep {
                    session.state().evicted = true;
                    session.retire();
                }
                keep
            });
        }
        let candidates: Vec<Arc<Session>> = self
            .map()
            .values()
            .filter(|session| session.evictable(older_than))
            .cloned()
            .collect();
        let mut evicted = 0;
        for session in candidates {
            let Some(journal) = session.journal.get() else {
                continue;
            };
            // A write in progress (an accept, a turn's start or end) means it is in use, unless the
            // caller waits for it to end.
            let writer = if wait_for_writes {
                journal.writer().await
            } else {
                match journal.try_writer() {
                    Some(writer) => writer,
                    None => continue,
                }
            };
            {
                let mut map = self.map();
                let mut state = session.state();
                let same = map
                    .get(&session.thread_id)
                    .is_some_and(|resident| Arc::ptr_eq(resident, &session));
                if !same || !session.evictable_locked(&state, older_than) {
                    continue;
                }
                state.evicted = true;
                map.remove(&session.thread_id);
            }
            session.retire();
            session.finish_events().await;
            journal.release(&writer).await;
            evicted += 1;
        }
        evicted
    }

    /// Renews the lease of every resident durable session that needs it.
    async fn renew_leases(&self) {
        let sessions: Vec<Arc<Session>> = self.map().values().cloned().collect();
        for session in sessions {
            let Some(journal) = session.journal.get() else {
                continue;
            };
            if let Some(mut writer) = journal.try_writer()
                && let Err(error) = journal.renew(&mut writer).await
            {
                tracing::warn!(thread_id = %session.thread_id, %error, "thread lease not renewed");
            }
        }
    }

    /// Starts (once) the task that renews thread leases and evicts idle sessions; it ends with the
    /// harness.
    pub(super) fn start_keeper(self: &Arc<Self>, runtime: &Arc<Runtime>) {
        let Some(durability) = runtime.durability() else {
            return;
        };
        if self.keeper.set(()).is_err() {
            return;
        }
        let period = (durability.lease_ttl / 4)
            .min(self.idle_ttl / 2)
            .max(Duration::from_millis(10));
        let idle_ttl = self.idle_ttl;
        let sessions: Weak<Sessions> = Arc::downgrade(self);
        // Not on the harness's task tracker: `wait_idle` waits for work, and this never ends while the
        // harness lives (it holds only a `Weak` and stops once the harness is gone).
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(period);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let Some(sessions) = sessions.upgrade() else {
                    return;
                };
                sessions.renew_leases().await;
                sessions.evict_idle(idle_ttl, false).await;
            }
        });
    }
}
