//! The steering vocabulary: how a message meets a running turn ([`DeliveryMode`]), where a model
//! call offers steers ([`SteerPoint`]), a waiting steer ([`Steer`]) and what to do with it
//! ([`SteerDecision`]). A leaf: it imports only `item`. The machinery (the turn's inbox, the
//! `on_steer` hook type) is in `session`.

use serde::{Deserialize, Serialize};

use crate::item::Item;

/// How a message meets a running turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum DeliveryMode {
    /// Wait for the next turn (coalesced with other queued messages).
    #[default]
    NextTurn,
    /// Join the running turn before its next model request.
    BetweenRounds,
    /// Join the running turn as soon as the model finishes its current output item.
    NextItem,
    /// Abort the running turn and start a new one with this message first.
    Interrupt,
}

/// Where a model call offers queued steers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SteerPoint {
    /// The stream finished an output item.
    ItemDone,
    /// A tool call is about to run.
    BeforeToolCall,
    /// A model request (after the turn's first) is about to be sent.
    BeforeRound,
}

/// A steering message waiting to join the running turn.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Steer {
    /// The message's id.
    pub message_id: String,
    /// How it was delivered (`between-rounds` or `next-item`).
    pub mode: DeliveryMode,
    /// Its items (role and content parts as sent).
    pub items: Vec<Item>,
}

impl Steer {
    /// A steer of `items` delivered as `mode`, as an engine's inbox hands it over
    /// ([`crate::engine::StepJournal::steers`]).
    pub fn new(message_id: impl Into<String>, mode: DeliveryMode, items: Vec<Item>) -> Self {
        Steer {
            message_id: message_id.into(),
            mode,
            items,
        }
    }
}

/// What to do with a steer at a point.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum SteerDecision {
    /// Apply it now (at `item_done` or `before_tool_call` this ends the round).
    Apply,
    /// Offer it again at the next point (and, at turn end, start the next turn with it).
    Hold,
    /// Apply these items instead.
    Rewrite(Vec<Item>),
    /// Discard it (emits `steer_dropped`).
    Drop,
}

/// The decision the defaults make.
pub fn default_decision(mode: DeliveryMode, point: SteerPoint) -> SteerDecision {
    match (mode, point) {
        (DeliveryMode::NextItem, SteerPoint::ItemDone | SteerPoint::BeforeRound) => {
            SteerDecision::Apply
        }
        (DeliveryMode::BetweenRounds, SteerPoint::BeforeRound) => SteerDecision::Apply,
        _ => SteerDecision::Hold,
    }
}
