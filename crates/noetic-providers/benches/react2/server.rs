//! The server role: a `MockServer` in its own process serving the react-2 conversation.
//!
//! A request whose `input` ends with a `function_call_output` gets the ~200-word answer in 50
//! `response.output_text.delta` events; any other request (a turn's first round: its input ends with
//! the user's message, after the thread's history if any) gets one `function_call` to `lookup`. Both are
//! framed as OpenResponses streams (`response.created`, `response.output_item.added`, the deltas,
//! `response.output_item.done`, `response.completed` with usage, then `data: [DONE]`). A request with the
//! [`HOLD_HEADER`] gets its answer in [`HOLD_CHUNK_BYTES`]-byte chunks [`HOLD_DELAY`] apart, so that many
//! turns are live at once for the memory measurement. A request with the [`PACE_HEADER`] gets every
//! event in a frame of its own, [`PACE_DELAY`] apart, as a model generating tokens streams.
//!
//! The process prints its base URL on stdout, answers `count` on stdin with the number of requests it
//! has received, and exits when stdin closes (so it cannot outlive the bench).

use std::io::{BufRead, Write};
use std::time::Duration;

use noetic_test_support::{MockReply, MockServer, RecordedHttpRequest};
use serde_json::{Value, json};

use crate::{
    ANSWER_DELTAS, ANSWER_WORDS, HOLD_HEADER, LOOKUP_ARGUMENTS, MODEL, PACE_DELAY, PACE_HEADER,
};

/// The chunk size of a held answer (an answer is about 11 KB: 44 chunks).
pub(crate) const HOLD_CHUNK_BYTES: usize = 256;
/// The pause between two chunks of a held answer (about 1.7 s per answer in all).
pub(crate) const HOLD_DELAY: Duration = Duration::from_millis(40);

/// Runs the server role until stdin closes.
pub(crate) fn serve() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("server runtime");
    // `start` spawns the server task on the runtime's workers, where it keeps running after
    // `block_on` returns; this thread then only reads commands.
    let server = runtime.block_on(MockServer::start());
    server.forget_requests();
    let tool_call = MockReply::sse_events(tool_call_events());
    let answer = MockReply::sse_events(answer_events());
    let held = answer
        .clone()
        .chunk_size(HOLD_CHUNK_BYTES)
        .delay_between_chunks(HOLD_DELAY);
    let pace = |reply: &MockReply| {
        reply
            .clone()
            .frame_per_event()
            .delay_between_chunks(PACE_DELAY)
    };
    let (paced_tool_call, paced_answer) = (pace(&tool_call), pace(&answer));
    server.set_responder(move |request: &RecordedHttpRequest| {
        let paced = request.header(PACE_HEADER).is_some();
        if !has_tool_output(&request.body) {
            if paced {
                paced_tool_call.clone()
            } else {
                tool_call.clone()
            }
        } else if paced {
            paced_answer.clone()
        } else if request.header(HOLD_HEADER).is_some() {
            held.clone()
        } else {
            answer.clone()
        }
    });
    let mut stdout = std::io::stdout();
    writeln!(stdout, "{}", server.base_url()).expect("stdout");
    stdout.flush().expect("stdout");
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        if line.trim() == "count" {
            writeln!(stdout, "{}", server.request_count()).expect("stdout");
            stdout.flush().expect("stdout");
        }
    }
    drop(server);
    runtime.shutdown_timeout(Duration::from_secs(2));
}

/// Whether the request answers the tool call: its input's last item is the call's output.
fn has_tool_output(body: &Value) -> bool {
    body.get("input")
        .and_then(Value::as_array)
        .and_then(|input| input.last())
        .is_some_and(|item| {
            item.get("type").and_then(Value::as_str) == Some("function_call_output")
        })
}

fn response(status: &str, output: Value, usage: Value) -> Value {
    json!({
        "id": "resp_bench",
        "object": "response",
        "created_at": 1_760_000_000,
        "status": status,
        "model": MODEL,
        "output": output,
        "usage": usage,
    })
}

/// Round 1: one `function_call` to `lookup`.
fn tool_call_events() -> Vec<Value> {
    let item = |arguments: &str, status: &str| {
        json!({
            "type": "function_call",
            "id": "fc_bench",
            "call_id": "call_bench",
            "name": "lookup",
            "arguments": arguments,
            "status": status,
        })
    };
    let done = item(LOOKUP_ARGUMENTS, "completed");
    let usage = json!({"input_tokens": 60, "output_tokens": 12, "total_tokens": 72});
    vec![
        json!({"type": "response.created", "sequence_number": 0,
               "response": response("in_progress", json!([]), Value::Null)}),
        json!({"type": "response.output_item.added", "sequence_number": 1, "output_index": 0,
               "item": item("", "in_progress")}),
        json!({"type": "response.function_call_arguments.delta", "sequence_number": 2,
               "item_id": "fc_bench", "output_index": 0, "delta": LOOKUP_ARGUMENTS}),
        json!({"type": "response.function_call_arguments.done", "sequence_number": 3,
               "item_id": "fc_bench", "output_index": 0, "arguments": LOOKUP_ARGUMENTS}),
        json!({"type": "response.output_item.done", "sequence_number": 4, "output_index": 0,
               "item": done.clone()}),
        json!({"type": "response.completed", "sequence_number": 5,
               "response": response("completed", json!([done]), usage)}),
    ]
}

/// Round 2: a ~200-word answer in 50 deltas.
fn answer_events() -> Vec<Value> {
    const WORDS: [&str; 16] = [
        "Paris", "is", "the", "capital", "of", "France,", "and", "its", "largest", "city;", "the",
        "lookup", "result", "confirms", "this", "fact.",
    ];
    let words_per_delta = ANSWER_WORDS / ANSWER_DELTAS;
    let deltas: Vec<String> = (0..ANSWER_DELTAS)
        .map(|delta| {
            (0..words_per_delta)
                .map(|word| WORDS[(delta * words_per_delta + word) % WORDS.len()])
                .fold(String::new(), |mut text, word| {
                    if delta > 0 || !text.is_empty() {
                        text.push(' ');
                    }
                    text.push_str(word);
                    text
                })
        })
        .collect();
    let text: String = deltas.concat();
    let item = |content: Value, status: &str| {
        json!({"type": "message", "id": "msg_bench", "role": "assistant", "status": status,
               "content": content})
    };
    let done = item(
        json!([{"type": "output_text", "text": text, "annotations": []}]),
        "completed",
    );
    let usage = json!({"input_tokens": 90, "output_tokens": 260, "total_tokens": 350});
    let mut events = vec![
        json!({"type": "response.created", "sequence_number": 0,
               "response": response("in_progress", json!([]), Value::Null)}),
        json!({"type": "response.output_item.added", "sequence_number": 1, "output_index": 0,
               "item": item(json!([]), "in_progress")}),
    ];
    for (index, delta) in deltas.iter().enumerate() {
        events.push(
            json!({"type": "response.output_text.delta", "sequence_number": index + 2,
                           "item_id": "msg_bench", "output_index": 0, "content_index": 0,
                           "delta": delta}),
        );
    }
    let next = ANSWER_DELTAS + 2;
    events.push(
        json!({"type": "response.output_item.done", "sequence_number": next,
                       "output_index": 0, "item": done.clone()}),
    );
    events.push(
        json!({"type": "response.completed", "sequence_number": next + 1,
                       "response": response("completed", json!([done]), usage)}),
    );
    events
}
