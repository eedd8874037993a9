//! `session/update` notifications and permission requests read into core's [`AcpUpdate`] and
//! [`AcpToolCall`]. Unknown kinds, unknown fields and `_meta` are tolerated.

use noetic_core::TokenUsage;
use noetic_core::acp::{AcpPermissionOption, AcpToolCall, AcpUpdate};
use serde_json::Value;

fn text(value: Option<&Value>) -> Option<String> {
    value.and_then(Value::as_str).map(str::to_owned)
}

/// The text of a content block (`{"type": "text", "text": …}`); `None` for other blocks.
fn block_text(block: Option<&Value>) -> Option<String> {
    let block = block?;
    (block.get("type").and_then(Value::as_str) == Some("text"))
        .then(|| text(block.get("text")))
        .flatten()
}

/// A tool call as `tool_call`, `tool_call_update` and permission requests carry it.
pub(crate) fn tool_call(value: &Value) -> AcpToolCall {
    let mut call = AcpToolCall::new(
        value
            .get("toolCallId")
            .and_then(Value::as_str)
            .unwrap_or_default(),
    );
    call.title = text(value.get("title"));
    call.kind = text(value.get("kind"));
    call.status = text(value.get("status"));
    call.raw_input = value.get("rawInput").filter(|v| !v.is_null()).cloned();
    call.raw_output = value.get("rawOutput").filter(|v| !v.is_null()).cloned();
    call.content = value
        .get("content")
        .and_then(Value::as_array)
        .map(|blocks| blocks.to_vec());
    call
}

/// One update (the `update` object of a `session/update`).
pub(crate) fn update(update: &Value) -> AcpUpdate {
    match update.get("sessionUpdate").and_then(Value::as_str) {
        Some("agent_message_chunk") => match block_text(update.get("content")) {
            Some(text) => AcpUpdate::Message {
                message_id: text_of(update, "messageId"),
                text,
            },
            None => AcpUpdate::Other,
        },
        Some("agent_thought_chunk") => match block_text(update.get("content")) {
            Some(text) => AcpUpdate::Thought { text },
            None => AcpUpdate::Other,
        },
        Some("tool_call") => AcpUpdate::ToolCall(tool_call(update)),
        Some("tool_call_update") => AcpUpdate::ToolCallUpdate(tool_call(update)),
        Some("usage_update") => {
            let cost = update.get("cost");
            let usd = cost
                .filter(|cost| {
                    cost.get("currency")
                        .and_then(Value::as_str)
                        .is_some_and(|currency| currency.eq_ignore_ascii_case("USD"))
                })
                .and_then(|cost| cost.get("amount"))
                .and_then(Value::as_f64);
            AcpUpdate::Usage {
                used: update.get("used").and_then(Value::as_u64),
                size: update.get("size").and_then(Value::as_u64),
                cost_usd: usd,
            }
        }
        _ => AcpUpdate::Other,
    }
}

fn text_of(value: &Value, key: &str) -> Option<String> {
    text(value.get(key))
}

/// The options of a permission request.
pub(crate) fn options(params: &Value) -> Vec<AcpPermissionOption> {
    params
        .get("options")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|option| {
            Some(AcpPermissionOption::new(
                option.get("optionId")?.as_str()?,
                option
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
                option.get("kind")?.as_str()?,
            ))
        })
        .collect()
}

/// The prompt response's `usage` (an unstable field of ACP v1): `None` when absent.
pub(crate) fn usage(response: &Value) -> Option<TokenUsage> {
    let usage = response.get("usage").filter(|usage| usage.is_object())?;
    let count = |key: &str| usage.get(key).and_then(Value::as_u64);
    let input = count("inputTokens");
    let output = count("outputTokens");
    if input.is_none() && output.is_none() && count("totalTokens").is_none() {
        return None;
    }
    let tokens = TokenUsage {
        input_tokens: input.unwrap_or_default(),
        output_tokens: output.unwrap_or_default(),
        cached_tokens: count("cachedReadTokens"),
        cache_write_tokens: count("cachedWriteTokens"),
        reasoning_tokens: count("thoughtTokens"),
    };
    Some(tokens)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn updates_are_read_and_unknown_ones_tolerated() {
        assert_eq!(
            update(
                &json!({"sessionUpdate": "agent_message_chunk", "messageId": "m1",
                "content": {"type": "text", "text": "hi", "_meta": {"x": 1}}, "_meta": {}})
            ),
            AcpUpdate::Message {
                message_id: Some("m1".into()),
                text: "hi".into()
            }
        );
        assert_eq!(
            update(
                &json!({"sessionUpdate": "agent_message_chunk", "content": {"type": "image", "data": ""}})
            ),
            AcpUpdate::Other
        );
        assert_eq!(
            update(&json!({"sessionUpdate": "made_up_kind", "extra": 1})),
            AcpUpdate::Other
        );
        assert_eq!(
            update(
                &json!({"sessionUpdate": "usage_update", "used": 10, "size": 100,
                "cost": {"amount": 0.5, "currency": "EUR"}})
            ),
            AcpUpdate::Usage {
                used: Some(10),
                size: Some(100),
                cost_usd: None
            }
        );
        let AcpUpdate::ToolCallUpdate(call) = update(
            &json!({"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "completed"}),
        ) else {
            panic!("a tool call update");
        };
        assert_eq!(
            (call.id.as_str(), call.status.as_deref(), call.title),
            ("c1", Some("completed"), None)
        );
    }

    #[test]
    fn usage_is_absent_unless_reported() {
        assert_eq!(usage(&json!({"stopReason": "end_turn"})), None);
        let tokens =
            usage(&json!({"usage": {"inputTokens": 5, "outputTokens": 7, "totalTokens": 12}}))
                .expect("usage");
        assert_eq!(
            (
                tokens.input_tokens,
                tokens.output_tokens,
                tokens.cached_tokens
            ),
            (5, 7, None)
        );
    }
}
