//! The Anthropic provider behind the OpenAI shape.

use serde_json::{Value, json};

use super::*;

fn event(name: &str, data: Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

pub(super) fn anthropic_stream_frames() -> Vec<String> {
    vec![
        event(
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_s", "type": "message", "role": "assistant",
                "model": "claude-test", "content": [], "stop_reason": null,
                "usage": {"input_tokens": 25, "output_tokens": 1}}}),
        ),
        event(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
        event("ping", json!({"type": "ping"})),
        event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Let me "}}),
        ),
        event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "check."}}),
        ),
        event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        event(
            "content_block_start",
            json!({"type": "content_block_start", "index": 1, "content_block":
                {"type": "tool_use", "id": "toolu_9", "name": "get_weather", "input": {}}}),
        ),
        event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"city\":"}}),
        ),
        event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "\"Paris\"}"}}),
        ),
        event(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 1}),
        ),
        event(
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null},
                "usage": {"output_tokens": 17}}),
        ),
        event("message_stop", json!({"type": "message_stop"})),
    ]
}

#[tokio::test]
async fn anthropic_text_answer() {
    let fake = Fake::start().await;
    fake.script(
        "a",
        vec![Reply::Json(json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-test",
            "content": [{"type": "text", "text": "Hello from Claude"}],
            "stop_reason": "end_turn", "stop_sequence": null,
            "usage": {"input_tokens": 12, "output_tokens": 4}
        }))],
    );
    let cfg = gateway(
        vec![anthropic_dep(&fake, "claude", "a")],
        &[],
        RoutingStrategy::SimpleShuffle,
        0,
    );
    let r = router(&cfg);
    let req = json!({"model": "claude", "messages": [
        {"role": "system", "content": "Be nice."},
        {"role": "user", "content": "Hello"}],
        "response_format": {"type": "json_object"}});
    let (response, usage, deployment) = complete(r.chat(req).await.unwrap());
    assert_eq!(deployment, "claude#0 (anthropic/claude-test)");
    assert_eq!(response["object"], "chat.completion");
    assert_eq!(response["model"], "claude");
    assert_eq!(
        response["choices"][0]["message"]["content"],
        "Hello from Claude"
    );
    assert_eq!(response["choices"][0]["finish_reason"], "stop");
    assert_eq!(
        usage,
        Usage {
            prompt_tokens: 12,
            completion_tokens: 4
        }
    );

    let sent = &fake.requests("a")[0];
    assert_eq!(sent.path, "/a/v1/messages");
    assert_eq!(sent.headers["x-api-key"], KEY);
    assert_eq!(sent.headers["anthropic-version"], "2023-06-01");
    assert!(sent.headers.get("authorization").is_none());
    assert_eq!(sent.body["model"], "claude-test");
    assert_eq!(sent.body["max_tokens"], 4096);
    let system = sent.body["system"].as_str().unwrap();
    assert!(
        system.starts_with("Be nice.") && system.contains("JSON"),
        "{system}"
    );
    assert_eq!(
        sent.body["messages"],
        json!([{"role": "user", "content": [{"type": "text", "text": "Hello"}]}])
    );
}

#[tokio::test]
async fn anthropic_tool_use_becomes_tool_calls() {
    let fake = Fake::start().await;
    fake.script(
        "a",
        vec![Reply::Json(json!({
            "id": "msg_2", "type": "message", "role": "assistant", "model": "claude-test",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}],
            "stop_reason": "tool_use", "usage": {"input_tokens": 30, "output_tokens": 10}
        }))],
    );
    let cfg = gateway(
        vec![anthropic_dep(&fake, "claude", "a")],
        &[],
        RoutingStrategy::SimpleShuffle,
        0,
    );
    let r = router(&cfg);
    let req = json!({"model": "claude",
        "messages": [
            {"role": "user", "content": "Weather in Paris, and Rome?"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "toolu_0", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\":\"Rome\"}"}}]},
            {"role": "tool", "tool_call_id": "toolu_0", "content": "hot"}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]});
    let (response, _, _) = complete(r.chat(req).await.unwrap());
    let message = &response["choices"][0]["message"];
    assert_eq!(message["content"], Value::Null);
    assert_eq!(message["tool_calls"][0]["id"], "toolu_1");
    assert_eq!(
        message["tool_calls"][0]["function"]["arguments"],
        "{\"city\":\"Paris\"}"
    );
    assert_eq!(response["choices"][0]["finish_reason"], "tool_calls");

    let sent = &fake.requests("a")[0].body;
    assert_eq!(sent["tools"][0]["name"], "get_weather");
    assert_eq!(
        sent["tools"][0]["input_schema"]["required"],
        json!(["city"])
    );
    assert_eq!(sent["messages"][1]["content"][0]["type"], "tool_use");
    assert_eq!(
        sent["messages"][1]["content"][0]["input"],
        json!({"city": "Rome"})
    );
    assert_eq!(
        sent["messages"][2]["content"][0],
        json!({"type": "tool_result", "tool_use_id": "toolu_0", "content": "hot"})
    );
}

#[tokio::test]
async fn anthropic_stream_becomes_openai_chunks() {
    let fake = Fake::start().await;
    fake.script("a", vec![Reply::Sse(anthropic_stream_frames())]);
    let cfg = gateway(
        vec![anthropic_dep(&fake, "claude", "a")],
        &[],
        RoutingStrategy::SimpleShuffle,
        0,
    );
    let r = router(&cfg);
    let mut req = stream_request("claude");
    req["stream_options"] = json!({"include_usage": true});
    let (items, deployment, usage) = collect(r.chat(req).await.unwrap()).await;
    assert_eq!(deployment, "claude#0 (anthropic/claude-test)");
    let chunks: Vec<Value> = items.into_iter().map(Result::unwrap).collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert!(
        chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk" && c["model"] == "claude")
    );
    let oks: Vec<Result<Value, LlmError>> = chunks.iter().cloned().map(Ok).collect();
    assert_eq!(streamed_text(&oks), "Let me check.");
    let calls: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c.pointer("/choices/0/delta/tool_calls/0"))
        .collect();
    assert_eq!(calls[0]["id"], "toolu_9");
    assert_eq!(calls[0]["function"]["name"], "get_weather");
    let args: String = calls
        .iter()
        .filter_map(|c| c.pointer("/function/arguments").and_then(Value::as_str))
        .collect();
    assert_eq!(args, "{\"city\":\"Paris\"}");
    let finish: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c.pointer("/choices/0/finish_reason"))
        .filter(|f| !f.is_null())
        .collect();
    assert_eq!(finish, [&json!("tool_calls")]);
    assert_eq!(chunks.last().unwrap()["usage"]["completion_tokens"], 17);
    assert_eq!(
        usage,
        Some(Usage {
            prompt_tokens: 25,
            completion_tokens: 17
        })
    );
    assert_eq!(fake.requests("a")[0].body["stream"], true);
}

#[tokio::test]
async fn anthropic_overloaded_event_before_first_chunk_fails_over() {
    let fake = Fake::start().await;
    fake.script(
        "a",
        vec![Reply::Sse(vec![event(
            "error",
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        )])],
    );
    fake.script("b", vec![Reply::Sse(openai_frames(&["ok"]))]);
    let cfg = gateway(
        vec![
            anthropic_dep(&fake, "claude", "a"),
            openai_dep(&fake, "backup", "b"),
        ],
        &[("claude", &["backup"])],
        RoutingStrategy::SimpleShuffle,
        0,
    );
    let r = router(&cfg);
    let (items, deployment, _) = collect(r.chat(stream_request("claude")).await.unwrap()).await;
    assert_eq!(deployment, "backup#0 (openai/gpt-4o-mini)");
    assert_eq!(streamed_text(&items), "ok");
}

#[tokio::test]
async fn anthropic_bad_request_is_passed_through() {
    let fake = Fake::start().await;
    fake.script(
        "a",
        vec![status(
            400,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: too large"}}"#,
        )],
    );
    fake.script("b", vec![ok("never")]);
    let cfg = gateway(
        vec![
            anthropic_dep(&fake, "claude", "a"),
            openai_dep(&fake, "backup", "b"),
        ],
        &[("claude", &["backup"])],
        RoutingStrategy::SimpleShuffle,
        3,
    );
    let r = router(&cfg);
    let err = r.chat(chat_request("claude")).await.unwrap_err();
    match &err {
        LlmError::Upstream { status, message } => {
            assert_eq!(*status, 400);
            assert_eq!(message, "max_tokens: too large");
        }
        other => panic!("{other:?}"),
    }
    let (code, body) = err.to_openai_error();
    assert_eq!(code, 400);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_tokens: too large")
    );
    assert_eq!(fake.count("a"), 1, "a 400 is not retried");
    assert_eq!(fake.count("b"), 0, "nor failed over");
}
