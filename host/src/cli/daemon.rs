//! `pincer start`: the long-running host. It serves the gateway (TCP and
//! every workspace's socket) and runs turns for `pincer message` and
//! `pincer chat` over its control socket, until Ctrl-C or SIGTERM.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;

use super::Context;
use crate::router::control;

pub async fn start(
    config_flag: Option<&Path>,
    listen: Option<std::net::SocketAddr>,
) -> anyhow::Result<()> {
    let ctx = Context::load(config_flag)?;
    let control_socket = control::bind(&ctx.home)?;
    let agent = Arc::new(super::agent::agent(&ctx).await?);
    let addr = listen.unwrap_or(ctx.config.gateway.listen);
    let tcp = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} (gateway.listen)"))?;
    let bound = tcp.local_addr()?;
    let routes = agent.gateway().routes();
    let gateway = tokio::spawn(async move { axum::serve(tcp, routes).await });
    for workspace in ctx.config.workspaces.keys() {
        agent.serve_gateway(workspace).map_err(anyhow::Error::msg)?;
    }
    let turns = tokio::spawn(control::serve(control_socket, agent.clone()));
    println!(
        "pincer is running: gateway on http://{bound}/v1, turns on {}, {} workspace(s); Ctrl-C stops it",
        control::socket_path(&ctx.home).display(),
        ctx.config.workspaces.len()
    );
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let outcome = tokio::select! {
        _ = tokio::signal::ctrl_c() => Ok(()),
        _ = terminate.recv() => Ok(()),
        done = gateway => match done {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(anyhow::Error::from(e).context("the gateway listener stopped")),
            Err(e) => Err(anyhow::Error::from(e)),
        },
    };
    turns.abort();
    let _ = std::fs::remove_file(control::socket_path(&ctx.home));
    outcome
}
