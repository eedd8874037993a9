//! AG-UI 1.0 events (our own serde types: `type` in SCREAMING_SNAKE_CASE, camelCase fields) and one
//! turn's bus events translated to them: a step per model call, a text message per output message,
//! a reasoning span per reasoning item, a tool call per function call (its result when it ran), and
//! the noetic events with no AG-UI counterpart as `CUSTOM {name: "noetic.<type>", value}`. The run's
//! start and end (`RUN_STARTED`, `RUN_FINISHED`, `RUN_ERROR`) are the wire's (`run.rs`).

use std::collections::{HashMap, HashSet};

use noetic_core::item::Item;
use noetic_core::{ApprovalRequest, FrameworkEvent, ResponseEvent, StreamEvent};
use serde::Serialize;
use serde_json::{Value, json};

use crate::follow::{Open, event_data};

/// One AG-UI event.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(
    tag = "type",
    rename_all = "SCREAMING_SNAKE_CASE",
    rename_all_fields = "camelCase"
)]
pub(crate) enum Event {
    RunStarted {
        thread_id: String,
        run_id: String,
        /// `{"turnId"}`: the noetic turn the run follows (`{}` when it found none).
        metadata: Value,
    },
    RunFinished {
        thread_id: String,
        run_id: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        outcome: Option<Outcome>,
    },
    RunError {
        message: String,
        code: String,
    },
    StepStarted {
        step_name: String,
    },
    StepFinished {
        step_name: String,
    },
    TextMessageStart {
        message_id: String,
        role: &'static str,
    },
    TextMessageContent {
        message_id: String,
        delta: String,
    },
    TextMessageEnd {
        message_id: String,
    },
    ReasoningStart {
        message_id: String,
    },
    ReasoningMessageStart {
        message_id: String,
        role: &'static str,
    },
    ReasoningMessageContent {
        message_id: String,
        delta: String,
    },
    ReasoningMessageEnd {
        message_id: String,
    },
    ReasoningEnd {
        message_id: String,
    },
    ToolCallStart {
        tool_call_id: String,
        tool_call_name: String,
    },
    ToolCallArgs {
        tool_call_id: String,
        delta: String,
    },
    ToolCallEnd {
        tool_call_id: String,
    },
    ToolCallResult {
        message_id: String,
        tool_call_id: String,
        content: String,
        role: &'static str,
    },
    Custom {
        name: String,
        value: Value,
    },
}

/// Why a run ended (`RUN_FINISHED.outcome`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Outcome {
    Success,
    Interrupt { interrupts: Vec<Interrupt> },
    Cancelled,
}

/// A tool call waiting for a person's approval, as an AG-UI interrupt.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Interrupt {
    /// The approval id: what `resume[].interruptId` answers.
    id: String,
    /// `tool_call`.
    reason: &'static str,
    message: String,
    tool_call_id: String,
    /// `{approved: boolean, reason?: string, always?: boolean}`.
    response_schema: Value,
    /// `{toolName, arguments}`.
    metadata: Value,
}

impl Interrupt {
    pub(crate) fn approval(request: &ApprovalRequest) -> Self {
        Interrupt {
            id: request.approval_id.clone(),
            reason: "tool_call",
            message: format!("Approve the call of `{}`?", request.tool),
            tool_call_id: request.call_id.clone(),
            response_schema: json!({
                "type": "object",
                "properties": {
                    "approved": {"type": "boolean"},
                    "reason": {"type": "string"},
                    "always": {"type": "boolean"},
                },
                "required": ["approved"],
            }),
            metadata: json!({"toolName": request.tool, "arguments": request.arguments}),
        }
    }
}

/// An event as an SSE frame.
pub(crate) fn frame(event: &Event) -> String {
    let json = serde_json::to_string(event).unwrap_or_else(|error| {
        json!({"type": "RUN_ERROR", "message": error.to_string(), "code": "INTERNAL"}).to_string()
    });
    format!("data: {json}\n\n")
}

/// The translation state of one turn.
#[derive(Default)]
pub(crate) struct Translator {
    /// The turn: message ids are `<turn>-text-<call>-<index>`, unique within the thread.
    turn: String,
    /// Model calls started so far.
    calls: u32,
    /// The open step's name.
    step: Option<String>,
    /// The items of the model call in progress.
    items: HashMap<u32, Open>,
    /// Calls started (`TOOL_CALL_START` sent).
    started: HashSet<String>,
    /// Calls with arguments sent.
    with_args: HashSet<String>,
    /// Calls started and not ended, in the order they started.
    open_calls: Vec<String>,
}

impl Translator {
    /// A fresh translation of `turn`, at its start.
    pub(crate) fn new(turn: &str) -> Self {
        Translator {
            turn: turn.to_owned(),
            ..Self::default()
        }
    }

    /// Ends every open text message, reasoning span, tool call and step (before a run ends).
    pub(crate) fn close_all(&mut self, out: &mut Vec<Event>) {
        self.close_parts(out);
        for call in std::mem::take(&mut self.open_calls) {
            out.push(Event::ToolCallEnd { tool_call_id: call });
        }
        self.finish_step(out);
    }

    fn close_parts(&mut self, out: &mut Vec<Event>) {
        let mut open: Vec<(u32, Open)> = self.items.drain().collect();
        open.sort_by_key(|(index, _)| *index);
        for (_, item) in open {
            match item {
                Open::Text { id, started: true } => {
                    out.push(Event::TextMessageEnd { message_id: id });
                }
                Open::Reasoning { id, started: true } => end_reasoning(id, out),
                _ => {}
            }
        }
    }

    fn finish_step(&mut self, out: &mut Vec<Event>) {
        if let Some(step_name) = self.step.take() {
            out.push(Event::StepFinished { step_name });
        }
    }

    /// The events of one bus event of the turn (turn start and end excepted).
    pub(crate) fn event(&mut self, event: &StreamEvent, harness: &str, out: &mut Vec<Event>) {
        match event {
            StreamEvent::Sdk(event) => self.sdk(event, out),
            StreamEvent::Framework(event) => self.framework(event, harness, out),
            StreamEvent::Lagged { skipped } => {
                out.push(custom("lagged", json!({"skipped": skipped})))
            }
            _ => {}
        }
    }

    fn sdk(&mut self, event: &ResponseEvent, out: &mut Vec<Event>) {
        match event {
            ResponseEvent::OutputItemAdded { output_index, item } => {
                self.item_added(*output_index, item, out);
            }
            ResponseEvent::OutputTextDelta {
                output_index,
                delta,
                ..
            } if !delta.is_empty() => {
                if let Some(id) = self.text_part(*output_index, false, out) {
                    out.push(Event::TextMessageContent {
                        message_id: id,
                        delta: delta.clone(),
                    });
                }
            }
            ResponseEvent::ReasoningDelta {
                output_index,
                delta,
                ..
            } if !delta.is_empty() => {
                if let Some(id) = self.text_part(*output_index, true, out) {
                    out.push(Event::ReasoningMessageContent {
                        message_id: id,
                        delta: delta.clone(),
                    });
                }
            }
            ResponseEvent::FunctionCallArgumentsDelta {
                output_index,
                delta,
            } if !delta.is_empty() => {
                if let Some(Open::Call { call_id, .. }) = self.items.get(output_index)
                    && self.open_calls.contains(call_id)
                {
                    self.with_args.insert(call_id.clone());
                    out.push(Event::ToolCallArgs {
                        tool_call_id: call_id.clone(),
                        delta: delta.clone(),
                    });
                }
            }
            ResponseEvent::FunctionCallArgumentsDone {
                output_index,
                arguments,
            } => {
                if let Some(Open::Call { call_id, name }) = self.items.get(output_index) {
                    let (call_id, name) = (call_id.clone(), name.clone());
                    if !call_id.is_empty() {
                        self.end_call(&call_id, &name, arguments, out);
                    }
                }
            }
            ResponseEvent::OutputItemDone { output_index, item } => {
                self.item_done(*output_index, item, out);
            }
            _ => {}
        }
    }

    fn item_added(&mut self, index: u32, item: &Item, out: &mut Vec<Event>) {
        // An item still open at this index (its `done` was missed) ends first.
        match self.items.remove(&index) {
            Some(Open::Text { id, started: true }) => {
                out.push(Event::TextMessageEnd { message_id: id });
            }
            Some(Open::Reasoning { id, started: true }) => end_reasoning(id, out),
            _ => {}
        }
        let open = match item {
            Item::Message(_) => Open::Text {
                id: self.part_id("text", index),
                started: false,
            },
            Item::Reasoning(_) => Open::Reasoning {
                id: self.part_id("reasoning", index),
                started: false,
            },
            Item::FunctionCall(call) => {
                if !call.call_id.is_empty() {
                    self.start_call(&call.call_id, &call.name, out);
                }
                Open::Call {
                    call_id: call.call_id.clone(),
                    name: call.name.clone(),
                }
            }
            _ => Open::Other,
        };
        self.items.insert(index, open);
    }

    fn part_id(&self, kind: &str, index: u32) -> String {
        format!("{}-{kind}-{}-{index}", self.turn, self.calls)
    }

    /// The id of the text message (or reasoning span) of output item `index`, opening it (and the
    /// item, when its `added` event was missed) first; `None` when the item is of another kind.
    fn text_part(&mut self, index: u32, reasoning: bool, out: &mut Vec<Event>) -> Option<String> {
        let kind = if reasoning { "reasoning" } else { "text" };
        let fresh = self.part_id(kind, index);
        let open = self.items.entry(index).or_insert_with(|| {
            if reasoning {
                Open::Reasoning {
                    id: fresh,
                    started: false,
                }
            } else {
                Open::Text {
                    id: fresh,
                    started: false,
                }
            }
        });
        match open {
            Open::Text { id, started } if !reasoning => {
                if !std::mem::replace(started, true) {
                    out.push(Event::TextMessageStart {
                        message_id: id.clone(),
                        role: "assistant",
                    });
                }
                Some(id.clone())
            }
            Open::Reasoning { id, started } if reasoning => {
                if !std::mem::replace(started, true) {
                    out.push(Event::ReasoningStart {
                        message_id: id.clone(),
                    });
                    out.push(Event::ReasoningMessageStart {
                        message_id: id.clone(),
                        role: "reasoning",
                    });
                }
                Some(id.clone())
            }
            _ => None,
        }
    }

    fn item_done(&mut self, index: u32, item: &Item, out: &mut Vec<Event>) {
        let open = self.items.remove(&index);
        match (item, open) {
            (_, Some(Open::Text { id, started: true })) => {
                out.push(Event::TextMessageEnd { message_id: id });
            }
            (_, Some(Open::Reasoning { id, started: true })) => end_reasoning(id, out),
            // A message whose text came with no delta (or whose deltas were missed): all at once.
            (Item::Message(message), None | Some(Open::Text { .. })) => {
                let text = message.text();
                if !text.is_empty() {
                    let id = self.part_id("text", index);
                    out.push(Event::TextMessageStart {
                        message_id: id.clone(),
                        role: "assistant",
                    });
                    out.push(Event::TextMessageContent {
                        message_id: id.clone(),
                        delta: text,
                    });
                    out.push(Event::TextMessageEnd { message_id: id });
                }
            }
            (Item::FunctionCall(call), _) if !call.call_id.is_empty() => {
                self.end_call(&call.call_id, &call.name, &call.arguments, out);
            }
            _ => {}
        }
    }

    /// `TOOL_CALL_START` for a call not started yet.
    fn start_call(&mut self, call_id: &str, name: &str, out: &mut Vec<Event>) {
        if self.started.insert(call_id.to_owned()) {
            self.open_calls.push(call_id.to_owned());
            out.push(Event::ToolCallStart {
                tool_call_id: call_id.to_owned(),
                tool_call_name: name.to_owned(),
            });
        }
    }

    /// `TOOL_CALL_END` for a call not ended yet (started first, and its arguments sent whole when
    /// none were streamed).
    fn end_call(&mut self, call_id: &str, name: &str, arguments: &str, out: &mut Vec<Event>) {
        self.start_call(call_id, name, out);
        let Some(at) = self.open_calls.iter().position(|open| open == call_id) else {
            return;
        };
        if self.with_args.insert(call_id.to_owned()) && !arguments.is_empty() {
            out.push(Event::ToolCallArgs {
                tool_call_id: call_id.to_owned(),
                delta: arguments.to_owned(),
            });
        }
        self.open_calls.remove(at);
        out.push(Event::ToolCallEnd {
            tool_call_id: call_id.to_owned(),
        });
    }

    fn framework(&mut self, event: &FrameworkEvent, harness: &str, out: &mut Vec<Event>) {
        match event {
            FrameworkEvent::ModelCallStarted { .. } => {
                self.close_parts(out);
                self.finish_step(out);
                self.calls += 1;
                let step_name = format!("model_call_{}", self.calls);
                self.step = Some(step_name.clone());
                out.push(Event::StepStarted { step_name });
            }
            // Its text and reasoning are complete; its calls were ended with their items.
            FrameworkEvent::ModelCallCompleted { .. } => {
                self.close_parts(out);
                self.finish_step(out);
            }
            FrameworkEvent::ModelCallFailed { .. } => {
                self.close_parts(out);
                self.finish_step(out);
                out.push(custom(event.event_type(), event_data(event, harness)));
            }
            // The interrupt that ends the run carries the request; the call itself is complete.
            FrameworkEvent::ApprovalRequested {
                call_id,
                tool,
                arguments,
                ..
            } => self.end_call(call_id, tool, &arguments.to_string(), out),
            FrameworkEvent::ToolCallCompleted {
                name,
                call_id,
                output,
                ..
            } => {
                self.end_call(call_id, name, "", out);
                out.push(Event::ToolCallResult {
                    message_id: format!("{}-result-{call_id}", self.turn),
                    tool_call_id: call_id.clone(),
                    content: output.clone(),
                    role: "tool",
                });
            }
            // Carried by the events themselves, or by the wire (the run's start and end).
            FrameworkEvent::TurnStarted { .. }
            | FrameworkEvent::TurnCompleted { .. }
            | FrameworkEvent::TurnAborted { .. }
            | FrameworkEvent::ItemAppended { .. } => {}
            other => out.push(custom(other.event_type(), event_data(other, harness))),
        }
    }
}

fn end_reasoning(id: String, out: &mut Vec<Event>) {
    out.push(Event::ReasoningMessageEnd {
        message_id: id.clone(),
    });
    out.push(Event::ReasoningEnd { message_id: id });
}

/// A noetic event with no AG-UI counterpart.
pub(crate) fn custom(kind: &str, value: Value) -> Event {
    Event::Custom {
        name: format!("noetic.{kind}"),
        value,
    }
}

#[cfg(test)]
mod tests {
    use noetic_core::model::ReasoningKind;

    use super::*;

    fn kinds(events: &[Event]) -> Vec<String> {
        events
            .iter()
            .map(|event| serde_json::to_value(event).unwrap()["type"].to_string())
            .map(|kind| kind.trim_matches('"').to_owned())
            .collect()
    }

    fn model_call() -> StreamEvent {
        StreamEvent::Framework(FrameworkEvent::ModelCallStarted {
            round: 0,
            message_count: 1,
            tool_count: 0,
            recovery_continuation: false,
        })
    }

    #[test]
    fn reasoning_is_a_span_with_one_message_and_everything_open_closes_at_the_end() {
        let mut translator = Translator::new("turn");
        let mut out = Vec::new();
        for event in [
            model_call(),
            StreamEvent::Sdk(ResponseEvent::ReasoningDelta {
                kind: ReasoningKind::Summary,
                output_index: 0,
                part_index: 0,
                delta: "hmm".to_owned(),
            }),
            StreamEvent::Sdk(ResponseEvent::OutputTextDelta {
                output_index: 1,
                content_index: 0,
                delta: "cut".to_owned(),
            }),
            StreamEvent::Sdk(ResponseEvent::FunctionCallArgumentsDone {
                output_index: 2,
                arguments: "{}".to_owned(),
            }),
        ] {
            translator.event(&event, "agent", &mut out);
        }
        translator.start_call("c", "echo", &mut out);
        translator.close_all(&mut out);
        translator.close_all(&mut out);
        assert_eq!(
            kinds(&out),
            [
                "STEP_STARTED",
                "REASONING_START",
                "REASONING_MESSAGE_START",
                "REASONING_MESSAGE_CONTENT",
                "TEXT_MESSAGE_START",
                "TEXT_MESSAGE_CONTENT",
                "TOOL_CALL_START",
                "REASONING_MESSAGE_END",
                "REASONING_END",
                "TEXT_MESSAGE_END",
                "TOOL_CALL_END",
                "STEP_FINISHED"
            ]
        );
        let json = serde_json::to_value(&out[2]).unwrap();
        assert_eq!(
            json,
            json!({"type": "REASONING_MESSAGE_START", "messageId": "turn-reasoning-1-0", "role": "reasoning"})
        );
    }

    #[test]
    fn a_call_without_streamed_arguments_sends_them_whole_and_events_serialize_as_ag_ui() {
        let mut translator = Translator::new("t");
        let mut out = Vec::new();
        let call = StreamEvent::Framework(FrameworkEvent::ApprovalRequested {
            approval_id: "ap".to_owned(),
            call_id: "c".to_owned(),
            tool: "echo".to_owned(),
            arguments: json!({"text": "x"}),
        });
        translator.event(&call, "agent", &mut out);
        translator.event(
            &StreamEvent::Framework(FrameworkEvent::ToolRoundStarted {
                round: 0,
                tool_count: 1,
            }),
            "agent",
            &mut out,
        );
        let out: Vec<Value> = out
            .iter()
            .map(|event| serde_json::to_value(event).unwrap())
            .collect();
        assert_eq!(
            out,
            [
                json!({"type": "TOOL_CALL_START", "toolCallId": "c", "toolCallName": "echo"}),
                json!({"type": "TOOL_CALL_ARGS", "toolCallId": "c", "delta": "{\"text\":\"x\"}"}),
                json!({"type": "TOOL_CALL_END", "toolCallId": "c"}),
                json!({"type": "CUSTOM", "name": "noetic.tool_round_started", "value": {"round": 0, "tool_count": 1}}),
            ]
        );
        let finished = Event::RunFinished {
            thread_id: "th".to_owned(),
            run_id: "r".to_owned(),
            outcome: Some(Outcome::Cancelled),
        };
        assert_eq!(
            frame(&finished),
            "data: {\"type\":\"RUN_FINISHED\",\"threadId\":\"th\",\"runId\":\"r\",\"outcome\":{\"type\":\"cancelled\"}}\n\n"
        );
    }
}
