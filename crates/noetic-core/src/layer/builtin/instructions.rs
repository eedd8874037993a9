//! [`InstructionsLayer`]: fixed instructions recalled into every request.

use futures_util::future::BoxFuture;

use crate::Result;
use crate::item::Item;
use crate::layer::{Band, ContextLayer, LayerCtx, RecallLayerOutput};

/// Recalls fixed instructions as a developer message (or a system message, with
/// [`InstructionsLayer::system`]) before the history of every `call_model` step.
///
/// The message goes into the request's input, not into the step's `instructions` field, and never
/// into the item log.
///
/// # Examples
/// ```
/// use noetic_core::layer::builtin::InstructionsLayer;
/// let layer = InstructionsLayer::new("Answer in French.").with_id("french");
/// assert_eq!(layer.text(), "Answer in French.");
/// ```
#[derive(Debug, Clone)]
pub struct InstructionsLayer {
    id: String,
    text: String,
    system: bool,
    slot: i32,
}

impl InstructionsLayer {
    /// Instructions holding `text`, sent as a developer message (id `instructions`, slot 105).
    pub fn new(text: impl Into<String>) -> Self {
        InstructionsLayer {
            id: "instructions".to_owned(),
            text: text.into(),
            system: false,
            slot: 105,
        }
    }

    /// Sends the text as a system message instead of a developer message.
    pub fn system(mut self) -> Self {
        self.system = true;
        self
    }

    /// Sets the layer's id (to stack several instruction layers).
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = id.into();
        self
    }

    /// Sets the layer's slot.
    pub fn with_slot(mut self, slot: i32) -> Self {
        self.slot = slot;
        self
    }

    /// The instructions.
    pub fn text(&self) -> &str {
        &self.text
    }
}

impl ContextLayer for InstructionsLayer {
    fn id(&self) -> &str {
        &self.id
    }

    fn slot(&self) -> i32 {
        self.slot
    }

    fn band(&self) -> Band {
        Band::BeforeHistory
    }

    fn recall<'a>(
        &'a self,
        _ctx: LayerCtx<'a>,
        _query: &'a str,
    ) -> BoxFuture<'a, Result<Option<RecallLayerOutput>>> {
        let output = (!self.text.is_empty()).then(|| {
            let item = if self.system {
                Item::system_text(self.text.as_str())
            } else {
                Item::developer_text(self.text.as_str())
            };
            RecallLayerOutput::new(self.id.clone(), vec![item])
        });
        Box::pin(async move { Ok(output) })
    }
}
