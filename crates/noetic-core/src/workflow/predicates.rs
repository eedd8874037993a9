//! Until predicates of a document mapped to [`crate::until`].

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::document::UntilPredicate;
use super::fields::{invalid, join};
use crate::Result;
use crate::until::{self, Until, Verdict};

/// The predicate at `path` as an [`Until`].
///
/// `outputEquals` and `converged` have no builder in [`crate::until`] and are built here with
/// [`until::custom`]; `converged` with a threshold below 1 needs embeddings and is refused.
pub(crate) fn hydrate(predicate: &UntilPredicate, path: &str) -> Result<Until> {
    Ok(match predicate {
        UntilPredicate::MaxSteps { n } => until::max_steps(*n),
        UntilPredicate::MaxCost { usd } => until::max_cost(*usd),
        UntilPredicate::MaxDuration { duration } => {
            until::max_duration(millis(*duration, &join(path, "duration"))?)
        }
        UntilPredicate::NoToolCalls => until::no_tool_calls(),
        UntilPredicate::Never => until::never(),
        UntilPredicate::OutputContains { marker } => until::output_contains(marker.as_str()),
        UntilPredicate::OutputEquals { sentinel } => output_equals(sentinel.clone()),
        UntilPredicate::Converged { threshold } => match threshold {
            Some(threshold) if *threshold < 1.0 => {
                return Err(invalid(
                    join(path, "threshold"),
                    "a converged threshold below 1 needs embeddings, which are not supported; \
                     omit it or use 1 (exact equality)",
                ));
            }
            _ => converged(),
        },
        UntilPredicate::Any { predicates } => until::any(all_of(predicates, path)?),
        UntilPredicate::All { predicates } => until::all(all_of(predicates, path)?),
    })
}

/// `ms` milliseconds as a [`Duration`].
pub(crate) fn millis(ms: f64, path: &str) -> Result<Duration> {
    Duration::try_from_secs_f64(ms / 1000.0).map_err(|_| {
        invalid(
            path,
            format!("expected a duration in milliseconds, got {ms}"),
        )
    })
}

fn all_of(predicates: &[UntilPredicate], path: &str) -> Result<Vec<Until>> {
    let path = join(path, "predicates");
    predicates
        .iter()
        .enumerate()
        .map(|(index, predicate)| hydrate(predicate, &join(&path, &index.to_string())))
        .collect()
}

/// Stops when the last output's text is exactly `sentinel`.
fn output_equals(sentinel: String) -> Until {
    until::custom(move |snapshot| {
        if snapshot.last_text() == sentinel.as_str() {
            Verdict::stop(format!("Output equals {sentinel:?}"))
        } else {
            Verdict::go_on()
        }
    })
}

/// Stops when the last output's text equals the previous iteration's. The first iteration of each run
/// of the loop never stops (and forgets what an earlier run saw), so a loop that runs several times
/// starts afresh each time.
fn converged() -> Until {
    let previous: Arc<Mutex<Option<String>>> = Arc::default();
    until::custom(move |snapshot| {
        let text = snapshot.last_text().into_owned();
        let mut previous = previous.lock().unwrap_or_else(PoisonError::into_inner);
        let stop = snapshot.step_count > 1 && previous.as_deref() == Some(text.as_str());
        *previous = Some(text);
        if stop {
            Verdict::stop("Output converged")
        } else {
            Verdict::go_on()
        }
    })
}
