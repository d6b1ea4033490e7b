//! The gateway through the real `pincer gateway serve`, in front of local
//! fake providers that speak the OpenAI protocol, driven by the official
//! `openai` and `anthropic` Python clients and by plain HTTP. Loopback only.

use crate::support;

use serde_json::{Value, json};
use support::fake_llm::{Behaviour, FakeUpstream};
use support::gateway::{Served as Gateway, metric, python};
use support::ok;

/// A provider key the gateway holds; it must never come out anywhere.
const PROVIDER_KEY: &str = "sk-pincer-test-PROVIDERKEY-0123456789abcdef";

/// The gateway with a key minted for workspace `main`.
struct Served {
    gateway: Gateway,
    key: String,
}

impl std::ops::Deref for Served {
    type Target = Gateway;
    fn deref(&self) -> &Gateway {
        &self.gateway
    }
}

impl Served {
    /// `gateway serve` with `gateway_yaml` (the `gateway:` section body) and
    /// `workspaces_yaml` (workspace `main`'s body); the provider key is in
    /// the environment, read by the config as `${FAKE_PROVIDER_KEY}`.
    fn start(gateway_yaml: &str, workspaces_yaml: &str) -> Self {
        let gateway = Gateway::start(
            &format!("gateway:\n{gateway_yaml}workspaces:\n  main:\n{workspaces_yaml}"),
            &[("FAKE_PROVIDER_KEY", PROVIDER_KEY)],
        );
        let key = gateway.key("main");
        Self { gateway, key }
    }

    async fn post(
        &self,
        path: &str,
        key: Option<&str>,
        body: String,
    ) -> (u16, reqwest::header::HeaderMap, Value) {
        let mut request = pincer::gateway::default_client()
            .expect("http client")
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body);
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        answer(request).await
    }

    /// A `tools/call` of `tool` on `/mcp`, as one stateless JSON-RPC request.
    async fn mcp_call(&self, tool: &str) -> (u16, reqwest::header::HeaderMap, Value) {
        let request = pincer::gateway::default_client()
            .expect("http client")
            .post(format!("{}/mcp", self.base))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .bearer_auth(&self.key)
            .body(
                json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": tool, "arguments": {}}})
                .to_string(),
            );
        answer(request).await
    }

    async fn chat(&self, model: &str) -> (u16, reqwest::header::HeaderMap, Value) {
        let body = json!({"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16});
        self.post(
            "/v1/chat/completions",
            Some(&self.key.clone()),
            body.to_string(),
        )
        .await
    }
}

/// Sends `request`; its status, headers and body (JSON, else the text).
async fn answer(request: reqwest::RequestBuilder) -> (u16, reqwest::header::HeaderMap, Value) {
    let response = request.send().await.expect("gateway answers");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response.text().await.expect("body");
    (
        status,
        headers,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn deployment(alias: &str, upstream: &FakeUpstream, extra: &str) -> String {
    format!(
        "    - model_name: {alias}\n      litellm_params: {{model: openai_compatible/fake-{alias}, api_base: \"{}\", api_key: \"${{FAKE_PROVIDER_KEY}}\"{extra}}}\n",
        upstream.base_url
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_openai_and_anthropic_clients_work_through_the_gateway() {
    let answer =
        FakeUpstream::spawn(Behaviour::Answer("Hello from the fake provider".into())).await;
    let tools = FakeUpstream::spawn(Behaviour::ToolCall {
        name: "get_weather".into(),
        arguments: r#"{"city":"Paris"}"#.into(),
    })
    .await;
    let served = Served::start(
        &format!(
            "  model_list:\n{}{}",
            deployment("default", &answer, ""),
            deployment("tools", &tools, "")
        ),
        "    {}\n",
    );
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/python/gateway_clients.py"
    );
    let out = tokio::process::Command::new(python())
        .args([script, &served.base, &served.key])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "python clients failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(got["models"], json!(["default", "tools"]));
    assert_eq!(got["chat"], "Hello from the fake provider");
    assert_eq!(got["chat_usage"], json!([11, 7]));
    assert_eq!(got["chat_deployment"], "default#0");
    assert_eq!(got["stream"], "Hello from the fake provider");
    assert_eq!(got["tool"], json!(["get_weather", {"city": "Paris"}]));
    assert_eq!(got["tool_finish"], "tool_calls");
    assert_eq!(got["unknown_model"], json!([404, "model_not_found"]));
    assert_eq!(got["anthropic"], "Hello from the fake provider");
    assert_eq!(got["anthropic_usage"], json!([11, 7]));
    assert_eq!(got["anthropic_stream"], "Hello from the fake provider");
    // The provider got the model it was configured with, and our key.
    let sent = answer.received();
    assert_eq!(sent[0]["model"], "fake-default");
    let listed = |usage: &str| {
        usage
            .lines()
            .any(|l| l.starts_with("main") && l.contains("default"))
    };
    let usage = served.usage_showing(&[], listed);
    assert!(listed(&usage), "{usage}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_fall_back_and_name_the_deployment_that_answered() {
    let good = FakeUpstream::spawn(Behaviour::Answer("from the fallback".into())).await;
    let limited = FakeUpstream::spawn(Behaviour::Status(429)).await;
    let broken = FakeUpstream::spawn(Behaviour::Status(500)).await;
    let hanging = FakeUpstream::spawn(Behaviour::Hang).await;
    let dropping = FakeUpstream::spawn(Behaviour::DropMidStream).await;
    let served = Served::start(
        &format!(
            "  model_list:\n{}{}{}{}{}  fallbacks: [{{limited: [good]}}, {{broken: [good]}}, {{hanging: [good]}}]\n  num_retries: 1\n",
            deployment("good", &good, ""),
            deployment("limited", &limited, ""),
            deployment("broken", &broken, ""),
            deployment("hanging", &hanging, ", timeout: 1"),
            deployment("dropping", &dropping, ""),
        ),
        "    {}\n",
    );
    for alias in ["limited", "broken", "hanging"] {
        let (status, headers, body) = served.chat(alias).await;
        assert_eq!(status, 200, "{alias}: {body}");
        assert_eq!(
            body["choices"][0]["message"]["content"], "from the fallback",
            "{alias}"
        );
        assert_eq!(headers["x-pincer-deployment"], "good#0", "{alias}");
    }
    assert_eq!(
        limited.received().len(),
        1,
        "a 429 must not be retried on the same deployment"
    );
    assert_eq!(
        broken.received().len(),
        2,
        "a 500 is retried once (num_retries: 1), then falls back"
    );

    // A stream that breaks midway cannot be replayed: it ends with a clear error.
    let body = json!({"model": "dropping", "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    let (status, _, text) = served
        .post(
            "/v1/chat/completions",
            Some(&served.key.clone()),
            body.to_string(),
        )
        .await;
    assert_eq!(status, 200);
    let text = text.as_str().unwrap_or_default().to_string();
    assert!(
        text.contains("partial") && text.contains("\"error\""),
        "{text}"
    );

    // No fallback left: a clear OpenAI-style error.
    let (status, _, body) = served.chat("dropping").await;
    assert!(status >= 500, "{status} {body}");
    assert!(body["error"]["message"].as_str().is_some(), "{body}");

    // The audit record names the deployment that answered.
    let answered = |calls: &[String], alias: &str| {
        calls
            .iter()
            .any(|d| d.starts_with(&format!("{alias} answered by good#0")))
    };
    let aliases = ["limited", "broken", "hanging"];
    let calls = served.audited_showing("main", "gateway.call", |calls| {
        aliases.iter().all(|alias| answered(calls, alias))
    });
    for alias in aliases {
        assert!(answered(&calls, alias), "{alias}: {calls:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_clear_errors_and_the_gateway_keeps_serving() {
    let answer = FakeUpstream::spawn(Behaviour::Answer("fine".into())).await;
    let served = Served::start(
        &format!(
            "  max_request_bytes: 2048\n  model_list:\n{}",
            deployment("default", &answer, "")
        ),
        "    {}\n",
    );
    let key = served.key.clone();
    let cases: Vec<(&str, Option<&str>, String, u16, &str)> = vec![
        ("malformed JSON", Some(&key), "{not json".into(), 400, "invalid_json"),
        ("not an object", Some(&key), "[1,2]".into(), 400, "invalid_request"),
        ("unknown model", Some(&key), json!({"model": "gpt-nope", "messages": []}).to_string(), 404, "model_not_found"),
        ("no key", None, json!({"model": "default", "messages": []}).to_string(), 401, "missing_api_key"),
        ("invalid key", Some("pk-pincer-main-not-a-real-key"), json!({"model": "default", "messages": []}).to_string(), 401, "invalid_api_key"),
        ("oversized", Some(&key), json!({"model": "default", "messages": [{"role": "user", "content": "x".repeat(4096)}]}).to_string(), 413, "request_too_large"),
    ];
    for (case, key, body, status, code) in cases {
        let (got, _, body) = served.post("/v1/chat/completions", key, body).await;
        assert_eq!(got, status, "{case}: {body}");
        assert_eq!(body["error"]["code"], code, "{case}: {body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{case}: {body}"
        );
    }
    ok(served.cli(&["gateway", "keys", "revoke", "main", "default"]));
    let (status, _, body) = served.chat("default").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (401, Some("invalid_api_key")),
        "revoked key: {body}"
    );
    let listed = ok(served.cli(&["gateway", "keys", "list", "main"]));
    assert!(
        listed.contains("revoked") && !listed.contains(&key),
        "{listed}"
    );

    let fresh = ok(served.cli(&["gateway", "keys", "create", "main", "--name", "second"]));
    let (status, _, body) = served
        .post(
            "/v1/chat/completions",
            Some(fresh.trim()),
            json!({"model": "default", "messages": [{"role": "user", "content": "hi"}]})
                .to_string(),
        )
        .await;
    assert_eq!(
        status, 200,
        "the gateway stopped serving after bad input: {body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_keys_never_leak_even_when_the_upstream_echoes_them() {
    let echo = FakeUpstream::spawn(Behaviour::EchoAuthorization).await;
    let served = Served::start(
        &format!("  model_list:\n{}", deployment("default", &echo, "")),
        "    {}\n",
    );
    let (status, _, body) = served.chat("default").await;
    assert_eq!(status, 200, "{body}");
    assert!(echo.received().len() == 1);
    let text = body.to_string();
    assert!(text.contains("you sent"), "{text}");
    assert!(
        !text.contains(PROVIDER_KEY),
        "the provider key reached the client: {text}"
    );
    let stream = json!({"model": "default", "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    let (_, _, streamed) = served
        .post(
            "/v1/chat/completions",
            Some(&served.key.clone()),
            stream.to_string(),
        )
        .await;
    assert!(
        !streamed.to_string().contains(PROVIDER_KEY),
        "the provider key reached a streaming client"
    );

    let home = served.sandbox.home();
    let log = served.log();
    assert!(
        !log.contains(PROVIDER_KEY),
        "the provider key is in the gateway log"
    );
    // The state as a file to scan: the SQLite one, or every row of the
    // PostgreSQL database copied into one.
    let file = match &served.sandbox.state() {
        pincer::db::Location::Sqlite(path) => path.clone(),
        pincer::db::Location::Postgres(url) => {
            let copied = home.join("copied.db");
            let to = format!("sqlite:{}", copied.display());
            ok(served
                .sandbox
                .pincer(&["state", "copy", "--from", url, "--to", &to]));
            copied
        }
    };
    let db = std::fs::read(&file).unwrap();
    let wal = std::fs::read(home.join("pincer.db-wal")).unwrap_or_default();
    for (name, bytes) in [("the state", db), ("pincer.db-wal", wal)] {
        assert!(
            !bytes
                .windows(PROVIDER_KEY.len())
                .any(|w| w == PROVIDER_KEY.as_bytes()),
            "the provider key is in {name}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_calls_never_overspend_the_budget() {
    let answer = FakeUpstream::spawn(Behaviour::Answer("ok".into())).await;
    let served = std::sync::Arc::new(Served::start(
        &format!("  model_list:\n{}", deployment("default", &answer, "")),
        "    budget: {daily_tokens: 400}\n",
    ));
    let calls: Vec<_> = (0..50)
        .map(|_| {
            let served = served.clone();
            tokio::spawn(async move { served.chat("default").await })
        })
        .collect();
    let (mut answered, mut refused) = (0, 0);
    for call in calls {
        let (status, _, body) = call.await.unwrap();
        match status {
            200 => answered += 1,
            429 => {
                assert_eq!(body["error"]["code"], "budget_exceeded", "{body}");
                refused += 1;
            }
            other => panic!("unexpected {other}: {body}"),
        }
    }
    assert_eq!(answered + refused, 50);
    assert!(
        answered >= 1 && refused >= 1,
        "answered {answered}, refused {refused}"
    );
    // Every answer used 18 tokens (11 + 7): the spend stays within the limit.
    let spent = answered * 18;
    assert!(
        spent <= 400,
        "{answered} answers spent {spent} tokens over a budget of 400"
    );
    assert_eq!(
        answer.received().len(),
        answered,
        "a refused call reached the provider"
    );
    let calls = format!(" {answered} ");
    let usage = served.usage_showing(&["--workspace", "main"], |u| u.contains(&calls));
    assert!(usage.contains(&calls), "{usage}");
}

/// A refused call is audited. While another process holds the database's
/// lock, that record must not hold up `gateway serve`'s one thread: with
/// refused model and MCP tool calls in flight, `/health` and an allowed
/// call answer at once, and every refusal is in the audit once the lock is
/// gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_audited_while_the_store_is_locked_do_not_stall_the_gateway() {
    let answer = FakeUpstream::spawn(Behaviour::Answer("fine".into())).await;
    let served = Served::start(
        &format!(
            "  model_list:\n{}{}",
            deployment("default", &answer, ""),
            deployment("other", &answer, "")
        ),
        "    models: [default]\n",
    );
    // Verified once before the lock: the key is then remembered.
    assert_eq!(served.chat("default").await.0, 200);
    let lock = served.sandbox.lock_db();
    let refused = futures_util::future::join_all((0..4).map(|_| served.chat("other")));
    let refused_tools =
        futures_util::future::join_all((0..4).map(|_| served.mcp_call("shell__rm_rf")));
    let checks = async {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let started = std::time::Instant::now();
        let health = pincer::gateway::default_client()
            .expect("http client")
            .get(format!("{}/health", served.base))
            .send()
            .await
            .map(|r| r.status().as_u16());
        let health_took = started.elapsed();
        let started = std::time::Instant::now();
        let allowed = served.chat("default").await.0;
        (health, health_took, allowed, started.elapsed())
    };
    let (refused, refused_tools, (health, health_took, allowed, allowed_took)) =
        tokio::join!(refused, refused_tools, checks);
    lock.release();
    for (status, _, body) in &refused {
        assert_eq!(*status, 403, "{body}");
        assert_eq!(body["error"]["code"], "model_not_allowed", "{body}");
    }
    for (status, _, body) in &refused_tools {
        assert_eq!(*status, 200, "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("shell__rm_rf")),
            "{body}"
        );
    }
    assert!(
        health.as_ref().ok() == Some(&200) && health_took < std::time::Duration::from_secs(2),
        "/health: {health:?} after {health_took:?} while refusals waited on the lock\n{}",
        served.log()
    );
    assert!(
        allowed == 200 && allowed_took < std::time::Duration::from_secs(2),
        "an allowed call: {allowed} after {allowed_took:?}\n{}",
        served.log()
    );
    let denied = served.audited_showing("main", "gateway.denied", |d| d.len() >= 8);
    let count = |needle: &str| denied.iter().filter(|d| d.contains(needle)).count();
    assert_eq!(count("model `other`"), 4, "{denied:?}");
    assert_eq!(count("shell__rm_rf"), 4, "{denied:?} {refused_tools:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identical_requests_are_answered_from_the_cache_when_enabled() {
    let answer = FakeUpstream::spawn(Behaviour::Answer("cached answer".into())).await;
    let served = Served::start(
        &format!(
            "  cache: {{enabled: true, ttl_secs: 60}}\n  model_list:\n{}",
            deployment("default", &answer, "")
        ),
        "    {}\n",
    );
    let (first_status, first_headers, first) = served.chat("default").await;
    let (second_status, second_headers, second) = served.chat("default").await;
    assert_eq!((first_status, second_status), (200, 200));
    assert_eq!(first_headers["x-pincer-cache"], "miss");
    assert_eq!(second_headers["x-pincer-cache"], "hit");
    assert_eq!(first["choices"], second["choices"]);
    assert_eq!(
        answer.received().len(),
        1,
        "a cache hit reached the provider"
    );
    // Streaming requests are never cached.
    let stream = json!({"model": "default", "stream": true, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 16});
    let (_, headers, _) = served
        .post(
            "/v1/chat/completions",
            Some(&served.key.clone()),
            stream.to_string(),
        )
        .await;
    assert_eq!(headers["x-pincer-cache"], "miss");
    assert_eq!(answer.received().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_workspace_has_its_own_unix_socket() {
    let answer = FakeUpstream::spawn(Behaviour::Answer("over the socket".into())).await;
    let served = Served::start(
        &format!("  model_list:\n{}", deployment("default", &answer, "")),
        "    {}\n",
    );
    let socket = served.sandbox.home().join("run/main/gateway/gateway.sock");
    let body =
        json!({"model": "default", "messages": [{"role": "user", "content": "hi"}]}).to_string();
    let out = tokio::process::Command::new("curl")
        .args(["--silent", "--show-error", "--unix-socket"])
        .arg(&socket)
        .args([
            "-H",
            &format!("Authorization: Bearer {}", served.key),
            "-H",
            "content-type: application/json",
        ])
        .args(["--data", &body, "http://gateway/v1/chat/completions"])
        .output()
        .await
        .expect("curl");
    let answer: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(
        answer["choices"][0]["message"]["content"],
        "over the socket"
    );
}

/// `/metrics` on the TCP listener, parsed by the official
/// `prometheus_client` OpenMetrics parser after a few requests: requests by
/// outcome, tokens, the added-latency histogram and the budget left; a
/// workspace's unix socket has no `/metrics`.
#[tokio::test(flavor = "multi_thread")]
async fn metrics_count_requests_and_are_never_served_on_a_workspace_socket() {
    let answer = FakeUpstream::spawn(Behaviour::Answer("counted".into())).await;
    let served = Served::start(
        &format!(
            "  model_list:\n{}  prices: {{default: {{input_per_1m: 1000.0, output_per_1m: 2000.0}}}}\n",
            deployment("default", &answer, "")
        ),
        "    budget: {daily_usd: 5.0}\n    models: [default]\n",
    );
    for _ in 0..3 {
        let (status, _, body) = served.chat("default").await;
        assert_eq!(status, 200, "{body}\n{}", served.log());
    }
    // Made-up model names (a container chooses them) share one series.
    for unknown in ["nope", "nope-2", "nope-3"] {
        assert_eq!(served.chat(unknown).await.0, 404, "an unknown alias");
    }
    let scraped = support::gateway::scrape_metrics(&served.base);
    assert!(
        scraped["content_type"]
            .as_str()
            .unwrap()
            .starts_with("application/openmetrics-text"),
        "{scraped}"
    );
    let requests = |outcome: &str, model: &str| {
        metric(
            &scraped,
            "pincer_gateway_requests_total",
            json!({"workspace": "main", "model": model, "outcome": outcome}),
        )
    };
    assert_eq!(requests("ok", "default"), Some(3.0), "{scraped:#}");
    assert_eq!(requests("denied", "(unknown)"), Some(3.0), "{scraped:#}");
    assert_eq!(requests("denied", "nope"), None, "{scraped:#}");
    let tokens = metric(
        &scraped,
        "pincer_gateway_tokens_total",
        json!({"workspace": "main", "model": "default", "kind": "completion"}),
    );
    assert!(tokens.is_some_and(|t| t > 0.0), "{scraped:#}");
    assert_eq!(
        metric(
            &scraped,
            "pincer_gateway_added_latency_seconds_count",
            json!({"endpoint": "chat"})
        ),
        Some(6.0),
        "{scraped:#}"
    );
    let left = metric(
        &scraped,
        "pincer_budget_remaining_usd",
        json!({"workspace": "main", "window": "day"}),
    )
    .expect("the budget gauge");
    assert!(
        left < 5.0 && left > 4.0,
        "three calls spent a little of 5 USD: {left}"
    );

    let socket = served.sandbox.home().join("run/main/gateway/gateway.sock");
    let out = tokio::process::Command::new("curl")
        .args([
            "--silent",
            "--output",
            "/dev/null",
            "--write-out",
            "%{http_code}",
            "--unix-socket",
        ])
        .arg(&socket)
        // even with the workspace's own key
        .args(["-H", &format!("Authorization: Bearer {}", served.key)])
        .arg("http://gateway/metrics")
        .output()
        .await
        .expect("curl");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "404",
        "no /metrics on a workspace socket"
    );
}
