//! The plugin host against real first-party and hostile components.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::response::Redirect;
use axum::routing::{get, post};
use pincer::audit::AuditLog;
use pincer::plugins::CompileSource;
use pincer::plugins::api::{
    ChannelError, Event, EventBody, Frame, Header, HttpRequest, Message, Outbound, ToolError,
    TunnelError, WebhookRequest,
};
use pincer::plugins::{
    CallLimits, HostPaths, HttpReach, LoadedPlugin, PluginError, PluginHost, PluginPackage,
    PluginSource, Scope,
};
use serde_json::{Value, json};
use support::staged;

fn host(dir: &std::path::Path) -> PluginHost {
    let paths = HostPaths::under(dir);
    let audit = Arc::new(AuditLog::open(&dir.join(pincer::db::FILE_NAME)).expect("audit log"));
    PluginHost::new(paths, audit).expect("plugin host")
}

fn package(name: &str) -> PluginPackage {
    let dir = staged(name);
    PluginPackage::read(&dir, PluginSource::Dir(dir.clone())).expect("staged plugin")
}

fn load(host: &PluginHost, name: &str, config: Value) -> Arc<LoadedPlugin> {
    host.load(&package(name), Some(&config), CallLimits::default())
        .unwrap_or_else(|e| panic!("loading {name}: {e}"))
}

async fn invoke(
    host: &PluginHost,
    plugin: &LoadedPlugin,
    tool: &str,
    args: Value,
) -> Result<Value, ToolError> {
    let out = host
        .skill_invoke(plugin, tool, &args.to_string())
        .await
        .expect("plugin call")?;
    Ok(serde_json::from_str(&out.json).expect("tool output is JSON"))
}

/// `name` in `scope`, its HTTP reach narrowed by a workspace grant.
fn load_granted(
    host: &PluginHost,
    name: &str,
    scope: Scope,
    granted: &[&str],
) -> Arc<LoadedPlugin> {
    let package = package(name);
    let manifest = pincer::plugins::Manifest::parse(&package.manifest_text, name).unwrap();
    let reach = HttpReach {
        granted: Some(granted.iter().map(|s| s.to_string()).collect()),
        ..HttpReach::manifest_only(&manifest)
    };
    host.load_in(
        &package,
        Some(&json!({})),
        CallLimits::default(),
        &scope,
        Some(reach),
    )
    .unwrap_or_else(|e| panic!("loading {name}: {e}"))
}

fn webhook(method: &str, path: &str, headers: Vec<(&str, String)>, body: &str) -> WebhookRequest {
    WebhookRequest {
        method: method.into(),
        path: path.into(),
        query: String::new(),
        headers: headers
            .into_iter()
            .map(|(name, value)| Header {
                name: name.into(),
                value,
            })
            .collect(),
        body: body.as_bytes().to_vec(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skill_world_round_trips_json() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(dir.path());
    let calc = load(&host, "skill-calc", json!({}));
    let tools = host.skill_tools(&calc).await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["evaluate", "convert"]);
    for tool in &tools {
        let schema: Value = serde_json::from_str(&tool.input_schema).expect("schema is JSON");
        assert_eq!(schema["type"], "object");
    }
    let out = invoke(
        &host,
        &calc,
        "evaluate",
        json!({"expression": "2 * (3 + 4) ^ 2"}),
    )
    .await
    .unwrap();
    assert_eq!(out["result"], 98.0);
    let out = invoke(
        &host,
        &calc,
        "convert",
        json!({"value": 100, "from": "c", "to": "f"}),
    )
    .await
    .unwrap();
    assert_eq!(out["result"], 212.0);
    let err = invoke(&host, &calc, "evaluate", json!({"expression": "1/0"}))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ToolError::Failed(m) | ToolError::InvalidArgs(m) if m.contains("division by zero")),
        "{err:?}"
    );
    let err = invoke(&host, &calc, "evaluate", json!({"expr": "1"}))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ToolError::InvalidArgs(m) if m.contains("expression")),
        "{err:?}"
    );
    let err = invoke(&host, &calc, "nope", json!({})).await.unwrap_err();
    assert!(matches!(err, ToolError::UnknownTool(_)), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_compare_and_set_loses_no_concurrent_append() {
    let dir = tempfile::tempdir().unwrap();
    let host = Arc::new(host(dir.path()));
    let notes = load(&host, "skill-notes", json!({}));
    invoke(&host, &notes, "put", json!({"key": "log", "text": ""}))
        .await
        .unwrap();
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let (host, notes) = (host.clone(), notes.clone());
            tokio::spawn(async move {
                invoke(
                    &host,
                    &notes,
                    "append",
                    json!({"key": "log", "text": format!("<{i}>")}),
                )
                .await
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap().expect("append");
    }
    let got = invoke(&host, &notes, "get", json!({"key": "log"}))
        .await
        .unwrap();
    let text = got["text"].as_str().unwrap();
    for i in 0..8 {
        assert!(text.contains(&format!("<{i}>")), "append {i} lost: {text}");
    }
    // Another plugin's namespace does not see it.
    let other = invoke(&host, &notes, "list", json!({})).await.unwrap();
    assert!(other.to_string().contains("log"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observer_world_writes_json_lines() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(dir.path());
    let observer = load(&host, "observer-jsonl", json!({}));
    let message = Message {
        id: "m1".into(),
        conversation: "c1".into(),
        thread: None,
        sender: "u1".into(),
        sender_name: Some("Ada".into()),
        text: "你好, pincer".into(),
        timestamp_ms: 1_700_000_000_000,
        files: Vec::new(),
    };
    for body in [
        EventBody::MessageIn(message),
        EventBody::Error("boom".into()),
    ] {
        let event = Event {
            timestamp_ms: 1,
            workspace: Some("w".into()),
            session: None,
            body,
        };
        host.observe(&observer, &event).await.unwrap();
    }
    let file = dir
        .path()
        .join("plugin-data/workspace.default/observer-jsonl/events.jsonl");
    let text = std::fs::read_to_string(&file).expect("events file");
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["type"], "message_in");
    assert_eq!(lines[0]["text"], "你好, pincer");
    assert_eq!(lines[1]["type"], "error");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channel_world_handles_webhooks_frames_and_sends() {
    let received = Arc::new(Mutex::new(Vec::<Value>::new()));
    let sink = received.clone();
    let addr = support::serve(Router::new().route(
        "/out",
        post(move |body: String| {
            let sink = sink.clone();
            async move {
                sink.lock()
                    .unwrap()
                    .push(serde_json::from_str(&body).unwrap_or(Value::Null));
                axum::Json(json!({"id": "delivered-1"}))
            }
        }),
    ))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let host = host(dir.path());
    let channel = load(
        &host,
        "channel-webhook",
        json!({"outbound_url": format!("http://127.0.0.1:{}/out", addr.port()), "ws_url": "ws://127.0.0.1:1/ws", "allow_unsigned": true}),
    );

    let body = json!([
        {"id": "1", "conversation": "c", "sender": "u", "text": "one"},
        {"id": "2", "conversation": "c", "sender": "u", "text": "two", "thread": "t"}
    ])
    .to_string();
    let outcome = host
        .channel_webhook(&channel, &webhook("POST", "/", vec![], &body))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(outcome.response.status, 200);
    let texts: Vec<&str> = outcome.messages.iter().map(|m| m.text.as_str()).collect();
    assert_eq!(texts, ["one", "two"]);
    assert_eq!(outcome.messages[1].thread.as_deref(), Some("t"));

    let bad = host
        .channel_webhook(&channel, &webhook("POST", "/", vec![], "{not json"))
        .await
        .unwrap();
    assert!(matches!(bad, Err(ChannelError::BadRequest(_))), "{bad:?}");

    let connection = host
        .channel_connect(&channel)
        .await
        .unwrap()
        .unwrap()
        .expect("ws mode");
    assert_eq!(connection.url, "ws://127.0.0.1:1/ws");
    let frame = Frame::Text(
        json!({"type": "message", "id": "9", "conversation": "c", "sender": "u", "text": "framed"})
            .to_string(),
    );
    let outcome = host
        .channel_on_frame(&channel, &frame)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(outcome.messages[0].text, "framed");
    let Frame::Text(ack) = &outcome.replies[0] else {
        panic!("ack is text")
    };
    assert_eq!(
        serde_json::from_str::<Value>(ack).unwrap(),
        json!({"type": "ack", "id": "9"})
    );

    let delivery = host
        .channel_send(
            &channel,
            &Outbound {
                conversation: "c".into(),
                thread: None,
                text: "reply".into(),
                reply_to: Some("1".into()),
                actions: Vec::new(),
                visible_to: None,
            },
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(delivery.id, "delivered-1");
    let got = received.lock().unwrap().clone();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["text"], "reply");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_webhooks_are_verified() {
    use hmac::{Hmac, Mac};
    let authorizations = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = authorizations.clone();
    let addr = support::serve(Router::new().route(
        "/out",
        post(move |headers: axum::http::HeaderMap| {
            let sink = sink.clone();
            async move {
                let auth = headers
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default();
                sink.lock().unwrap().push(auth.to_string());
                axum::Json(json!({"id": "d-1"}))
            }
        }),
    ))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let host = host(dir.path());
    let channel = load(
        &host,
        "channel-webhook",
        json!({"secret": "s3cret-hook-key", "outbound_url": format!("http://127.0.0.1:{}/out", addr.port())}),
    );
    let body = json!({"id": "1", "conversation": "c", "sender": "u", "text": "signed"}).to_string();
    // Without `secret`, a webhook is refused unless the operator said
    // `allow_unsigned: true`: nothing would tell a forger from the sender.
    let unsigned = load(
        &host,
        "channel-webhook",
        json!({"outbound_url": format!("http://127.0.0.1:{}/out", addr.port())}),
    );
    let refused = host
        .channel_webhook(&unsigned, &webhook("POST", "/", vec![], &body))
        .await
        .unwrap();
    assert!(
        matches!(&refused, Err(ChannelError::Unauthorized(m)) if m.contains("`allow_unsigned: true`")),
        "{refused:?}"
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let sign = |ts: u64, body: &str| {
        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(b"s3cret-hook-key").unwrap();
        mac.update(format!("{ts}.{body}").as_bytes());
        format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
    };
    let headers = |ts: u64, sig: String| {
        vec![
            ("X-Pincer-Timestamp", ts.to_string()),
            ("X-Pincer-Signature", sig),
        ]
    };

    let good = host
        .channel_webhook(
            &channel,
            &webhook("POST", "/", headers(now, sign(now, &body)), &body),
        )
        .await
        .unwrap();
    assert_eq!(good.unwrap().messages[0].text, "signed");
    let tampered = body.replace("signed", "forged");
    let bad = host
        .channel_webhook(
            &channel,
            &webhook("POST", "/", headers(now, sign(now, &body)), &tampered),
        )
        .await
        .unwrap();
    assert!(matches!(bad, Err(ChannelError::Unauthorized(_))), "{bad:?}");
    let stale = now - 600;
    let old = host
        .channel_webhook(
            &channel,
            &webhook("POST", "/", headers(stale, sign(stale, &body)), &body),
        )
        .await
        .unwrap();
    assert!(
        matches!(&old, Err(ChannelError::Unauthorized(m)) if m.contains("timestamp")),
        "{old:?}"
    );
    let unsigned = host
        .channel_webhook(&channel, &webhook("POST", "/", vec![], &body))
        .await
        .unwrap();
    assert!(
        matches!(unsigned, Err(ChannelError::Unauthorized(_))),
        "{unsigned:?}"
    );
    // Replies carry the secret as a bearer token, put in by the host (the
    // plugin, on WIT 0.5.0, never sees it).
    let delivery = host
        .channel_send(
            &channel,
            &Outbound {
                conversation: "c".into(),
                thread: None,
                text: "reply".into(),
                reply_to: None,
                actions: Vec::new(),
                visible_to: None,
            },
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(delivery.id, "d-1");
    assert_eq!(*authorizations.lock().unwrap(), ["Bearer s3cret-hook-key"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tunnel_world_forwards_relative_requests_only() {
    let addr = support::serve(Router::new().route("/api/ping", get(|| async { "pong" }))).await;
    let dir = tempfile::tempdir().unwrap();
    let host = host(dir.path());
    let tunnel = load(
        &host,
        "tunnel-http",
        json!({"service": "svc", "target": format!("http://127.0.0.1:{}/api", addr.port())}),
    );
    assert_eq!(host.tunnel_service(&tunnel).await.unwrap(), "svc");
    let request = |url: &str| HttpRequest {
        method: "GET".into(),
        url: url.into(),
        headers: vec![],
        body: vec![],
        timeout_ms: None,
        secrets: vec![],
        capture: None,
    };
    let response = host
        .tunnel_forward(&tunnel, &request("/ping"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (response.status, response.body.as_slice()),
        (200, b"pong".as_slice())
    );
    for bad in [
        "http://example.com/",
        "//example.com/x",
        "/../etc/passwd",
        "ping",
    ] {
        let out = host.tunnel_forward(&tunnel, &request(bad)).await.unwrap();
        assert!(
            matches!(out, Err(TunnelError::BadRequest(_))),
            "{bad}: {out:?}"
        );
    }
    // The target is checked against the manifest's allowlist too.
    let elsewhere = load(
        &host,
        "tunnel-http",
        json!({"service": "svc", "target": "http://example.com"}),
    );
    let out = host
        .tunnel_forward(&elsewhere, &request("/x"))
        .await
        .unwrap();
    assert!(matches!(out, Err(TunnelError::Denied(_))), "{out:?}");
}

fn limits() -> CallLimits {
    CallLimits {
        memory_bytes: 32 << 20,
        timeout: Duration::from_millis(500),
        ..CallLimits::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_plugins_fail_alone_while_the_host_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let host = Arc::new(host(dir.path()));
    let load_limited = |name: &str| {
        host.load(&package(name), Some(&json!({})), limits())
            .unwrap()
    };
    let (spin, hog, trap, calc) = (
        load_limited("spin-forever"),
        load_limited("memory-hog"),
        load_limited("trap-on-call"),
        load_limited("skill-calc"),
    );

    let hostile = {
        let host = host.clone();
        let (spin, hog, trap) = (spin.clone(), hog.clone(), trap.clone());
        tokio::spawn(async move {
            let spin = host.skill_invoke(&spin, "spin", "{}");
            let hog = host.skill_invoke(&hog, "hog", "{}");
            let trap = host.skill_invoke(&trap, "trap", "{}");
            let (s, h, t) = tokio::join!(spin, hog, trap);
            (s.map(|_| ()), h.map(|_| ()), t.map(|_| ()))
        })
    };
    // Other calls are answered while the hostile ones run.
    let answered = AtomicUsize::new(0);
    while !hostile.is_finished() {
        let out = invoke(&host, &calc, "evaluate", json!({"expression": "1+1"}))
            .await
            .unwrap();
        assert_eq!(out["result"], 2.0);
        answered.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        answered.load(Ordering::Relaxed) > 0,
        "no call was answered meanwhile"
    );
    let (spin_out, hog_out, trap_out) = hostile.await.unwrap();

    let err = spin_out.unwrap_err();
    assert!(
        matches!(err, PluginError::Deadline { ms: 500, .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains("spin-forever") && err.to_string().contains("deadline of 500 ms"),
        "{err}"
    );
    let err = hog_out.unwrap_err();
    assert!(
        matches!(err, PluginError::MemoryLimit { limit_mb: 32, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("memory limit of 32 MiB"), "{err}");
    let err = trap_out.unwrap_err();
    assert!(matches!(err, PluginError::Trap { .. }), "{err}");
    assert!(err.to_string().contains("trap-on-call: trapped"), "{err}");

    // Each plugin is usable again: every call gets a fresh instance.
    let ok = host.skill_invoke(&trap, "ok", "{}").await.unwrap().unwrap();
    assert_eq!(serde_json::from_str::<Value>(&ok.json).unwrap()["ok"], true);
    let small = host
        .skill_invoke(&hog, "hog", r#"{"mb": 4}"#)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&small.json).unwrap()["allocated_mb"],
        4
    );
    assert_eq!((spin.faults(), hog.faults(), trap.faults()), (1, 1, 1));

    let faults = host.audit().recent(None, 50).unwrap();
    let kinds: Vec<(&str, &str)> = faults
        .iter()
        .map(|e| (e.actor.as_str(), e.kind.as_str()))
        .collect();
    for actor in [
        "plugin:spin-forever",
        "plugin:memory-hog",
        "plugin:trap-on-call",
    ] {
        assert!(
            kinds.contains(&(actor, "plugin.fault")),
            "{actor} not audited: {kinds:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_outside_the_manifest_is_denied_even_through_redirects() {
    let ok_hits = Arc::new(AtomicUsize::new(0));
    let hits = ok_hits.clone();
    let addr = support::serve(
        Router::new()
            .route(
                "/ok",
                get(move || {
                    hits.fetch_add(1, Ordering::SeqCst);
                    async { "fine" }
                }),
            )
            .route(
                "/bounce",
                get(
                    |axum::extract::Query(q): axum::extract::Query<
                        std::collections::HashMap<String, String>,
                    >| async move {
                        Redirect::temporary(q.get("to").map(String::as_str).unwrap_or("/ok"))
                    },
                ),
            ),
    )
    .await;
    let port = addr.port();
    let dir = tempfile::tempdir().unwrap();
    let host = host(dir.path());
    // The manifest allows `localhost:*`; the fake listens on 127.0.0.1, which
    // the operator's grant names literally (without it, see
    // `names_resolving_to_private_addresses_are_refused`).
    let fetcher = load_granted(
        &host,
        "undeclared-http",
        Scope::workspace("w"),
        &["localhost:*", "127.0.0.1:*"],
    );
    let calc = load(&host, "skill-calc", json!({}));
    let fetch = |url: String| invoke(&host, &fetcher, "fetch", json!({ "url": url }));

    let allowed = fetch(format!("http://localhost:{port}/ok")).await.unwrap();
    assert_eq!(
        (allowed["status"].as_u64(), allowed["body"].as_str()),
        (Some(200), Some("fine"))
    );
    let same_host_redirect = fetch(format!("http://localhost:{port}/bounce?to=/ok"))
        .await
        .unwrap();
    assert_eq!(same_host_redirect["status"], 200);
    assert_eq!(ok_hits.load(Ordering::SeqCst), 2);

    let direct = fetch(format!("http://127.0.0.1:{port}/ok"))
        .await
        .unwrap_err();
    assert!(
        matches!(&direct, ToolError::Denied(m) if m.contains("127.0.0.1")),
        "{direct:?}"
    );
    let to = format!("http://127.0.0.1:{port}/ok");
    let redirected = fetch(format!("http://localhost:{port}/bounce?to={to}"))
        .await
        .unwrap_err();
    assert!(
        matches!(&redirected, ToolError::Denied(_)),
        "{redirected:?}"
    );
    assert_eq!(
        ok_hits.load(Ordering::SeqCst),
        2,
        "a denied destination was reached"
    );

    // The denials are reported, and the host keeps answering.
    let denials: Vec<_> = host
        .audit()
        .recent(Some("plugin:undeclared-http"), 10)
        .unwrap();
    assert_eq!(
        denials.iter().filter(|e| e.kind == "plugin.denied").count(),
        2,
        "{denials:?}"
    );
    assert_eq!(
        invoke(&host, &calc, "evaluate", json!({"expression": "3*3"}))
            .await
            .unwrap()["result"],
        9.0
    );
    // A plugin without the http capability is refused outright.
    let no_http = load(&host, "skill-notes", json!({}));
    assert!(no_http.manifest.capabilities.http.is_empty());
}

/// A copy of a staged plugin with its manifest and component edited.
fn doctored(
    dir: &std::path::Path,
    name: &str,
    manifest: impl Fn(String) -> String,
    wasm: impl Fn(Vec<u8>) -> Vec<u8>,
) -> Result<PluginPackage, PluginError> {
    let src = staged(name);
    let dst = dir.join(format!("doctored-{name}"));
    std::fs::create_dir_all(&dst).unwrap();
    std::fs::write(
        dst.join("plugin.toml"),
        manifest(std::fs::read_to_string(src.join("plugin.toml")).unwrap()),
    )
    .unwrap();
    std::fs::write(
        dst.join("plugin.wasm"),
        wasm(std::fs::read(src.join("plugin.wasm")).unwrap()),
    )
    .unwrap();
    PluginPackage::read(&dst, PluginSource::Dir(dst.clone()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_plugins_are_refused_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(dir.path());
    let same = |s: String| s;
    let cases: Vec<(&str, Result<PluginPackage, PluginError>, &str)> = vec![
        (
            "truncated",
            doctored(dir.path(), "skill-calc", same, |w| {
                w[..w.len() / 2].to_vec()
            }),
            "plugin skill-calc: not a valid component",
        ),
        (
            "header only",
            doctored(dir.path(), "skill-calc", same, |w| w[..6].to_vec()),
            "the file is 6 bytes (truncated?)",
        ),
        (
            "not wasm",
            doctored(dir.path(), "skill-calc", same, |_| {
                b"#!/bin/sh\necho hi\n".to_vec()
            }),
            "not a WebAssembly file",
        ),
        (
            "core module",
            doctored(dir.path(), "skill-calc", same, |_| {
                b"\0asm\x01\0\0\0".to_vec()
            }),
            "is a core WebAssembly module, not a component",
        ),
        (
            "kind mismatch",
            doctored(
                dir.path(),
                "skill-calc",
                |m| m.replace("kind = \"skill\"", "kind = \"channel\""),
                |w| w,
            ),
            "plugin skill-calc: plugin.toml says kind `channel`, but the component exports pincer:plugin/skill@0.5.0 (the skill-plugin world)",
        ),
        (
            "WIT major",
            doctored(
                dir.path(),
                "skill-calc",
                |m| m.replace("wit = \"0.5.0\"", "wit = \"1.0.0\""),
                |w| w,
            ),
            "built against pincer:plugin@1.0.0, but this host serves 0.1.0, 0.2.0, 0.3.0, 0.4.0, 0.5.0 (WIT major-version mismatch)",
        ),
        (
            "WIT minor on 0.x",
            doctored(
                dir.path(),
                "skill-calc",
                |m| m.replace("wit = \"0.5.0\"", "wit = \"0.6.0\""),
                |w| w,
            ),
            "WIT major-version mismatch",
        ),
        (
            "manifest and component disagree on the release",
            doctored(
                dir.path(),
                "skill-calc",
                |m| m.replace("wit = \"0.5.0\"", "wit = \"0.2.0\""),
                |w| w,
            ),
            "plugin.toml says wit = \"0.2.0\", but the component was built against pincer:plugin@0.5.0",
        ),
        (
            "unknown manifest key",
            doctored(
                dir.path(),
                "skill-calc",
                |m| m.replace("[plugin]", "[plugin]\nhomepage = \"x\""),
                |w| w,
            ),
            "invalid plugin.toml: TOML parse error at line 2, column 1",
        ),
    ];
    for (case, package, expected) in cases {
        // Refused when read (manifest) or when loaded (everything else).
        let err = match package {
            Err(e) => e,
            Ok(p) => host
                .load(&p, Some(&json!({})), CallLimits::default())
                .err()
                .unwrap_or_else(|| panic!("{case}: accepted")),
        };
        assert!(err.to_string().contains(expected), "{case}: {err}");
    }
    // Config is checked against the manifest's schema.
    let err = host
        .load(
            &package("tunnel-http"),
            Some(&json!({"service": "x"})),
            CallLimits::default(),
        )
        .err()
        .unwrap();
    assert!(
        err.to_string().contains("config key `target` is required"),
        "{err}"
    );
    // And the host still works.
    let calc = load(&host, "skill-calc", json!({}));
    assert_eq!(
        invoke(&host, &calc, "evaluate", json!({"expression": "7"}))
            .await
            .unwrap()["result"],
        7.0
    );
}

/// Every WIT release the host serves keeps loading after the first-party
/// plugins moved on: a fixture built with raw wit-bindgen against each
/// frozen folder is loaded, its tools listed and called (through that
/// release's imports); a component built against a release no host serves
/// is refused, naming the releases served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_served_wit_release_loads_and_an_unserved_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(dir.path());
    for (name, wit) in [
        ("wit-v0-1-0", "0.1.0"),
        ("wit-v0-2-0", "0.2.0"),
        ("wit-v0-3-0", "0.3.0"),
        ("wit-v0-4-0", "0.4.0"),
    ] {
        let plugin = load(&host, name, json!({"greeting": "hello"}));
        assert_eq!(plugin.manifest.plugin.wit.to_string(), wit);
        assert!(
            plugin
                .imports
                .iter()
                .any(|i| *i == format!("pincer:plugin/kv@{wit}")),
            "{name}: {:?}",
            plugin.imports
        );
        let tools = host.skill_tools(&plugin).await.unwrap();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["echo"], "{name}");
        assert!(tools[0].description.contains(wit), "{name}");
        for version in [1, 2] {
            let out = invoke(&host, &plugin, "echo", json!({"text": "hi"}))
                .await
                .unwrap();
            assert_eq!(
                out,
                json!({"text": "hi", "greeting": "hello", "wit": wit, "kv_version": version, "clock_ok": true}),
                "{name}"
            );
        }
        let err = invoke(&host, &plugin, "echo", json!({"txt": "hi"}))
            .await
            .unwrap_err();
        assert!(matches!(err, ToolError::InvalidArgs(_)), "{name}: {err:?}");
    }

    let err = host
        .load(
            &package("wit-future"),
            Some(&json!({})),
            CallLimits::default(),
        )
        .err()
        .expect("a component of an unserved release loads");
    assert!(
        err.to_string().contains(
            "plugin wit-future: built against pincer:plugin@0.9.0, but this host serves 0.1.0, 0.2.0, 0.3.0, 0.4.0, 0.5.0"
        ),
        "{err}"
    );
    // A manifest claiming a served release does not get it through either.
    let lying = doctored(
        dir.path(),
        "wit-future",
        |m| m.replace("wit = \"0.9.0\"", "wit = \"0.3.0\""),
        |w| w,
    )
    .unwrap();
    let err = host
        .load(&lying, Some(&json!({})), CallLimits::default())
        .err()
        .expect("a component of an unserved release loads");
    assert!(
        err.to_string()
            .contains("the component was built against pincer:plugin@0.9.0"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compiled_components_are_cached_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let first = load(&host(dir.path()), "skill-calc", json!({}));
    assert_eq!(first.compiled, CompileSource::Compiled);
    let restarted = host(dir.path());
    let second = load(&restarted, "skill-calc", json!({}));
    assert_eq!(second.compiled, CompileSource::DiskCache);
    assert_eq!(
        invoke(
            &restarted,
            &second,
            "evaluate",
            json!({"expression": "1+2"})
        )
        .await
        .unwrap()["result"],
        3.0
    );

    // A damaged cache entry is discarded and recompiled, not trusted.
    for entry in std::fs::read_dir(dir.path().join("cache/components")).unwrap() {
        std::fs::write(entry.unwrap().path(), b"garbage").unwrap();
    }
    let third = load(&host(dir.path()), "skill-calc", json!({}));
    assert_eq!(third.compiled, CompileSource::Compiled);
}

/// A declared name that resolves to loopback is not reached unless the
/// configuration names the literal address; a bare host allows only the
/// scheme's default port; userinfo never reaches the audit log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_resolving_to_private_addresses_are_refused() {
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let addr = support::serve(Router::new().route(
        "/ok",
        get(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            async { "reached" }
        }),
    ))
    .await;
    let port = addr.port();
    let dir = tempfile::tempdir().unwrap();
    let host = host(dir.path());
    // The manifest says `localhost:*`; `localhost` resolves to 127.0.0.1.
    let fetcher = load(&host, "undeclared-http", json!({}));
    let err = invoke(
        &host,
        &fetcher,
        "fetch",
        json!({"url": format!("http://localhost:{port}/ok")}),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&err, ToolError::Denied(m) if m.contains("127.0.0.1")),
        "{err:?}"
    );
    assert_eq!(hits.load(Ordering::SeqCst), 0, "loopback was reached");

    // A bare host is its scheme's default port only.
    let bare = doctored(
        dir.path(),
        "undeclared-http",
        |m| m.replace("http = [\"localhost:*\"]", "http = [\"127.0.0.1\"]"),
        |w| w,
    )
    .unwrap();
    let bare = host
        .load(&bare, Some(&json!({})), CallLimits::default())
        .unwrap();
    let err = invoke(
        &host,
        &bare,
        "fetch",
        json!({"url": format!("http://127.0.0.1:{port}/ok")}),
    )
    .await
    .unwrap_err();
    assert!(matches!(&err, ToolError::Denied(_)), "{err:?}");
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "a non-default port was reached"
    );

    // Named literally (`127.0.0.1:*` in the grant), it is reached.
    let granted = load_granted(
        &host,
        "undeclared-http",
        Scope::workspace("w"),
        &["localhost:*", "127.0.0.1:*"],
    );
    let out = invoke(
        &host,
        &granted,
        "fetch",
        json!({"url": format!("http://localhost:{port}/ok")}),
    )
    .await
    .unwrap();
    assert_eq!(out["body"], "reached");

    // A denied URL is audited without its user:password@.
    let _ = invoke(
        &host,
        &fetcher,
        "fetch",
        json!({"url": "http://admin:hunter2@elsewhere.invalid:8080/x?token=1"}),
    )
    .await
    .unwrap_err();
    let records = host
        .audit()
        .recent(Some("plugin:undeclared-http"), 20)
        .unwrap();
    assert!(
        records
            .iter()
            .any(|e| e.detail.contains("elsewhere.invalid")),
        "{records:?}"
    );
    assert!(
        records
            .iter()
            .all(|e| !e.detail.contains("hunter2") && !e.detail.contains("admin")),
        "{records:?}"
    );
}

/// Two workspaces' instances of one skill share no kv entries and no /data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_and_data_are_per_workspace() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(dir.path());
    let template = load(&host, "skill-notes", json!({}));
    let reach = HttpReach::manifest_only(&template.manifest);
    let alice = host
        .rescope(&template, &Scope::workspace("alice"), reach.clone())
        .unwrap();
    let bob = host
        .rescope(&template, &Scope::workspace("bob"), reach)
        .unwrap();
    invoke(
        &host,
        &alice,
        "put",
        json!({"key": "diary", "text": "secret"}),
    )
    .await
    .unwrap();
    let listed = invoke(&host, &bob, "list", json!({})).await.unwrap();
    assert!(!listed.to_string().contains("diary"), "{listed}");
    let mine = invoke(&host, &alice, "list", json!({})).await.unwrap();
    assert!(mine.to_string().contains("diary"), "{mine}");

    let io = load(&host, "hostile-io", json!({}));
    let (a, b) = (
        host.rescope(&io, &Scope::workspace("alice"), HttpReach::default())
            .unwrap(),
        host.rescope(&io, &Scope::channel("c"), HttpReach::default())
            .unwrap(),
    );
    invoke(&host, &a, "fill", json!({"file": "f", "mb": 1}))
        .await
        .unwrap();
    assert!(
        invoke(&host, &b, "size", json!({"file": "f"}))
            .await
            .is_err()
    );
    assert_eq!(
        a.data_dir().unwrap(),
        dir.path().join("plugin-data/workspace.alice/hostile-io")
    );
    assert_eq!(
        b.data_dir().unwrap(),
        dir.path().join("plugin-data/channel.c/hostile-io")
    );
}

/// State kept by plugin name only (before per-workspace state) goes to the
/// `default` workspace, once, with an audit record; no other workspace gets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_in_the_old_layout_goes_to_the_default_workspace() {
    let dir = tempfile::tempdir().unwrap();
    {
        let conn = rusqlite::Connection::open(dir.path().join("pincer.db")).unwrap();
        conn.execute_batch(
            "CREATE TABLE plugin_kv (
                plugin TEXT NOT NULL, key TEXT NOT NULL, value BLOB NOT NULL,
                version INTEGER NOT NULL, expires_at_ms INTEGER,
                PRIMARY KEY (plugin, key)
            ) WITHOUT ROWID;",
        )
        .unwrap();
        // skill-notes keeps `note:<key>` entries.
        let probe = tempfile::tempdir().unwrap();
        let fresh = host(probe.path());
        let notes = load(&fresh, "skill-notes", json!({}));
        invoke(
            &fresh,
            &notes,
            "put",
            json!({"key": "old", "text": "from before"}),
        )
        .await
        .unwrap();
        let probe_db = rusqlite::Connection::open(probe.path().join("pincer.db")).unwrap();
        let (key, value): (String, Vec<u8>) = probe_db
            .query_row("SELECT key, value FROM plugin_kv", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .unwrap();
        conn.execute(
            "INSERT INTO plugin_kv VALUES ('skill-notes', ?1, ?2, 1, NULL)",
            rusqlite::params![key, value],
        )
        .unwrap();
    }
    let old_data = dir.path().join("plugin-data/observer-jsonl");
    std::fs::create_dir_all(&old_data).unwrap();
    std::fs::write(old_data.join("events.jsonl"), "{}\n").unwrap();

    let host = host(dir.path());
    let template = load(&host, "skill-notes", json!({}));
    let got = invoke(&host, &template, "get", json!({"key": "old"}))
        .await
        .unwrap();
    assert!(got.to_string().contains("from before"), "{got}");
    let bob = host
        .rescope(
            &template,
            &Scope::workspace("bob"),
            HttpReach::manifest_only(&template.manifest),
        )
        .unwrap();
    assert!(
        invoke(&host, &bob, "get", json!({"key": "old"}))
            .await
            .is_err()
    );
    assert_eq!(
        std::fs::read_to_string(
            dir.path()
                .join("plugin-data/workspace.default/observer-jsonl/events.jsonl")
        )
        .unwrap(),
        "{}\n"
    );
    assert!(!old_data.exists());
    let migrated: Vec<_> = host
        .audit()
        .recent(Some("pincer"), 10)
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == "plugin.state_migrated")
        .collect();
    assert_eq!(migrated.len(), 2, "{migrated:?}");
    drop(host);
    // Logged once: opening again migrates nothing.
    let again = self::host(dir.path());
    let records = again.audit().recent(Some("pincer"), 10).unwrap();
    assert_eq!(
        records
            .iter()
            .filter(|e| e.kind == "plugin.state_migrated")
            .count(),
        2
    );
}

/// `/data` is bounded: a write past the quota fails, what was written stays,
/// and the host keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_writes_past_the_quota_fail_and_keep_what_was_written() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(dir.path());
    let limits = CallLimits {
        data_quota_bytes: 3 << 20,
        timeout: Duration::from_secs(20),
        ..CallLimits::default()
    };
    let io = host
        .load(&package("hostile-io"), Some(&json!({})), limits)
        .unwrap();
    let calc = load(&host, "skill-calc", json!({}));
    let first = invoke(&host, &io, "fill", json!({"file": "a", "mb": 2}))
        .await
        .unwrap();
    assert_eq!(first["written_mb"], 2, "{first}");
    let second = invoke(&host, &io, "fill", json!({"file": "b", "mb": 50}))
        .await
        .unwrap();
    assert_eq!(second["written_mb"], 1, "{second}");
    assert!(!second["error"].is_null(), "{second}");
    let kept = invoke(&host, &io, "size", json!({"file": "a"}))
        .await
        .unwrap();
    assert_eq!(kept["bytes"], 2 << 20);
    let total =
        pincer::plugins::data_usage(&dir.path().join("plugin-data/workspace.default/hostile-io"));
    assert!(total <= 3 << 20, "{total} bytes under /data");
    // Still refused in a later call; other plugins are unaffected.
    let third = invoke(&host, &io, "fill", json!({"file": "a", "mb": 1}))
        .await
        .unwrap();
    assert_eq!(third["written_mb"], 0, "{third}");
    assert_eq!(
        invoke(&host, &calc, "evaluate", json!({"expression": "2+2"}))
            .await
            .unwrap()["result"],
        4.0
    );
    let denied = host.audit().recent(Some("plugin:hostile-io"), 10).unwrap();
    assert!(
        denied
            .iter()
            .any(|e| e.kind == "plugin.denied" && e.detail.contains("quota")),
        "{denied:?}"
    );
}

/// kv and http without the capability, and a flooded host call, are audited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capability_denials_and_hostcall_floods_are_audited() {
    let dir = tempfile::tempdir().unwrap();
    let host = host(dir.path());
    let io = host
        .load_in(
            &package("hostile-io"),
            Some(&json!({})),
            CallLimits {
                memory_bytes: 128 << 20,
                ..CallLimits::default()
            },
            &Scope::workspace("w"),
            None,
        )
        .unwrap();
    let kv = invoke(&host, &io, "kv", json!({})).await.unwrap();
    assert_eq!(kv["denied"], true, "{kv}");
    let http = invoke(
        &host,
        &io,
        "fetch",
        json!({"url": "http://user:pw@example.com/"}),
    )
    .await
    .unwrap();
    assert_eq!(http["denied"], true, "{http}");
    let flood = host
        .skill_invoke(&io, "flood", r#"{"mb": 40}"#)
        .await
        .unwrap_err();
    assert!(matches!(flood, PluginError::HostcallFuel { .. }), "{flood}");
    let records = host.audit().recent(Some("plugin:hostile-io"), 10).unwrap();
    let has = |kind: &str, needle: &str| {
        records.iter().any(|e| {
            e.kind == kind && e.detail.contains(needle) && e.workspace.as_deref() == Some("w")
        })
    };
    assert!(has("plugin.denied", "kv"), "{records:?}");
    assert!(has("plugin.denied", "http"), "{records:?}");
    assert!(has("plugin.fault", "host call"), "{records:?}");
    assert!(
        records.iter().all(|e| !e.detail.contains("user:pw")),
        "{records:?}"
    );
}

/// A hostile skill of WIT 0.2.0 tries every way to read its secret and a
/// value the host captured for it: `config`, echoes of its own requests,
/// a captured token, a redirect to another origin, a digest oracle. The
/// servers get the values; nothing the host hands the component holds
/// them.
#[tokio::test(flavor = "multi_thread")]
async fn a_plugin_uses_its_secrets_by_name_and_never_sees_them() {
    const TOKEN: &str = "xoxb-probe-secret-token-5f2e91";
    const CAPTURED: &str = "t-captured-tenant-token-77c1";
    let received: Arc<Mutex<Vec<String>>> = Arc::default();
    let echo = {
        let received = received.clone();
        move |headers: axum::http::HeaderMap, body: String| {
            let received = received.clone();
            async move {
                let auth = headers
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string();
                let leak = headers
                    .get("x-leak")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string();
                received
                    .lock()
                    .unwrap()
                    .push(format!("{auth} | {body} | {leak}"));
                axum::Json(json!({"authorization": auth, "body": body, "x-leak": leak}))
            }
        }
    };
    let elsewhere_hits = Arc::new(AtomicUsize::new(0));
    let elsewhere = {
        let hits = elsewhere_hits.clone();
        support::serve(Router::new().fallback(move || {
            hits.fetch_add(1, Ordering::SeqCst);
            async { "elsewhere" }
        }))
        .await
    };
    // Echoes a server could send in a form the host does not expect: each
    // answers the Authorization header it got, encoded; /gzip compresses
    // whatever the request's accept-encoding says.
    let encoded = |encode: fn(&str) -> (Option<&'static str>, Vec<u8>)| {
        move |headers: axum::http::HeaderMap| async move {
            let auth = headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string();
            let (encoding, body) = encode(&format!("{{\"authorization\":\"{auth}\"}}"));
            let mut response = axum::response::Response::builder().status(200);
            if let Some(encoding) = encoding {
                response = response.header("content-encoding", encoding);
            }
            response.body(axum::body::Body::from(body)).unwrap()
        }
    };
    let router = Router::new()
        .route("/echo", post(echo))
        .route(
            "/gzip",
            post(encoded(|text| {
                use std::io::Write as _;
                let mut gz =
                    flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
                gz.write_all(text.as_bytes()).unwrap();
                (Some("gzip"), gz.finish().unwrap())
            })),
        )
        .route(
            "/base64",
            post(encoded(|text| {
                use base64::Engine as _;
                (
                    None,
                    base64::engine::general_purpose::STANDARD
                        .encode(text)
                        .into_bytes(),
                )
            })),
        )
        .route(
            "/hex",
            post(encoded(|text| (None, hex::encode(text).into_bytes()))),
        )
        .route(
            "/escaped",
            post(encoded(|text| {
                let json = serde_json::from_str::<Value>(text).unwrap();
                let auth = json["authorization"].as_str().unwrap();
                let escaped: String = auth
                    .chars()
                    .map(|c| format!("\\u{:04x}", c as u32))
                    .collect();
                (
                    None,
                    format!("{{\"authorization\":\"{escaped}\"}}").into_bytes(),
                )
            })),
        )
        .route(
            "/issue",
            post(|| async {
                axum::Json(json!({"code": 0, "access_token": CAPTURED, "expire": 60}))
            }),
        )
        .route(
            "/redirect",
            post(move || async move {
                axum::response::Redirect::temporary(&format!(
                    "http://127.0.0.1:{}/take",
                    elsewhere.port()
                ))
            }),
        );
    let addr = support::serve(router).await;
    let dir = tempfile::tempdir().unwrap();
    let host = host(dir.path());
    let probe = load(
        &host,
        "secret-probe",
        json!({"token": TOKEN, "base": format!("http://127.0.0.1:{}", addr.port())}),
    );
    let seen = invoke(&host, &probe, "probe", json!({})).await.unwrap();
    let text = seen.to_string();
    assert!(
        !text.contains(TOKEN),
        "the component saw its token: {seen:#}"
    );
    assert!(
        !text.contains(CAPTURED),
        "the component saw the captured value: {seen:#}"
    );

    assert_eq!(seen["config_token"], Value::Null);
    let config: Value = serde_json::from_str(seen["config_json"].as_str().unwrap()).unwrap();
    assert!(config.get("token").is_none(), "{config}");
    assert_eq!(config["base"], format!("http://127.0.0.1:{}", addr.port()));
    assert_eq!(seen["token_is_set"], true);
    assert_eq!(seen["derived_is_set"], true);

    // The servers got the real values, placed where plugin.toml binds
    // them; the text `{{token}}` in the body stayed text.
    let got = received.lock().unwrap().clone();
    assert!(got[0].starts_with(&format!("Bearer {TOKEN} | ")), "{got:?}");
    let body: Value = serde_json::from_str(got[0].split(" | ").nth(1).unwrap()).unwrap();
    assert_eq!(body["text"], "{{token}} ${token} token");
    assert!(
        got.iter()
            .any(|g| g.starts_with(&format!("Bearer {CAPTURED} | "))),
        "the captured value was used: {got:?}"
    );
    // Placements plugin.toml does not bind are refused before anything is
    // sent, and audited.
    for (leak, place) in [
        ("leak_json", "JSON member `/copy`"),
        ("leak_header", "header `x-leak`"),
    ] {
        let error = seen[leak]["error"].as_str().unwrap_or_default();
        assert!(
            error.contains(&format!("secret `token` may not go into {place}"))
                && error.contains("binds it only to header `Authorization` after `Bearer `"),
            "{leak}: {seen:#}"
        );
    }
    assert!(
        got.iter()
            .all(|g| !g.ends_with(TOKEN) && !g.contains("copy")),
        "an unbound placement reached the server: {got:?}"
    );
    // What came back to the component was scrubbed, in every spelling; a
    // compressed answer is refused, since the host cannot scrub it.
    let echoed = seen["echo_header"]["body"].as_str().unwrap();
    assert!(echoed.contains("Bearer [secret]"), "{echoed}");
    let gzip = seen["echo_gzip"]["error"].as_str().unwrap_or_default();
    assert!(gzip.contains("content-encoded (`gzip`)"), "{seen:#}");
    for key in ["echo_base64", "echo_hex", "echo_escaped"] {
        assert_eq!(seen[key]["status"], 200, "{key}: {seen:#}");
        assert!(
            seen[key]["body"].as_str().unwrap().contains("[secret]"),
            "{key}: {seen:#}"
        );
    }
    // Whatever bytes the component got, decoded every way it could: no
    // form of either value.
    let spellings = |value: &str| -> Vec<String> {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD.encode(value);
        vec![
            value.to_string(),
            hex::encode(value),
            b64[..b64.len() - 4].to_string(),
        ]
    };
    let mut decoded = Vec::new();
    for entry in seen.as_object().unwrap().values() {
        let Some(bytes) = entry["body_hex"].as_str().map(|h| hex::decode(h).unwrap()) else {
            continue;
        };
        let mut inflated = Vec::new();
        if bytes.starts_with(&[0x1f, 0x8b]) {
            use std::io::Read as _;
            flate2::read::GzDecoder::new(&bytes[..])
                .read_to_end(&mut inflated)
                .unwrap();
        }
        for b in [bytes, inflated] {
            let text = String::from_utf8_lossy(&b).into_owned();
            decoded.push(text.clone());
            if let Ok(json) = serde_json::from_str::<Value>(&text) {
                decoded.push(json.to_string());
            }
        }
    }
    for value in [TOKEN, CAPTURED] {
        for spelling in spellings(value) {
            assert!(
                decoded.iter().all(|d| !d.contains(&spelling)),
                "the component read `{spelling}` (a form of a secret): {decoded:#?}"
            );
        }
    }
    let issued = seen["capture"]["body"].as_str().unwrap();
    assert!(issued.contains("\"access_token\":\"\""), "{issued}");
    // A plain config key is not a secret; a redirect to another origin is
    // handed back, not followed with the token.
    assert!(
        seen["use_of_plain_key"]["error"]
            .as_str()
            .unwrap()
            .contains("not a secret"),
        "{seen:#}"
    );
    assert_eq!(seen["redirect"]["status"], 307, "{seen:#}");
    assert_eq!(elsewhere_hits.load(Ordering::SeqCst), 0);
    assert_eq!(seen["verify_guess"], "Ok(false)");
    // The refused uses are audited.
    let denials = host
        .audit()
        .recent(Some("plugin:secret-probe"), 20)
        .unwrap();
    for needle in ["`base`", "JSON member `/copy`", "header `x-leak`"] {
        assert!(
            denials
                .iter()
                .any(|d| d.kind == "plugin.denied" && d.detail.contains(needle)),
            "{needle}: {denials:?}"
        );
    }
    // A secret too short to be told from ordinary text is refused at load.
    let short = host
        .load(
            &package("secret-probe"),
            Some(&json!({"token": "1234567", "base": "http://127.0.0.1:9"})),
            CallLimits::default(),
        )
        .map(|_| ())
        .unwrap_err();
    assert!(
        short
            .to_string()
            .contains("`token` is a secret of 7 bytes; secrets must be at least 8 bytes"),
        "{short}"
    );
}
