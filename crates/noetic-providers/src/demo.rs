//! The offline demo model: a deterministic OpenResponses server on 127.0.0.1, inside the process.
//!
//! It exists so that the quick start and the CLI work on a fresh machine with no API key, through the
//! same HTTP, SSE and decoding path as a real provider. Its behaviour is fixed:
//! - if the request offers tools and the input holds no tool output yet, it calls the **first** tool
//!   once, with arguments derived from the last user message (the first string parameter gets the
//!   message text, other required parameters get plain defaults);
//! - otherwise it answers in text built from the tool outputs it sees (or, without any, from the user's
//!   message), streamed word by word; a user message after the last tool output (a steer) is
//!   acknowledged at the end.
//!
//! The server is a minimal HTTP/1.1 implementation (keep-alive, `Content-Length` bodies) on tokio: a
//! full server library would be a heavy dependency for a demo. It stops when the [`DemoModel`] is dropped.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use crate::error::ProviderError;
use crate::responses::OpenResponses;

/// The model id the demo reports.
pub const DEMO_MODEL_ID: &str = "noetic/offline-demo";

/// A running demo model server. Dropping it stops the server.
#[derive(Debug)]
pub struct DemoModel {
    base_url: String,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for DemoModel {
    fn drop(&mut self) {
        // Aborting the accept loop drops its JoinSet, which aborts every open connection.
        self.server.abort();
    }
}

impl DemoModel {
    /// Starts the server on `127.0.0.1` with an ephemeral port.
    ///
    /// # Errors
    /// [`ProviderError::Transport`] when no loopback port can be bound.
    pub async fn start() -> Result<DemoModel, ProviderError> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.map_err(|error| {
            ProviderError::Transport {
                message: format!("demo model could not bind 127.0.0.1: {error}"),
                source: Some(Box::new(error)),
            }
        })?;
        let address = listener
            .local_addr()
            .map_err(|error| ProviderError::Transport {
                message: format!("demo model address: {error}"),
                source: Some(Box::new(error)),
            })?;
        let server = tokio::spawn(serve(listener));
        Ok(DemoModel {
            base_url: format!("http://{address}/v1"),
            server,
        })
    }

    /// The base URL (`http://127.0.0.1:PORT/v1`).
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// An [`OpenResponses`] provider pointed at this server, named `demo`.
    ///
    /// # Errors
    /// As [`crate::OpenResponsesBuilder::build`].
    pub fn provider(&self) -> Result<OpenResponses, ProviderError> {
        OpenResponses::builder(&self.base_url).name("demo").build()
    }
}

async fn serve(listener: TcpListener) {
    let counter = Arc::new(AtomicU64::new(0));
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    connections.spawn(connection(stream, counter.clone()));
                }
                Err(error) => tracing::warn!(%error, "demo model: accept failed"),
            },
            // Reap finished connections so the set does not grow.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// Serves requests on one connection until the client closes it.
async fn connection(stream: TcpStream, counter: Arc<AtomicU64>) {
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    loop {
        let request = match read_request(&mut reader).await {
            Ok(Some(request)) => request,
            Ok(None) => return,
            Err(message) => {
                let _ = write
                    .write_all(&http_response(
                        400,
                        "application/json",
                        json!({"error": {"message": message}})
                            .to_string()
                            .as_bytes(),
                    ))
                    .await;
                return;
            }
        };
        let reply = if request.method == "POST" && request.path.ends_with("/responses") {
            match serde_json::from_slice::<Value>(&request.body) {
                Ok(body) => http_response(
                    200,
                    "text/event-stream",
                    answer(&body, counter.fetch_add(1, Ordering::Relaxed)).as_bytes(),
                ),
                Err(error) => http_response(
                    400,
                    "application/json",
                    json!({"error": {"message": format!("request body is not JSON: {error}")}})
                        .to_string()
                        .as_bytes(),
                ),
            }
        } else {
            http_response(404, "application/json", json!({"error": {"message": format!("no route {} {}", request.method, request.path)}}).to_string().as_bytes())
        };
        if write.write_all(&reply).await.is_err() {
            return;
        }
    }
}

struct Request {
    method: String,
    path: String,
    body: Vec<u8>,
}

/// Reads one request: the head up to the blank line, then `Content-Length` bytes. `None` at a clean EOF.
async fn read_request(
    reader: &mut BufReader<tokio::net::tcp::OwnedReadHalf>,
) -> Result<Option<Request>, String> {
    let mut line = String::new();
    if reader
        .read_line(&mut line)
        .await
        .map_err(|error| error.to_string())?
        == 0
    {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let (Some(method), Some(path)) = (parts.next(), parts.next()) else {
        return Err(format!("bad request line {line:?}"));
    };
    let (method, path) = (method.to_owned(), path.to_owned());
    let mut length = 0usize;
    loop {
        line.clear();
        if reader
            .read_line(&mut line)
            .await
            .map_err(|error| error.to_string())?
            == 0
        {
            return Err("connection closed in the request head".to_owned());
        }
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value
                    .trim()
                    .parse()
                    .map_err(|_| format!("bad content-length {value:?}"))?;
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                return Err("chunked request bodies are not supported by the demo model".to_owned());
            }
        }
    }
    if length > 64 * 1024 * 1024 {
        return Err("request body too large".to_owned());
    }
    let mut body = vec![0; length];
    reader
        .read_exact(&mut body)
        .await
        .map_err(|error| error.to_string())?;
    Ok(Some(Request { method, path, body }))
}

fn http_response(status: u16, content_type: &str, body: &[u8]) -> Vec<u8> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        _ => "Not Found",
    };
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nx-generation-id: gen-demo\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

/// The SSE body answering one request.
fn answer(body: &Value, sequence: u64) -> String {
    let input = body
        .get("input")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let tools = body
        .get("tools")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let user_text = input
        .iter()
        .rev()
        .find(|item| item.get("role").and_then(Value::as_str) == Some("user"))
        .map(message_text)
        .unwrap_or_default();
    let outputs: Vec<String> = input
        .iter()
        .filter(|item| item.get("type").and_then(Value::as_str) == Some("function_call_output"))
        .map(|item| match item.get("output") {
            Some(Value::String(text)) => text.clone(),
            Some(other) => other.to_string(),
            None => String::new(),
        })
        .collect();
    let input_tokens = (body.to_string().len() / 4) as u64;
    let mut events = Events::default();
    events.push(json!({"type": "response.created", "response": {"id": format!("resp_demo_{sequence}"), "model": DEMO_MODEL_ID, "status": "in_progress", "output": [], "usage": null}}));
    let (item, output_tokens) = match tools.first() {
        Some(tool) if outputs.is_empty() => {
            let name = tool.get("name").and_then(Value::as_str).unwrap_or("tool");
            let arguments = arguments_for(tool.get("parameters"), &user_text).to_string();
            let call_id = format!("call_demo_{sequence}");
            let opened = json!({"type": "function_call", "id": format!("fc_demo_{sequence}"), "call_id": call_id, "name": name, "arguments": "", "status": "in_progress"});
            events.push(
                json!({"type": "response.output_item.added", "output_index": 0, "item": opened}),
            );
            events.push(json!({"type": "response.function_call_arguments.delta", "output_index": 0, "item_id": format!("fc_demo_{sequence}"), "delta": arguments}));
            events.push(json!({"type": "response.function_call_arguments.done", "output_index": 0, "item_id": format!("fc_demo_{sequence}"), "arguments": arguments}));
            let done = json!({"type": "function_call", "id": format!("fc_demo_{sequence}"), "call_id": call_id, "name": name, "arguments": arguments, "status": "completed"});
            (done, 12)
        }
        _ => {
            let last_is_user = input
                .last()
                .and_then(|item| item.get("role"))
                .and_then(Value::as_str)
                == Some("user");
            let first_user = input
                .iter()
                .find(|item| item.get("role").and_then(Value::as_str) == Some("user"))
                .map(message_text)
                .unwrap_or_default();
            let text = if outputs.is_empty() && first_user != user_text {
                // Show that earlier turns are in the request (a restored history, say).
                format!(
                    "(offline demo model) You said: {user_text} (earlier you said: {first_user})"
                )
            } else if outputs.is_empty() {
                format!("(offline demo model) You said: {user_text}")
            } else if last_is_user {
                // A message that arrived after the tool ran (a steer): acknowledge it.
                format!(
                    "(offline demo model) Here is what the tools returned: {} (noted: {user_text})",
                    outputs.join(" | ")
                )
            } else {
                format!(
                    "(offline demo model) Here is what the tools returned: {}",
                    outputs.join(" | ")
                )
            };
            let id = format!("msg_demo_{sequence}");
            events.push(json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "message", "id": id, "role": "assistant", "status": "in_progress", "content": []}}));
            events.push(json!({"type": "response.content_part.added", "output_index": 0, "item_id": id, "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}}));
            let mut words = 0;
            for word in text.split_inclusive(' ') {
                words += 1;
                events.push(json!({"type": "response.output_text.delta", "output_index": 0, "item_id": id, "content_index": 0, "delta": word}));
            }
            events.push(json!({"type": "response.output_text.done", "output_index": 0, "item_id": id, "content_index": 0, "text": text}));
            let done = json!({"type": "message", "id": id, "role": "assistant", "status": "completed", "content": [{"type": "output_text", "text": text, "annotations": []}]});
            (done, words)
        }
    };
    events.push(json!({"type": "response.output_item.done", "output_index": 0, "item": item}));
    events.push(json!({"type": "response.completed", "response": {
        "id": format!("resp_demo_{sequence}"), "model": DEMO_MODEL_ID, "status": "completed", "output": [item],
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens, "total_tokens": input_tokens + output_tokens,
                  "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}}
    }}));
    events.finish()
}

/// SSE framing with OpenAI-style `event:` lines and sequence numbers.
#[derive(Default)]
struct Events {
    body: String,
    sequence: u64,
}

impl Events {
    fn push(&mut self, mut event: Value) {
        let kind = event
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        if let Value::Object(map) = &mut event {
            map.insert("sequence_number".to_owned(), json!(self.sequence));
        }
        self.sequence += 1;
        self.body.push_str("event: ");
        self.body.push_str(&kind);
        self.body.push_str("\ndata: ");
        self.body.push_str(&event.to_string());
        self.body.push_str("\n\n");
    }

    fn finish(self) -> String {
        self.body
    }
}

fn message_text(item: &Value) -> String {
    match item.get("content") {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|part| part.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// Arguments for a tool schema: the first string property gets `text`, other required properties plain
/// defaults by type.
fn arguments_for(schema: Option<&Value>, text: &str) -> Value {
    let mut arguments = serde_json::Map::new();
    let Some(properties) = schema
        .and_then(|schema| schema.get("properties"))
        .and_then(Value::as_object)
    else {
        return Value::Object(arguments);
    };
    let required: Vec<&str> = schema
        .and_then(|schema| schema.get("required"))
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let kind_of = |property: &Value| -> String {
        match property.get("type") {
            Some(Value::String(kind)) => kind.clone(),
            Some(Value::Array(kinds)) => kinds
                .iter()
                .filter_map(Value::as_str)
                .find(|kind| *kind != "null")
                .unwrap_or("string")
                .to_owned(),
            _ => "string".to_owned(),
        }
    };
    // The text goes to the first required string parameter, else to the first string parameter (JSON
    // object keys come sorted, so "first" is alphabetical: deterministic either way).
    let text_field = properties
        .iter()
        .filter(|(_, property)| kind_of(property) == "string")
        .map(|(name, _)| name.as_str())
        .find(|name| required.contains(name))
        .or_else(|| {
            properties
                .iter()
                .find(|(_, property)| kind_of(property) == "string")
                .map(|(name, _)| name.as_str())
        });
    for (name, property) in properties {
        let value = if Some(name.as_str()) == text_field {
            json!(text)
        } else if !required.contains(&name.as_str()) {
            continue;
        } else {
            match kind_of(property).as_str() {
                "string" => json!(""),
                "integer" | "number" => json!(1),
                "boolean" => json!(true),
                "array" => json!([]),
                "object" => json!({}),
                _ => Value::Null,
            }
        };
        arguments.insert(name.clone(), value);
    }
    Value::Object(arguments)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derives_arguments_from_the_schema() {
        let schema = json!({"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}, "note": {"type": ["string", "null"]}}, "required": ["query", "limit"]});
        assert_eq!(
            arguments_for(Some(&schema), "news"),
            json!({"query": "news", "limit": 1})
        );
        assert_eq!(arguments_for(None, "x"), json!({}));
    }

    #[test]
    fn calls_the_first_tool_then_answers_from_its_output() {
        let first = answer(
            &json!({"input": [{"role": "user", "content": "Find AI news"}], "tools": [{"type": "function", "name": "search", "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}}]}),
            0,
        );
        assert!(first.contains(r#""name":"search""#), "{first}");
        assert!(first.contains(r#"\"query\":\"Find AI news\""#), "{first}");
        let second = answer(
            &json!({"input": [{"role": "user", "content": "Find AI news"}, {"type": "function_call_output", "call_id": "c", "output": "three stories"}], "tools": [{"name": "search"}]}),
            1,
        );
        assert!(second.contains("three stories"), "{second}");
        assert!(second.contains("response.completed"), "{second}");
    }
}
