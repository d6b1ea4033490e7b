//! OpenAI-style upstreams: passthrough, streams, tool calls, the
//! `/v1/messages` reverse translation over them.

use serde_json::{Value, json};

use super::*;
use crate::gateway::llm::{
    anthropic_request_to_openai, openai_response_to_anthropic, openai_stream_to_anthropic,
};

#[tokio::test]
async fn openai_passthrough_complete() {
    let fake = Fake::start().await;
    fake.script("p", vec![ok("Hi there")]);
    let cfg = gateway(
        vec![openai_dep(&fake, "default", "p")],
        &[],
        RoutingStrategy::SimpleShuffle,
        0,
    );
    let r = router(&cfg);
    assert_eq!(r.aliases(), ["default"]);
    let (response, usage, deployment) = complete(r.chat(chat_request("default")).await.unwrap());
    assert_eq!(deployment, "default#0 (openai/gpt-4o-mini)");
    assert_eq!(response["model"], "default");
    assert_eq!(response["choices"][0]["message"]["content"], "Hi there");
    assert_eq!(
        usage,
        Usage {
            prompt_tokens: 9,
            completion_tokens: 3
        }
    );
    let sent = &fake.requests("p")[0];
    assert_eq!(sent.path, "/p/v1/chat/completions");
    assert_eq!(sent.body["model"], "gpt-4o-mini");
    assert_eq!(sent.body["messages"][0]["content"], "Hello");
    assert_eq!(
        sent.headers["authorization"],
        format!("Bearer {KEY}").as_str()
    );
}

#[tokio::test]
async fn openai_passthrough_stream() {
    let fake = Fake::start().await;
    fake.script("p", vec![Reply::Sse(openai_frames(&["Hel", "lo"]))]);
    let cfg = gateway(
        vec![openai_dep(&fake, "default", "p")],
        &[],
        RoutingStrategy::SimpleShuffle,
        0,
    );
    let r = router(&cfg);
    let (items, deployment, usage) =
        collect(r.chat(stream_request("default")).await.unwrap()).await;
    assert_eq!(deployment, "default#0 (openai/gpt-4o-mini)");
    assert!(items.iter().all(Result::is_ok), "{items:?}");
    assert_eq!(streamed_text(&items), "Hello");
    // The client did not ask for usage: the usage-only chunk is not forwarded…
    assert!(items.iter().flatten().all(|c| c.get("usage").is_none()));
    assert!(items.iter().flatten().all(|c| c["model"] == "default"));
    // …but it was requested upstream and accounted.
    assert_eq!(
        fake.requests("p")[0].body["stream_options"]["include_usage"],
        true
    );
    assert_eq!(
        usage,
        Some(Usage {
            prompt_tokens: 11,
            completion_tokens: 4
        })
    );

    // A client asking for usage gets the chunk.
    let mut req = stream_request("default");
    req["stream_options"] = json!({"include_usage": true});
    let (items, _, _) = collect(r.chat(req).await.unwrap()).await;
    let last = items.last().unwrap().as_ref().unwrap();
    assert_eq!(last["usage"]["completion_tokens"], 4);
}

#[tokio::test]
async fn openai_tool_call_roundtrip() {
    let fake = Fake::start().await;
    fake.script(
        "p",
        vec![Reply::Json(json!({
            "id": "chatcmpl-t", "object": "chat.completion", "created": 1, "model": "gpt-4o-mini",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": null,
                "tool_calls": [{"id": "call_1", "type": "function",
                    "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]}}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 7, "total_tokens": 27}
        }))],
    );
    let cfg = gateway(
        vec![openai_dep(&fake, "default", "p")],
        &[],
        RoutingStrategy::SimpleShuffle,
        0,
    );
    let r = router(&cfg);
    let tools = json!([{"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
    let req = json!({"model": "default", "messages": [{"role": "user", "content": "Weather?"}],
        "tools": tools, "tool_choice": "auto"});
    let (response, usage, _) = complete(r.chat(req).await.unwrap());
    let call = &response["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["name"], "get_weather");
    assert_eq!(response["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(usage.completion_tokens, 7);
    assert_eq!(fake.requests("p")[0].body["tools"], tools);
}

#[tokio::test]
async fn messages_endpoint_over_an_openai_provider() {
    let fake = Fake::start().await;
    fake.script(
        "p",
        vec![ok("Bonjour"), Reply::Sse(openai_frames(&["Bon", "jour"]))],
    );
    let cfg = gateway(
        vec![openai_dep(&fake, "default", "p")],
        &[],
        RoutingStrategy::SimpleShuffle,
        0,
    );
    let r = router(&cfg);
    let anthropic_req = json!({"model": "default", "max_tokens": 50, "system": "Speak French.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Hello"}]}]});

    let openai_req = anthropic_request_to_openai(anthropic_req.clone()).unwrap();
    let (response, _, _) = complete(r.chat(openai_req).await.unwrap());
    let message = openai_response_to_anthropic(response);
    assert_eq!(message["type"], "message");
    assert_eq!(message["model"], "default");
    assert_eq!(
        message["content"],
        json!([{"type": "text", "text": "Bonjour"}])
    );
    assert_eq!(message["stop_reason"], "end_turn");
    assert_eq!(
        message["usage"],
        json!({"input_tokens": 9, "output_tokens": 3})
    );
    let sent = &fake.requests("p")[0].body;
    assert_eq!(
        sent["messages"][0],
        json!({"role": "system", "content": "Speak French."})
    );
    // OpenAI gets the bound as `max_completion_tokens` (its current field).
    assert_eq!(sent["max_completion_tokens"], 50);
    assert!(sent.get("max_tokens").is_none(), "{sent}");

    let mut streaming = anthropic_req;
    streaming["stream"] = Value::Bool(true);
    let openai_req = anthropic_request_to_openai(streaming).unwrap();
    let ChatOutcome::Stream { events, .. } = r.chat(openai_req).await.unwrap() else {
        panic!("expected a stream");
    };
    let events: Vec<_> = openai_stream_to_anthropic(events, "default")
        .collect()
        .await;
    let events: Vec<_> = events.into_iter().map(Result::unwrap).collect();
    let names: Vec<&str> = events.iter().map(|e| e.event).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    let text: String = events
        .iter()
        .filter_map(|e| e.data.pointer("/delta/text").and_then(Value::as_str))
        .collect();
    assert_eq!(text, "Bonjour");
    // Usage reaches the Anthropic client: the converted request asked for it.
    assert_eq!(events[5].data["usage"]["output_tokens"], 4);
    assert_eq!(events[5].data["delta"]["stop_reason"], "end_turn");
}

#[tokio::test]
async fn bad_requests_are_rejected_before_routing() {
    let fake = Fake::start().await;
    let cfg = gateway(
        vec![openai_dep(&fake, "default", "p")],
        &[],
        RoutingStrategy::SimpleShuffle,
        0,
    );
    let r = router(&cfg);
    let err = r.chat(json!({"model": "default"})).await.unwrap_err();
    assert!(matches!(err, LlmError::BadRequest(_)));
    assert_eq!(err.to_openai_error().0, 400);
    assert_eq!(fake.count("p"), 0);
}
