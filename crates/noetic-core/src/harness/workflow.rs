//! Running workflow documents on a harness.

use serde_json::Value;

use super::AgentHarness;
use crate::Result;
use crate::context::Context;
use crate::workflow::IntoWorkflowDocument;

impl AgentHarness {
    /// Parses a workflow document, hydrates it against the harness's [`crate::WorkflowRegistry`] (whose
    /// names win; the harness's own tools resolve the rest) and its options, and runs it with
    /// [`AgentHarness::run`] on `ctx` (layers, hooks and events included).
    ///
    /// # Errors
    /// [`crate::Error::WorkflowInvalid`] with a JSON pointer before anything runs when the document is
    /// malformed or names something unknown; otherwise the run's error.
    ///
    /// # Cancel safety
    /// As [`AgentHarness::run`]: dropping the future stops the tree at its current await point; spend
    /// already charged stays on the context.
    ///
    /// # Examples
    /// ```
    /// use noetic_core::{AgentHarness, Context, ContextOptions};
    /// use noetic_core::workflow::WorkflowRegistry;
    /// use serde_json::json;
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let registry = WorkflowRegistry::new()
    ///     .code("upper", |text: String, _: Context| async move {
    ///         Ok::<_, std::convert::Infallible>(text.to_uppercase())
    ///     });
    /// let harness = AgentHarness::builder("flows").workflow_registry(registry).build()?;
    /// let ctx = harness.create_context(ContextOptions::default());
    /// let document = r#"{ "version": 1, "root": {
    ///     "kind": "sequence", "id": "shout",
    ///     "steps": [ { "kind": "runCode", "id": "upper", "execute": "upper" } ] } }"#;
    /// let output = harness.parse_and_run_workflow(document, json!("hi"), &ctx).await?;
    /// assert_eq!(output, json!("HI"));
    /// # Ok::<(), noetic_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn parse_and_run_workflow(
        &self,
        document: impl IntoWorkflowDocument,
        input: Value,
        ctx: &Context,
    ) -> Result<Value> {
        let document = document.into_workflow_document()?;
        let step = self
            .workflow_registry()
            .hydrate_with_tools(&document, self.tools())?;
        let span = crate::telemetry::workflow_span(step.id());
        crate::telemetry::traced(span, ctx.run(&step, input)).await
    }
}
