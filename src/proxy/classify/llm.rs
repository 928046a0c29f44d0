//! LLM API calls: recognizing OpenAI- and Anthropic-style requests, and reading token usage
//! from their responses (JSON, or a captured `text/event-stream`).
//!
//! A request is an LLM call when it is a POST whose path (normalized like route paths) ends
//! in `/chat/completions`, `/completions` or `/responses` (OpenAI style) or `/messages`
//! (Anthropic style) and whose JSON body is an object with a string `model`. Requests that
//! name the model elsewhere (Azure OpenAI deployments in the path) are host-level calls.

use super::{RequestView, ToolCall};
use crate::policy::proxy::request_segments;
use crate::policy::ProxyPolicy;
use hyper::Method;
use serde_json::{Map, Value};

/// An LLM API call.
#[derive(Debug, Clone, PartialEq)]
pub struct LlmCall {
    /// `[proxy.llm_providers]` for the host, else `openai` (OpenAI-style paths) or
    /// `anthropic` (`/messages`).
    pub provider: String,
    /// The body's `model`.
    pub model: Option<String>,
    /// The body's `max_tokens`, else `max_completion_tokens`, else `max_output_tokens` (the
    /// first that is a number).
    pub max_tokens: Option<f64>,
    /// The body asks for a stream (`"stream": true`): the answer is `text/event-stream`.
    pub stream: bool,
    /// Tool `llm.chat` with `model`, `provider` and (when known) `max_tokens`.
    pub call: ToolCall,
}

/// The LLM call of `req`, or None.
pub(super) fn classify(policy: &ProxyPolicy, req: &RequestView) -> Option<LlmCall> {
    if req.method != Method::POST {
        return None;
    }
    // `/chat/completions` ends in `completions` too.
    let style = match request_segments(req.path).last().map(String::as_str) {
        Some("completions" | "responses") => "openai",
        Some("messages") => "anthropic",
        _ => return None,
    };
    let body = req.body?.as_object()?;
    let model = body.get("model")?.as_str()?.to_string();
    let provider = policy.llm_provider(req.host).unwrap_or(style).to_string();
    let max_tokens = ["max_tokens", "max_completion_tokens", "max_output_tokens"]
        .iter()
        .find_map(|k| body.get(*k).and_then(Value::as_f64));
    let mut args = Map::new();
    args.insert("model".into(), Value::from(model.as_str()));
    args.insert("provider".into(), Value::from(provider.as_str()));
    if let Some(n) = max_tokens {
        args.insert("max_tokens".into(), Value::from(n));
    }
    Some(LlmCall {
        provider,
        model: Some(model),
        max_tokens,
        stream: body.get("stream") == Some(&Value::Bool(true)),
        call: ToolCall {
            tool_name: "llm.chat".into(),
            tool_args: args,
        },
    })
}

/// Token usage of one LLM answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LlmUsage {
    /// The model that answered, when the answer names it.
    pub model: Option<String>,
    /// Prompt tokens. For `anthropic` this includes cache reads and cache writes
    /// (`cache_read_input_tokens`, `cache_creation_input_tokens`), which Anthropic counts
    /// apart; OpenAI's counts already include cached tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
}

/// The token usage in a captured LLM answer, or None when it names none (or the capture is
/// neither JSON nor an event stream with usage).
///
/// * JSON: `usage` of the object (OpenAI chat `prompt_tokens`/`completion_tokens`, OpenAI
///   responses and Anthropic `input_tokens`/`output_tokens`).
/// * Event stream: every `data:` event that is JSON is read in order (`[DONE]` and partial
///   events are skipped); each count takes the last value seen. Usage may sit at the top
///   level (OpenAI chat's final chunk with `stream_options.include_usage`, Anthropic
///   `message_delta`), under `message` (Anthropic `message_start`: input tokens) or under
///   `response` (OpenAI responses `response.completed`). So Anthropic's input comes from
///   `message_start` and its output from the last `message_delta`.
///
/// `provider` is the [`LlmCall::provider`]; `anthropic` adds cache tokens to the input.
pub fn llm_usage(provider: &str, captured: &[u8]) -> Option<LlmUsage> {
    let mut acc = Usage {
        anthropic: provider.eq_ignore_ascii_case("anthropic"),
        ..Usage::default()
    };
    match serde_json::from_slice::<Value>(captured) {
        Ok(v) => acc.absorb(&v),
        Err(_) => for_each_event(&String::from_utf8_lossy(captured), |v| acc.absorb(v)),
    }
    acc.seen.then_some(LlmUsage {
        model: acc.model,
        input_tokens: acc.input.unwrap_or(0),
        output_tokens: acc.output.unwrap_or(0),
    })
}

/// Usage gathered so far.
#[derive(Default)]
struct Usage {
    anthropic: bool,
    seen: bool,
    model: Option<String>,
    input: Option<u64>,
    output: Option<u64>,
}

impl Usage {
    /// Reads one JSON answer or event.
    fn absorb(&mut self, v: &Value) {
        for scope in [Some(v), v.get("message"), v.get("response")]
            .into_iter()
            .flatten()
        {
            if let Some(model) = scope.get("model").and_then(Value::as_str) {
                self.model = Some(model.to_string());
            }
            if let Some(usage) = scope.get("usage").filter(|u| u.is_object()) {
                self.absorb_usage(usage);
            }
        }
    }

    fn absorb_usage(&mut self, usage: &Value) {
        let count = |key: &str| {
            let v = usage.get(key)?;
            v.as_u64()
                .or_else(|| v.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
        };
        let input = count("prompt_tokens").or_else(|| count("input_tokens"));
        let input = match input {
            Some(n) if self.anthropic => Some(
                n + count("cache_creation_input_tokens").unwrap_or(0)
                    + count("cache_read_input_tokens").unwrap_or(0),
            ),
            other => other,
        };
        let output = count("completion_tokens").or_else(|| count("output_tokens"));
        self.seen |= input.is_some() || output.is_some();
        self.input = input.or(self.input);
        self.output = output.or(self.output);
    }
}

/// Calls `f` with each `data:` event of an event stream that parses as JSON. Lines of one
/// event are joined with `\n`; events end at a blank line or the end of the text.
fn for_each_event(text: &str, mut f: impl FnMut(&Value)) {
    let mut data: Vec<&str> = Vec::new();
    let mut flush = |data: &mut Vec<&str>| {
        if !data.is_empty() {
            if let Ok(v) = serde_json::from_str::<Value>(&data.join("\n")) {
                f(&v);
            }
            data.clear();
        }
    };
    for line in text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l)) {
        if line.is_empty() {
            flush(&mut data);
        } else if let Some(rest) = line.strip_prefix("data:") {
            data.push(rest.strip_prefix(' ').unwrap_or(rest));
        }
    }
    flush(&mut data);
}
