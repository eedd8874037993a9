//! SIGTERM and SIGINT for `run`: the first signal stops the run (gracefully with `--drain-ms`), a
//! second one during the drain stops it at once; the process then exits 128 + the first signal's
//! number, after printing the drain's report as `drain: {json}` on stderr.

use noetic_core::{DrainReport, Spend};
use serde_json::{Map, Value, json};
use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::Failure;

/// SIGTERM's and SIGINT's numbers.
const SIGTERM: i32 = 15;
const SIGINT: i32 = 2;

/// The two signals, listened to from `install` on (so one that arrives early is not the default
/// action: the process is not killed before it can drain).
pub(crate) struct Signals {
    term: Signal,
    int: Signal,
}

impl Signals {
    pub(crate) fn install() -> Result<Self, Failure> {
        let listen = |kind: SignalKind, name: &str| {
            signal(kind)
                .map_err(|error| Failure::Usage(format!("cannot listen for {name}: {error}")))
        };
        Ok(Signals {
            term: listen(SignalKind::terminate(), "SIGTERM")?,
            int: listen(SignalKind::interrupt(), "SIGINT")?,
        })
    }

    /// The next signal's number.
    ///
    /// # Cancel safety
    /// Cancel safe: a signal not yet returned stays pending.
    pub(crate) async fn next(&mut self) -> i32 {
        tokio::select! {
            _ = self.term.recv() => SIGTERM,
            _ = self.int.recv() => SIGINT,
        }
    }
}

/// The reason a signal gives the work it stops.
pub(crate) fn reason(signo: i32) -> &'static str {
    if signo == SIGINT { "SIGINT" } else { "SIGTERM" }
}

/// Prints what a signal's stop leaves: the `drain:` line, and with `--output json` the final object
/// (`drain`, `usage`, `cost`, and `executionId` for a durable run).
pub(crate) fn report(
    report: Option<&DrainReport>,
    spend: Spend,
    execution_id: Option<&str>,
    output_json: bool,
) {
    let drain = report.map_or(Value::Null, |report| json!(report));
    if report.is_some() {
        eprintln!("drain: {drain}");
    }
    if output_json {
        let mut out = Map::new();
        if let Some(execution_id) = execution_id {
            out.insert("executionId".to_owned(), json!(execution_id));
        }
        out.insert("drain".to_owned(), drain);
        out.insert(
            "usage".to_owned(),
            json!({"inputTokens": spend.usage.input_tokens, "outputTokens": spend.usage.output_tokens}),
        );
        if let Some(cost) = spend.cost {
            out.insert("cost".to_owned(), json!(cost));
        }
        println!("{}", Value::Object(out));
    }
}
