//! [`ScratchpadLayer`]: notes the model writes with a tool and sees in later requests.

use futures_util::future::BoxFuture;
use schemars::JsonSchema;
use serde::Deserialize;

use crate::Result;
use crate::context::Context;
use crate::layer::{Band, ContextLayer, LayerCtx, LayerScope, RecallLayerOutput};
use crate::tool::{Tool, ToolContext, ToolError};

/// The name of the tool that writes a scratchpad note.
pub const SCRATCHPAD_TOOL: &str = "scratchpad_write";

/// The state key the notes are stored under (a JSON array of strings).
const NOTES_KEY: &str = "notes";

/// Keeps notes in layer state and recalls them as one developer message before the history.
///
/// Notes are written by the tool from [`ScratchpadLayer::tool`] (or [`scratchpad_tool`] for a layer
/// built with [`ScratchpadLayer::new`]): `scratchpad_write { "note": string }`. The tool writes through
/// [`LayerCtx::new`] on its calling [`Context`] (`ToolContext.ctx`), so the notes live in the ordinary
/// layer state store (`layer/{id}/{scope_key}/notes`) and rehydrate like any layer's state. Recall
/// runs once per `call_model` step, so a note written during a step shows from the next step on.
///
/// Default scope: [`LayerScope::Execution`] (the context's id). Writes are read-modify-write: tool
/// calls running concurrently (`tool_concurrency` > 1) may lose a note.
///
/// # Examples
/// ```
/// use noetic_core::layer::builtin::ScratchpadLayer;
/// let pad = ScratchpadLayer::new();
/// let tool = pad.tool();
/// assert_eq!(tool.name(), "scratchpad_write");
/// ```
#[derive(Debug, Clone)]
pub struct ScratchpadLayer {
    id: String,
    scope: LayerScope,
}

impl Default for ScratchpadLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl ScratchpadLayer {
    /// A scratchpad with id `scratchpad` (slot 100) in execution scope.
    pub fn new() -> Self {
        ScratchpadLayer {
            id: "scratchpad".to_owned(),
            scope: LayerScope::Execution,
        }
    }

    /// Sets the layer's id (its state namespace); take the tool from [`ScratchpadLayer::tool`] after.
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = id.into();
        self
    }

    /// Sets the scope the notes are kept in; take the tool from [`ScratchpadLayer::tool`] after.
    pub fn with_scope(mut self, scope: LayerScope) -> Self {
        self.scope = scope;
        self
    }

    /// The `scratchpad_write` tool that appends a note to this layer's state.
    pub fn tool(&self) -> Tool {
        let id = self.id.clone();
        let scope = self.scope;
        Tool::new(
            SCRATCHPAD_TOOL,
            "Write a note to your scratchpad; you will see your notes in later requests.",
            move |args: NoteArgs, tool_ctx: ToolContext| {
                let id = id.clone();
                async move {
                    append_note(&tool_ctx.ctx, &id, scope, args.note)
                        .await
                        .map_err(|error| ToolError::new(error.to_string()))?;
                    Ok("noted".to_owned())
                }
            },
        )
    }

    /// The notes stored on `ctx` for this layer.
    ///
    /// # Errors
    /// [`crate::Error::Storage`] when the storage adapter fails or the stored value is not a list.
    pub async fn notes(&self, ctx: &Context) -> Result<Vec<String>> {
        read_notes(LayerCtx::new(ctx, &self.id), self.scope).await
    }
}

/// The `scratchpad_write` tool for a layer built with [`ScratchpadLayer::new`] (id `scratchpad`,
/// execution scope).
pub fn scratchpad_tool() -> Tool {
    ScratchpadLayer::new().tool()
}

/// The arguments of `scratchpad_write`.
#[derive(Debug, Deserialize, JsonSchema)]
struct NoteArgs {
    /// The note to keep.
    note: String,
}

async fn read_notes(ctx: LayerCtx<'_>, scope: LayerScope) -> Result<Vec<String>> {
    Ok(ctx
        .state_get::<Vec<String>>(scope, NOTES_KEY)
        .await?
        .unwrap_or_default())
}

async fn append_note(ctx: &Context, id: &str, scope: LayerScope, note: String) -> Result<()> {
    let layer_ctx = LayerCtx::new(ctx, id);
    let mut notes = read_notes(layer_ctx, scope).await?;
    notes.push(note);
    layer_ctx.state_set(scope, NOTES_KEY, &notes).await
}

impl ContextLayer for ScratchpadLayer {
    fn id(&self) -> &str {
        &self.id
    }

    fn slot(&self) -> i32 {
        100
    }

    fn band(&self) -> Band {
        Band::BeforeHistory
    }

    fn recall<'a>(
        &'a self,
        ctx: LayerCtx<'a>,
        _query: &'a str,
    ) -> BoxFuture<'a, Result<Option<RecallLayerOutput>>> {
        Box::pin(async move {
            let notes = read_notes(ctx, self.scope).await?;
            if notes.is_empty() {
                return Ok(None);
            }
            let mut text = String::from("Scratchpad notes:");
            for note in &notes {
                text.push_str("\n- ");
                text.push_str(note);
            }
            Ok(Some(RecallLayerOutput::text(self.id.clone(), text)))
        })
    }
}
