//! A context's graceful drain, and the guard each model round holds on its paid-call record.
//!
//! A drain is set on the context being cancelled and covers it and its descendants: every step,
//! model round and tool call about to start beneath it waits instead (and fails `CANCELLED` once the
//! cancel proceeds). The rounds already in flight — the drain's snapshot of the runtime's paid-call
//! records, taken under the same lock a round registers under — may finish until the deadline. Each
//! round's [`CallGuard`] tells the drain when its call ends; the drain ends when none is left
//! (`settled`), at the deadline (`deadline`), or when a second cancel or an abort stops it
//! (`stopped`).

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::Context;
use crate::drain::{CallKind, DrainReason, DrainReport, PaidCall};
use crate::event::FrameworkEvent;
use crate::paid::PaidCalls;
use crate::sync::lock;
use crate::usage::TokenUsage;
use crate::{Error, Result};

/// A drain in progress (or done) on one context.
pub(crate) struct Drain {
    started: Instant,
    deadline: Instant,
    /// `deadline` on the wall clock, for status.
    deadline_at: SystemTime,
    /// The dispatch ids of the calls it still waits for.
    in_flight: Mutex<HashSet<String>>,
    /// The calls that ended during it, in order.
    finished: Mutex<Vec<PaidCall>>,
    /// Woken whenever a call it waits for ends.
    ended: Notify,
    /// Cancelled by a second cancel: the drain stops at once.
    stop: CancellationToken,
    /// Its report, once it ended.
    report: watch::Sender<Option<DrainReport>>,
}

impl Drain {
    /// Its report, once it ended.
    ///
    /// # Cancel safety
    /// Cancel safe: waiting is all it does.
    pub(crate) async fn report(&self) -> DrainReport {
        let mut reports = self.report.subscribe();
        let report = reports.wait_for(Option::is_some).await;
        // The sender lives in `self`: it cannot close while borrowed.
        report
            .ok()
            .and_then(|report| report.clone())
            .unwrap_or_else(|| DrainReport {
                execution_id: String::new(),
                reason: DrainReason::Stopped,
                duration: self.started.elapsed(),
                finished: Vec::new(),
                cut_off: Vec::new(),
            })
    }

    /// A call it may wait for ended: it joins `finished`.
    fn call_ended(&self, call: PaidCall) {
        let Some(dispatch_id) = call.dispatch_id.as_deref() else {
            return;
        };
        if lock(&self.in_flight).remove(dispatch_id) {
            lock(&self.finished).push(call);
            self.ended.notify_one();
        }
    }
}

impl Context {
    /// The drain covering this context: its own, else the nearest ancestor's.
    pub(crate) fn active_drain(&self) -> Option<&Arc<Drain>> {
        let mut current = Some(self);
        while let Some(context) = current {
            if let Some(drain) = context.inner.drain.get() {
                return Some(drain);
            }
            current = context.parent();
        }
        None
    }

    /// Whether a drain was started on this context itself.
    pub(crate) fn is_draining(&self) -> bool {
        self.inner.drain.get().is_some()
    }

    /// When the drain started on this context cuts what is still in flight, while it has not ended
    /// (the cancel has not proceeded).
    pub(crate) fn drain_deadline(&self) -> Option<SystemTime> {
        let drain = self.inner.drain.get()?;
        (drain.report.borrow().is_none() && !self.aborted()).then_some(drain.deadline_at)
    }

    /// Counts a run on this context until the guard drops.
    pub(crate) fn enter_run(&self) -> RunCount<'_> {
        self.inner.active_runs.fetch_add(1, Ordering::SeqCst);
        RunCount(self)
    }

    /// Whether a run is on this context now.
    pub(crate) fn is_running(&self) -> bool {
        self.inner.active_runs.load(Ordering::SeqCst) > 0
    }

    /// Waits, when a drain covers this context, until the cancel proceeds: nothing new starts
    /// beneath a draining context.
    ///
    /// # Errors
    /// [`Error::Cancelled`] once the context is cancelled (at once when it already is).
    pub(crate) async fn hold_if_draining(&self) -> Result<()> {
        if self.active_drain().is_some() {
            self.cancelled().await;
        }
        self.check_aborted()
    }

    /// The ids of the contexts from the root down to this one.
    fn path(&self) -> Vec<String> {
        let mut path = Vec::with_capacity(self.depth() as usize + 1);
        let mut current = Some(self);
        while let Some(context) = current {
            path.push(context.id().to_owned());
            current = context.parent();
        }
        path.reverse();
        path
    }

    /// Records a model round of `model` about to be sent, and returns the guard that ends its record.
    /// Under a drain it is not sent: it waits for the cancel instead.
    ///
    /// # Errors
    /// [`Error::Cancelled`] when the context is (or, under a drain, gets) cancelled.
    pub(crate) async fn dispatch_call(&self, model: &str, round: u32) -> Result<CallGuard> {
        self.dispatch_call_of(CallKind::ModelRound, model, round)
            .await
    }

    /// [`Context::dispatch_call`] for a call of `kind`.
    pub(crate) async fn dispatch_call_of(
        &self,
        kind: CallKind,
        model: &str,
        round: u32,
    ) -> Result<CallGuard> {
        self.check_aborted()?;
        let calls = self.runtime().paid_calls().clone();
        let dispatch_id = crate::id::new_id();
        let call = PaidCall {
            kind,
            model: model.to_owned(),
            execution_id: self.root().id().to_owned(),
            round: Some(round),
            dispatch_id: Some(dispatch_id.clone()),
            generation_id: None,
            cost: None,
            usage: None,
        };
        let recorded = calls
            .dispatch(&dispatch_id, call, self.path(), || {
                self.active_drain().is_some()
            })
            .await?;
        if !recorded {
            self.cancelled().await;
            return Err(Error::cancelled(self.abort_reason()));
        }
        Ok(CallGuard {
            ctx: self.clone(),
            calls,
            dispatch_id,
            ended: false,
        })
    }

    /// Drains this context for up to `window` (see the module docs), then aborts it with `reason`:
    /// the cancel proceeds. A drain already started on it is stopped at once instead, and its report
    /// returned (to every caller).
    ///
    /// # Cancel safety
    /// Cancel safe: the drain runs on a task of its own once the first poll started it. Dropping
    /// this future only stops waiting for the report; the drain still ends (settled, at its
    /// deadline, or stopped by a second stop) and the context is still aborted then, so nothing
    /// beneath it is left waiting.
    pub(crate) async fn drain(&self, window: Duration, reason: Option<String>) -> DrainReport {
        self.start_drain(window, reason).report().await
    }

    /// Starts the drain on a task of its own, or stops the one already started; returns it.
    pub(crate) fn start_drain(&self, window: Duration, reason: Option<String>) -> Arc<Drain> {
        if let Some(drain) = self.inner.drain.get() {
            drain.stop.cancel();
            return drain.clone();
        }
        let started = Instant::now();
        let drain = Arc::new(Drain {
            started,
            deadline: started + window,
            deadline_at: SystemTime::now() + window,
            in_flight: Mutex::new(HashSet::new()),
            finished: Mutex::new(Vec::new()),
            ended: Notify::new(),
            stop: CancellationToken::new(),
            report: watch::Sender::new(None),
        });
        let own_id = self.id();
        let started_with = self.runtime().paid_calls().start_drain(
            |path| path.iter().any(|id| id == own_id),
            |calls| {
                // Filled before the drain is visible, so a call ending from now on finds its id.
                lock(&drain.in_flight)
                    .extend(calls.iter().filter_map(|call| call.dispatch_id.clone()));
                self.inner.drain.set(drain.clone()).is_ok()
            },
        );
        let Some(calls) = started_with else {
            // Another drain was installed meanwhile: stop it, and share its report.
            // (`set` fails only when one is set.)
            let other = self.inner.drain.get().unwrap_or(&drain);
            other.stop.cancel();
            return other.clone();
        };
        self.emit(FrameworkEvent::DrainStarted { calls });
        tokio::spawn(self.clone().run_drain(drain.clone(), reason));
        drain
    }

    /// The drain's own task: waits for the calls in flight until none is left, the deadline or a
    /// stop; publishes the report; then aborts the context.
    async fn run_drain(self, drain: Arc<Drain>, reason: Option<String>) {
        let ended_by = loop {
            if lock(&drain.in_flight).is_empty() {
                break DrainReason::Settled;
            }
            tokio::select! {
                biased;
                () = drain.stop.cancelled() => break DrainReason::Stopped,
                () = self.cancelled() => break DrainReason::Stopped,
                () = drain.ended.notified() => {}
                () = tokio::time::sleep_until(drain.deadline) => break DrainReason::Deadline,
            }
        };
        let paid = self.runtime().paid_calls();
        let cut_off: Vec<PaidCall> = std::mem::take(&mut *lock(&drain.in_flight))
            .into_iter()
            .filter_map(|dispatch_id| paid.get(&dispatch_id))
            .collect();
        let report = DrainReport {
            execution_id: self.root().id().to_owned(),
            reason: ended_by,
            duration: drain.started.elapsed(),
            finished: std::mem::take(&mut *lock(&drain.finished)),
            cut_off,
        };
        crate::telemetry::drain_finished(self.runtime().name(), &report);
        self.emit(FrameworkEvent::DrainFinished {
            report: report.clone(),
        });
        drain.report.send_replace(Some(report));
        // The cancel proceeds whether or not anyone still waits for the report.
        self.abort(reason);
    }
}

/// A run on a context, counted while it lives.
pub(crate) struct RunCount<'a>(&'a Context);

impl Drop for RunCount<'_> {
    fn drop(&mut self) {
        self.0.inner.active_runs.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A model round's hold on its paid-call record. The round ends it as priced ([`CallGuard::priced`])
/// or refused ([`CallGuard::refused`]); dropped otherwise (cut by a cancel, a steer, a broken
/// stream), its record stays pending.
pub(crate) struct CallGuard {
    ctx: Context,
    calls: Arc<PaidCalls>,
    dispatch_id: String,
    ended: bool,
}

impl CallGuard {
    /// Notes the provider's generation id (from the response headers or its `created` event). A
    /// failure to store it is logged: the record stands without it.
    pub(crate) async fn generation(&self, generation_id: &str) {
        if let Err(error) = self
            .calls
            .set_generation(&self.dispatch_id, generation_id)
            .await
        {
            tracing::warn!(dispatch_id = %self.dispatch_id, %error, "paid-call generation id not stored");
        }
    }

    /// The response is in: the call is priced with what the provider reported.
    pub(crate) async fn priced(mut self, usage: Option<TokenUsage>, cost: Option<f64>) {
        self.ended = true;
        if let Some(mut call) = self.close().await {
            call.usage = usage;
            call.cost = cost;
            self.tell_drain(call);
        }
    }

    /// The provider refused the request before any response: nothing to reconcile.
    pub(crate) async fn refused(mut self) {
        self.ended = true;
        if let Some(call) = self.close().await {
            self.tell_drain(call);
        }
    }

    /// Drops the record; a row that cannot be deleted stays pending (logged). Inside a durable run
    /// the row goes with the run's next checkpoint, the one that records this round.
    async fn close(&self) -> Option<PaidCall> {
        if let Some(journal) = self.ctx.root().journal()
            && journal.in_run()
        {
            return self
                .calls
                .close_deferred(&self.dispatch_id, journal.execution_id());
        }
        let call = self.calls.get(&self.dispatch_id);
        match self.calls.close(&self.dispatch_id).await {
            Ok(closed) => closed,
            Err(error) => {
                tracing::warn!(dispatch_id = %self.dispatch_id, %error, "paid-call record not removed: it stays pending");
                call
            }
        }
    }

    fn tell_drain(&self, call: PaidCall) {
        if let Some(drain) = self.ctx.active_drain() {
            drain.call_ended(call);
        }
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        if !self.ended
            && let Some(call) = self.calls.cut(&self.dispatch_id)
        {
            self.tell_drain(call);
        }
    }
}
