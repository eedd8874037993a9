//! The step as the runtime's [`AcpHost`]: what the turn streamed (messages, tool calls) kept in
//! order and turned into items at the end, events emitted as it streams, and permission requests
//! answered by the step's rules, a person, or its default.

use std::sync::Mutex;

use futures_util::future::BoxFuture;
use serde_json::{Map, Value};

use super::super::call_model::until_cancelled;
use crate::acp::{
    AcpActivity, AcpHost, AcpPermissionRequest, AcpPermissions, AcpToolCall, AcpUpdate,
    PermissionAnswer, PermissionDefault,
};
use crate::approval::{ApprovalDecision, ApprovalRequest};
use crate::context::Context;
use crate::event::{FrameworkEvent, StreamEvent};
use crate::item::{FunctionCallItem, Item};
use crate::model::{ReasoningKind, ResponseEvent};
use crate::sync::lock;

/// The thread approvals of a run outside any session are asked on.
const DEFAULT_THREAD: &str = "default";

/// What the turn has streamed so far.
#[derive(Default)]
pub(super) struct TurnState {
    /// In the order they began: messages and tool calls (by index into `messages` / `calls`).
    order: Vec<Entry>,
    messages: Vec<(Option<String>, String)>,
    calls: Vec<AcpToolCall>,
    /// The output index of the open message, for its deltas.
    open_message: Option<(usize, u32)>,
    next_output_index: u32,
    /// The reasoning block being streamed (output index).
    thought: Option<u32>,
}

#[derive(Clone, Copy)]
enum Entry {
    Message(usize),
    Call(usize),
}

impl TurnState {
    /// The agent's messages' text, concatenated in order.
    pub(super) fn final_text(&self) -> String {
        self.messages
            .iter()
            .map(|(_, text)| text.as_str())
            .collect()
    }

    /// The items of the turn: one assistant message per ACP message, a function call per tool call
    /// and an output for each call that ended (`completed` or `failed`).
    pub(super) fn items(&self) -> Vec<Item> {
        let mut items = Vec::new();
        for entry in &self.order {
            match *entry {
                Entry::Message(index) => {
                    let text = &self.messages[index].1;
                    if !text.is_empty() {
                        items.push(Item::assistant_text(text.clone()));
                    }
                }
                Entry::Call(index) => {
                    let call = &self.calls[index];
                    let name = crate::tool::wire_name(&format!(
                        "acp_{}",
                        call.kind.as_deref().unwrap_or("other")
                    ));
                    let arguments = call
                        .raw_input
                        .as_ref()
                        .map_or_else(|| "{}".to_owned(), Value::to_string);
                    let status = call.status.as_deref();
                    let mut extra = Map::new();
                    extra.insert(
                        "status".to_owned(),
                        Value::from(if matches!(status, Some("completed" | "failed")) {
                            "completed"
                        } else {
                            "incomplete"
                        }),
                    );
                    items.push(Item::FunctionCall(FunctionCallItem {
                        id: None,
                        call_id: call.id.clone(),
                        name,
                        arguments,
                        extra,
                    }));
                    match status {
                        Some("completed") => {
                            items.push(Item::function_call_output(&call.id, render(call)));
                        }
                        Some("failed") => {
                            items.push(Item::function_call_error(&call.id, render(call)));
                        }
                        _ => {}
                    }
                }
            }
        }
        items
    }
}

/// A tool call's output as text: its content blocks (text, `[diff <path>]` and the new text,
/// `[terminal <id>]`), else its raw output as JSON.
fn render(call: &AcpToolCall) -> String {
    let mut parts = Vec::new();
    for block in call.content.iter().flatten() {
        match block.get("type").and_then(Value::as_str) {
            Some("content") => {
                let content = block.get("content");
                match content
                    .and_then(|content| content.get("text"))
                    .and_then(Value::as_str)
                {
                    Some(text) => parts.push(text.to_owned()),
                    None => parts.push(content.map(Value::to_string).unwrap_or_default()),
                }
            }
            Some("diff") => {
                let path = block.get("path").and_then(Value::as_str).unwrap_or("?");
                let new = block.get("newText").and_then(Value::as_str).unwrap_or("");
                parts.push(format!("[diff {path}]\n{new}"));
            }
            Some("terminal") => {
                let id = block
                    .get("terminalId")
                    .and_then(Value::as_str)
                    .unwrap_or("?");
                parts.push(format!("[terminal {id}]"));
            }
            _ => parts.push(block.to_string()),
        }
    }
    if parts.is_empty()
        && let Some(output) = &call.raw_output
    {
        return output.to_string();
    }
    parts.join("\n")
}

/// Merges a `tool_call_update` into the call: only the fields it sets change (content replaced).
fn merge(call: &mut AcpToolCall, update: AcpToolCall) {
    let AcpToolCall {
        id: _,
        title,
        kind,
        status,
        raw_input,
        raw_output,
        content,
    } = update;
    call.title = title.or(call.title.take());
    call.kind = kind.or(call.kind.take());
    call.status = status.or(call.status.take());
    call.raw_input = raw_input.or(call.raw_input.take());
    call.raw_output = raw_output.or(call.raw_output.take());
    call.content = content.or(call.content.take());
}

fn ended(status: Option<&str>) -> bool {
    matches!(status, Some("completed" | "failed"))
}

/// The step as the runtime's [`AcpHost`].
pub(super) struct Host<'a> {
    pub(super) ctx: &'a Context,
    pub(super) step_id: &'a str,
    pub(super) agent: &'a str,
    pub(super) permissions: &'a AcpPermissions,
    pub(super) turn: Mutex<TurnState>,
}

impl Host<'_> {
    fn sdk(&self, event: ResponseEvent) {
        self.ctx.emit_stream(StreamEvent::Sdk(event));
    }

    /// A call reported (first or update): started and completed events as its status moves.
    fn call(&self, update: AcpToolCall) {
        let mut turn = lock(&self.turn);
        let known = turn.calls.iter().position(|call| call.id == update.id);
        let (index, was_ended, announce) = match known {
            Some(index) => {
                let was = ended(turn.calls[index].status.as_deref());
                merge(&mut turn.calls[index], update);
                (index, was, false)
            }
            None => {
                // An update for a call never announced is tracked all the same.
                turn.calls.push(update);
                let index = turn.calls.len() - 1;
                turn.order.push(Entry::Call(index));
                turn.open_message = None;
                turn.thought = None;
                (index, false, true)
            }
        };
        let call = turn.calls[index].clone();
        drop(turn);
        let name = call.title.clone().unwrap_or_else(|| call.id.clone());
        if announce {
            self.ctx.emit(FrameworkEvent::ToolCallStarted {
                name: name.clone(),
                call_id: call.id.clone(),
            });
        }
        if !was_ended && ended(call.status.as_deref()) {
            self.ctx.emit(FrameworkEvent::ToolCallCompleted {
                name,
                call_id: call.id.clone(),
                error: call.status.as_deref() == Some("failed"),
                output: render(&call),
            });
        }
    }

    /// The rules' verdict: `Some(allowed)` when one decides.
    fn rules(&self, request: &AcpPermissionRequest) -> Option<bool> {
        let kind = request.tool_call.kind.as_deref();
        let title = request.tool_call.title.as_deref();
        if self
            .permissions
            .deny
            .iter()
            .any(|rule| rule.matches(kind, title))
        {
            return Some(false);
        }
        if self
            .permissions
            .allow
            .iter()
            .any(|rule| rule.matches(kind, title))
        {
            return Some(true);
        }
        None
    }

    /// Asks a person; `None` when the turn is cancelled first.
    async fn ask(&self, request: &AcpPermissionRequest) -> Option<(bool, bool)> {
        let ctx = self.ctx;
        let thread = ctx.thread_id().unwrap_or(DEFAULT_THREAD).to_owned();
        let kind = request.tool_call.kind.as_deref().unwrap_or("other");
        let tool = format!("acp:{}:{kind}", self.agent);
        let approvals = ctx.runtime().approvals().clone();
        if approvals.always_approved(&thread, &tool) {
            return Some((true, true));
        }
        let approval_id = format!(
            "acp:{}:{}:{}",
            request.session_id, request.tool_call.id, request.request_id
        );
        let arguments = serde_json::json!({
            "title": request.tool_call.title,
            "kind": request.tool_call.kind,
            "rawInput": request.tool_call.raw_input,
            "options": request.options.iter().map(|option| serde_json::json!({
                "optionId": option.option_id, "name": option.name, "kind": option.kind,
            })).collect::<Vec<_>>(),
        });
        crate::telemetry::approval_requested(ctx.runtime().name(), &tool);
        let approval = ApprovalRequest {
            approval_id: approval_id.clone(),
            thread_id: thread.clone(),
            call_id: request.tool_call.id.clone(),
            tool: tool.clone(),
            arguments: arguments.clone(),
        };
        // Never kept in the durable store: the connection that asked dies with this process, so a
        // decision taken after a restart has nobody to answer (`approve` then fails with
        // APPROVAL_NOT_FOUND, and the resumed turn runs the agent again, which asks again).
        let mut waiting = approvals.ask(approval);
        ctx.emit(FrameworkEvent::ApprovalRequested {
            approval_id: approval_id.clone(),
            call_id: request.tool_call.id.clone(),
            tool: tool.clone(),
            arguments,
        });
        let decision = until_cancelled(ctx, waiting.decision()).await??;
        let always = approvals.always_approved(&thread, &tool);
        let (approved, reason) = match decision {
            ApprovalDecision::Approved => (true, None),
            ApprovalDecision::Rejected { reason } => (false, Some(reason)),
        };
        ctx.emit(FrameworkEvent::ApprovalDecided {
            approval_id,
            call_id: request.tool_call.id.clone(),
            approved,
            reason,
        });
        Some((approved, always))
    }
}

/// The option for a decision: the preferred kind, else the other of the same polarity.
fn choose(request: &AcpPermissionRequest, allow: bool, always: bool) -> PermissionAnswer {
    let (once, forever) = if allow {
        ("allow_once", "allow_always")
    } else {
        ("reject_once", "reject_always")
    };
    let preference = if always {
        [forever, once]
    } else {
        [once, forever]
    };
    preference
        .iter()
        .find_map(|kind| {
            request
                .options
                .iter()
                .find(|option| option.kind == *kind)
                .map(|option| PermissionAnswer::Selected(option.option_id.clone()))
        })
        .unwrap_or(PermissionAnswer::NoMatchingOption { allowed: allow })
}

impl AcpHost for Host<'_> {
    fn update(&self, raw: Value, update: AcpUpdate) {
        let ctx = self.ctx;
        if ctx.has_event_sink() {
            ctx.emit(FrameworkEvent::AcpUpdate {
                step_id: self.step_id.to_owned(),
                update: raw,
            });
        }
        match update {
            AcpUpdate::Message { message_id, text } => {
                let mut turn = lock(&self.turn);
                let continues = turn.open_message.is_some_and(|(index, _)| {
                    message_id.is_none() || turn.messages[index].0 == message_id
                });
                if !continues {
                    let output_index = turn.next_output_index;
                    turn.next_output_index += 1;
                    turn.messages.push((message_id, String::new()));
                    let index = turn.messages.len() - 1;
                    turn.order.push(Entry::Message(index));
                    turn.open_message = Some((index, output_index));
                }
                let Some((index, output_index)) = turn.open_message else {
                    return;
                };
                turn.messages[index].1.push_str(&text);
                turn.thought = None;
                drop(turn);
                self.sdk(ResponseEvent::OutputTextDelta {
                    output_index,
                    content_index: 0,
                    delta: text,
                });
            }
            AcpUpdate::Thought { text } => {
                let mut turn = lock(&self.turn);
                let output_index = match turn.thought {
                    Some(index) => index,
                    None => {
                        let index = turn.next_output_index;
                        turn.next_output_index += 1;
                        turn.thought = Some(index);
                        index
                    }
                };
                drop(turn);
                self.sdk(ResponseEvent::ReasoningDelta {
                    kind: ReasoningKind::Text,
                    output_index,
                    part_index: 0,
                    delta: text,
                });
            }
            AcpUpdate::ToolCall(call) | AcpUpdate::ToolCallUpdate(call) => self.call(call),
            AcpUpdate::Usage { .. } | AcpUpdate::Other => {}
        }
    }

    fn permission(&self, request: AcpPermissionRequest) -> BoxFuture<'_, PermissionAnswer> {
        Box::pin(async move {
            if self.ctx.aborted() {
                return PermissionAnswer::Cancelled;
            }
            if let Some(allowed) = self.rules(&request) {
                return choose(&request, allowed, self.permissions.persist);
            }
            if self.permissions.ask {
                return match self.ask(&request).await {
                    Some((allowed, always)) => {
                        choose(&request, allowed, always || self.permissions.persist)
                    }
                    None => PermissionAnswer::Cancelled,
                };
            }
            choose(
                &request,
                self.permissions.default == PermissionDefault::Allow,
                self.permissions.persist,
            )
        })
    }

    fn activity(&self, activity: AcpActivity) {
        let AcpActivity {
            method,
            target,
            served,
            detail,
        } = activity;
        self.ctx.emit(FrameworkEvent::AcpClientActivity {
            step_id: self.step_id.to_owned(),
            method,
            target,
            served,
            detail,
        });
    }
}
