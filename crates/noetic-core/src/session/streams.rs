//! Item snapshots built from a session's events, for UIs that render items as they stream.

use std::collections::HashMap;
use std::sync::Arc;

use futures_util::{Stream, StreamExt};
use serde_json::Map;

use crate::event::{FrameworkEvent, StreamEvent};
use crate::item::{ContentPart, Item};
use crate::model::ResponseEvent;

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
                if let Item::Message(message) = item {
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

pub(crate) fn item_snapshots(
    events: impl Stream<Item = Arc<StreamEvent>> + Send + 'static,
) -> impl Stream<Item = ItemSnapshot> + Send + 'static {
    events
        .scan(Builder::default(), |builder, event| {
            let snapshot = builder.take(&event);
            async move { Some(snapshot) }
        })
        .filter_map(|snapshot| async move { snapshot })
}
