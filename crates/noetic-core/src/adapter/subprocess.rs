//! Where steps run: the [`SubprocessAdapter`] trait and its default, [`InProcess`].
//!
//! Every `run_code`, `spawn` and `detached_spawn` is routed through a subprocess adapter: the
//! detached-spawn override first, then the step's own (`.subprocess(..)` on its builder), then the
//! runtime's. Whether a step runs in this process or in another one is the adapter's property
//! ([`SubprocessAdapter::runs_out_of_process`]): [`InProcess`] keeps every step here;
//! `noetic_platform_unix::LocalSubprocess` runs the steps of its [`crate::StepRegistry`] in child
//! processes (the same binary, re-executed) and persists a manifest per live child so a restarted
//! host can rejoin them ([`SubprocessAdapter::list_live`], [`SubprocessAdapter::restore`]).
//!
//! A step cannot be shipped to another process (it holds closures), so a child runs the step its
//! own copy of the program registered under the same id, with the input as JSON.

use std::time::Duration;

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Result;
use crate::usage::Spend;

/// What a child process is asked to run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct StepRequest {
    /// The handle's id (unique per child).
    pub handle_id: String,
    /// The id of the registered step to run.
    pub step_id: String,
    /// Its input.
    pub input: Value,
    /// The execution the child works for: the caller's root for a routed step, the child's own for a
    /// detached spawn (then equal to `handle_id`).
    pub execution_id: String,
    /// The session thread, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<String>,
    /// The resource, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_id: Option<String>,
    /// Whether the child outlives its host (a detached spawn) instead of ending with it.
    #[serde(default)]
    pub detached: bool,
}

impl StepRequest {
    /// A request to run `step_id` on `input` for `execution_id`, attached to its host.
    pub fn new(
        handle_id: impl Into<String>,
        step_id: impl Into<String>,
        input: Value,
        execution_id: impl Into<String>,
    ) -> Self {
        StepRequest {
            handle_id: handle_id.into(),
            step_id: step_id.into(),
            input,
            execution_id: execution_id.into(),
            thread_id: None,
            resource_id: None,
            detached: false,
        }
    }
}

/// How a child's step failed, as it crosses the process boundary: the error's stable code and its
/// message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message} [{code}]")]
#[non_exhaustive]
pub struct ChildError {
    /// The stable code of the child's error (`CANCELLED`, `STEP_FAILED`, …).
    pub code: String,
    /// Its message.
    pub message: String,
}

impl ChildError {
    /// A child error.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        ChildError {
            code: code.into(),
            message: message.into(),
        }
    }
}

impl From<&crate::Error> for ChildError {
    fn from(error: &crate::Error) -> Self {
        ChildError::new(error.code(), error.to_string())
    }
}

/// One message from a child, in the order it sent them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ChildMessage {
    /// One of the child's events, in its [`crate::StreamEvent::to_json`] shape.
    Event {
        /// The event.
        event: Value,
    },
    /// What the child spent since its previous `Spend` (charged to the caller's context).
    Spend {
        /// The spend.
        spend: Spend,
    },
    /// The step ended: its output, or its error. Nothing follows.
    Finished {
        /// The output or the error.
        result: std::result::Result<Value, ChildError>,
    },
}

/// A running child: what [`SubprocessAdapter::spawn`] and [`SubprocessAdapter::reattach`] return.
pub trait ChildProcess: Send + Sync {
    /// The handle's id.
    fn handle_id(&self) -> &str;

    /// The child's process id, when it is an OS process.
    fn pid(&self) -> Option<u32>;

    /// The child's next message. `None` once it has nothing more: after `Finished`, or when it
    /// vanished without finishing (killed, crashed), which the caller reports as `HANDLE_EVICTED`.
    ///
    /// # Cancel safety
    /// Cancel safe: a message is never lost by dropping this future.
    fn next(&mut self) -> BoxFuture<'_, Option<ChildMessage>>;

    /// Asks the child to cancel its step (it then finishes with `CANCELLED` and its spend).
    fn cancel(&self, reason: Option<String>) -> BoxFuture<'_, ()>;

    /// Ends the child and everything it started: SIGTERM to its process group, SIGKILL after `grace`.
    fn stop(&self, grace: Duration) -> BoxFuture<'_, ()>;
}

impl std::fmt::Debug for dyn ChildProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChildProcess")
            .field("handle_id", &self.handle_id())
            .field("pid", &self.pid())
            .finish()
    }
}

/// A live child as [`SubprocessAdapter::list_live`] reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct LiveChild {
    /// The handle's id.
    pub handle_id: String,
    /// The step it runs.
    pub step_id: String,
    /// The execution it works for.
    pub execution_id: String,
    /// Its process id.
    pub pid: u32,
    /// Whether it outlives its host.
    pub detached: bool,
    /// When it started, in milliseconds since the Unix epoch.
    pub started_at_ms: u64,
}

impl LiveChild {
    /// A live child, as an out-of-process adapter reports it from its manifest.
    pub fn new(
        handle_id: impl Into<String>,
        step_id: impl Into<String>,
        execution_id: impl Into<String>,
        pid: u32,
        detached: bool,
        started_at_ms: u64,
    ) -> Self {
        LiveChild {
            handle_id: handle_id.into(),
            step_id: step_id.into(),
            execution_id: execution_id.into(),
            pid,
            detached,
            started_at_ms,
        }
    }
}

/// What a signal to a child did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SignalOutcome {
    /// Delivered.
    Done,
    /// No live child has that handle.
    NotFound,
    /// The adapter cannot do that (an in-process child cannot be paused).
    Unsupported,
}

/// Runs steps somewhere: in this process or in others. Object safe: the runtime holds one as an
/// `Arc<dyn SubprocessAdapter>`.
pub trait SubprocessAdapter: Send + Sync + 'static {
    /// Whether the step `step_id` runs in another process through [`SubprocessAdapter::spawn`];
    /// `false` runs it here, in the caller's task.
    fn runs_out_of_process(&self, step_id: &str) -> bool;

    /// Starts a child running `request`.
    ///
    /// # Errors
    /// A stable-coded error when the child cannot be started (`SUBPROCESS_FAILED`), or when the
    /// adapter runs nothing out of process.
    fn spawn(&self, request: StepRequest) -> BoxFuture<'_, Result<Box<dyn ChildProcess>>>;

    /// The children still alive (after a host restart: those this host's predecessor started). A
    /// child whose process is gone, or whose pid now belongs to another process, is not listed and
    /// its manifest is cleared.
    ///
    /// # Errors
    /// When the manifests cannot be read.
    fn list_live(&self) -> BoxFuture<'_, Result<Vec<LiveChild>>>;

    /// Rejoins the live child `handle_id`: its remaining messages arrive on the returned handle;
    /// `None` when it is gone (its manifest is then cleared).
    ///
    /// # Errors
    /// When the manifests cannot be read.
    fn reattach<'a>(
        &'a self,
        handle_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Box<dyn ChildProcess>>>>;

    /// Rejoins the live child working for `execution_id` (a detached child's own execution).
    ///
    /// # Errors
    /// When the manifests cannot be read.
    fn restore<'a>(
        &'a self,
        execution_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Box<dyn ChildProcess>>>> {
        Box::pin(async move {
            let live = self.list_live().await?;
            match live.iter().find(|child| child.execution_id == execution_id) {
                Some(child) => self.reattach(&child.handle_id).await,
                None => Ok(None),
            }
        })
    }

    /// Stops the child `handle_id` (SIGTERM to its group, SIGKILL after `grace`).
    ///
    /// # Errors
    /// When the manifests cannot be read.
    fn stop<'a>(
        &'a self,
        handle_id: &'a str,
        grace: Duration,
    ) -> BoxFuture<'a, Result<SignalOutcome>>;

    /// Pauses the child `handle_id` (SIGSTOP to its group).
    ///
    /// # Errors
    /// When the manifests cannot be read.
    fn pause<'a>(&'a self, handle_id: &'a str) -> BoxFuture<'a, Result<SignalOutcome>>;

    /// Resumes a paused child (SIGCONT to its group).
    ///
    /// # Errors
    /// When the manifests cannot be read.
    fn resume<'a>(&'a self, handle_id: &'a str) -> BoxFuture<'a, Result<SignalOutcome>>;
}

/// The default: every step runs in this process, in its caller's task (a detached spawn in a task of
/// its own). Nothing outlives the process, so nothing is listed live.
#[derive(Debug, Default, Clone, Copy)]
pub struct InProcess;

impl SubprocessAdapter for InProcess {
    fn runs_out_of_process(&self, _step_id: &str) -> bool {
        false
    }

    fn spawn(&self, request: StepRequest) -> BoxFuture<'_, Result<Box<dyn ChildProcess>>> {
        Box::pin(async move {
            Err(crate::Error::InvalidArgument {
                argument: "request",
                message: format!(
                    "the in-process subprocess adapter runs `{}` in the caller; it starts no child",
                    request.step_id
                ),
            })
        })
    }

    fn list_live(&self) -> BoxFuture<'_, Result<Vec<LiveChild>>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    fn reattach<'a>(
        &'a self,
        _handle_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Box<dyn ChildProcess>>>> {
        Box::pin(async { Ok(None) })
    }

    fn stop<'a>(
        &'a self,
        _handle_id: &'a str,
        _grace: Duration,
    ) -> BoxFuture<'a, Result<SignalOutcome>> {
        Box::pin(async { Ok(SignalOutcome::NotFound) })
    }

    fn pause<'a>(&'a self, _handle_id: &'a str) -> BoxFuture<'a, Result<SignalOutcome>> {
        Box::pin(async { Ok(SignalOutcome::Unsupported) })
    }

    fn resume<'a>(&'a self, _handle_id: &'a str) -> BoxFuture<'a, Result<SignalOutcome>> {
        Box::pin(async { Ok(SignalOutcome::Unsupported) })
    }
}
