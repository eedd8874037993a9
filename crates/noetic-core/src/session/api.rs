//! The vocabulary of the session surface (`execute` input and options, scopes, responses, status);
//! the surface itself is on the harness (`harness/session.rs`).

use std::time::SystemTime;

use serde_json::Value;

use super::{DEFAULT_THREAD, DeliveryMode};
use crate::item::Item;
use crate::layer::LayerUsage;
use crate::usage::TokenUsage;

/// What `execute` accepts: text (one user message with one `input_text` part), one item, or several
/// items, used as given. Empty text and an empty list are rejected (`INVALID_ARGUMENT`): they would
/// start a paid model turn with nothing new.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Input {
    /// A user message's text.
    Text(String),
    /// One item.
    Item(Item),
    /// Several items.
    Items(Vec<Item>),
}

impl Input {
    pub(crate) fn into_items(self) -> Vec<Item> {
        match self {
            Input::Text(text) if text.is_empty() => Vec::new(),
            Input::Text(text) => vec![Item::user_text(text)],
            Input::Item(item) => vec![item],
            Input::Items(items) => items,
        }
    }
}

impl From<&str> for Input {
    fn from(text: &str) -> Self {
        Input::Text(text.to_owned())
    }
}

impl From<String> for Input {
    fn from(text: String) -> Self {
        Input::Text(text)
    }
}

impl From<Item> for Input {
    fn from(item: Item) -> Self {
        Input::Item(item)
    }
}

impl From<Vec<Item>> for Input {
    fn from(items: Vec<Item>) -> Self {
        Input::Items(items)
    }
}

/// Options of [`crate::AgentHarness::execute`].
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct ExecuteOptions {
    /// The thread (default [`DEFAULT_THREAD`]).
    pub thread_id: Option<String>,
    /// The resource (user, tenant) the turn runs for; model calls see it.
    pub resource_id: Option<String>,
    /// How the message meets a running turn (default: the harness's, else `next-turn`).
    pub delivery_mode: Option<DeliveryMode>,
    /// The message's id (default `msg-<unique id>`), as it appears in `turn_started` and steer events.
    pub message_id: Option<String>,
}

impl ExecuteOptions {
    /// Options with everything defaulted.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the thread.
    pub fn thread_id(mut self, thread_id: impl Into<String>) -> Self {
        self.thread_id = Some(thread_id.into());
        self
    }

    /// Sets the resource id.
    pub fn resource_id(mut self, resource_id: impl Into<String>) -> Self {
        self.resource_id = Some(resource_id.into());
        self
    }

    /// Sets the delivery mode.
    pub fn delivery_mode(mut self, mode: DeliveryMode) -> Self {
        self.delivery_mode = Some(mode);
        self
    }

    /// Sets the message id.
    pub fn message_id(mut self, message_id: impl Into<String>) -> Self {
        self.message_id = Some(message_id.into());
        self
    }
}

/// Which session an accessor looks at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Scope {
    /// The thread (default [`DEFAULT_THREAD`]).
    pub thread_id: Option<String>,
}

impl Scope {
    /// The scope of the default thread ([`DEFAULT_THREAD`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// The scope of `thread_id`, or of the default thread for `None`.
    pub fn thread_or_default(thread_id: Option<String>) -> Self {
        Scope { thread_id }
    }

    /// The scope of `thread_id`.
    pub fn thread(thread_id: impl Into<String>) -> Self {
        Scope {
            thread_id: Some(thread_id.into()),
        }
    }

    pub(crate) fn thread_id(&self) -> &str {
        self.thread_id.as_deref().unwrap_or(DEFAULT_THREAD)
    }
}

/// Options of [`crate::AgentHarness::abort`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AbortOptions {
    /// The thread (default [`DEFAULT_THREAD`]).
    pub thread_id: Option<String>,
    /// Why (becomes the turn's `CANCELLED` reason).
    pub reason: Option<String>,
    /// How long the turn's model rounds in flight may take to finish first (a graceful drain, as
    /// [`crate::CancelOptions::drain`]); `None` cuts at once.
    pub drain: Option<std::time::Duration>,
}

impl AbortOptions {
    /// Options aborting the default thread's turn, without a reason.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the thread.
    pub fn thread_id(mut self, thread_id: impl Into<String>) -> Self {
        self.thread_id = Some(thread_id.into());
        self
    }

    /// Sets the reason.
    pub fn reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }

    /// Drains the turn's in-flight model rounds for up to `window` first.
    pub fn drain(mut self, window: std::time::Duration) -> Self {
        self.drain = Some(window);
        self
    }
}

/// What a session is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SessionStatus {
    /// No turn is running and nothing is queued.
    Idle,
    /// Messages are accepted and waiting, and no turn is running yet: the next turn is about to start.
    Queued {
        /// How many messages wait.
        queued: usize,
    },
    /// A turn is running.
    Running {
        /// The turn's id.
        turn_id: String,
        /// When it started.
        started_at: SystemTime,
    },
    /// The running turn is draining before it stops: nothing new starts, the model rounds in
    /// flight may finish until `deadline`.
    Draining {
        /// The turn's id.
        turn_id: String,
        /// When what is still in flight is cut off.
        deadline: SystemTime,
    },
    /// The running turn was asked to stop and has not stopped yet.
    Aborting {
        /// The turn's id.
        turn_id: String,
    },
    /// The running turn waits for a person's decision on these calls
    /// ([`crate::AgentHarness::approve`] / `reject`); its other calls have run. Messages sent
    /// meanwhile queue (or steer, once the turn goes on), other threads run.
    AwaitingApproval {
        /// The turn's id.
        turn_id: String,
        /// The calls waiting, in the order they were asked for.
        calls: Vec<crate::ApprovalRequest>,
    },
}

/// The outcome of a session turn.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct HarnessResponse {
    /// The whole conversation after the turn (seeded history, earlier turns, this turn).
    pub items: Vec<Item>,
    /// Tokens this turn used.
    pub usage: TokenUsage,
    /// What this turn cost, when reported.
    pub cost: Option<f64>,
    /// The agent graph's output as text (a string output as is, anything else as JSON).
    pub text: String,
    /// The agent graph's output.
    pub output: Value,
    /// What each context layer contributed to the turn's last model request (slot order).
    pub last_layer_usage: Vec<LayerUsage>,
}
