//! The derived session streams: text, reasoning and item snapshots, each as [`SessionChunk`]s that
//! mark where turns start and end and where the subscriber lagged.

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::{Stream, StreamExt};
use serde_json::Map;

use crate::event::{FrameworkEvent, StreamEvent};
use crate::item::{ContentPart, Item};
use crate::model::ResponseEvent;

/// One element of a derived session stream (`text_stream`, `reasoning_stream`, `item_stream`).
///
/// A chat UI renders `Data` between a `TurnStarted` and its `TurnEnded`. `Lagged` means this
/// subscriber fell behind and `skipped` session events (of any kind, not only this stream's) were
/// dropped for it: what it shows may have a gap there — never a silent one.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum SessionChunk<T> {
    /// A turn started.
    TurnStarted {
        /// The turn's id (as in the `turn_started` event).
        turn_id: String,
        /// The ids of the messages the turn answers, in order.
        message_ids: Vec<String>,
    },
    /// The stream's data: a text or reasoning delta, or an item snapshot.
    Data(T),
    /// The turn ended.
    TurnEnded {
        /// The turn's id.
        turn_id: String,
        /// How it ended.
        outcome: TurnOutcome,
    },
    /// This subscriber fell behind; `skipped` session events were dropped for it.
    Lagged {
        /// How many session events it missed.
        skipped: u64,
    },
}

/// How a turn ended, in a [`SessionChunk::TurnEnded`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TurnOutcome {
    /// The turn completed.
    Completed,
    /// The turn failed or was aborted (`turn_aborted`).
    Failed {
        /// The error's stable code (`CANCELLED`, `PROVIDER_ERROR`, …).
        error_kind: &'static str,
        /// The error's message.
        reason: String,
    },
}

/// The state of one item: replace earlier snapshots with the same `key`.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ItemSnapshot {
    /// Identifies the item across snapshots (its id when it has one).
    pub key: String,
    /// The item as known so far.
    pub item: Item,
    /// Whether the item is complete.
    pub is_complete: bool,
}

#[derive(Default)]
struct Builder {
    round: u64,
    appended: u64,
    open: HashMap<u32, (String, Item)>,
    /// Items the current round streamed to completion, with their keys: when the model call then
    /// appends one to the log, its `item_appended` snapshot reuses that key (items without an id, such
    /// as function calls from some providers, would otherwise show up twice).
    streamed: Vec<(Item, String)>,
}

impl Builder {
    fn take(&mut self, event: &StreamEvent) -> Option<ItemSnapshot> {
        match event {
            StreamEvent::Framework(FrameworkEvent::ItemAppended { item }) => {
                self.appended += 1;
                let streamed = self.streamed.iter().position(|(done, _)| done == item);
                let key = match streamed {
                    Some(index) => self.streamed.swap_remove(index).1,
                    None => item
                        .id()
                        .map_or_else(|| format!("appended:{}", self.appended), str::to_owned),
                };
                Some(ItemSnapshot {
                    key,
                    item: item.clone(),
                    is_complete: true,
                })
            }
            StreamEvent::Sdk(sdk) => self.sdk(sdk),
            _ => None,
        }
    }

    fn sdk(&mut self, event: &ResponseEvent) -> Option<ItemSnapshot> {
        match event {
            ResponseEvent::Created { .. } => {
                self.round += 1;
                self.open.clear();
                self.streamed.clear();
                None
            }
            ResponseEvent::OutputItemAdded { output_index, item } => {
                let key = item.id().map_or_else(
                    || format!("round:{}:{output_index}", self.round),
                    str::to_owned,
                );
                self.open.insert(*output_index, (key.clone(), item.clone()));
                Some(ItemSnapshot {
                    key,
                    item: item.clone(),
                    is_complete: false,
                })
            }
            ResponseEvent::OutputTextDelta {
                output_index,
                content_index,
                delta,
            } => {
                let (key, item) = self.open.get_mut(output_index)?;
                if let Item::Message(message) = item
                    && *content_index <= crate::model::MAX_OUTPUT_INDEX
                {
                    // Past the cap the delta only misses from the snapshot; the round itself fails.
                    let index = *content_index as usize;
                    while message.content.len() <= index {
                        message.content.push(ContentPart::OutputText {
                            text: String::new(),
                            extra: Map::new(),
                        });
                    }
                    if let ContentPart::OutputText { text, .. } = &mut message.content[index] {
                        text.push_str(delta);
                    }
                }
                Some(ItemSnapshot {
                    key: key.clone(),
                    item: item.clone(),
                    is_complete: false,
                })
            }
            ResponseEvent::FunctionCallArgumentsDelta {
                output_index,
                delta,
            } => {
                let (key, item) = self.open.get_mut(output_index)?;
                if let Item::FunctionCall(call) = item {
                    call.arguments.push_str(delta);
                }
                Some(ItemSnapshot {
                    key: key.clone(),
                    item: item.clone(),
                    is_complete: false,
                })
            }
            ResponseEvent::OutputItemDone { output_index, item } => {
                let key = match self.open.remove(output_index) {
                    Some((key, _)) => key,
                    None => item.id().map_or_else(
                        || format!("round:{}:{output_index}", self.round),
                        str::to_owned,
                    ),
                };
                self.streamed.push((item.clone(), key.clone()));
                Some(ItemSnapshot {
                    key,
                    item: item.clone(),
                    is_complete: true,
                })
            }
            ResponseEvent::Finished(_) => {
                self.round += 1;
                self.open.clear();
                None
            }
            _ => None,
        }
    }
}

impl<T> SessionChunk<T> {
    /// The chunk a turn boundary or a lag notice becomes; `None` for any other event.
    fn boundary(event: &StreamEvent) -> Option<Self> {
        match event {
            StreamEvent::Framework(
                FrameworkEvent::TurnStarted {
                    turn_id,
                    message_ids,
                }
                | FrameworkEvent::RoundRestarted {
                    turn_id,
                    message_ids,
                },
            ) => Some(SessionChunk::TurnStarted {
                turn_id: turn_id.clone(),
                message_ids: message_ids.clone(),
            }),
            StreamEvent::Framework(FrameworkEvent::TurnCompleted { turn_id, .. }) => {
                Some(SessionChunk::TurnEnded {
                    turn_id: turn_id.clone(),
                    outcome: TurnOutcome::Completed,
                })
            }
            StreamEvent::Framework(FrameworkEvent::TurnAborted {
                turn_id,
                reason,
                error_kind,
            }) => Some(SessionChunk::TurnEnded {
                turn_id: turn_id.clone(),
                outcome: TurnOutcome::Failed {
                    error_kind,
                    reason: reason.clone(),
                },
            }),
            StreamEvent::Lagged { skipped } => Some(SessionChunk::Lagged { skipped: *skipped }),
            _ => None,
        }
    }
}

/// The text of the provider events `pick` selects, with turn boundaries and lag notices.
pub(crate) fn text_chunks(
    events: impl Stream<Item = Arc<StreamEvent>> + Send + 'static,
    pick: fn(&ResponseEvent) -> Option<&str>,
) -> impl Stream<Item = SessionChunk<String>> + Send + 'static {
    events.filter_map(move |event| {
        let chunk = match &*event {
            StreamEvent::Sdk(sdk) => pick(sdk).map(|text| SessionChunk::Data(text.to_owned())),
            other => SessionChunk::boundary(other),
        };
        async move { chunk }
    })
}

pub(crate) fn item_snapshots(
    events: impl Stream<Item = Arc<StreamEvent>> + Send + 'static,
) -> impl Stream<Item = SessionChunk<ItemSnapshot>> + Send + 'static {
    events
        .scan(Builder::default(), |builder, event| {
            let chunk = match &*event {
                StreamEvent::Lagged { .. } => {
                    // Deltas may be missing: open items are no longer known, their next complete
                    // snapshot (`output_item.done`, `item_appended`) stands.
                    builder.open.clear();
                    SessionChunk::boundary(&event)
                }
                other => builder
                    .take(other)
                    .map(SessionChunk::Data)
                    .or_else(|| SessionChunk::boundary(other)),
            };
            async move { Some(chunk) }
        })
        .filter_map(|chunk| async move { chunk })
}
