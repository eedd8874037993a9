//! # noetic-core
//!
//! The core of the noetic agent harness: the item model, typed composable steps and their interpreter,
//! tools, contexts, the model-provider seam, and the [`AgentHarness`].
//!
//! A developer composes an agent from small typed steps — typically a [`loop_step`] around a
//! [`call_model`] with [`Tool`]s — and runs it with [`AgentHarness::run`] on a [`Context`]. Providers
//! (OpenRouter, OpenAI, any OpenResponses or Chat Completions server) live in `noetic-providers` and plug
//! in through the [`ModelProvider`] trait; this crate does no network or file IO of its own.
//!
//! ```
//! use noetic_core::{AgentHarness, ContextOptions, loop_step, run_code, until, Context};
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let count = loop_step("count")
//!     .step(run_code("inc", |n: u32, _: Context| async move { Ok::<_, std::convert::Infallible>(n + 1) }))
//!     .until(until::max_steps(3))
//!     .build();
//! let harness = AgentHarness::builder("counter").build()?;
//! let ctx = harness.create_context(ContextOptions::default());
//! assert_eq!(harness.run(&count, 0, &ctx).await?, 3);
//! # Ok::<(), noetic_core::Error>(())
//! # }).unwrap();
//! ```
#![warn(missing_docs)]

pub mod acp;
pub mod adapter;
mod approval;
pub mod channel;
pub mod checkpoint;
mod connection;
mod context;
mod drain;
pub mod engine;
mod error;
mod event;
mod exec;
mod harness;
mod id;
pub mod item;
pub mod layer;
pub mod model;
mod paid;
mod runtime;
pub mod session;
mod steer;
mod step;
mod step_kind;
mod sync;
pub mod telemetry;
mod tool;
mod usage;
pub mod workflow;

/// Loop stop predicates (they live with the loop step).
pub use step::until;

pub use adapter::{
    Commit, DurableStore, InMemoryStorage, KvDurableStore, Lease, LeaseRequest, StorageAdapter,
    StorageOp,
};
pub use approval::{ApprovalDecision, ApprovalRequest};
pub use channel::{Channel, ChannelHandle, ChannelMode, ChannelStream};
pub use checkpoint::{ExecutionRecord, ExecutionStatus, LedgerRetention};
pub use connection::{Connection, ConnectionSpec};
pub use context::{
    Context, ContextOptions, DetachedHandle, DetachedOptions, MAX_DEPTH, RestoreOptions, StepMeta,
};
pub use drain::{CallKind, CancelOptions, DrainReason, DrainReport, PaidCall};
pub use error::{BoxError, CODES, Error, Result, StepFailure};
pub use event::{EventSink, FrameworkEvent, FrameworkEventKind, StreamEvent};
pub use harness::{AgentHarness, AgentHarnessBuilder, ServeOptions, ServeReport};
pub use item::{ContentPart, Item, Role};
pub use layer::{
    Band, ContextLayer, LayerCtx, LayerDecision, LayerScope, LayerUsage, Outcome, RecallLayerOutput,
};
pub use model::{ModelProvider, ModelRequest, ModelStream, ResponseEvent};
pub use runtime::{
    AgentHooks, CallModelDefaults, DEFAULT_IDLE_TIMEOUT, Environment, Runtime, RuntimeBuilder,
};
pub use session::{
    AbortOptions, DEFAULT_THREAD, DeliveryMode, EventLogOptions, ExecuteOptions, HarnessResponse,
    Input, ItemSnapshot, Replay, Scope, SequencedEvent, SessionChunk, SessionStatus, Steer,
    SteerDecision, SteerPoint, StoredThread, TurnOutcome,
};
pub use step::{
    AcpAgentBuilder, Backoff, CANCEL_GRACE, CallModelBuilder, DEFAULT_MAX_ITERATIONS,
    InvokeToolBuilder, LoopBuilder, LoopStart, MAX_RECOVERIES, MAX_TOOL_ROUNDS, ParallelBuilder,
    RetryPolicy, RunCodeBuilder, STOP_GRACE, ScheduleBuilder, ScheduleOnError, SequenceBuilder,
    SequenceStart, Settled, SpawnBuilder, SteerMode, Step, StepKind, StepRef, StepRegistry,
    acp_agent, call_model, conditional, in_parallel, invoke_tool, loop_step, run_code, schedule,
    sequence, spawn, with_context,
};
pub use telemetry::create_span;
pub use tool::{Tool, ToolContext, ToolError, ToolSource, schema_for, wire_name};
pub use until::{Until, Verdict, all, any};
pub use usage::{Spend, TokenUsage};
pub use workflow::{WorkflowDocument, WorkflowRegistry};

/// The traits users implement or call, for a glob import.
pub mod prelude {
    pub use crate::adapter::{FsAdapter, ShellAdapter, StorageAdapter, SubprocessAdapter};
    pub use crate::event::EventSink;
    pub use crate::layer::ContextLayer;
    pub use crate::model::ModelProvider;
}
