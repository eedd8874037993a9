//! What `run` and `chat` print: the streamed text, the `--output json` object and the usage summary.

use std::io::Write;

use noetic_core::{HarnessResponse, ResponseEvent, Spend, StreamEvent};
use serde_json::{Map, Value, json};

/// Prints the text of a stream of events as it arrives: every `output_text` delta, and a line end
/// after each finished output item, so the answers of successive model calls (a workflow's steps, a
/// tool round's preface and answer) each end their line instead of running together.
pub(crate) struct TextPrinter {
    wrote: bool,
    at_line_start: bool,
}

impl TextPrinter {
    pub(crate) fn new() -> Self {
        TextPrinter {
            wrote: false,
            at_line_start: true,
        }
    }

    /// Prints what `event` adds to the text, if anything.
    pub(crate) fn event(&mut self, event: &StreamEvent, out: &mut impl Write) {
        let StreamEvent::Sdk(sdk) = event else {
            return;
        };
        match sdk {
            ResponseEvent::OutputTextDelta { delta, .. } if !delta.is_empty() => {
                let _ = write!(out, "{delta}");
                self.wrote = true;
                self.at_line_start = delta.ends_with('\n');
            }
            ResponseEvent::OutputItemDone { .. } => self.end_line(out),
            _ => return,
        }
        let _ = out.flush();
    }

    /// Prints `text` as if it had been streamed.
    pub(crate) fn text(&mut self, text: &str, out: &mut impl Write) {
        if !text.is_empty() {
            let _ = write!(out, "{text}");
            self.wrote = true;
            self.at_line_start = text.ends_with('\n');
        }
    }

    /// Ends the current line, unless nothing is on it.
    pub(crate) fn end_line(&mut self, out: &mut impl Write) {
        if !self.at_line_start {
            let _ = writeln!(out);
            let _ = out.flush();
            self.at_line_start = true;
        }
    }

    /// Whether any text was printed.
    pub(crate) fn wrote(&self) -> bool {
        self.wrote
    }
}

/// The response as one JSON object: `text`, `items` (the OpenResponses wire shape, as exchanged with
/// the provider), `usage` (`inputTokens`, `outputTokens`, `cachedTokens` only when reported) and
/// `cost` (only when reported).
pub(crate) fn response_json(response: &HarnessResponse) -> Value {
    let mut usage = Map::new();
    usage.insert("inputTokens".to_owned(), json!(response.usage.input_tokens));
    usage.insert(
        "outputTokens".to_owned(),
        json!(response.usage.output_tokens),
    );
    if let Some(cached) = response.usage.cached_tokens {
        usage.insert("cachedTokens".to_owned(), json!(cached));
    }
    let mut out = Map::new();
    out.insert("text".to_owned(), json!(response.text));
    out.insert("items".to_owned(), json!(response.items));
    out.insert("usage".to_owned(), Value::Object(usage));
    if let Some(cost) = response.cost {
        out.insert("cost".to_owned(), json!(cost));
    }
    Value::Object(out)
}

/// One line for stderr: `usage: 120 input tokens (80 cached), 40 output tokens, $0.0012`.
pub(crate) fn usage_line(spend: &Spend) -> String {
    let usage = &spend.usage;
    let mut line = format!("usage: {} input tokens", usage.input_tokens);
    if let Some(cached) = usage.cached_tokens {
        line.push_str(&format!(" ({cached} cached)"));
    }
    line.push_str(&format!(", {} output tokens", usage.output_tokens));
    if let Some(cost) = spend.cost {
        line.push_str(&format!(", ${cost:.6}"));
    }
    line
}
