//! The provider key never leaves in an error, a Debug output or (after
//! redaction) a response body, even when the upstream echoes it.

use serde_json::json;

use super::*;
use crate::gateway::llm::redact::{REDACTED, redact_secrets};

/// A key that matches no known key format: only the configured-secret layer
/// can catch it.
const PLAIN_KEY: &str = "plain-custom-credential-9z8y7x6w";

fn assert_clean(text: &str) {
    assert!(!text.contains(KEY), "key leaked: {text}");
    assert!(!text.contains(PLAIN_KEY), "key leaked: {text}");
}

fn everything(err: &LlmError) -> String {
    format!(
        "{err}\n{err:?}\n{}\n{}",
        err.to_openai_error().1,
        err.to_anthropic_error().1
    )
}

#[tokio::test]
async fn key_echoed_in_an_auth_error_is_redacted() {
    let fake = Fake::start().await;
    let echo = json!({"error": {"message": format!("Incorrect API key provided: {KEY}. Bearer {KEY}"),
        "type": "invalid_request_error", "code": "invalid_api_key"}});
    fake.script("p", vec![status(401, &echo.to_string())]);
    let cfg = gateway(
        vec![openai_dep(&fake, "default", "p")],
        &[],
        RoutingStrategy::SimpleShuffle,
        0,
    );
    let r = router(&cfg);
    let err = r.chat(chat_request("default")).await.unwrap_err();
    assert!(
        matches!(err, LlmError::Upstream { status: 401, .. }),
        "{err:?}"
    );
    assert_clean(&everything(&err));
    assert!(err.to_string().contains(REDACTED));
    assert_eq!(err.to_openai_error().0, 401);
    assert_clean(&format!("{r:?}"));
}

#[tokio::test]
async fn custom_key_echoed_by_a_compatible_server_is_redacted() {
    let fake = Fake::start().await;
    fake.script(
        "p",
        vec![
            status(400, &format!("bad request from key {PLAIN_KEY}")),
            status(
                500,
                &format!("{{\"error\": \"internal, key={PLAIN_KEY}\"}}"),
            ),
        ],
    );
    let mut d = dep(
        "default",
        "openai_compatible/local-model",
        format!("{}/p/v1", fake.base),
    );
    d.litellm_params.api_key = Some(PLAIN_KEY.into());
    let cfg = gateway(vec![d], &[], RoutingStrategy::SimpleShuffle, 1);
    let r = router(&cfg);
    let err = r.chat(chat_request("default")).await.unwrap_err();
    assert!(matches!(err, LlmError::Upstream { status: 400, .. }));
    assert_clean(&everything(&err));
    // The key did go upstream, as a bearer token.
    assert_eq!(
        fake.requests("p")[0].headers["authorization"],
        format!("Bearer {PLAIN_KEY}").as_str()
    );
    let err = r.chat(chat_request("default")).await.unwrap_err();
    assert!(matches!(err, LlmError::AllFailed { .. }), "{err:?}");
    assert_clean(&everything(&err));
}

#[tokio::test]
async fn key_echoed_in_a_successful_answer_is_removed_by_redact() {
    let fake = Fake::start().await;
    fake.script(
        "p",
        vec![ok(&format!(
            "your key is {KEY}, and mine is sk-ant-api03-someoneelses0123456789"
        ))],
    );
    let cfg = gateway(
        vec![openai_dep(&fake, "default", "p")],
        &[],
        RoutingStrategy::SimpleShuffle,
        0,
    );
    let r = router(&cfg);
    let (response, _, _) = complete(r.chat(chat_request("default")).await.unwrap());
    let body = r.redact(&response.to_string());
    assert_clean(&body);
    assert!(!body.contains("someoneelses"), "{body}");
    let parsed: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        parsed["choices"][0]["message"]["content"],
        format!("your key is {REDACTED}, and mine is {REDACTED}")
    );
    assert_eq!(redact_secrets(&response.to_string(), &[KEY]), body);
}

#[tokio::test]
async fn key_echoed_in_a_stream_error_event_is_redacted() {
    let fake = Fake::start().await;
    let mut frames = openai_frames(&["hi"]);
    frames.truncate(2);
    frames.push(format!(
        "data: {}\n\n",
        json!({"error": {"message": format!("key {PLAIN_KEY} revoked"), "code": 500}})
    ));
    fake.script("p", vec![Reply::Sse(frames)]);
    let mut d = openai_dep(&fake, "default", "p");
    d.litellm_params.api_key = Some(PLAIN_KEY.into());
    let cfg = gateway(vec![d], &[], RoutingStrategy::SimpleShuffle, 0);
    let r = router(&cfg);
    let (items, _, _) = collect(r.chat(stream_request("default")).await.unwrap()).await;
    let err = items.last().unwrap().as_ref().unwrap_err();
    assert!(matches!(err, LlmError::StreamInterrupted { .. }));
    assert_clean(&everything(err));
    assert!(err.to_string().contains("revoked"));
}
