//! `pincer gateway …`: run the gateway alone, manage its keys, read usage.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context as _, bail};

use super::{Context, GatewayCommand, KeysCommand};

pub async fn run(config_flag: Option<&Path>, command: GatewayCommand) -> anyhow::Result<()> {
    let ctx = Context::load(config_flag)?;
    match command {
        GatewayCommand::Serve { listen } => serve(&ctx, listen).await,
        GatewayCommand::Keys(KeysCommand::Create { workspace, name }) => {
            ctx.check_workspace(&workspace)?;
            let key = ctx.key_store()?.mint(&workspace, &name)?;
            println!("{}", key.token);
            eprintln!(
                "created key `{}` for workspace {workspace}; it is shown only this once. Use it as the OpenAI API key (base URL http://{}/v1).",
                key.name, ctx.config.gateway.listen
            );
            Ok(())
        }
        GatewayCommand::Keys(KeysCommand::List { workspace }) => {
            ctx.check_workspace(&workspace)?;
            let keys = ctx.key_store()?.list(&workspace)?;
            println!(
                "{:<20} {:<10} {:<10} {:<8} CREATED",
                "NAME", "PREFIX", "KIND", "STATE"
            );
            for key in keys {
                println!(
                    "{:<20} {:<10} {:<10} {:<8} {}",
                    key.name,
                    key.prefix,
                    key.kind,
                    if key.revoked { "revoked" } else { "live" },
                    key.created_ms
                );
            }
            Ok(())
        }
        GatewayCommand::Keys(KeysCommand::Revoke { workspace, name }) => {
            // Revoking is always safe, also for a workspace that is no
            // longer configured (whose keys the gateway refuses anyway).
            if ctx.key_store()?.revoke(&workspace, &name)? {
                println!("revoked key `{name}` of workspace {workspace}");
                Ok(())
            } else {
                bail!("workspace {workspace} has no live key named `{name}`")
            }
        }
        GatewayCommand::Usage { workspace } => {
            let rows = ctx.ledger()?.usage(workspace.as_deref())?;
            println!(
                "{:<16} {:<10} {:<24} {:>6} {:>10} {:>10} {:>10} {:>7}",
                "WORKSPACE", "DAY", "MODEL", "CALLS", "PROMPT", "COMPLETION", "COST USD", "CACHED"
            );
            for r in rows {
                println!(
                    "{:<16} {:<10} {:<24} {:>6} {:>10} {:>10} {:>10.4} {:>7}",
                    r.workspace,
                    r.day,
                    r.model,
                    r.calls,
                    r.prompt_tokens,
                    r.completion_tokens,
                    r.cost_usd,
                    r.cached_calls
                );
            }
            Ok(())
        }
    }
}

/// Serves on TCP and on `$PINCER_HOME/run/<workspace>/gateway/gateway.sock` for
/// every configured workspace, until Ctrl-C or SIGTERM; either writes every
/// queued usage row before exiting.
async fn serve(ctx: &Context, listen: Option<std::net::SocketAddr>) -> anyhow::Result<()> {
    crate::daemon::raise_nofile_limit();
    let addr = listen.unwrap_or(ctx.config.gateway.listen);
    crate::gateway::check_listen(&ctx.config.gateway, addr)?;
    let memory = Arc::new(ctx.memory_store()?);
    let gateway = crate::daemon::build::gateway(ctx, ctx.audit_log()?, None, memory)?;
    let tcp = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} (gateway.listen)"))?;
    let bound = tcp.local_addr()?;
    let mut servers = tokio::task::JoinSet::new();
    {
        let gateway = gateway.clone();
        servers.spawn(async move {
            gateway.serve_tcp(tcp, std::future::pending()).await;
            Ok(())
        });
    }
    for workspace in ctx.config.workspaces.keys() {
        let served = gateway.serve_workspace_socket(&ctx.home, workspace)?;
        servers.spawn(async move { served.await? });
    }
    println!(
        "pincer gateway listening on http://{bound}/v1 and on one unix socket per workspace under {} ({} model alias{})",
        ctx.home.join("run").display(),
        ctx.config
            .gateway
            .model_list
            .iter()
            .map(|d| &d.model_name)
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        if ctx.config.gateway.model_list.len() == 1 {
            ""
        } else {
            "es"
        }
    );
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let ended = tokio::select! {
        _ = tokio::signal::ctrl_c() => Ok(()),
        _ = terminate.recv() => Ok(()),
        Some(done) = servers.join_next() => done.map_err(anyhow::Error::from).and_then(|r| r).context("a gateway listener stopped"),
    };
    servers.abort_all();
    gateway.shutdown();
    ended
}
