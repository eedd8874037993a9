//! A scripted model provider.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use noetic_core::item::Item;
use noetic_core::model::{ModelRequest, ModelStream, ResponseSnapshot, ResponseStatus};
use noetic_core::{Error, ModelProvider, ResponseEvent, Result, TokenUsage};
use serde_json::Value;

/// A request as the scripted model received it.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    /// The model id.
    pub model: String,
    /// The instructions.
    pub instructions: Option<String>,
    /// The input items.
    pub input: Vec<Item>,
    /// The wire names of the offered tools.
    pub tools: Vec<String>,
    /// The round within its step.
    pub round: u32,
    /// The thread id.
    pub thread_id: Option<String>,
    /// The resource id.
    pub resource_id: Option<String>,
    /// Whether a structured output format was requested.
    pub has_output_format: bool,
}

impl RecordedRequest {
    /// Copies what a request carried.
    pub fn from_request(request: &ModelRequest<'_>) -> Self {
        RecordedRequest {
            model: request.model.to_owned(),
            instructions: request.instructions.map(str::to_owned),
            input: request.input.to_vec(),
            tools: request.tools.iter().map(|tool| tool.name.clone()).collect(),
            round: request.round,
            thread_id: request.thread_id.map(str::to_owned),
            resource_id: request.resource_id.map(str::to_owned),
            has_output_format: request.output.is_some(),
        }
    }

    /// The texts of the user messages in the input.
    pub fn user_texts(&self) -> Vec<String> {
        self.input
            .iter()
            .filter(|item| item.role() == Some(noetic_core::Role::User))
            .filter_map(Item::text)
            .collect()
    }

    /// The outputs of the `function_call_output` items in the input.
    pub fn tool_outputs(&self) -> Vec<String> {
        self.input
            .iter()
            .filter_map(|item| match item {
                Item::FunctionCallOutput(output) => Some(match &output.output {
                    Value::String(text) => text.clone(),
                    other => other.to_string(),
                }),
                _ => None,
            })
            .collect()
    }
}

/// One canned response: the events to stream, and whether to hang afterwards.
#[derive(Debug, Clone)]
pub struct ScriptedResponse {
    events: Vec<ResponseEvent>,
    stall: bool,
    error: Option<(Option<u16>, String)>,
}

fn usage(input: u64, output: u64) -> Option<TokenUsage> {
    Some(TokenUsage {
        input_tokens: input,
        output_tokens: output,
        ..TokenUsage::default()
    })
}

fn assistant_message(id: &str, text: &str) -> Item {
    let mut item = Item::assistant_text(text);
    if let Item::Message(message) = &mut item {
        message.id = Some(id.to_owned());
    }
    item
}

impl ScriptedResponse {
    /// A response made of these events, as given.
    pub fn events(events: Vec<ResponseEvent>) -> Self {
        ScriptedResponse {
            events,
            stall: false,
            error: None,
        }
    }

    /// A text answer streamed in deltas of about 16 characters, usage 10 in / 5 out.
    pub fn text(text: &str) -> Self {
        Self::text_in_deltas(text, 16)
    }

    /// A text answer streamed in deltas of `chunk` characters.
    pub fn text_in_deltas(text: &str, chunk: usize) -> Self {
        let opened = Item::message(noetic_core::Role::Assistant, Vec::new());
        let mut events = vec![
            ResponseEvent::Created {
                response_id: Some("resp_scripted".to_owned()),
                model: None,
            },
            ResponseEvent::OutputItemAdded {
                output_index: 0,
                item: opened,
            },
        ];
        let chars: Vec<char> = text.chars().collect();
        for piece in chars.chunks(chunk.max(1)) {
            events.push(ResponseEvent::OutputTextDelta {
                output_index: 0,
                content_index: 0,
                delta: piece.iter().collect(),
            });
        }
        events.push(ResponseEvent::OutputItemDone {
            output_index: 0,
            item: assistant_message("msg_scripted", text),
        });
        events.push(ResponseEvent::completed(usage(10, 5)));
        Self::events(events)
    }

    /// One function call, usage 10 in / 5 out.
    pub fn tool_call(call_id: &str, name: &str, arguments: Value) -> Self {
        Self::tool_calls(&[(call_id, name, arguments)])
    }

    /// Several function calls in one response, in order.
    pub fn tool_calls(calls: &[(&str, &str, Value)]) -> Self {
        let mut events = vec![ResponseEvent::Created {
            response_id: Some("resp_scripted".to_owned()),
            model: None,
        }];
        for (index, (call_id, name, arguments)) in calls.iter().enumerate() {
            let output_index = index as u32;
            let arguments = match arguments {
                Value::String(raw) => raw.clone(),
                other => other.to_string(),
            };
            events.push(ResponseEvent::OutputItemAdded {
                output_index,
                item: Item::function_call(*call_id, *name, ""),
            });
            events.push(ResponseEvent::FunctionCallArgumentsDelta {
                output_index,
                delta: arguments.clone(),
            });
            events.push(ResponseEvent::FunctionCallArgumentsDone {
                output_index,
                arguments: arguments.clone(),
            });
            events.push(ResponseEvent::OutputItemDone {
                output_index,
                item: Item::function_call(*call_id, *name, arguments),
            });
        }
        events.push(ResponseEvent::completed(usage(10, 5)));
        Self::events(events)
    }

    /// An `incomplete` response (partial text, no `.done` events), usage 10 in / 5 out.
    pub fn incomplete(reason: &str) -> Self {
        Self::events(vec![
            ResponseEvent::OutputItemAdded {
                output_index: 0,
                item: Item::message(noetic_core::Role::Assistant, Vec::new()),
            },
            ResponseEvent::OutputTextDelta {
                output_index: 0,
                content_index: 0,
                delta: "partial".to_owned(),
            },
            ResponseEvent::Finished(Box::new(ResponseSnapshot {
                status: Some(ResponseStatus::Incomplete),
                usage: usage(10, 5),
                incomplete_reason: Some(reason.to_owned()),
                ..ResponseSnapshot::default()
            })),
        ])
    }

    /// A `completed` response with no output, usage 10 in / 0 out.
    pub fn empty() -> Self {
        Self::events(vec![ResponseEvent::completed(usage(10, 0))])
    }

    /// Streams `events`, then never sends another event nor ends.
    pub fn stall_after(events: Vec<ResponseEvent>) -> Self {
        ScriptedResponse {
            events,
            stall: true,
            error: None,
        }
    }

    /// The provider refuses the request (as an HTTP error would).
    pub fn provider_error(status: Option<u16>, message: &str) -> Self {
        ScriptedResponse {
            events: Vec::new(),
            stall: false,
            error: Some((status, message.to_owned())),
        }
    }

    /// Replaces the usage (and sets the cost) reported by the terminal event.
    pub fn with_usage(mut self, usage: TokenUsage, cost: Option<f64>) -> Self {
        for event in &mut self.events {
            if let ResponseEvent::Finished(snapshot) = event {
                snapshot.usage = Some(usage);
                snapshot.cost = cost;
            }
        }
        self
    }

    /// Removes the usage from the terminal event (a provider that reports none).
    pub fn without_usage(mut self) -> Self {
        for event in &mut self.events {
            if let ResponseEvent::Finished(snapshot) = event {
                snapshot.usage = None;
                snapshot.cost = None;
            }
        }
        self
    }

    /// The events.
    pub fn into_events(self) -> Vec<ResponseEvent> {
        self.events
    }
}

type Responder = dyn Fn(&RecordedRequest) -> ScriptedResponse + Send + Sync;

#[derive(Default)]
struct State {
    queue: VecDeque<ScriptedResponse>,
    responder: Option<Arc<Responder>>,
    requests: Vec<RecordedRequest>,
}

/// A model provider that answers from a script and records its requests. Clones share the script.
#[derive(Clone, Default)]
pub struct ScriptedModel {
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for ScriptedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.lock();
        f.debug_struct("ScriptedModel")
            .field("queued", &state.queue.len())
            .field("requests", &state.requests.len())
            .finish()
    }
}

impl ScriptedModel {
    /// A model with an empty script: every request fails until responses are queued.
    pub fn new() -> Self {
        Self::default()
    }

    /// A model that answers each request in turn with `responses`.
    pub fn with_responses(responses: impl IntoIterator<Item = ScriptedResponse>) -> Self {
        let model = Self::new();
        model.lock().queue.extend(responses);
        model
    }

    /// A model that computes each answer from the request (used when the queue is empty).
    pub fn responding(
        responder: impl Fn(&RecordedRequest) -> ScriptedResponse + Send + Sync + 'static,
    ) -> Self {
        let model = Self::new();
        model.lock().responder = Some(Arc::new(responder));
        model
    }

    /// Queues another response.
    pub fn push(&self, response: ScriptedResponse) {
        self.lock().queue.push_back(response);
    }

    /// Every request received so far.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.lock().requests.clone()
    }

    /// How many requests were received.
    pub fn request_count(&self) -> usize {
        self.lock().requests.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl ModelProvider for ScriptedModel {
    fn stream<'a>(&'a self, request: &'a ModelRequest<'a>) -> BoxFuture<'a, Result<ModelStream>> {
        let recorded = RecordedRequest::from_request(request);
        let response = {
            let mut state = self.lock();
            let response = match state.queue.pop_front() {
                Some(response) => Some(response),
                None => state
                    .responder
                    .clone()
                    .map(|responder| responder(&recorded)),
            };
            state.requests.push(recorded);
            response
        };
        Box::pin(async move {
            let Some(response) = response else {
                return Err(Error::provider(
                    "scripted",
                    None,
                    "the scripted model has no response left",
                ));
            };
            if let Some((status, message)) = response.error {
                return Err(Error::provider("scripted", status, message));
            }
            let events = futures_util::stream::iter(response.events.into_iter().map(Ok));
            let events = if response.stall {
                events.chain(futures_util::stream::pending()).boxed()
            } else {
                events.boxed()
            };
            Ok(ModelStream {
                generation_id: Some("gen-scripted".to_owned()),
                events,
            })
        })
    }
}
