//! A graph run as a session turn, for an engine that runs a thread's turns itself.

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::Context;
use crate::item::Item;
use crate::{Error, Result};

impl Context {
    /// Runs a step tree as a session turn does, for an engine that runs a thread's turns itself
    /// (noetic-restate): `messages` (the turn's user messages, in order, coalesced) are appended to
    /// the log, and the tree's input is their text, blank-line separated, as a JSON string, marked as
    /// the turn's messages: a `call_model` does not append it again, and a `spawn` handed it starts
    /// its child with the messages themselves (roles and parts as sent). Otherwise as
    /// [`Context::run`].
    ///
    /// # Errors
    /// As [`Context::run`]; `INVALID_ARGUMENT` (naming `messages`) when there are none.
    ///
    /// # Cancel safety
    /// As [`Context::run`]; the messages are in the log once the future is first polled.
    pub async fn run_turn<I, O: DeserializeOwned>(
        &self,
        step: &crate::step::Step<I, O>,
        messages: Vec<Item>,
    ) -> Result<O> {
        if messages.is_empty() {
            return Err(Error::InvalidArgument {
                argument: "messages",
                message: "a turn needs at least one message".to_owned(),
            });
        }
        step.validate()?;
        for item in &messages {
            self.append_item(item.clone());
        }
        let input = Value::String(turn_text(&messages));
        let origin = crate::step::Origin::Turn(messages.into());
        let output = crate::exec::run(self, &step.node, input, origin).await?;
        crate::step::decode(step.id(), "output", output)
    }
}

/// A turn's root input: the text of its messages, blank-line separated (messages without text, an
/// image alone say, add none).
pub(crate) fn turn_text(messages: &[Item]) -> String {
    messages
        .iter()
        .filter_map(Item::text)
        .filter(|text| !text.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n")
}
