//! `call_model`: a model call that runs its own tool rounds.
//!
//! A *round* is one provider request and its streamed response. The step runs rounds until a response
//! has no function calls: it runs the calls, appends their outputs, and asks again. See `rounds.rs` for
//! the loop and its limits, `stream.rs` for one round under the idle watchdog, `tools.rs` for tool calls.

mod durable;
mod request;
mod rounds;
mod stream;
mod tools;

pub(crate) use request::assemble_request;
pub(crate) use rounds::execute;
pub use rounds::{MAX_RECOVERIES, MAX_TOOL_ROUNDS};
pub(crate) use tools::{ABORTED_WHILE_RUNNING, until_cancelled};

use std::marker::PhantomData;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{Step, StepBody, StepNode};
use crate::connection::Need;
use crate::context::Context;
use crate::event::{FrameworkEvent, FrameworkEventKind};
use crate::model::{ModelParams, OutputFormat};
use crate::runtime::Runtime;
use crate::tool::{Tool, ToolSource, schema_for};
use tools::ToolSet;

pub(crate) struct CallModelSpec {
    pub(crate) model: String,
    pub(crate) instructions: Option<String>,
    pub(crate) tools: Vec<Tool>,
    pub(crate) provider: Option<String>,
    pub(crate) params: ModelParams,
    pub(crate) output: Option<OutputSpec>,
    pub(crate) tool_concurrency: usize,
    pub(crate) idle_timeout: Option<Duration>,
    /// The token budget of the request's conversation (layers' recall plus history), when capped.
    pub(crate) token_budget: Option<usize>,
    pub(crate) emit: EmitPolicy,
    /// Connection operations the step's tools use, checked by `run()` before the tree starts.
    pub(crate) needs: Vec<Need>,
    /// Sources whose current tools are offered after the step's own (an MCP server's).
    pub(crate) sources: Vec<Arc<dyn ToolSource>>,
    /// The step's tools and the runtime's, with their specs, built once for the runtime tools and
    /// source snapshots they were built with: a step run on one runtime copies no schema per request.
    tool_set: Mutex<Option<CachedTools>>,
}

/// A step's [`ToolSet`] and the runtime tools and source snapshots it was built with.
struct CachedTools {
    runtime_tools: Arc<[Tool]>,
    snapshots: Vec<Arc<[Tool]>>,
    set: Arc<ToolSet>,
}

impl CallModelSpec {
    /// The tools offered to the model on `runtime` now: the step's, its sources', the runtime's, the
    /// runtime's sources'. The first tool of a name wins.
    pub(crate) fn tool_set(&self, runtime: &Runtime) -> Arc<ToolSet> {
        let runtime_tools = runtime.shared_tools();
        let runtime_sources = runtime.tool_sources();
        // Without sources (the common case) nothing is collected per round.
        let snapshots: Vec<Arc<[Tool]>> = self
            .sources
            .iter()
            .chain(runtime_sources)
            .map(|source| source.tools())
            .collect();
        let mut cached = crate::sync::lock(&self.tool_set);
        if let Some(hit) = &*cached
            && Arc::ptr_eq(&hit.runtime_tools, runtime_tools)
            && hit.snapshots.len() == snapshots.len()
            && hit
                .snapshots
                .iter()
                .zip(&snapshots)
                .all(|(old, new)| Arc::ptr_eq(old, new))
        {
            return hit.set.clone();
        }
        let (step_sources, runtime_sources) = snapshots.split_at(self.sources.len());
        let groups = std::iter::once(&self.tools[..])
            .chain(step_sources.iter().map(|tools| &tools[..]))
            .chain(std::iter::once(&runtime_tools[..]))
            .chain(runtime_sources.iter().map(|tools| &tools[..]));
        let set = Arc::new(ToolSet::new(groups));
        *cached = Some(CachedTools {
            runtime_tools: runtime_tools.clone(),
            snapshots,
            set: set.clone(),
        });
        set
    }
}

/// Which of its own events a `call_model` step emits (step, model-call and tool events; items,
/// provider events and steer events always flow).
#[derive(Clone)]
pub(crate) enum EmitPolicy {
    All,
    Nothing,
    Filter(Arc<dyn Fn(FrameworkEventKind) -> bool + Send + Sync>),
}

impl EmitPolicy {
    /// Whether emitting is possible at all (a sink listens and the policy is not `Nothing`): checked
    /// before an event is even built.
    pub(crate) fn active(&self, ctx: &Context) -> bool {
        !matches!(self, EmitPolicy::Nothing) && ctx.has_event_sink()
    }

    /// Emits `event` if the policy lets its type through.
    pub(crate) fn emit(&self, ctx: &Context, event: FrameworkEvent) {
        let allowed = match self {
            EmitPolicy::All => true,
            EmitPolicy::Nothing => false,
            EmitPolicy::Filter(filter) => filter(event.kind()),
        };
        if allowed {
            ctx.emit(event);
        }
    }

    pub(crate) fn allows(&self, kind: FrameworkEventKind) -> bool {
        match self {
            EmitPolicy::All => true,
            EmitPolicy::Nothing => false,
            EmitPolicy::Filter(filter) => filter(kind),
        }
    }
}

pub(crate) struct OutputSpec {
    pub(crate) format: OutputFormat,
    /// Parses the final text into the output type and back into JSON, so a type mismatch is caught here.
    pub(crate) parse: fn(&str) -> Result<Value, String>,
}

fn parse_as<T: DeserializeOwned + serde::Serialize>(text: &str) -> Result<Value, String> {
    let typed: T = serde_json::from_str(text).map_err(|source| source.to_string())?;
    serde_json::to_value(typed).map_err(|source| source.to_string())
}

/// Builds a `call_model` step; see [`call_model`].
#[must_use = "a builder does nothing until turned into a step"]
pub struct CallModelBuilder<O = String> {
    id: String,
    spec: CallModelSpec,
    _output: PhantomData<fn() -> O>,
}

/// A model call with tools. Output: the final answer's text, or a typed value with
/// [`CallModelBuilder::output`].
///
/// Input: a string, and nothing invents user messages. A non-empty string is appended to the log as a
/// user message only when it is a *root* input — given to `run()`, returned by a loop's `prepare_next`,
/// or handed to a spawned child (its own root). A session turn's root input (the text of its messages,
/// already in the log) and a loop's output fed back to its next iteration are neither appended nor
/// sent. The output of an earlier step of a sequence or loop body is input for this step, not a
/// message from the user: it is sent with the step's requests (as user-role input after the history)
/// but never stored, and not sent at all when it is the newest assistant message of the log (the
/// previous call's answer, already there). The input is the layers' recall query in every case.
///
/// # Examples
/// ```
/// use noetic_core::call_model;
/// let answer = call_model("answer").model("openai/gpt-4o").instructions("Be brief.").build();
/// assert_eq!(answer.id(), "answer");
/// ```
pub fn call_model(id: impl Into<String>) -> CallModelBuilder<String> {
    CallModelBuilder {
        id: id.into(),
        spec: CallModelSpec {
            model: String::new(),
            instructions: None,
            tools: Vec::new(),
            provider: None,
            params: ModelParams::default(),
            output: None,
            tool_concurrency: 1,
            idle_timeout: None,
            token_budget: None,
            emit: EmitPolicy::All,
            needs: Vec::new(),
            sources: Vec::new(),
            tool_set: Mutex::new(None),
        },
        _output: PhantomData,
    }
}

impl<O> CallModelBuilder<O> {
    /// The model id (`vendor/model`).
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.spec.model = model.into();
        self
    }

    /// System instructions.
    pub fn instructions(mut self, instructions: impl Into<String>) -> Self {
        self.spec.instructions = Some(instructions.into());
        self
    }

    /// Offers a tool to the model.
    pub fn tool(mut self, tool: Tool) -> Self {
        self.spec.tools.push(tool);
        self
    }

    /// Offers several tools.
    pub fn tools(mut self, tools: impl IntoIterator<Item = Tool>) -> Self {
        self.spec.tools.extend(tools);
        self
    }

    /// Offers the current tools of `source` (an MCP server's, say) after the step's own, asking it
    /// again at every round: a list that changed reaches the next request.
    pub fn tools_from(mut self, source: impl ToolSource) -> Self {
        self.spec.sources.push(Arc::new(source));
        self
    }

    /// Uses the named provider instead of the harness default.
    pub fn provider(mut self, provider: impl Into<String>) -> Self {
        self.spec.provider = Some(provider.into());
        self
    }

    /// Sampling temperature.
    pub fn temperature(mut self, temperature: f64) -> Self {
        self.spec.params.temperature = Some(temperature);
        self
    }

    /// Nucleus sampling.
    pub fn top_p(mut self, top_p: f64) -> Self {
        self.spec.params.top_p = Some(top_p);
        self
    }

    /// Cap on output tokens per round.
    pub fn max_output_tokens(mut self, max_output_tokens: u64) -> Self {
        self.spec.params.max_output_tokens = Some(max_output_tokens);
        self
    }

    /// Extended thinking with a budget of `budget_tokens` (providers with a thinking budget:
    /// Anthropic; the others ignore it). The thinking comes back as reasoning items, replayed with
    /// their signatures.
    pub fn thinking(mut self, budget_tokens: u64) -> Self {
        self.spec.params.thinking_budget = Some(budget_tokens);
        self
    }

    /// Prompt-cache breakpoints for this step (providers that place them: Anthropic), over the
    /// provider's own setting.
    pub fn prompt_cache(mut self, cache: crate::model::PromptCache) -> Self {
        self.spec.params.prompt_cache = Some(cache);
        self
    }

    /// Whether and which tool the model must call ([`ToolChoice`](crate::model::ToolChoice)), sent
    /// with every round of the step: `Required` or `Tool` keep the model calling tools until the
    /// tool-round cap, so use them on a step meant to call one.
    pub fn tool_choice(mut self, choice: crate::model::ToolChoice) -> Self {
        self.spec.params.tool_choice = Some(choice);
        self
    }

    /// All sampling parameters at once.
    pub fn params(mut self, params: ModelParams) -> Self {
        self.spec.params = params;
        self
    }

    /// How many tool calls of one round may run at once (default 1: in the order the model emitted
    /// them). Results are recorded in call order either way.
    pub fn tool_concurrency(mut self, concurrency: usize) -> Self {
        self.spec.tool_concurrency = concurrency.max(1);
        self
    }

    /// Caps the tokens (estimated as JSON characters / 4) of what the step sends besides its
    /// instructions: each context layer first gets its `min_tokens`, the rest is shared between the
    /// layers' recall and the history, which keeps its newest items and never separates a function call
    /// from its output. See [`crate::layer::allocate_budget`]. Default: no cap.
    pub fn token_budget(mut self, tokens: usize) -> Self {
        self.spec.token_budget = Some(tokens);
        self
    }

    /// The stream idle timeout of each round (default: the harness's, 120 s).
    pub fn idle_timeout(mut self, idle_timeout: Duration) -> Self {
        self.spec.idle_timeout = Some(idle_timeout);
        self
    }

    /// Whether this step emits its step and model-loop events (default true). Item and provider events
    /// are always emitted.
    pub fn emit(mut self, emit: bool) -> Self {
        self.spec.emit = if emit {
            EmitPolicy::All
        } else {
            EmitPolicy::Nothing
        };
        self
    }

    /// Emits only this step's events whose kind passes `filter`
    /// (`|kind| kind != FrameworkEventKind::ModelCallStarted`). Items, provider events and steer events
    /// always flow.
    pub fn emit_filter(
        mut self,
        filter: impl Fn(FrameworkEventKind) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.spec.emit = EmitPolicy::Filter(Arc::new(filter));
        self
    }

    /// Asks for structured output of type `T`: the request carries `T`'s JSON Schema as the response
    /// format and the final text is parsed into `T` (`MODEL_PARSE_ERROR` with the raw text on failure).
    pub fn output<T: DeserializeOwned + serde::Serialize + JsonSchema>(
        self,
    ) -> CallModelBuilder<T> {
        let CallModelBuilder { id, mut spec, .. } = self;
        spec.output = Some(OutputSpec {
            format: OutputFormat {
                name: "output".to_owned(),
                schema: schema_for::<T>(),
            },
            parse: parse_as::<T>,
        });
        CallModelBuilder {
            id,
            spec,
            _output: PhantomData,
        }
    }

    /// Declares that the step (its tools, typically) uses `operation` of the connection named
    /// `connection`: `run()` fails with `CONNECTION_UNSATISFIED` before anything runs unless the harness
    /// has such a connection supporting it.
    pub fn requires(mut self, connection: impl Into<String>, operation: impl Into<String>) -> Self {
        self.spec.needs.push(Need::new(connection, operation));
        self
    }

    /// The finished step.
    pub fn build(self) -> Step<String, O> {
        Step::from_node(StepNode {
            id: self.id,
            body: StepBody::CallModel(Box::new(self.spec)),
        })
    }
}

impl<O> From<CallModelBuilder<O>> for Step<String, O> {
    fn from(builder: CallModelBuilder<O>) -> Self {
        builder.build()
    }
}
