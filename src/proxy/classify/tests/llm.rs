//! LLM: detection of OpenAI- and Anthropic-style calls, provider override, and token usage
//! from JSON answers and event streams.

use super::super::*;
use super::{classify_req, kind};
use serde_json::json;

#[test]
fn llm_calls_are_detected_for_both_styles() {
    let openai = json!({"model": "gpt-4o", "max_completion_tokens": 300, "stream": true});
    let anthropic = json!({"model": "claude-sonnet-4", "max_tokens": 1024});
    let responses = json!({"model": "gpt-4.1", "max_output_tokens": 50, "stream": false});
    type Case<'a> = (&'a str, &'a str, &'a Value, &'a str, Option<f64>, bool);
    let cases: [Case; 6] = [
        (
            "api.openai.com",
            "/v1/chat/completions",
            &openai,
            "openai",
            Some(300.0),
            true,
        ),
        (
            "api.openai.com",
            "/v1/responses",
            &responses,
            "openai",
            Some(50.0),
            false,
        ),
        (
            "api.anthropic.com",
            "/v1/messages",
            &anthropic,
            "anthropic",
            Some(1024.0),
            false,
        ),
        // Unknown hosts get the provider of the path style; the pack can override per host.
        (
            "gateway.example",
            "/openai/v1/completions",
            &anthropic,
            "openai",
            Some(1024.0),
            false,
        ),
        (
            "gateway.example",
            "/anthropic/v1/messages/",
            &openai,
            "anthropic",
            Some(300.0),
            true,
        ),
        (
            "llm.internal.example",
            "/v1/chat/completions",
            &openai,
            "vllm",
            Some(300.0),
            true,
        ),
    ];
    for (host, path, body, provider, max_tokens, stream) in cases {
        let Classified::Llm(call) = classify_req(Method::POST, host, path, Some(body)) else {
            panic!("{host}{path}: not LLM");
        };
        assert_eq!(call.provider, provider, "{host}{path}");
        assert_eq!(call.model.as_deref(), body["model"].as_str());
        assert_eq!(call.max_tokens, max_tokens);
        assert_eq!(call.stream, stream);
        assert_eq!(call.call.tool_name, "llm.chat");
        let mut want = json!({"model": body["model"], "provider": provider});
        if let Some(n) = max_tokens {
            want["max_tokens"] = json!(n);
        }
        assert_eq!(Value::Object(call.call.tool_args), want);
    }
    let not_llm: [(Method, &str, Value); 5] = [
        (Method::GET, "/v1/chat/completions", openai.clone()),
        (Method::POST, "/v1/messages/count_tokens", anthropic.clone()),
        (Method::POST, "/v1/chat/completions", json!({"model": 4})),
        (
            Method::POST,
            "/v1/chat/completions",
            json!({"messages": []}),
        ),
        (Method::POST, "/v1/embeddings", openai.clone()),
    ];
    for (method, path, body) in not_llm {
        assert_eq!(
            kind(&classify_req(method, "api.openai.com", path, Some(&body))),
            "host",
            "{path}"
        );
    }
}

fn usage(model: Option<&str>, input: u64, output: u64) -> Option<LlmUsage> {
    Some(LlmUsage {
        model: model.map(str::to_string),
        input_tokens: input,
        output_tokens: output,
    })
}

#[test]
fn usage_is_read_from_json_answers() {
    let cases = [
        (
            "openai",
            json!({"model": "gpt-4o-2024", "usage": {"prompt_tokens": 12, "completion_tokens": 30, "total_tokens": 42}}),
            usage(Some("gpt-4o-2024"), 12, 30),
        ),
        (
            "openai",
            json!({"model": "gpt-4.1", "usage": {"input_tokens": 5, "output_tokens": 6, "input_tokens_details": {"cached_tokens": 2}}}),
            usage(Some("gpt-4.1"), 5, 6),
        ),
        (
            "anthropic",
            json!({"model": "claude-x", "usage": {"input_tokens": 10, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 1, "output_tokens": 7}}),
            usage(Some("claude-x"), 111, 7),
        ),
        ("openai", json!({"model": "gpt-4o", "choices": []}), None),
        ("openai", json!({"usage": null}), None),
    ];
    for (provider, body, want) in cases {
        assert_eq!(
            llm_usage(provider, body.to_string().as_bytes()),
            want,
            "{body}"
        );
    }
    assert_eq!(llm_usage("openai", b"not json, no events"), None);
}

#[test]
fn usage_is_read_from_event_streams() {
    let openai_chat = "data: {\"model\":\"gpt-4o\",\"choices\":[{\"delta\":{\"content\":\"Hi\"}}],\"usage\":null}\n\n\
        data: {\"model\":\"gpt-4o\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":2}}\n\n\
        data: [DONE]\n\n";
    let openai_responses = "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"model\":\"gpt-4.1\",\"usage\":null}}\n\n\
        event: response.completed\r\ndata: {\"type\":\"response.completed\",\"response\":{\"model\":\"gpt-4.1\",\"usage\":{\"input_tokens\":4,\"output_tokens\":8}}}\r\n\r\n";
    let anthropic = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-x\",\"usage\":{\"input_tokens\":25,\"cache_read_input_tokens\":5,\"output_tokens\":1}}}\n\n\
        event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"Hello\"}}\n\n\
        event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":15}}\n\n\
        event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
    let truncated = &anthropic[..anthropic.find("message_delta\ndata").unwrap() + 30];
    let cases = [
        ("openai", openai_chat, usage(Some("gpt-4o"), 9, 2)),
        ("openai", openai_responses, usage(Some("gpt-4.1"), 4, 8)),
        ("anthropic", anthropic, usage(Some("claude-x"), 30, 15)),
        // A capture cut mid-event keeps what was complete.
        ("anthropic", truncated, usage(Some("claude-x"), 30, 1)),
        ("openai", "data: {\"choices\":[]}\n\ndata: [DONE]\n\n", None),
    ];
    for (provider, text, want) in cases {
        assert_eq!(llm_usage(provider, text.as_bytes()), want, "{text}");
    }
}
