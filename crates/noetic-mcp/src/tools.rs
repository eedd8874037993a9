//! An MCP server's tools as noetic [`Tool`]s: named `<server>__<tool>`, their JSON Schemas kept, each
//! call a `tools/call` whose every failure is the call's error output.

use std::sync::Arc;
use std::time::Duration;

use noetic_core::{Tool, ToolContext, ToolError, wire_name};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, ClientRequest, ContentBlock,
    ResourceContents, ServerResult,
};
use rmcp::service::{PeerRequestOptions, ServiceError};
use rmcp::{Peer, RoleClient};
use serde_json::Value;

use crate::cancel::{CancelOnDrop, Cancels};

/// Which of a server's tools are offered.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ToolFilter {
    /// When set, only these (MCP names).
    pub(crate) allow: Option<Vec<String>>,
    /// Never these.
    pub(crate) deny: Vec<String>,
    /// Calls of these wait for a person's approval (see `noetic_core::Tool::needs_approval`).
    pub(crate) needs_approval: Vec<String>,
}

impl ToolFilter {
    pub(crate) fn admits(&self, name: &str) -> bool {
        self.allow
            .as_ref()
            .is_none_or(|allow| allow.iter().any(|allowed| allowed == name))
            && !self.deny.iter().any(|denied| denied == name)
    }
}

/// The tools of one listing, as offered.
pub(crate) struct Snapshot {
    pub(crate) tools: Arc<[Tool]>,
    /// The MCP names of the offered tools, for [`noetic_core::Connection::supports`].
    pub(crate) names: Vec<String>,
}

/// What a tool call needs of its server.
#[derive(Clone)]
pub(crate) struct CallTarget {
    pub(crate) server: Arc<str>,
    pub(crate) peer: Peer<RoleClient>,
    pub(crate) timeout: Duration,
    /// The server's cancellations still being sent.
    pub(crate) cancels: Cancels,
}

/// The snapshot of `listed`: filtered, named `<server>__<tool>` (made unique after sanitizing).
pub(crate) fn snapshot(
    listed: Vec<rmcp::model::Tool>,
    filter: &ToolFilter,
    target: &CallTarget,
) -> Snapshot {
    let mut tools: Vec<Tool> = Vec::with_capacity(listed.len());
    let mut names = Vec::with_capacity(listed.len());
    for mcp_tool in listed {
        let mcp_name = mcp_tool.name.to_string();
        if !filter.admits(&mcp_name) {
            continue;
        }
        let name = unique_name(&target.server, &mcp_name, &tools);
        let description = mcp_tool
            .description
            .as_deref()
            .or(mcp_tool.title.as_deref())
            .unwrap_or_default()
            .to_owned();
        let schema = Value::Object((*mcp_tool.input_schema).clone());
        let call = target.clone();
        let called = mcp_name.clone();
        let tool = Tool::dynamic(
            name,
            description,
            schema,
            move |arguments: Value, _tool_ctx: ToolContext| {
                call_tool(call.clone(), called.clone(), arguments)
            },
        );
        let tool = tool.map(|tool| {
            let gated = filter.needs_approval.contains(&mcp_name);
            tool.needs_approval(gated)
        });
        match tool {
            Ok(tool) => {
                tools.push(tool);
                names.push(mcp_name);
            }
            Err(error) => tracing::warn!(
                server = %target.server,
                tool = %mcp_name,
                %error,
                "MCP tool skipped: its input schema is not a valid JSON Schema"
            ),
        }
    }
    Snapshot {
        tools: tools.into(),
        names,
    }
}

/// `<server>__<tool>`, sanitized for the wire; a name taken already gets `_2`, `_3`, …
fn unique_name(server: &str, tool: &str, taken: &[Tool]) -> String {
    let base = wire_name(&format!("{server}__{tool}"));
    let free = |candidate: &str| taken.iter().all(|tool| tool.name() != candidate);
    if free(&base) {
        return base;
    }
    (2..)
        .map(|n| {
            let suffix = format!("_{n}");
            let keep = base.len().min(64 - suffix.len());
            format!("{}{suffix}", &base[..keep])
        })
        .find(|candidate| free(candidate))
        .unwrap_or(base)
}

/// One `tools/call`: its result, or the error output the model sees. Dropping the future (the run
/// was cancelled) or the timeout sends the server `notifications/cancelled` for the request
/// ([`CancelOnDrop`]), which a shutdown waits for.
pub(crate) async fn call_tool(
    target: CallTarget,
    tool: String,
    arguments: Value,
) -> Result<Value, ToolError> {
    let mut params = CallToolRequestParams::new(tool.clone());
    match arguments {
        Value::Object(arguments) => params = params.with_arguments(arguments),
        Value::Null => {}
        other => {
            return Err(ToolError::new(format!(
                "MCP tool `{tool}` takes a JSON object of arguments, not {other}"
            )));
        }
    }
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    // No await between the request's hand-off to the connection and the guard: once it is sent, a
    // dropped call is cancelled.
    let handle = target
        .peer
        .send_cancellable_request(request, PeerRequestOptions::no_options())
        .await
        .map_err(|error| ToolError::new(describe(&target.server, &tool, &error)))?;
    let mut guard = CancelOnDrop::new(
        target.server.clone(),
        target.peer.clone(),
        target.cancels.clone(),
        handle.id.clone(),
    );
    let Ok(answer) = tokio::time::timeout(target.timeout, handle.await_response()).await else {
        guard.cancel(format!("timed out after {} ms", target.timeout.as_millis()));
        return Err(ToolError::new(format!(
            "MCP tool `{tool}` of server `{}` timed out after {} ms (the call was cancelled)",
            target.server,
            target.timeout.as_millis()
        )));
    };
    guard.disarm();
    match answer {
        Err(error) => Err(ToolError::new(describe(&target.server, &tool, &error))),
        Ok(ServerResult::CallToolResult(result)) => output(&target.server, &tool, result),
        // A result without content (`{}`) is an empty success.
        Ok(ServerResult::EmptyResult(_)) => {
            output(&target.server, &tool, CallToolResult::default())
        }
        Ok(_) => Err(ToolError::new(format!(
            "MCP server `{}` answered `tools/call` of `{tool}` with something other than a tool \
             result",
            target.server
        ))),
    }
}

/// What the model reads for a failed call.
fn describe(server: &str, tool: &str, error: &ServiceError) -> String {
    match error {
        ServiceError::McpError(data) => format!(
            "MCP server `{server}` refused `{tool}`: {} (code {})",
            data.message, data.code.0
        ),
        ServiceError::TransportClosed | ServiceError::TransportSend(_) => format!(
            "MCP server `{server}` is not reachable (its connection closed): `{tool}` did not run"
        ),
        ServiceError::Timeout { timeout } => format!(
            "MCP tool `{tool}` of server `{server}` timed out after {} ms",
            timeout.as_millis()
        ),
        other => format!("MCP tool `{tool}` of server `{server}` failed: {other}"),
    }
}

/// A result as the call's output: structured content when present (its JSON), else the text of its
/// content blocks; `isError` makes it the call's error output.
fn output(server: &str, tool: &str, result: CallToolResult) -> Result<Value, ToolError> {
    let text = content_text(&result.content);
    if result.is_error == Some(true) {
        let message = if text.is_empty() {
            format!("MCP tool `{tool}` of server `{server}` reported an error")
        } else {
            text
        };
        return Err(ToolError::new(message));
    }
    Ok(match result.structured_content {
        Some(structured) => structured,
        None => Value::String(text),
    })
}

/// The text of content blocks, one per line; what is not text is named, not inlined.
fn content_text(content: &[ContentBlock]) -> String {
    let parts: Vec<String> = content
        .iter()
        .map(|block| match block {
            ContentBlock::Text(text) => text.text.clone(),
            ContentBlock::Image(image) => format!("[image: {}]", image.mime_type),
            ContentBlock::Audio(audio) => format!("[audio: {}]", audio.mime_type),
            ContentBlock::Resource(resource) => match &resource.resource {
                ResourceContents::TextResourceContents { text, .. } => text.clone(),
                ResourceContents::BlobResourceContents { uri, .. } => {
                    format!("[resource: {uri}]")
                }
                _ => "[resource]".to_owned(),
            },
            ContentBlock::ResourceLink(link) => format!("[resource link: {}]", link.uri),
            _ => "[content of a kind this client does not read]".to_owned(),
        })
        .collect();
    parts.join("\n")
}
