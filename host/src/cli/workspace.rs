//! `pincer workspace …` and `pincer image build`.

use std::path::Path;
use std::time::Instant;

use pincer_runner_protocol::ExecRequest;

use super::{Context, WorkspaceCommand};
use crate::containers::{self, ContainerRuntime};

pub async fn image_build(config_flag: Option<&Path>) -> anyhow::Result<()> {
    let ctx = Context::load(config_flag)?;
    let runtime = ctx.container_runtime().await?;
    let tag = &ctx.config.containers.image;
    let started = Instant::now();
    let built = runtime
        .build_image(tag, &mut |line| println!("==> {line}"))
        .await?;
    let runner = containers::install_runner(&ctx.home)?;
    println!(
        "{} {} in {:.1} s; the agent runner ({} KiB, static) is bind-mounted from {}",
        if built.up_to_date { "checked" } else { "built" },
        built.image,
        started.elapsed().as_secs_f64(),
        containers::runner_size() / 1024,
        runner.display()
    );
    Ok(())
}

pub async fn run(config_flag: Option<&Path>, command: WorkspaceCommand) -> anyhow::Result<()> {
    let ctx = match command {
        WorkspaceCommand::Up { .. } => Context::load_checked(config_flag)?,
        _ => Context::load(config_flag)?,
    };
    if let Ok(runtime) = ctx.container_runtime().await {
        reconcile(&ctx, &runtime).await?;
    }
    match command {
        WorkspaceCommand::List => list(&ctx).await,
        WorkspaceCommand::Up { name } => {
            let runtime = ctx.container_runtime().await?;
            let (_, spec) = containers::plan(&ctx.config, &ctx.home, runtime.instance(), &name)?;
            let started = Instant::now();
            let ensured = runtime.ensure(&spec).await?;
            if let Some(why) = &ensured.replaced {
                println!("replaced the previous container: {why}");
            }
            println!(
                "{} {} ({}) in {} ms; policy verified; runner pid {} uid {}",
                if ensured.created {
                    "started"
                } else {
                    "already running:"
                },
                spec.container_name,
                &ensured.id[..12.min(ensured.id.len())],
                started.elapsed().as_millis(),
                ensured.runner.pid,
                ensured.runner.uid
            );
            let reaches = crate::policy::Reaches::compute(&ctx.config);
            if let Some(note) = reaches
                .get(&name)
                .and_then(|r| super::egress::no_way_out_note(&name, &r.egress))
            {
                println!("{note}");
            }
            Ok(())
        }
        WorkspaceCommand::Down { name } => {
            ctx.check_workspace(&name)?;
            let runtime = ctx.container_runtime().await?;
            if runtime.down(&name).await? {
                println!("removed the container of {name}; its folder is kept");
            } else {
                println!("{name} has no container");
            }
            Ok(())
        }
        WorkspaceCommand::Pause { name } => {
            ctx.check_workspace(&name)?;
            ctx.container_runtime().await?.pause(&name).await?;
            println!("paused the container of {name}; its next use wakes it");
            Ok(())
        }
        WorkspaceCommand::Wake { name } => {
            ctx.check_workspace(&name)?;
            if ctx.container_runtime().await?.wake(&name).await? {
                println!("woke the container of {name}");
            } else {
                println!("the container of {name} is not paused");
            }
            Ok(())
        }
        WorkspaceCommand::Status { name } => {
            ctx.check_workspace(&name)?;
            let runtime = ctx.container_runtime().await?;
            match runtime.status(&name).await? {
                Some(c) => {
                    let runner = match runtime.runner_status(&name).await {
                        Some(s) if s.busy > 0 => format!("; runner busy ({} running)", s.busy),
                        Some(s) => format!("; runner idle for {} s", s.idle_ms / 1000),
                        None => String::new(),
                    };
                    println!(
                        "{name}: {} ({}) {} (Docker: {}){runner}",
                        c.name,
                        &c.id[..12.min(c.id.len())],
                        runtime.lifecycle(&c),
                        c.status
                    );
                }
                None => println!("{name}: no container (started on first use)"),
            }
            Ok(())
        }
        WorkspaceCommand::Exec {
            name,
            timeout_ms,
            command,
        } => exec(&ctx, &name, timeout_ms, command).await,
    }
}

/// Removes this instance's containers of workspaces no longer configured.
async fn reconcile(ctx: &Context, runtime: &ContainerRuntime) -> anyhow::Result<()> {
    let configured: Vec<String> = ctx.config.workspaces.keys().cloned().collect();
    for name in runtime.reconcile(&configured).await? {
        eprintln!("pincer: removed {name}: its workspace is no longer configured");
    }
    Ok(())
}

async fn list(ctx: &Context) -> anyhow::Result<()> {
    let runtime = ctx.container_runtime().await.ok();
    let running = match &runtime {
        Some(r) => r.list().await.unwrap_or_default(),
        None => Vec::new(),
    };
    println!(
        "{:<20} {:<28} {:<10} FOLDER",
        "WORKSPACE", "POLICIES", "CONTAINER"
    );
    for (name, ws) in &ctx.config.workspaces {
        let state = running
            .iter()
            .find(|c| &c.workspace == name)
            .map_or("-".to_string(), |c| c.state.clone());
        let policies = if ws.policies.is_empty() {
            "(baseline)".to_string()
        } else {
            let names: Vec<&str> = ws.policies.iter().map(|p| p.name()).collect();
            names.join(",")
        };
        let folder = ctx.config.workspace_dir(name);
        println!("{name:<20} {policies:<28} {state:<10} {}", folder.display());
    }
    if runtime.is_none() {
        println!("(Docker is not reachable; container states unknown — see `pincer doctor`)");
    }
    Ok(())
}

/// How long a finished `workspace exec` waits for its command's
/// connections through the egress proxy to end and be audited.
const EGRESS_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

async fn exec(
    ctx: &Context,
    name: &str,
    timeout_ms: u64,
    command: Vec<String>,
) -> anyhow::Result<()> {
    ctx.check_workspace(name)?;
    let runtime: ContainerRuntime = ctx.container_runtime().await?;
    let (_, spec) = containers::plan(&ctx.config, &ctx.home, runtime.instance(), name)?;
    // The command's way out, for as long as it runs (unless the daemon
    // serves it already).
    let egress = crate::daemon::build::egress_proxies(
        ctx,
        &crate::policy::Reaches::compute(&ctx.config),
        &ctx.audit_log()?,
        None,
        Some(std::sync::Arc::new(ctx.approvals()?)),
    )
    .await;
    let request = ExecRequest {
        argv: command,
        cwd: None,
        env: Vec::new(),
        stdin: None,
        timeout_ms,
        max_output_bytes: pincer_runner_protocol::MAX_OUTPUT_BYTES,
    };
    let (ensured, outcome) = runtime.exec(&spec, request).await?;
    // The command's last connections are audited before this exits.
    egress.close(EGRESS_GRACE).await;
    if let Some(why) = &ensured.replaced {
        eprintln!("pincer: replaced the previous container: {why}");
    }
    let result = &outcome.result;
    print!("{}", result.stdout);
    eprint!("{}", result.stderr);
    if outcome.oom_killed {
        eprintln!(
            "pincer: the command was killed at the workspace's memory limit ({} MiB)",
            spec.settings.memory_bytes >> 20
        );
    }
    if outcome.pids_limit_hits > 0 {
        eprintln!(
            "pincer: process creation hit the workspace's pids limit ({})",
            spec.settings.pids_limit
        );
    }
    if result.timed_out {
        eprintln!("pincer: the command timed out after {timeout_ms} ms and was killed");
    }
    let code = if result.timed_out {
        124
    } else if let Some(signal) = result.signal {
        128 + signal
    } else {
        result.exit_code.unwrap_or(1)
    };
    if code != 0 {
        eprintln!("pincer: exit code {code}");
        return Err(super::ExitStatus(code).into());
    }
    Ok(())
}
