//! A session turn's transcript: every item appended in any context of the turn, in order.

use std::sync::{Arc, Mutex};

use crate::item::Item;
use crate::sync::lock;

/// Every item appended in any context of one session turn (its root context, spawned children,
/// parallel paths), in the order they were appended. The session history at the turn's end is the
/// history before it, the turn's messages, and these.
///
/// The root's own items are in its log already, so for them only a marker is kept (no copy): the
/// transcript stays cheap on the hot path of a turn without children.
#[derive(Default)]
pub(crate) struct Transcript {
    /// `None`: the root's next appended item (in its log); `Some`: an item appended in a descendant.
    entries: Mutex<Vec<Option<Box<Item>>>>,
}

impl Transcript {
    /// The turn's items, in order: the root's log from `start` on, interleaved with the descendants'
    /// items as they were appended. `root_items` is the root context's whole log.
    pub(crate) fn assemble(&self, root_items: Vec<Item>, start: usize) -> Vec<Item> {
        let entries = std::mem::take(&mut *lock(&self.entries));
        let mut root = root_items.into_iter();
        let mut items: Vec<Item> = root.by_ref().take(start).collect();
        items.reserve(entries.len());
        for entry in entries {
            match entry {
                None => items.extend(root.next()),
                Some(item) => items.push(*item),
            }
        }
        // Nothing reaches a log without a marker, but keep whatever would.
        items.extend(root);
        items
    }
}

/// How a context takes part in a turn's transcript.
pub(super) enum TranscriptRef {
    /// The turn's root: its appends are markers.
    Root(Arc<Transcript>),
    /// A descendant: its appends are copied.
    Member(Arc<Transcript>),
}

impl TranscriptRef {
    fn transcript(&self) -> &Arc<Transcript> {
        match self {
            TranscriptRef::Root(transcript) | TranscriptRef::Member(transcript) => transcript,
        }
    }

    pub(super) fn member(&self) -> TranscriptRef {
        TranscriptRef::Member(self.transcript().clone())
    }

    pub(super) fn record(&self, item: &Item) {
        let entry = match self {
            TranscriptRef::Root(_) => None,
            TranscriptRef::Member(_) => Some(Box::new(item.clone())),
        };
        lock(&self.transcript().entries).push(entry);
    }
}
