//! Folds a round's events into its final items, status and usage.

use serde_json::{Map, Value};

use super::event::{ResponseEvent, ResponseSnapshot, ResponseStatus};
use crate::item::{ContentPart, Item};
use crate::usage::TokenUsage;
use crate::{Error, Result};

/// The outcome of one round (serializable: an engine's journal records it, see [`crate::engine`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct ModelResponse {
    /// The response id.
    pub id: Option<String>,
    /// The model that served it.
    pub model: Option<String>,
    /// The terminal status.
    pub status: ResponseStatus,
    /// The output items, in output order.
    pub items: Vec<Item>,
    /// Token usage, when reported.
    pub usage: Option<TokenUsage>,
    /// Cost in USD, when reported.
    pub cost: Option<f64>,
    /// The provider's error message (failed responses).
    pub error: Option<String>,
    /// Why the response is incomplete.
    pub incomplete_reason: Option<String>,
}

impl ModelResponse {
    /// The function calls among the items.
    pub fn function_calls(&self) -> impl Iterator<Item = &crate::item::FunctionCallItem> {
        self.items.iter().filter_map(Item::as_function_call)
    }

    /// The text of the last assistant message.
    pub fn text(&self) -> Option<String> {
        self.items
            .iter()
            .rev()
            .find(|item| item.role() == Some(crate::item::Role::Assistant))
            .and_then(Item::text)
    }
}

/// One output slot while the stream is open.
#[derive(Debug, Default)]
struct Slot {
    /// The item as opened by `output_item.added`.
    opened: Option<Item>,
    /// The item as closed by `output_item.done`.
    done: Option<Item>,
    /// Text deltas per content index, used only when the item never closes.
    text: Vec<String>,
    /// Argument deltas, used only when the call never closes.
    arguments: String,
}

/// Folds [`ResponseEvent`]s into a [`ModelResponse`].
///
/// Items come from `output_item.done` events; positions the stream never closed are filled from the
/// terminal snapshot's `output` when it has one. Items still open at
/// the end (an `incomplete` response often stops mid-item) are closed from their deltas and marked
/// `status: incomplete`.
#[derive(Debug, Default)]
pub struct ResponseAccumulator {
    slots: Vec<Slot>,
    /// The first output or content index past [`MAX_OUTPUT_INDEX`]: such an event is dropped (its
    /// slot would cost memory by the index) and the round fails when it finishes.
    out_of_range: Option<(&'static str, u32)>,
    response_id: Option<String>,
    model: Option<String>,
    finished: Option<Box<ResponseSnapshot>>,
    error: Option<(Option<String>, String)>,
}

/// The largest output or content index a round may use. Slots are stored by index, so an absurd index
/// from a broken or hostile stream (`output_index: 4294967295`) would otherwise allocate by it.
pub const MAX_OUTPUT_INDEX: u32 = 65_536;

impl ResponseAccumulator {
    /// An empty accumulator.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether `index` (an output index, or a content index when `what` says so) is in range; records
    /// the first one that is not.
    fn in_range(&mut self, what: &'static str, index: u32) -> bool {
        if index <= MAX_OUTPUT_INDEX {
            return true;
        }
        self.out_of_range.get_or_insert((what, index));
        false
    }

    fn slot(&mut self, output_index: u32) -> Option<&mut Slot> {
        if !self.in_range("output_index", output_index) {
            return None;
        }
        let index = output_index as usize;
        if self.slots.len() <= index {
            self.slots.resize_with(index + 1, Slot::default);
        }
        Some(&mut self.slots[index])
    }

    /// Takes one event. Returns the output index of an item that this event completed.
    pub fn push(&mut self, event: &ResponseEvent) -> Option<u32> {
        match event {
            ResponseEvent::Created { response_id, model } => {
                if response_id.is_some() {
                    self.response_id.clone_from(response_id);
                }
                if model.is_some() {
                    self.model.clone_from(model);
                }
            }
            ResponseEvent::OutputItemAdded { output_index, item } => {
                if let Some(slot) = self.slot(*output_index) {
                    slot.opened = Some(item.clone());
                }
            }
            ResponseEvent::OutputTextDelta {
                output_index,
                content_index,
                delta,
            } => {
                if !self.in_range("content_index", *content_index) {
                    return None;
                }
                let slot = self.slot(*output_index)?;
                let part = *content_index as usize;
                if slot.text.len() <= part {
                    slot.text.resize_with(part + 1, String::new);
                }
                slot.text[part].push_str(delta);
            }
            ResponseEvent::FunctionCallArgumentsDelta {
                output_index,
                delta,
            } => {
                if let Some(slot) = self.slot(*output_index) {
                    slot.arguments.push_str(delta);
                }
            }
            ResponseEvent::FunctionCallArgumentsDone {
                output_index,
                arguments,
            } => {
                if let Some(slot) = self.slot(*output_index) {
                    slot.arguments.clone_from(arguments);
                }
            }
            ResponseEvent::OutputItemDone { output_index, item } => {
                let slot = self.slot(*output_index)?;
                slot.done = Some(item.clone());
                return Some(*output_index);
            }
            ResponseEvent::Finished(snapshot) => {
                if self.finished.is_none() {
                    self.finished = Some(snapshot.clone());
                }
            }
            ResponseEvent::Error { code, message } => {
                if self.error.is_none() {
                    self.error = Some((code.clone(), message.clone()));
                }
            }
            ResponseEvent::ReasoningDelta { .. } | ResponseEvent::Other { .. } => {}
        }
        None
    }

    /// Whether a terminal event (or an `error` event) has been seen.
    pub fn is_terminal(&self) -> bool {
        self.finished.is_some() || self.error.is_some()
    }

    /// The items completed so far, in output order.
    pub fn completed_items(&self) -> impl Iterator<Item = &Item> {
        self.slots.iter().filter_map(|slot| slot.done.as_ref())
    }

    /// Ends the round.
    ///
    /// # Errors
    /// [`Error::Provider`] when the stream ended without a terminal event (a truncated stream is never
    /// a silent success), or when an event named an output or content index past
    /// [`MAX_OUTPUT_INDEX`] (the message names it).
    pub fn finish(self, provider: &str, round: u32) -> Result<ModelResponse> {
        if let Some((what, index)) = self.out_of_range {
            return Err(Error::provider(
                provider,
                None,
                format!(
                    "malformed stream: {what} {index} is past the largest supported ({MAX_OUTPUT_INDEX})"
                ),
            )
            .in_round(round));
        }
        let ResponseAccumulator {
            slots,
            out_of_range: _,
            response_id,
            model,
            finished,
            error,
        } = self;
        let Some(snapshot) = finished else {
            // A lone `error` event followed by end-of-stream is terminal too.
            if let Some((code, message)) = error {
                let items = close_slots(slots, false);
                return Ok(ModelResponse {
                    id: response_id,
                    model,
                    status: ResponseStatus::Failed,
                    items,
                    usage: None,
                    cost: None,
                    error: Some(match code {
                        Some(code) => format!("{code}: {message}"),
                        None => message,
                    }),
                    incomplete_reason: None,
                });
            }
            return Err(Error::provider(
                provider,
                None,
                "stream ended without a terminal event (truncated response)",
            )
            .in_round(round));
        };
        let snapshot = *snapshot;
        let status = snapshot.status.unwrap_or(ResponseStatus::Completed);
        let items = if snapshot.output.is_empty() {
            close_slots(slots, status == ResponseStatus::Incomplete)
        } else {
            merge_with_snapshot(slots, snapshot.output)
        };
        let error = snapshot.error.or_else(|| {
            error.map(|(code, message)| match code {
                Some(code) => format!("{code}: {message}"),
                None => message,
            })
        });
        Ok(ModelResponse {
            id: snapshot.id.or(response_id),
            model: snapshot.model.or(model),
            status,
            items,
            usage: snapshot.usage,
            cost: snapshot.cost,
            error,
            incomplete_reason: snapshot.incomplete_reason,
        })
    }
}

/// Final items when the terminal snapshot lists the output: each position takes the item closed by its
/// `output_item.done` event when there was one (that is the value clients replay: OpenAI re-encrypts
/// reasoning between the two, and the captured follow-up requests carry the `.done` value), else the
/// snapshot's item (a response cut short by `incomplete` often never closes its last item).
fn merge_with_snapshot(slots: Vec<Slot>, snapshot: Vec<Item>) -> Vec<Item> {
    let mut done: Vec<Option<Item>> = slots.into_iter().map(|slot| slot.done).collect();
    let count = done.len().max(snapshot.len());
    let mut snapshot = snapshot.into_iter();
    let mut items = Vec::with_capacity(count);
    for index in 0..count {
        let from_snapshot = snapshot.next();
        match done.get_mut(index).and_then(Option::take) {
            Some(item) => items.push(item),
            None => items.extend(from_snapshot),
        }
    }
    items
}

/// Final items from the slots: closed ones as closed, open ones rebuilt from their deltas.
fn close_slots(slots: Vec<Slot>, mark_incomplete: bool) -> Vec<Item> {
    let mut items = Vec::with_capacity(slots.len());
    for slot in slots {
        if let Some(done) = slot.done {
            items.push(done);
            continue;
        }
        let Some(mut opened) = slot.opened else {
            continue;
        };
        match &mut opened {
            Item::Message(message) => {
                for (index, text) in slot.text.into_iter().enumerate() {
                    if text.is_empty() {
                        continue;
                    }
                    match message.content.get_mut(index) {
                        Some(ContentPart::OutputText { text: existing, .. }) => {
                            existing.push_str(&text)
                        }
                        _ => message.content.push(ContentPart::OutputText {
                            text,
                            extra: Map::new(),
                        }),
                    }
                }
                set_status(&mut message.extra, mark_incomplete);
            }
            Item::FunctionCall(call) => {
                if !slot.arguments.is_empty() {
                    call.arguments = slot.arguments;
                }
                set_status(&mut call.extra, mark_incomplete);
            }
            Item::Reasoning(reasoning) => set_status(&mut reasoning.extra, mark_incomplete),
            _ => {}
        }
        items.push(opened);
    }
    items
}

fn set_status(extra: &mut Map<String, Value>, incomplete: bool) {
    if incomplete {
        extra.insert("status".to_owned(), Value::String("incomplete".to_owned()));
    }
}
