//! Detached children: [`Context::detached_spawn`] and the [`DetachedHandle`] that awaits one.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::adapter::{ChildProcess, StepRequest, SubprocessAdapter};
use crate::context::{Context, ContextOptions};
use crate::error::StepFailure;
use crate::step::{Origin, Step, StepBody};
use crate::{Error, Result};

/// Options of [`Context::detached_spawn`].
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct DetachedOptions {
    /// Where the child runs: overrides the step's adapter and the runtime's.
    pub subprocess: Option<Arc<dyn SubprocessAdapter>>,
}

impl DetachedOptions {
    /// The defaults: the step's adapter, else the runtime's.
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs the child through `adapter`, whatever the step and the runtime say.
    pub fn subprocess(mut self, adapter: impl SubprocessAdapter) -> Self {
        self.subprocess = Some(Arc::new(adapter));
        self
    }
}

impl std::fmt::Debug for DetachedOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DetachedOptions")
            .field("subprocess", &self.subprocess.is_some())
            .finish()
    }
}

enum Running {
    /// A task of this process, on its own root context.
    Task {
        task: tokio::task::JoinHandle<Result<Value>>,
        ctx: Context,
    },
    /// A child process.
    Child(Box<dyn ChildProcess>),
}

/// A detached child: it runs on its own (a cancel of the context that spawned it does not reach it)
/// until it finishes, is cancelled through [`DetachedHandle::cancel`], or its process is stopped.
///
/// Its id is the child's execution id: out of process, a restarted host rejoins the child with
/// [`DetachedHandle::restore`] by that id.
#[must_use = "a detached child runs on; wait on its handle for its output"]
pub struct DetachedHandle<O> {
    handle_id: String,
    step_id: String,
    running: Running,
    /// The context the child's events and spend go to, when there is one.
    report_to: Option<Context>,
    cancel: CancellationToken,
    _output: PhantomData<fn() -> O>,
}

impl<O> std::fmt::Debug for DetachedHandle<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DetachedHandle")
            .field("handle_id", &self.handle_id)
            .field("step_id", &self.step_id)
            .field("out_of_process", &matches!(self.running, Running::Child(_)))
            .finish()
    }
}

impl<O: DeserializeOwned> DetachedHandle<O> {
    /// The handle's id: the child's execution id.
    pub fn handle_id(&self) -> &str {
        &self.handle_id
    }

    /// The step the child runs (a restored handle knows it from the child's manifest).
    pub fn step_id(&self) -> &str {
        &self.step_id
    }

    /// The child's process id, when it runs out of process.
    pub fn pid(&self) -> Option<u32> {
        match &self.running {
            Running::Child(child) => child.pid(),
            Running::Task { .. } => None,
        }
    }

    /// Rejoins the live child of `execution_id` through `adapter` (after a host restart, say): the
    /// child's remaining events, its spend and its output arrive on the handle.
    ///
    /// # Errors
    /// [`Error::HandleEvicted`] when no live child works for `execution_id` (it vanished: its manifest
    /// is cleared); the adapter's error when its manifests cannot be read.
    pub async fn restore(adapter: &dyn SubprocessAdapter, execution_id: &str) -> Result<Self> {
        let live = adapter.list_live().await?;
        let step_id = live
            .iter()
            .find(|child| child.execution_id == execution_id)
            .map(|child| child.step_id.clone());
        let child = match step_id {
            Some(_) => adapter.restore(execution_id).await?,
            None => None,
        };
        match (child, step_id) {
            (Some(child), Some(step_id)) => Ok(DetachedHandle {
                handle_id: child.handle_id().to_owned(),
                step_id,
                running: Running::Child(child),
                report_to: None,
                cancel: CancellationToken::new(),
                _output: PhantomData,
            }),
            _ => Err(Error::HandleEvicted {
                handle_id: execution_id.to_owned(),
            }),
        }
    }

    /// Sends the child's events and charges its spend to `ctx` (a restored handle reports nowhere
    /// until given one).
    pub fn report_to(mut self, ctx: &Context) -> Self {
        self.report_to = Some(ctx.clone());
        self
    }

    /// Cancels the child: in process, its context is aborted; out of process, the child is asked to
    /// cancel and its process group is stopped after a grace period. [`DetachedHandle::wait`] then
    /// returns `CANCELLED`.
    pub fn cancel(&self, reason: Option<String>) {
        if let Running::Task { ctx, .. } = &self.running {
            ctx.abort(reason);
        }
        self.cancel.cancel();
    }

    /// Waits for the child's output, at most `timeout` when given.
    ///
    /// # Errors
    /// The child's error; [`Error::StepFailed`] (`timed out`) when `timeout` passes first (the child
    /// runs on, and can be rejoined by its id); [`Error::HandleEvicted`] when the child vanished
    /// without finishing (killed, crashed, or its task panicked).
    pub async fn wait(self, timeout: Option<Duration>) -> Result<O> {
        let step_id = self.step_id.clone();
        let waiting = self.wait_value();
        let output = match timeout {
            None => waiting.await?,
            Some(after) => match tokio::time::timeout(after, waiting).await {
                Ok(output) => output?,
                Err(_) => {
                    return Err(Error::StepFailed {
                        step_id,
                        cause: StepFailure::Timeout { after },
                    });
                }
            },
        };
        crate::step::decode(&step_id, "output", output)
    }

    async fn wait_value(self) -> Result<Value> {
        let DetachedHandle {
            handle_id,
            step_id,
            running,
            report_to,
            cancel,
            ..
        } = self;
        match running {
            Running::Task { task, ctx: _ } => match task.await {
                Ok(result) => result,
                Err(_) => Err(Error::HandleEvicted { handle_id }),
            },
            Running::Child(mut child) => {
                crate::step::routed::pump(&mut *child, &step_id, report_to.as_ref(), &cancel).await
            }
        }
    }
}

impl Context {
    /// Starts `step` as a detached child: it runs on its own root context (same runtime, thread,
    /// resource and event sink, a copy of the state; a cancel of this context does not reach it) and
    /// is awaited through the returned handle.
    ///
    /// Where it runs follows the routing order: `options.subprocess`, then the step's own adapter
    /// (`.subprocess(..)` on a `run_code` or `spawn`), then the runtime's. An adapter that runs the
    /// step out of process starts a child process that outlives this one; the handle's id is then the
    /// id a restarted host rejoins it by ([`DetachedHandle::restore`]).
    ///
    /// # Errors
    /// [`Error::InvalidStep`] for a malformed step, a type mismatch of `input`, or the adapter's error
    /// when the child cannot be started.
    pub async fn detached_spawn<I: Serialize, O: DeserializeOwned>(
        &self,
        step: &Step<I, O>,
        input: I,
        options: DetachedOptions,
    ) -> Result<DetachedHandle<O>> {
        step.validate()?;
        let input = crate::step::encode(step.id(), "input", input)?;
        let own = match &step.node.body {
            StepBody::RunCode(spec) => spec.subprocess.as_ref(),
            StepBody::Spawn(spec) => spec.subprocess.as_ref(),
            _ => None,
        };
        let adapter = options
            .subprocess
            .as_ref()
            .or(own)
            .unwrap_or_else(|| self.runtime().subprocess());
        if adapter.runs_out_of_process(step.id()) {
            let id = crate::id::new_id();
            let mut request = StepRequest::new(id.clone(), step.id(), input, id);
            request.thread_id = self.thread_id().map(str::to_owned);
            request.resource_id = self.resource_id().map(str::to_owned);
            request.detached = true;
            let child = adapter.spawn(request).await?;
            return Ok(DetachedHandle {
                handle_id: child.handle_id().to_owned(),
                step_id: step.id().to_owned(),
                running: Running::Child(child),
                report_to: Some(self.clone()),
                cancel: CancellationToken::new(),
                _output: PhantomData,
            });
        }
        let mut child_options = ContextOptions::new();
        child_options.thread_id = self.thread_id().map(str::to_owned);
        child_options.resource_id = self.resource_id().map(str::to_owned);
        child_options.event_sink = self.sink().cloned();
        child_options.state = Some(self.state());
        let child = Context::new(self.runtime().clone(), child_options);
        let node = step.node.clone();
        let running = child.clone();
        let task = tokio::spawn(async move {
            let result = crate::exec::run(&running, &node, input, Origin::Root).await;
            running.close().await;
            result
        });
        Ok(DetachedHandle {
            handle_id: child.id().to_owned(),
            step_id: step.id().to_owned(),
            running: Running::Task { task, ctx: child },
            report_to: Some(self.clone()),
            cancel: CancellationToken::new(),
            _output: PhantomData,
        })
    }
}
