//! `pincer demo`: loads every built-in plugin and drives each world once,
//! with real components on the real host. (The agent turn arrives with the
//! containers and gateway; until then this is pincer's main job.)

use std::path::Path;
use std::time::Instant;

use anyhow::{Context as _, anyhow, bail};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::Context;
use crate::plugins::CompileSource;
use crate::plugins::api::{Event, EventBody, Header, HttpRequest, WebhookRequest};
use crate::plugins::{LoadedPlugin, PluginHost, PluginPackage};

pub async fn run(config_flag: Option<&Path>) -> anyhow::Result<()> {
    let ctx = Context::load(config_flag)?;
    let host = ctx.plugin_host()?;
    let service = spawn_demo_service().await?;
    println!(
        "pincer demo: real WebAssembly plugins on the real host ({})",
        ctx.home.display()
    );

    let started = Instant::now();
    let mut cached = 0;
    let builtin = PluginPackage::builtin();
    let mut loaded = Vec::new();
    for package in &builtin {
        let config = demo_config(&package.label(), &service);
        let plugin = host.load(package, Some(&config), ctx.limits())?;
        cached += usize::from(plugin.compiled == CompileSource::DiskCache);
        loaded.push(plugin);
    }
    println!(
        "loaded {} built-in plugins in {} ms ({} from the compile cache)",
        loaded.len(),
        started.elapsed().as_millis(),
        cached
    );
    let get = |name: &str| {
        loaded
            .iter()
            .find(|p| p.name() == name)
            .ok_or_else(|| anyhow!("built-in plugin {name} is missing"))
    };

    let t = Instant::now();
    let shown = skill(
        &host,
        get("skill-calc")?,
        "evaluate",
        json!({"expression": "2^10 + sqrt(16)"}),
    )
    .await?;
    report("skill    skill-calc.evaluate", t, &shown);

    let t = Instant::now();
    let notes = get("skill-notes")?;
    skill(
        &host,
        notes,
        "put",
        json!({"key": "demo", "text": "pincer remembers"}),
    )
    .await?;
    let shown = skill(&host, notes, "get", json!({"key": "demo"})).await?;
    report("skill    skill-notes.put + get", t, &shown);

    let t = Instant::now();
    let body = json!({"id": "m1", "conversation": "demo", "sender": "you", "text": "hello pincer"});
    let request = WebhookRequest {
        method: "POST".into(),
        path: "/".into(),
        query: String::new(),
        headers: vec![Header {
            name: "content-type".into(),
            value: "application/json".into(),
        }],
        body: body.to_string().into_bytes(),
    };
    let outcome = host
        .channel_webhook(get("channel-webhook")?, &request)
        .await?
        .map_err(|e| anyhow!("channel-webhook refused the demo message: {e:?}"))?;
    let message = outcome
        .messages
        .into_iter()
        .next()
        .context("channel-webhook returned no message")?;
    report(
        "channel  channel-webhook.handle-webhook",
        t,
        &format!(
            "HTTP {} and message {:?} from {}",
            outcome.response.status, message.text, message.sender
        ),
    );

    let t = Instant::now();
    let event = Event {
        timestamp_ms: message.timestamp_ms,
        workspace: Some("default".into()),
        session: None,
        body: EventBody::MessageIn(message),
    };
    host.observe(get("observer-jsonl")?, &event).await?;
    let file = ctx
        .home
        .join("plugin-data/workspace.default/observer-jsonl/events.jsonl");
    report(
        "observer observer-jsonl.on-event",
        t,
        &format!("appended to {}", file.display()),
    );

    let t = Instant::now();
    let tunnel = get("tunnel-http")?;
    let name = host.tunnel_service(tunnel).await?;
    let request = HttpRequest {
        method: "GET".into(),
        url: "/hello".into(),
        headers: vec![],
        body: vec![],
        timeout_ms: Some(5000),
        secrets: vec![],
        capture: None,
    };
    let response = host
        .tunnel_forward(tunnel, &request)
        .await?
        .map_err(|e| anyhow!("tunnel-http failed: {e:?}"))?;
    report(
        "tunnel   tunnel-http.forward",
        t,
        &format!(
            "{name}: HTTP {} {:?}",
            response.status,
            String::from_utf8_lossy(&response.body)
        ),
    );
    println!("\nall four plugin worlds answered. Next:");
    println!("  pincer skill invoke skill-calc evaluate --args '{{\"expression\":\"6*7\"}}'");
    println!(
        "  pincer image build && pincer workspace exec default -- sh -c 'echo hi > /workspace/hi.txt'"
    );
    println!("  pincer policy audit default");
    println!(
        "  pincer gateway serve    (after adding gateway.model_list to pincer.yaml; see docs/gateway.md)"
    );
    Ok(())
}

fn report(label: &str, started: Instant, shown: &str) {
    println!(
        "  {label:<40} {:>7.2} ms  {shown}",
        started.elapsed().as_secs_f64() * 1e3
    );
}

async fn skill(
    host: &PluginHost,
    plugin: &LoadedPlugin,
    tool: &str,
    args: serde_json::Value,
) -> anyhow::Result<String> {
    match host.skill_invoke(plugin, tool, &args.to_string()).await? {
        Ok(out) => Ok(out.json),
        Err(e) => bail!("{}", super::skill::describe(&e)),
    }
}

fn demo_config(plugin: &str, service_url: &str) -> serde_json::Value {
    match plugin {
        "tunnel-http" => json!({"service": "demo-service", "target": service_url}),
        // Loaded, not called: the demo talks to no chat platform.
        "channel-slack" => json!({"bot_token": "xoxb-demo-not-a-real-token"}),
        "channel-feishu" => json!({"app_id": "cli_demo", "app_secret": "demo-not-a-real-secret"}),
        // Called in-process with an unsigned message: nothing listens.
        "channel-webhook" => json!({"allow_unsigned": true}),
        _ => json!({}),
    }
}

/// A one-route HTTP service on loopback for the tunnel to reach.
async fn spawn_demo_service() -> anyhow::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf).await;
                let body = "hello from a host-side service";
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(reply.as_bytes()).await;
            });
        }
    });
    Ok(url)
}
