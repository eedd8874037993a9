//! One turn's bus events as AI SDK UI message stream chunks (the v6 chunk set): text and reasoning
//! parts per output item, tool parts per call, a step per model call, and the noetic events with no
//! counterpart as transient `data-noetic-<type>` parts. The turn's start and end (`start`, `finish`,
//! `abort`, `error`) are the driver's (`stream.rs`): which turn is the response's is its business.

use std::collections::{HashMap, HashSet};

use noetic_core::item::Item;
use noetic_core::{FrameworkEvent, ResponseEvent, StreamEvent};
use serde_json::{Value, json};

use crate::follow::{Open, event_data};

/// The translation state of one turn.
#[derive(Default)]
pub(crate) struct Translator {
    /// Model calls started so far: part ids are `text-<call>-<index>`, unique within the turn.
    calls: u32,
    /// Whether a step is open (`start-step` sent, `finish-step` not yet).
    in_step: bool,
    /// The items of the model call in progress.
    items: HashMap<u32, Open>,
    /// Calls with a tool part (`tool-input-start` sent).
    announced: HashSet<String>,
    /// Calls whose input is complete (`tool-input-available` sent).
    available: HashSet<String>,
    /// Calls a person rejected: their part stays `output-denied`.
    denied: HashSet<String>,
}

/// A chunk with its `type`.
fn chunk(kind: &str, fields: Value) -> Value {
    let mut chunk = json!({"type": kind});
    if let (Some(target), Value::Object(fields)) = (chunk.as_object_mut(), fields) {
        target.extend(fields);
    }
    chunk
}

/// A transient `data-noetic-<kind>` part carrying `data`.
pub(crate) fn data_part(kind: &str, data: Value) -> Value {
    json!({"type": format!("data-noetic-{kind}"), "data": data, "transient": true})
}

/// A call's arguments as the tool part's input: the JSON they are, or their text when they are not
/// JSON (the tool's own error then says so).
fn input_of(arguments: &str) -> Value {
    if arguments.trim().is_empty() {
        return json!({});
    }
    serde_json::from_str(arguments).unwrap_or_else(|_| Value::String(arguments.to_owned()))
}

impl Translator {
    /// A fresh translation, at the start of a turn.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Ends the open text and reasoning parts (before a turn's end, or a response's).
    pub(crate) fn close_parts(&mut self, out: &mut Vec<Value>) {
        let mut open: Vec<(u32, Open)> = self.items.drain().collect();
        open.sort_by_key(|(index, _)| *index);
        for (_, item) in open {
            match item {
                Open::Text { id, started: true } => out.push(chunk("text-end", json!({"id": id}))),
                Open::Reasoning { id, started: true } => {
                    out.push(chunk("reasoning-end", json!({"id": id})));
                }
                _ => {}
            }
        }
    }

    /// Ends the open step, if any.
    pub(crate) fn finish_step(&mut self, out: &mut Vec<Value>) {
        if std::mem::take(&mut self.in_step) {
            out.push(chunk("finish-step", json!({})));
        }
    }

    /// The chunks of one bus event of the turn (turn start and end excepted).
    pub(crate) fn event(&mut self, event: &StreamEvent, harness: &str, out: &mut Vec<Value>) {
        match event {
            StreamEvent::Sdk(event) => self.sdk(event, out),
            StreamEvent::Framework(event) => self.framework(event, event_data(event, harness), out),
            StreamEvent::Lagged { skipped } => {
                out.push(data_part("lagged", json!({"skipped": skipped})));
            }
            _ => {}
        }
    }

    fn sdk(&mut self, event: &ResponseEvent, out: &mut Vec<Value>) {
        match event {
            ResponseEvent::OutputItemAdded { output_index, item } => {
                self.item_added(*output_index, item, out);
            }
            ResponseEvent::OutputTextDelta {
                output_index,
                delta,
                ..
            } => {
                if let Some(id) = self.text_part(*output_index, false, out) {
                    out.push(chunk("text-delta", json!({"id": id, "delta": delta})));
                }
            }
            ResponseEvent::ReasoningDelta {
                output_index,
                delta,
                ..
            } => {
                if let Some(id) = self.text_part(*output_index, true, out) {
                    out.push(chunk("reasoning-delta", json!({"id": id, "delta": delta})));
                }
            }
            ResponseEvent::FunctionCallArgumentsDelta {
                output_index,
                delta,
            } => {
                if let Some(Open::Call { call_id, .. }) = self.items.get(output_index)
                    && self.announced.contains(call_id)
                    && !self.available.contains(call_id)
                {
                    out.push(chunk(
                        "tool-input-delta",
                        json!({"toolCallId": call_id, "inputTextDelta": delta}),
                    ));
                }
            }
            ResponseEvent::FunctionCallArgumentsDone {
                output_index,
                arguments,
            } => {
                if let Some(Open::Call { call_id, name }) = self.items.get(output_index) {
                    let (call_id, name) = (call_id.clone(), name.clone());
                    if !call_id.is_empty() {
                        self.input_available(&call_id, &name, input_of(arguments), out);
                    }
                }
            }
            ResponseEvent::OutputItemDone { output_index, item } => {
                self.item_done(*output_index, item, out);
            }
            _ => {}
        }
    }

    fn item_added(&mut self, index: u32, item: &Item, out: &mut Vec<Value>) {
        let open = match item {
            Item::Message(_) => Open::Text {
                id: format!("text-{}-{index}", self.calls),
                started: false,
            },
            Item::Reasoning(_) => Open::Reasoning {
                id: format!("reasoning-{}-{index}", self.calls),
                started: false,
            },
            Item::FunctionCall(call) => {
                if !call.call_id.is_empty() {
                    self.announce(&call.call_id, &call.name, out);
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

    /// The id of the text (or reasoning) part of output item `index`, opening it (and the item, when
    /// its `added` event was missed) first; `None` when the item is of another kind.
    fn text_part(&mut self, index: u32, reasoning: bool, out: &mut Vec<Value>) -> Option<String> {
        let calls = self.calls;
        let open = self.items.entry(index).or_insert_with(|| {
            if reasoning {
                Open::Reasoning {
                    id: format!("reasoning-{calls}-{index}"),
                    started: false,
                }
            } else {
                Open::Text {
                    id: format!("text-{calls}-{index}"),
                    started: false,
                }
            }
        });
        match open {
            Open::Text { id, started } if !reasoning => {
                if !std::mem::replace(started, true) {
                    out.push(chunk("text-start", json!({"id": id})));
                }
                Some(id.clone())
            }
            Open::Reasoning { id, started } if reasoning => {
                if !std::mem::replace(started, true) {
                    out.push(chunk("reasoning-start", json!({"id": id})));
                }
                Some(id.clone())
            }
            _ => None,
        }
    }

    fn item_done(&mut self, index: u32, item: &Item, out: &mut Vec<Value>) {
        let open = self.items.remove(&index);
        match (item, open) {
            (_, Some(Open::Text { id, started: true })) => {
                out.push(chunk("text-end", json!({"id": id})));
            }
            (_, Some(Open::Reasoning { id, started: true })) => {
                out.push(chunk("reasoning-end", json!({"id": id})));
            }
            // A message whose text came with no delta (or whose deltas were missed): all at once.
            (Item::Message(message), None | Some(Open::Text { .. })) => {
                let text = message.text();
                if !text.is_empty() {
                    let id = format!("text-{}-{index}", self.calls);
                    out.push(chunk("text-start", json!({"id": id})));
                    out.push(chunk("text-delta", json!({"id": id, "delta": text})));
                    out.push(chunk("text-end", json!({"id": id})));
                }
            }
            (Item::FunctionCall(call), _) if !call.call_id.is_empty() => {
                self.input_available(&call.call_id, &call.name, input_of(&call.arguments), out);
            }
            _ => {}
        }
    }

    /// `tool-input-start` for a call not announced yet.
    fn announce(&mut self, call_id: &str, name: &str, out: &mut Vec<Value>) {
        if self.announced.insert(call_id.to_owned()) {
            out.push(chunk(
                "tool-input-start",
                json!({"toolCallId": call_id, "toolName": name}),
            ));
        }
    }

    /// `tool-input-available` for a call whose input is not yet (announcing it first if needed).
    fn input_available(&mut self, call_id: &str, name: &str, input: Value, out: &mut Vec<Value>) {
        self.announce(call_id, name, out);
        if self.available.insert(call_id.to_owned()) {
            out.push(chunk(
                "tool-input-available",
                json!({"toolCallId": call_id, "toolName": name, "input": input}),
            ));
        }
    }

    fn framework(&mut self, event: &FrameworkEvent, data: Value, out: &mut Vec<Value>) {
        match event {
            FrameworkEvent::ModelCallStarted { .. } => {
                self.close_parts(out);
                self.finish_step(out);
                self.calls += 1;
                self.in_step = true;
                out.push(chunk("start-step", json!({})));
            }
            // Its text and reasoning parts are complete; the step goes on with its tool calls.
            FrameworkEvent::ModelCallCompleted { .. } => self.close_parts(out),
            FrameworkEvent::ModelCallFailed { .. } => {
                self.close_parts(out);
                out.push(data_part(event.event_type(), data));
            }
            FrameworkEvent::ApprovalRequested {
                approval_id,
                call_id,
                tool,
                arguments,
            } => {
                self.input_available(call_id, tool, arguments.clone(), out);
                out.push(chunk(
                    "tool-approval-request",
                    json!({"approvalId": approval_id, "toolCallId": call_id}),
                ));
            }
            FrameworkEvent::ApprovalDecided {
                call_id, approved, ..
            } => {
                if !approved && self.announced.contains(call_id) {
                    self.denied.insert(call_id.clone());
                    out.push(chunk("tool-output-denied", json!({"toolCallId": call_id})));
                }
            }
            FrameworkEvent::ToolCallCompleted {
                name,
                call_id,
                error,
                output,
            } => {
                // A rejected call's output is the rejection: its part stays denied.
                if self.denied.contains(call_id) {
                    return;
                }
                self.input_available(call_id, name, Value::Null, out);
                if *error {
                    out.push(chunk(
                        "tool-output-error",
                        json!({"toolCallId": call_id, "errorText": output}),
                    ));
                } else {
                    out.push(chunk(
                        "tool-output-available",
                        json!({"toolCallId": call_id, "output": output}),
                    ));
                }
            }
            // Carried by the parts themselves, or by the driver (the turn's start and end).
            FrameworkEvent::TurnStarted { .. }
            | FrameworkEvent::TurnCompleted { .. }
            | FrameworkEvent::TurnAborted { .. }
            | FrameworkEvent::ItemAppended { .. } => {}
            other => out.push(data_part(other.event_type(), data)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn types(chunks: &[Value]) -> Vec<&str> {
        chunks
            .iter()
            .map(|chunk| chunk["type"].as_str().unwrap_or(""))
            .collect()
    }

    fn feed(translator: &mut Translator, events: Vec<StreamEvent>) -> Vec<Value> {
        let mut out = Vec::new();
        for event in events {
            translator.event(&event, "agent", &mut out);
        }
        out
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
    fn a_message_whose_text_comes_whole_is_one_text_part() {
        let mut translator = Translator::new();
        let out = feed(
            &mut translator,
            vec![
                model_call(),
                StreamEvent::Sdk(ResponseEvent::OutputItemDone {
                    output_index: 0,
                    item: Item::assistant_text("whole"),
                }),
            ],
        );
        assert_eq!(
            types(&out),
            ["start-step", "text-start", "text-delta", "text-end"]
        );
        assert_eq!(out[2]["delta"], "whole");
        assert_eq!(out[1]["id"], "text-1-0");
    }

    #[test]
    fn open_parts_close_and_the_step_finishes_once() {
        let mut translator = Translator::new();
        let mut out = feed(
            &mut translator,
            vec![
                model_call(),
                StreamEvent::Sdk(ResponseEvent::ReasoningDelta {
                    kind: noetic_core::model::ReasoningKind::Summary,
                    output_index: 0,
                    part_index: 0,
                    delta: "hmm".to_owned(),
                }),
                StreamEvent::Sdk(ResponseEvent::OutputTextDelta {
                    output_index: 1,
                    content_index: 0,
                    delta: "cut".to_owned(),
                }),
            ],
        );
        translator.close_parts(&mut out);
        translator.finish_step(&mut out);
        translator.finish_step(&mut out);
        assert_eq!(
            types(&out),
            [
                "start-step",
                "reasoning-start",
                "reasoning-delta",
                "text-start",
                "text-delta",
                "reasoning-end",
                "text-end",
                "finish-step"
            ]
        );
    }

    #[test]
    fn a_rejected_call_stays_denied_and_other_events_are_transient_data() {
        let mut translator = Translator::new();
        let out = feed(
            &mut translator,
            vec![
                StreamEvent::Framework(FrameworkEvent::ApprovalRequested {
                    approval_id: "ap".to_owned(),
                    call_id: "c".to_owned(),
                    tool: "echo".to_owned(),
                    arguments: json!({"text": "x"}),
                }),
                StreamEvent::Framework(FrameworkEvent::ApprovalDecided {
                    approval_id: "ap".to_owned(),
                    call_id: "c".to_owned(),
                    approved: false,
                    reason: Some("no".to_owned()),
                }),
                StreamEvent::Framework(FrameworkEvent::ToolCallCompleted {
                    name: "echo".to_owned(),
                    call_id: "c".to_owned(),
                    error: true,
                    output: "Tool call rejected: no".to_owned(),
                }),
                StreamEvent::Framework(FrameworkEvent::ToolRoundStarted {
                    round: 0,
                    tool_count: 1,
                }),
                StreamEvent::Lagged { skipped: 3 },
            ],
        );
        assert_eq!(
            types(&out),
            [
                "tool-input-start",
                "tool-input-available",
                "tool-approval-request",
                "tool-output-denied",
                "data-noetic-tool_round_started",
                "data-noetic-lagged"
            ]
        );
        assert_eq!(out[1]["input"], json!({"text": "x"}));
        assert_eq!(out[4]["transient"], true);
        assert_eq!(out[4]["data"]["tool_count"], 1);
        assert_eq!(out[5]["data"]["skipped"], 3);
    }
}
