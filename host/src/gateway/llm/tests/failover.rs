//! Retries, failover, timeouts, broken streams and cooldown.

use std::time::{Duration, Instant};

use super::*;

fn primary_and_backup(fake: &Fake, retries: u32) -> Gateway {
    gateway(
        vec![
            openai_dep(fake, "default", "p"),
            openai_dep(fake, "backup", "b"),
        ],
        &[("default", &["backup"])],
        RoutingStrategy::SimpleShuffle,
        retries,
    )
}

#[tokio::test]
async fn rate_limit_fails_over_to_the_fallback_at_once() {
    let fake = Fake::start().await;
    fake.script(
        "p",
        vec![status(429, r#"{"error": {"message": "slow down"}}"#)],
    );
    fake.script("b", vec![ok("from backup")]);
    let r = router(&primary_and_backup(&fake, 3));
    let (response, _, deployment) = complete(r.chat(chat_request("default")).await.unwrap());
    assert_eq!(deployment, "backup#0 (openai/gpt-4o-mini)");
    assert_eq!(response["choices"][0]["message"]["content"], "from backup");
    assert_eq!(
        response["model"], "default",
        "the answer names the requested alias"
    );
    assert_eq!(
        fake.count("p"),
        1,
        "a 429 is not retried on the same deployment"
    );
}

#[tokio::test]
async fn rate_limit_tries_the_next_deployment_of_the_alias_first() {
    let fake = Fake::start().await;
    fake.script("p0", vec![status(429, "busy")]);
    fake.script("p1", vec![status(429, "busy")]);
    fake.script("b", vec![ok("from backup")]);
    let cfg = gateway(
        vec![
            openai_dep(&fake, "default", "p0"),
            openai_dep(&fake, "default", "p1"),
            openai_dep(&fake, "backup", "b"),
        ],
        &[("default", &["backup"])],
        RoutingStrategy::SimpleShuffle,
        0,
    );
    let r = router(&cfg);
    let (_, _, deployment) = complete(r.chat(chat_request("default")).await.unwrap());
    assert_eq!(deployment, "backup#0 (openai/gpt-4o-mini)");
    assert_eq!((fake.count("p0"), fake.count("p1")), (1, 1));
}

#[tokio::test]
async fn server_error_is_retried_then_falls_back() {
    let fake = Fake::start().await;
    fake.script("p", vec![status(500, "boom")]);
    fake.script("b", vec![ok("from backup")]);
    let r = router(&primary_and_backup(&fake, 2));
    let (_, _, deployment) = complete(r.chat(chat_request("default")).await.unwrap());
    assert_eq!(deployment, "backup#0 (openai/gpt-4o-mini)");
    assert_eq!(fake.count("p"), 3, "one call and two retries");
}

#[tokio::test]
async fn server_error_retry_prefers_another_deployment() {
    let fake = Fake::start().await;
    fake.script("x", vec![status(503, "down"), ok("x")]);
    fake.script("y", vec![status(502, "down"), ok("y")]);
    let cfg = gateway(
        vec![
            openai_dep(&fake, "default", "x"),
            openai_dep(&fake, "default", "y"),
        ],
        &[],
        RoutingStrategy::SimpleShuffle,
        2,
    );
    let r = router(&cfg);
    let (response, _, deployment) = complete(r.chat(chat_request("default")).await.unwrap());
    // Both were tried once before either was retried; the second retry went
    // back to the last one (the only one left).
    assert_eq!(fake.count("x") + fake.count("y"), 3);
    assert!(fake.count("x") >= 1 && fake.count("y") >= 1);
    let second = if fake.count("x") == 2 { "x" } else { "y" };
    assert_eq!(response["choices"][0]["message"]["content"], second);
    assert!(deployment.starts_with("default#"));
}

#[tokio::test]
async fn server_error_recovers_on_retry() {
    let fake = Fake::start().await;
    fake.script("p", vec![status(500, "boom"), ok("second try")]);
    fake.script("b", vec![ok("from backup")]);
    let r = router(&primary_and_backup(&fake, 1));
    let (response, _, deployment) = complete(r.chat(chat_request("default")).await.unwrap());
    assert_eq!(deployment, "default#0 (openai/gpt-4o-mini)");
    assert_eq!(response["choices"][0]["message"]["content"], "second try");
    assert_eq!(fake.count("b"), 0);
}

#[tokio::test]
async fn connection_error_is_retried_then_falls_back() {
    let fake = Fake::start().await;
    fake.script("b", vec![ok("from backup")]);
    // A loopback port nobody listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}/v1", closed.local_addr().unwrap());
    drop(closed);
    let cfg = gateway(
        vec![
            dep("default", "openai/gpt-4o-mini", dead),
            openai_dep(&fake, "backup", "b"),
        ],
        &[("default", &["backup"])],
        RoutingStrategy::SimpleShuffle,
        1,
    );
    let r = router(&cfg);
    let (_, _, deployment) = complete(r.chat(chat_request("default")).await.unwrap());
    assert_eq!(deployment, "backup#0 (openai/gpt-4o-mini)");
}

#[tokio::test]
async fn timeout_fails_over_without_retry() {
    let fake = Fake::start().await;
    fake.script("p", vec![hang()]);
    fake.script("b", vec![ok("from backup")]);
    let r = router(&primary_and_backup(&fake, 3));
    let started = Instant::now();
    let (_, _, deployment) = complete(r.chat(chat_request("default")).await.unwrap());
    assert_eq!(deployment, "backup#0 (openai/gpt-4o-mini)");
    assert_eq!(fake.count("p"), 1);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn deployment_timeout_overrides_the_gateway_timeout() {
    let fake = Fake::start().await;
    fake.script(
        "p",
        vec![Reply::Delay(
            Duration::from_millis(800),
            Box::new(ok("slow but fine")),
        )],
    );
    let mut slow = openai_dep(&fake, "default", "p");
    slow.litellm_params.timeout = Some(3.0);
    let cfg = gateway(vec![slow], &[], RoutingStrategy::SimpleShuffle, 0);
    let r = router(&cfg);
    let (response, _, _) = complete(r.chat(chat_request("default")).await.unwrap());
    assert_eq!(
        response["choices"][0]["message"]["content"],
        "slow but fine"
    );
}

#[tokio::test]
async fn stream_failing_before_its_first_chunk_fails_over() {
    let fake = Fake::start().await;
    // Headers, then the connection drops before any event.
    fake.script("p", vec![Reply::SseThenDrop(vec![])]);
    fake.script("b", vec![Reply::Sse(openai_frames(&["from ", "backup"]))]);
    let r = router(&primary_and_backup(&fake, 0));
    let (items, deployment, _) = collect(r.chat(stream_request("default")).await.unwrap()).await;
    assert_eq!(deployment, "backup#0 (openai/gpt-4o-mini)");
    assert_eq!(streamed_text(&items), "from backup");
    assert!(items.iter().all(Result::is_ok));

    // Headers, then silence past the timeout: fails over too.
    let fake = Fake::start().await;
    fake.script(
        "p",
        vec![Reply::SseThenHang(vec![": keep-alive comment\n\n".into()])],
    );
    fake.script("b", vec![Reply::Sse(openai_frames(&["late"]))]);
    let r = router(&primary_and_backup(&fake, 3));
    let (items, deployment, _) = collect(r.chat(stream_request("default")).await.unwrap()).await;
    assert_eq!(deployment, "backup#0 (openai/gpt-4o-mini)");
    assert_eq!(streamed_text(&items), "late");
    assert_eq!(fake.count("p"), 1);
}

#[tokio::test]
async fn stream_dropped_midway_ends_with_an_error_item() {
    let fake = Fake::start().await;
    let mut frames = openai_frames(&["partial ", "answer"]);
    frames.truncate(3); // role chunk + two pieces, no finish, no [DONE]
    fake.script("p", vec![Reply::SseThenDrop(frames)]);
    fake.script("b", vec![ok("unused")]);
    let r = router(&primary_and_backup(&fake, 2));
    let (items, deployment, usage) =
        collect(r.chat(stream_request("default")).await.unwrap()).await;
    assert_eq!(deployment, "default#0 (openai/gpt-4o-mini)");
    assert_eq!(items.len(), 4, "{items:?}");
    assert_eq!(streamed_text(&items), "partial answer");
    match items.last().unwrap() {
        Err(LlmError::StreamInterrupted { deployment, reason }) => {
            assert_eq!(deployment, "default#0 (openai/gpt-4o-mini)");
            assert_eq!(reason, "connection lost");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(fake.count("b"), 0, "a started stream is not replayed");
    // Usage is still reported (estimated: the upstream sent none).
    let usage = usage.unwrap();
    assert!(
        usage.completion_tokens > 0 && usage.prompt_tokens > 0,
        "{usage:?}"
    );
}

#[tokio::test]
async fn stream_stalling_midway_ends_with_an_idle_timeout_item() {
    let fake = Fake::start().await;
    let mut frames = openai_frames(&["partial"]);
    frames.truncate(2);
    fake.script("p", vec![Reply::SseThenHang(frames)]);
    let r = router(&primary_and_backup(&fake, 0));
    let started = Instant::now();
    let (items, _, _) = collect(r.chat(stream_request("default")).await.unwrap()).await;
    assert!(started.elapsed() < Duration::from_secs(2));
    match items.last().unwrap() {
        Err(e @ LlmError::StreamInterrupted { reason, .. }) => {
            assert_eq!(reason, "idle timeout");
            assert_eq!(e.to_openai_error().0, 502);
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn cooldown_skips_a_failed_deployment_until_it_expires() {
    let fake = Fake::start().await;
    fake.script("p", vec![status(429, "busy"), ok("primary again")]);
    fake.script("b", vec![ok("from backup")]);
    let r = router(&primary_and_backup(&fake, 0)).with_cooldown(Duration::from_millis(1000));
    let (_, _, first) = complete(r.chat(chat_request("default")).await.unwrap());
    assert_eq!(first, "backup#0 (openai/gpt-4o-mini)");
    // Cooling down: not even tried.
    let (_, _, second) = complete(r.chat(chat_request("default")).await.unwrap());
    assert_eq!(second, "backup#0 (openai/gpt-4o-mini)");
    assert_eq!(fake.count("p"), 1);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (_, _, third) = complete(r.chat(chat_request("default")).await.unwrap());
    assert_eq!(third, "default#0 (openai/gpt-4o-mini)");
}

#[tokio::test]
async fn retry_after_sets_the_cooldown() {
    let fake = Fake::start().await;
    fake.script(
        "p",
        vec![
            Reply::Status {
                status: 429,
                body: "busy".into(),
                retry_after: Some(0),
            },
            ok("primary again"),
        ],
    );
    fake.script("b", vec![ok("from backup")]);
    // The default cooldown is long; the upstream's Retry-After: 0 wins.
    let r = router(&primary_and_backup(&fake, 0));
    let (_, _, first) = complete(r.chat(chat_request("default")).await.unwrap());
    assert_eq!(first, "backup#0 (openai/gpt-4o-mini)");
    let (_, _, second) = complete(r.chat(chat_request("default")).await.unwrap());
    assert_eq!(second, "default#0 (openai/gpt-4o-mini)");
}

#[tokio::test]
async fn a_cooling_deployment_is_used_when_it_is_the_only_one_left() {
    let fake = Fake::start().await;
    fake.script("p", vec![status(429, "busy"), ok("recovered")]);
    let cfg = gateway(
        vec![openai_dep(&fake, "default", "p")],
        &[],
        RoutingStrategy::SimpleShuffle,
        0,
    );
    let r = router(&cfg);
    let err = r.chat(chat_request("default")).await.unwrap_err();
    assert!(
        matches!(&err, LlmError::AllFailed { attempts, .. } if attempts == &["default#0: 429"])
    );
    assert_eq!(err.to_openai_error().0, 429);
    let (response, _, _) = complete(r.chat(chat_request("default")).await.unwrap());
    assert_eq!(response["choices"][0]["message"]["content"], "recovered");
}

#[tokio::test]
async fn cyclic_fallbacks_do_not_loop() {
    let fake = Fake::start().await;
    fake.script("a", vec![status(429, "busy")]);
    fake.script("b", vec![status(429, "busy")]);
    fake.script("c", vec![status(429, "busy")]);
    let cfg = gateway(
        vec![
            openai_dep(&fake, "a", "a"),
            openai_dep(&fake, "b", "b"),
            openai_dep(&fake, "c", "c"),
        ],
        &[("a", &["b"]), ("b", &["a", "c"]), ("c", &["a", "b"])],
        RoutingStrategy::SimpleShuffle,
        2,
    );
    let r = router(&cfg);
    assert_eq!(r.fallback_chain("a"), ["a", "b", "c"]);
    let err = r.chat(chat_request("a")).await.unwrap_err();
    match &err {
        LlmError::AllFailed { alias, attempts } => {
            assert_eq!(alias, "a");
            assert_eq!(attempts, &["a#0: 429", "b#0: 429", "c#0: 429"]);
        }
        other => panic!("{other:?}"),
    }
    let (code, body) = err.to_openai_error();
    assert_eq!(code, 429);
    assert_eq!(body["error"]["code"], "rate_limit_exceeded");
    assert_eq!(
        (fake.count("a"), fake.count("b"), fake.count("c")),
        (1, 1, 1)
    );
}

#[tokio::test]
async fn everything_timing_out_is_a_504_and_mixed_failures_a_502() {
    let fake = Fake::start().await;
    fake.script("p", vec![hang()]);
    fake.script("b", vec![hang()]);
    let r = router(&primary_and_backup(&fake, 0));
    let err = r.chat(chat_request("default")).await.unwrap_err();
    assert!(matches!(&err, LlmError::AllFailed { attempts, .. }
        if attempts == &["default#0: timeout", "backup#0: timeout"]));
    assert_eq!(err.to_openai_error().0, 504);

    let fake = Fake::start().await;
    fake.script("p", vec![status(500, "boom")]);
    fake.script("b", vec![hang()]);
    let r = router(&primary_and_backup(&fake, 1));
    let err = r.chat(chat_request("default")).await.unwrap_err();
    assert!(
        matches!(&err, LlmError::AllFailed { attempts, .. }
        if attempts == &["default#0: 500", "default#0: 500", "backup#0: timeout"]),
        "{err:?}"
    );
    let (code, body) = err.to_openai_error();
    assert_eq!(code, 502);
    assert_eq!(body["error"]["type"], "server_error");
}

#[tokio::test]
async fn unknown_alias_is_a_404() {
    let fake = Fake::start().await;
    let cfg = primary_and_backup(&fake, 0);
    let r = router(&cfg);
    let err = r.chat(chat_request("gpt-5")).await.unwrap_err();
    match &err {
        LlmError::UnknownModel { alias, known } => {
            assert_eq!(alias, "gpt-5");
            assert_eq!(known, &["backup", "default"]);
        }
        other => panic!("{other:?}"),
    }
    let (code, body) = err.to_openai_error();
    assert_eq!(code, 404);
    assert_eq!(body["error"]["code"], "model_not_found");
    assert_eq!(body["error"]["type"], "invalid_request_error");
}

#[tokio::test]
async fn invalid_configuration_is_refused() {
    let fake = Fake::start().await;
    let client = crate::gateway::llm::UpstreamClient::new().unwrap();
    let cfg = gateway(
        vec![
            openai_dep(&fake, "default", "p"),
            dep("x", "vertex/gemini", "http://127.0.0.1:1".into()),
        ],
        &[],
        RoutingStrategy::SimpleShuffle,
        0,
    );
    let err = LlmRouter::new(&cfg, client.clone())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("gateway.model_list[1]") && err.contains("vertex/gemini"),
        "{err}"
    );
    let cfg = gateway(
        vec![openai_dep(&fake, "default", "p")],
        &[("default", &["nowhere"])],
        RoutingStrategy::SimpleShuffle,
        0,
    );
    let err = LlmRouter::new(&cfg, client).unwrap_err().to_string();
    assert!(err.contains("nowhere"), "{err}");
}
