//! JSON-RPC 2.0 over the agent's stdin and stdout, one message per line.
//!
//! Our requests and the agent's keep separate id spaces (both count from 0): a response is matched
//! only against the requests we sent, and a request from the agent is answered with its own id,
//! whatever it is. A reader task parses every line: responses complete our pending requests;
//! the agent's requests and notifications, lines that are not JSON-RPC, and the end of stdout go to
//! [`Incoming`], in order.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _};
use tokio::process::{ChildStdin, ChildStdout};
use tokio::sync::{mpsc, oneshot};

/// The longest line read from the agent; a longer one ends the connection as a violation.
const MAX_LINE: usize = 64 * 1024 * 1024;

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RpcError {
    pub(crate) code: i64,
    pub(crate) message: String,
    pub(crate) data: Option<Value>,
}

impl RpcError {
    pub(crate) fn new(code: i64, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }
}

/// Method not found.
pub(crate) const METHOD_NOT_FOUND: i64 = -32601;
/// Invalid params.
pub(crate) const INVALID_PARAMS: i64 = -32602;
/// Internal error.
pub(crate) const INTERNAL_ERROR: i64 = -32603;
/// Request cancelled.
pub(crate) const REQUEST_CANCELLED: i64 = -32800;
/// Authentication required.
pub(crate) const AUTH_REQUIRED: i64 = -32000;
/// Resource not found.
pub(crate) const RESOURCE_NOT_FOUND: i64 = -32002;

/// What the agent sent that is not a response to us.
#[derive(Debug)]
pub(crate) enum Incoming {
    /// A request to the client; answer it with [`Rpc::respond`] and this id.
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    /// A notification.
    Notification { method: String, params: Value },
    /// A line that is not a JSON-RPC message (at most 200 characters of it).
    Violation(String),
    /// Stdout ended: the agent is gone or going.
    Closed,
}

/// The answer to one of our requests: the result, the agent's error, or `None` when the connection
/// closed first.
pub(crate) type Answer = oneshot::Receiver<Result<Value, RpcError>>;

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Value, RpcError>>>>>;

/// One connection's JSON-RPC peer.
pub(crate) struct Rpc {
    writer: tokio::sync::Mutex<Option<ChildStdin>>,
    pending: Pending,
    next_id: AtomicU64,
    reader: tokio::task::JoinHandle<()>,
}

impl Rpc {
    /// Starts reading `stdout`; what is not a response arrives on the returned receiver.
    pub(crate) fn start(
        agent: &str,
        stdin: ChildStdin,
        stdout: ChildStdout,
    ) -> (Rpc, mpsc::UnboundedReceiver<Incoming>) {
        let pending: Pending = Arc::default();
        let (incoming, receiver) = mpsc::unbounded_channel();
        let reader = tokio::spawn(read(agent.to_owned(), stdout, pending.clone(), incoming));
        (
            Rpc {
                writer: tokio::sync::Mutex::new(Some(stdin)),
                pending,
                next_id: AtomicU64::new(0),
                reader,
            },
            receiver,
        )
    }

    async fn write(&self, message: &Value) {
        let mut line = message.to_string();
        line.push('\n');
        let mut writer = self.writer.lock().await;
        if let Some(stdin) = writer.as_mut()
            && let Err(error) = async {
                stdin.write_all(line.as_bytes()).await?;
                stdin.flush().await
            }
            .await
        {
            // The agent is gone: the reader reports it as `Closed`.
            tracing::debug!(%error, "writing to the ACP agent failed");
            *writer = None;
        }
    }

    /// Sends a request; the answer arrives on the returned receiver.
    pub(crate) async fn request(&self, method: &str, params: Value) -> Answer {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (answer, receiver) = oneshot::channel();
        crate::sync::lock(&self.pending).insert(id, answer);
        self.write(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        receiver
    }

    /// Sends a notification.
    pub(crate) async fn notify(&self, method: &str, params: Value) {
        self.write(&json!({"jsonrpc": "2.0", "method": method, "params": params}))
            .await;
    }

    /// Answers the agent's request `id`.
    pub(crate) async fn respond(&self, id: Value, answer: Result<Value, RpcError>) {
        let message = match answer {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err(RpcError {
                code,
                message,
                data,
            }) => {
                let mut error = json!({"code": code, "message": message});
                if let Some(data) = data {
                    error["data"] = data;
                }
                json!({"jsonrpc": "2.0", "id": id, "error": error})
            }
        };
        self.write(&message).await;
    }

    /// Closes the agent's stdin (the polite end of a connection).
    pub(crate) async fn close_stdin(&self) {
        if let Some(mut stdin) = self.writer.lock().await.take() {
            let _ = stdin.shutdown().await;
        }
    }
}

impl Drop for Rpc {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

async fn read(
    agent: String,
    stdout: ChildStdout,
    pending: Pending,
    incoming: mpsc::UnboundedSender<Incoming>,
) {
    let mut reader = tokio::io::BufReader::new(stdout);
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = (&mut reader)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut line)
            .await;
        match read {
            Ok(0) | Err(_) => break,
            Ok(_) if line.len() > MAX_LINE => {
                let _ = incoming.send(Incoming::Violation(format!(
                    "a line of more than {MAX_LINE} bytes"
                )));
                break;
            }
            Ok(_) => {}
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        match classify(text) {
            Some(Parsed::Response { id, answer }) => {
                let waiting = id
                    .as_u64()
                    .and_then(|id| crate::sync::lock(&pending).remove(&id));
                match waiting {
                    Some(waiting) => {
                        let _ = waiting.send(answer);
                    }
                    None => {
                        tracing::warn!(agent = %agent, %id, "ACP response to no request of ours: ignored");
                    }
                }
            }
            Some(Parsed::Incoming(message)) => {
                let _ = incoming.send(message);
            }
            None => {
                let shown: String = text.chars().take(200).collect();
                let _ = incoming.send(Incoming::Violation(shown));
            }
        }
    }
    // Whoever still waits for an answer gets `None`.
    crate::sync::lock(&pending).clear();
    let _ = incoming.send(Incoming::Closed);
}

enum Parsed {
    Response {
        id: Value,
        answer: Result<Value, RpcError>,
    },
    Incoming(Incoming),
}

/// A line as a JSON-RPC message; `None` when it is not one.
fn classify(text: &str) -> Option<Parsed> {
    let Value::Object(mut message) = serde_json::from_str::<Value>(text).ok()? else {
        return None;
    };
    if message.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return None;
    }
    if let Some(Value::String(method)) = message.remove("method") {
        let params = message.remove("params").unwrap_or(Value::Null);
        return Some(Parsed::Incoming(match message.remove("id") {
            Some(id) if !id.is_null() => Incoming::Request { id, method, params },
            _ => Incoming::Notification { method, params },
        }));
    }
    let id = message.remove("id")?;
    let answer = if let Some(error) = message.remove("error") {
        Err(RpcError {
            code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
            message: error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            data: error.get("data").cloned(),
        })
    } else {
        Ok(message.remove("result")?)
    };
    Some(Parsed::Response { id, answer })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_told_apart() {
        assert!(matches!(
            classify(
                r#"{"jsonrpc":"2.0","id":0,"method":"session/request_permission","params":{}}"#
            ),
            Some(Parsed::Incoming(Incoming::Request { .. }))
        ));
        assert!(matches!(
            classify(r#"{"jsonrpc":"2.0","method":"session/update","params":{},"_meta":{}}"#),
            Some(Parsed::Incoming(Incoming::Notification { .. }))
        ));
        assert!(matches!(
            classify(r#"{"jsonrpc":"2.0","id":0,"result":null}"#),
            Some(Parsed::Response {
                answer: Ok(Value::Null),
                ..
            })
        ));
        let Some(Parsed::Response {
            answer: Err(error), ..
        }) = classify(
            r#"{"jsonrpc":"2.0","id":3,"error":{"code":-32603,"message":"Internal error","data":{"why":"x"}}}"#,
        )
        else {
            panic!("an error response");
        };
        assert_eq!(error.code, -32603);
        assert_eq!(error.data, Some(json!({"why": "x"})));
        for line in [
            "this is not json",
            "[1,2]",
            r#"{"id":1,"result":1}"#,
            r#"{"jsonrpc":"2.0"}"#,
        ] {
            assert!(classify(line).is_none(), "{line}");
        }
    }
}
