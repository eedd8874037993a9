//! Shared helpers for the step tests.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use noetic_core::{
    AgentHarness, Context, ContextLayer, ContextOptions, Error, Step, StepFailure, run_code,
};

/// The error type of bodies that cannot fail.
pub(crate) type Never = std::convert::Infallible;

/// A harness without providers, hooks or layers.
pub(crate) fn harness() -> AgentHarness {
    AgentHarness::builder("steps")
        .build()
        .expect("harness builds")
}

/// A fresh root context of `harness`.
pub(crate) fn root(harness: &AgentHarness) -> Context {
    harness.create_context(ContextOptions::new())
}

/// A shared call counter.
pub(crate) fn counter() -> Arc<AtomicUsize> {
    Arc::new(AtomicUsize::new(0))
}

/// The value of a counter.
pub(crate) fn count(counter: &AtomicUsize) -> usize {
    counter.load(Ordering::SeqCst)
}

/// A slot a step body fills in, for the test to read afterwards.
pub(crate) type Slot<T> = Arc<Mutex<Option<T>>>;

/// An empty slot.
pub(crate) fn slot<T>() -> Slot<T> {
    Arc::new(Mutex::new(None))
}

/// Takes what a body put in the slot.
pub(crate) fn take<T>(slot: &Slot<T>) -> T {
    slot.lock()
        .unwrap()
        .take()
        .expect("the step body filled the slot")
}

/// A shared, ordered record.
pub(crate) type Record<T> = Arc<Mutex<Vec<T>>>;

/// An empty record.
pub(crate) fn record<T>() -> Record<T> {
    Arc::new(Mutex::new(Vec::new()))
}

/// What was recorded so far.
pub(crate) fn recorded<T: Clone>(record: &Record<T>) -> Vec<T> {
    record.lock().unwrap().clone()
}

/// `n + 1`, counting its calls.
pub(crate) fn counting_inc(id: &str, calls: &Arc<AtomicUsize>) -> Step<i64, i64> {
    let calls = calls.clone();
    run_code(id, move |n: i64, _ctx: Context| {
        calls.fetch_add(1, Ordering::SeqCst);
        async move { Ok::<_, Never>(n + 1) }
    })
    .build()
}

/// A step that returns `value` whatever its input.
pub(crate) fn constant(id: &str, value: i64) -> Step<i64, i64> {
    run_code(id, move |_: i64, _ctx: Context| async move {
        Ok::<_, Never>(value)
    })
    .build()
}

/// A step that always fails with a user error.
pub(crate) fn failing(id: &str) -> Step<i64, i64> {
    let message = format!("{id} failed");
    run_code(id, move |_: i64, _ctx: Context| {
        let message = message.clone();
        async move { Err::<i64, _>(message) }
    })
    .build()
}

/// Unwraps `STEP_FAILED` into its step id and cause.
pub(crate) fn step_failure(error: Error) -> (String, StepFailure) {
    assert_eq!(error.code(), "STEP_FAILED", "unexpected error: {error}");
    match error {
        Error::StepFailed { step_id, cause } => (step_id, cause),
        other => panic!("expected StepFailed, got {other:?}"),
    }
}

/// An error's code, `CANCELLED` ones with their reason: `CANCELLED: <reason>`.
fn summary(error: Error) -> String {
    match error {
        Error::Cancelled {
            reason: Some(reason),
        } => format!("CANCELLED: {reason}"),
        other => other.code().to_owned(),
    }
}

/// The paths listed in a `FORK_PARTIAL`: indexes with their errors' summaries.
pub(crate) type Paths = Vec<(usize, String)>;

/// Unwraps `FORK_PARTIAL` into the succeeded indexes, the failed and the cancelled paths (see
/// [`summary`]).
pub(crate) fn fork_partial(error: Error) -> (Vec<usize>, Paths, Paths) {
    assert_eq!(error.code(), "FORK_PARTIAL", "unexpected error: {error}");
    let summaries = |paths: Vec<(usize, Box<Error>)>| -> Paths {
        paths
            .into_iter()
            .map(|(index, error)| (index, summary(*error)))
            .collect()
    };
    match error {
        Error::ForkPartial {
            succeeded,
            failed,
            cancelled,
            ..
        } => (succeeded, summaries(failed), summaries(cancelled)),
        other => panic!("expected ForkPartial, got {other:?}"),
    }
}

/// The abort reason of a `CANCELLED` error.
pub(crate) fn cancelled_reason(error: Error) -> Option<String> {
    assert_eq!(error.code(), "CANCELLED", "unexpected error: {error}");
    match error {
        Error::Cancelled { reason } => reason,
        other => panic!("expected Cancelled, got {other:?}"),
    }
}

/// A layer that only has an id.
pub(crate) struct NamedLayer(pub(crate) &'static str);

impl ContextLayer for NamedLayer {
    fn id(&self) -> &str {
        self.0
    }
}

/// The ids of a context's layers, in order.
pub(crate) fn layer_ids(ctx: &Context) -> Vec<String> {
    ctx.layers()
        .iter()
        .map(|layer| layer.id().to_owned())
        .collect()
}
