//! Sessions: `execute()`, per-thread queues, delivery modes, steering and session streams.
//!
//! Each thread id has a session: a queue of messages, the conversation history, an event bus and,
//! while a turn runs, that turn's context and steer inbox. `execute()` puts a message on the queue and
//! returns at once; a runner task takes every queued message as the input of one turn, runs the agent
//! graph on a context seeded with the history, and repeats until the queue is empty. Different threads
//! run concurrently; one thread runs one turn at a time.
//!
//! Delivery modes decide how a message meets a running turn:
//! - `next-turn` (default): it waits for the next turn, coalesced with the other queued messages;
//! - `between-rounds` / `next-item`: it is a **steer** and joins the running turn at the next steer
//!   point of its model calls (see [`SteerPoint`]); with no turn running it starts one;
//! - `interrupt`: the running turn is aborted and a new one starts with the message first.
//!
//! No message is ever lost: a steer still held when its turn ends starts the next turn, and a failed
//! or aborted turn keeps its input (and the items that completed) in the history.

mod api;
mod bus;
mod durable;
mod engine_record;
mod event_log;
mod fleet;
mod last;
mod remote;
mod runner;
mod sessions;
mod streams;

pub use crate::context::OnSteer;
pub use crate::steer::{DeliveryMode, Steer, SteerDecision, SteerPoint, default_decision};
pub use api::{AbortOptions, ExecuteOptions, HarnessResponse, Input, Scope, SessionStatus};
pub use bus::{
    DEFAULT_EVENT_BYTES, DEFAULT_EVENT_CAPACITY, IDLE_EVENT_BYTES, Replay, SequencedEvent,
    UNWATCHED_EVENT_BYTES,
};
pub use streams::{ItemSnapshot, SessionChunk, TurnOutcome};

pub use crate::event::EventLogOptions;
pub use durable::StoredThread;
pub(crate) use durable::{accept_shared, read_stored, settled_last, threads_with_work};
pub use engine_record::{EngineMessage, EngineTurn, ThreadRecorder};
pub(crate) use event_log::{Follow, follow};
pub(crate) use fleet::{Drive, LetGo, THREAD_LEASES, thread_of};
pub(crate) use remote::{request_abort, wake};
pub(crate) use runner::{Message, response_of};
pub use sessions::DEFAULT_SESSION_IDLE_TTL;
pub(crate) use sessions::Sessions;
pub(crate) use streams::{item_snapshots, text_chunks};

pub use crate::id::DEFAULT_THREAD;
