//! `run_code`: an async closure as a step, with an optional retry policy.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;

use super::{Step, StepBody, StepNode, decode, encode};
use crate::adapter::SubprocessAdapter;
use crate::connection::Need;
use crate::context::Context;
use crate::error::{BoxError, StepFailure};
use crate::{Error, Result};

/// How long to wait between attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backoff {
    /// The same delay every time.
    Fixed,
    /// `initial_delay × attempt`.
    Linear,
    /// `initial_delay × 2^(attempt − 1)`.
    Exponential,
}

/// A retry policy for [`run_code`]. `CANCELLED` is never retried.
///
/// A policy of 0 attempts is refused: a step carrying one fails validation (`INVALID_STEP`) when the
/// harness is built with it as the agent graph or when `run()` is given it, before anything runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Attempts in all, the first included; at least 1 (0 fails validation with `INVALID_STEP`).
    pub max_attempts: u32,
    /// How the delay grows.
    pub backoff: Backoff,
    /// The delay after the first failed attempt.
    pub initial_delay: Duration,
    /// The cap on any delay (default 30 s).
    pub max_delay: Duration,
}

impl RetryPolicy {
    /// A policy of `max_attempts` attempts (the first included) with the given backoff and initial
    /// delay, capped at 30 s. `max_attempts` must be at least 1: a step with a policy of 0 attempts
    /// is refused with `INVALID_STEP` before it runs.
    pub fn new(max_attempts: u32, backoff: Backoff, initial_delay: Duration) -> Self {
        RetryPolicy {
            max_attempts,
            backoff,
            initial_delay,
            max_delay: Duration::from_secs(30),
        }
    }

    /// Sets the cap on any delay.
    pub fn max_delay(mut self, max_delay: Duration) -> Self {
        self.max_delay = max_delay;
        self
    }

    /// The delay after failed attempt `failed` (0-based).
    pub fn delay_after(&self, failed: u32) -> Duration {
        let delay = match self.backoff {
            Backoff::Fixed => self.initial_delay,
            Backoff::Linear => self.initial_delay.saturating_mul(failed.saturating_add(1)),
            Backoff::Exponential => self
                .initial_delay
                .saturating_mul(2u32.saturating_pow(failed.min(31))),
        };
        delay.min(self.max_delay)
    }
}

type CodeBody =
    dyn Fn(Value, Context) -> BoxFuture<'static, Result<Value, CodeError>> + Send + Sync;

/// How an attempt failed: a framework error (type mismatch, a noetic error returned by user code, such
/// as `Cancelled`) keeps its identity; anything else is the user's error, wrapped as `STEP_FAILED`.
enum CodeError {
    Framework(Error),
    User(BoxError),
}

impl CodeError {
    fn from_user(error: BoxError) -> Self {
        match error.downcast::<Error>() {
            Ok(error) => CodeError::Framework(*error),
            Err(other) => CodeError::User(other),
        }
    }
}

pub(crate) struct RunCodeSpec {
    body: Box<CodeBody>,
    pub(crate) retry: Option<RetryPolicy>,
    /// Connection operations the body uses, checked by `run()` before the tree starts.
    pub(crate) needs: Vec<Need>,
    /// Where the step runs, when not the runtime's adapter.
    pub(crate) subprocess: Option<Arc<dyn SubprocessAdapter>>,
}

/// Builds a `run_code` step; see [`run_code`].
#[must_use = "a builder does nothing until turned into a step"]
pub struct RunCodeBuilder<I, O> {
    id: String,
    body: Box<CodeBody>,
    retry: Option<RetryPolicy>,
    needs: Vec<Need>,
    subprocess: Option<Arc<dyn SubprocessAdapter>>,
    _types: std::marker::PhantomData<fn(I) -> O>,
}

/// A step that runs an async closure.
///
/// The closure gets the input and the context and returns `Result<O, E>` for any `E` that converts into
/// a boxed error (`noetic_core::Error`, `std::io::Error`, `String`, …). A failure becomes `STEP_FAILED`;
/// returning [`Error::Cancelled`] propagates as is and is never retried.
///
/// # Examples
/// ```
/// use noetic_core::{run_code, Context};
/// let double = run_code("double", |n: i64, _ctx: Context| async move { Ok::<_, std::convert::Infallible>(n * 2) });
/// assert_eq!(double.id(), "double");
/// ```
pub fn run_code<I, O, E, F, Fut>(id: impl Into<String>, body: F) -> RunCodeBuilder<I, O>
where
    I: DeserializeOwned + Send + 'static,
    O: Serialize + Send + 'static,
    E: Into<BoxError> + 'static,
    F: Fn(I, Context) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, E>> + Send + 'static,
{
    let id = id.into();
    let step_id: Arc<str> = Arc::from(id.as_str());
    let body = Arc::new(body);
    let erased =
        move |input: Value, ctx: Context| -> BoxFuture<'static, Result<Value, CodeError>> {
            let body = body.clone();
            let step_id = step_id.clone();
            Box::pin(async move {
                let input: I = decode(&step_id, "input", input).map_err(CodeError::Framework)?;
                match body(input, ctx).await {
                    Ok(output) => encode(&step_id, "output", output).map_err(CodeError::Framework),
                    Err(error) => Err(CodeError::from_user(error.into())),
                }
            })
        };
    RunCodeBuilder {
        id,
        body: Box::new(erased),
        retry: None,
        needs: Vec::new(),
        subprocess: None,
        _types: std::marker::PhantomData,
    }
}

impl<I, O> RunCodeBuilder<I, O> {
    /// Retries failed attempts with this policy.
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = Some(policy);
        self
    }

    /// Declares that the body uses `operation` of the connection named `connection`: `run()` fails
    /// with `CONNECTION_UNSATISFIED` before anything runs unless the harness has such a connection
    /// supporting it.
    pub fn requires(mut self, connection: impl Into<String>, operation: impl Into<String>) -> Self {
        self.needs.push(Need::new(connection, operation));
        self
    }

    /// Runs the step through `adapter` instead of the runtime's subprocess adapter: out of process
    /// when that adapter says so for this step's id (see `adapter::SubprocessAdapter`).
    pub fn subprocess(mut self, adapter: impl SubprocessAdapter) -> Self {
        self.subprocess = Some(Arc::new(adapter));
        self
    }

    /// [`RunCodeBuilder::subprocess`] with an adapter already shared (a workflow registry's).
    pub(crate) fn subprocess_shared(mut self, adapter: Arc<dyn SubprocessAdapter>) -> Self {
        self.subprocess = Some(adapter);
        self
    }

    /// The finished step.
    pub fn build(self) -> Step<I, O> {
        Step::from_node(StepNode {
            id: self.id,
            body: StepBody::RunCode(RunCodeSpec {
                body: self.body,
                retry: self.retry,
                needs: self.needs,
                subprocess: self.subprocess,
            }),
        })
    }

    /// The step's id.
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl<I, O> From<RunCodeBuilder<I, O>> for Step<I, O> {
    fn from(builder: RunCodeBuilder<I, O>) -> Self {
        builder.build()
    }
}

pub(crate) async fn execute(
    step_id: &str,
    spec: &RunCodeSpec,
    input: Value,
    ctx: &Context,
) -> Result<Value> {
    let policy = spec
        .retry
        .unwrap_or(RetryPolicy::new(1, Backoff::Fixed, Duration::ZERO));
    let mut input = Some(input);
    let mut attempt = 0u32;
    loop {
        ctx.check_aborted()?;
        attempt += 1;
        let last = attempt >= policy.max_attempts;
        // Keep a copy of the input only while another attempt may need it.
        let this_input = if last {
            input.take().unwrap_or(Value::Null)
        } else {
            input.clone().unwrap_or(Value::Null)
        };
        let error = match (spec.body)(this_input, ctx.clone()).await {
            Ok(output) => return Ok(output),
            Err(CodeError::Framework(error)) if error.is_cancelled() => return Err(error),
            // A type mismatch will not change on retry.
            Err(CodeError::Framework(
                error @ Error::StepFailed {
                    cause: StepFailure::TypeMismatch { .. },
                    ..
                },
            )) => {
                return Err(error);
            }
            Err(CodeError::Framework(error)) => Box::new(error) as BoxError,
            Err(CodeError::User(error)) => error,
        };
        if last {
            return Err(Error::StepFailed {
                step_id: step_id.to_owned(),
                cause: StepFailure::Error {
                    source: error,
                    attempts: attempt,
                    retries_exhausted: policy.max_attempts > 1,
                },
            });
        }
        let delay = policy.delay_after(attempt - 1);
        tracing::debug!(step_id, attempt, ?delay, error = %error, "run_code attempt failed; retrying");
        tokio::select! {
            biased;
            () = ctx.cancelled() => return Err(Error::cancelled(ctx.abort_reason())),
            () = tokio::time::sleep(delay) => {}
        }
    }
}
