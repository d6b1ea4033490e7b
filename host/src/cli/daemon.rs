//! `pincer start`: the long-running host (see [`crate::daemon`]), and
//! `pincer status`: what it is doing.

use std::path::Path;

pub async fn start(
    config_flag: Option<&Path>,
    listen: Option<std::net::SocketAddr>,
) -> anyhow::Result<()> {
    crate::daemon::run(config_flag, listen).await
}

/// The daemons sharing the state and the workspaces each runs.
fn print_cluster(daemons: &[crate::cluster::Member], leases: &[crate::cluster::Holder]) {
    let now = crate::db::now_ms();
    let alive = daemons.iter().filter(|m| m.alive_at(now)).count();
    println!("\ncluster: {alive} daemon(s) alive on this state");
    for m in daemons {
        let runs: Vec<&str> = leases
            .iter()
            .filter(|l| l.owner == m.id && l.expires_ms > now)
            .filter_map(|l| l.what.strip_prefix("workspace:"))
            .collect();
        let beat = (now - m.heartbeat_ms).max(0) / 1000;
        let life = if m.alive_at(now) {
            format!("heartbeat {beat} s ago")
        } else {
            format!("GONE (last heartbeat {beat} s ago)")
        };
        let serves = |key: &str| {
            m.detail
                .get(key)
                .and_then(|v| v.as_str())
                .map(str::to_owned)
        };
        let channels = m
            .detail
            .get("channels")
            .and_then(|c| c.as_array())
            .map(|c| {
                c.iter()
                    .filter_map(|c| c.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            });
        println!(
            "  {:<20} on {}, {life}; gateway {}{}{}",
            m.id,
            m.host,
            serves("gateway").unwrap_or_else(|| "?".into()),
            serves("webhooks")
                .map(|w| format!(", webhooks {w}"))
                .unwrap_or_default(),
            channels
                .filter(|c| !c.is_empty())
                .map(|c| format!(", connections: {c}"))
                .unwrap_or_default(),
        );
        println!(
            "  {:<20} runs: {}",
            "",
            if runs.is_empty() {
                "no workspace".to_owned()
            } else {
                runs.join(", ")
            }
        );
    }
    let orphans: Vec<&str> = leases
        .iter()
        .filter(|l| l.expires_ms <= now && l.what.starts_with("workspace:"))
        .map(|l| l.what.trim_start_matches("workspace:"))
        .collect();
    if !orphans.is_empty() {
        println!(
            "  not run by any daemon now (taken by the next one to look): {}",
            orphans.join(", ")
        );
    }
}

/// `pincer status`.
pub async fn status(config_flag: Option<&Path>, json: bool) -> anyhow::Result<()> {
    let ctx = super::Context::load(config_flag)?;
    let snapshot = crate::daemon::status::read(&ctx.home);
    let state = ctx.state()?;
    let store = ctx.channel_store()?;
    let depth = store.outbox_depth()?;
    let daemons = crate::cluster::Members::open(&state)?.all()?;
    let leases = crate::cluster::Leases::open(&state)?.holders()?;
    let containers = match ctx.container_runtime().await {
        Ok(runtime) => Some(
            runtime
                .list()
                .await
                .unwrap_or_default()
                .into_iter()
                .map(|c| {
                    let life = runtime.lifecycle(&c);
                    (c, life)
                })
                .collect::<Vec<_>>(),
        ),
        Err(_) => None,
    };
    if json {
        let value = serde_json::json!({
            "daemon": snapshot,
            "state": state.to_string(),
            "cluster": {
                "daemons": daemons.iter().map(|m| serde_json::json!({
                    "id": m.id, "host": m.host, "alive": m.alive_at(crate::db::now_ms()),
                    "started_ms": m.started_ms, "heartbeat_ms": m.heartbeat_ms,
                    "serves": m.detail,
                })).collect::<Vec<_>>(),
                "leases": leases,
            },
            "outbox_pending": depth.iter().map(|(c, n)| (c.clone(), *n)).collect::<std::collections::BTreeMap<_, _>>(),
            "containers": containers.as_ref().map(|list| list.iter().map(|(c, life)| serde_json::json!({
                "workspace": c.workspace, "name": c.name, "state": c.state, "status": c.status,
                "paused_since_unix_ms": match life {
                    crate::containers::Lifecycle::Paused(Some(frozen)) => Some(frozen.since_unix_ms),
                    _ => None,
                },
            })).collect::<Vec<_>>()),
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    let ago = |ms: Option<i64>| match ms {
        Some(ms) => format!("{} s ago", (crate::db::now_ms() - ms).max(0) / 1000),
        None => "never".to_string(),
    };
    match &snapshot {
        Some(s) => println!(
            "daemon: running (pid {}, up {}), gateway http://{}/v1{}{}",
            s.pid,
            ago(Some(s.started_ms)).trim_end_matches(" ago"),
            s.gateway,
            s.webhooks
                .as_ref()
                .map(|w| format!(", webhooks http://{w}/channels/NAME/"))
                .unwrap_or_default(),
            s.console
                .as_ref()
                .map(|c| format!(
                    ", web console {}://{c}/",
                    if ctx.config.web.tls { "https" } else { "http" }
                ))
                .unwrap_or_default()
        ),
        None => println!("daemon: not running (start it with `pincer start`)"),
    }
    println!("state: {state}");
    print_cluster(&daemons, &leases);
    println!("\nworkspaces:");
    for name in ctx.config.workspaces.keys() {
        let state = match &containers {
            Some(list) => list
                .iter()
                .find(|(c, _)| &c.workspace == name)
                .map_or("no container".to_string(), |(c, life)| {
                    format!("{life} ({})", c.name)
                }),
            None => "Docker not reachable".to_string(),
        };
        println!("  {name:<20} {state}");
    }
    println!("\nchannels:");
    if ctx.config.channels.is_empty() {
        println!("  (none configured)");
    }
    for (name, channel) in &ctx.config.channels {
        let pending = depth.iter().find(|(c, _)| c == name).map_or(0, |(_, n)| *n);
        let live = snapshot
            .as_ref()
            .and_then(|s| s.channels.get(name))
            .map(|c| &c.connection);
        let connection = match live {
            None => "daemon not running".to_string(),
            Some(c) if !c.holds_connection => "webhooks only".to_string(),
            Some(c) if c.connected => format!("connected since {}", ago(c.since_ms)),
            Some(c) => format!(
                "NOT connected{}",
                c.last_error
                    .as_ref()
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default()
            ),
        };
        println!(
            "  {name:<20} plugin {} -> workspace {}; {connection}",
            channel.plugin, channel.workspace
        );
        if let Some(c) = live {
            println!(
                "  {:<20} last event {}, {} message(s) in, {} webhook request(s), {} reconnect(s) ({} by the quiet-socket watchdog)",
                "",
                ago(c.last_event_ms),
                c.messages_in,
                c.webhooks,
                c.reconnects,
                c.watchdog_reconnects
            );
        }
        println!("  {:<20} outbox: {pending} waiting", "");
    }
    if let Some(s) = &snapshot
        && !s.schedules.is_empty()
    {
        println!("\nschedules:");
        for (name, schedule) in &s.schedules {
            let file = schedule
                .file
                .as_ref()
                .map_or("no schedules.yaml".to_owned(), |f| f.display().to_string());
            println!("  {name:<20} {} task(s); {file}", schedule.tasks);
            if let Some(problem) = &schedule.problem {
                println!("  {:<20} PROBLEM: {problem}", "");
            }
        }
    }
    Ok(())
}
