//! The composition root of `pincer start`: builds one of each service for
//! a configuration — plugin host, agent (gateway, container runtime,
//! sessions, memory, observers), channel host with its store, router,
//! outbox worker, connections, webhook listener, control socket, the idle
//! containers' supervisor — wires
//! them together, and runs them until a signal:
//! - SIGTERM / Ctrl-C: stop taking input, let running turns finish within
//!   [`TURN_GRACE`] (then record them interrupted), deliver what the outbox
//!   can within [`FLUSH_WITHIN`], exit 0;
//! - SIGHUP, or a change to `pincer.yaml`: load the file again; if it is
//!   valid, stop the same way and start again with it; if not, say why and
//!   keep running with the old one.

pub mod build;
pub mod context;
pub mod prune;
pub mod status;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::sync::watch;

pub use context::Context;

use crate::channels::{ChannelHost, Inbox};
use crate::file_watch::FileWatch;
use crate::router::inbound::ChannelRouter;
use crate::router::scheduled::{Runners, Schedules};
use crate::turn::control;

/// How long a running turn may go on after a stop signal.
pub const TURN_GRACE: Duration = Duration::from_secs(20);
/// How long the outbox may keep delivering after the turns ended.
pub const FLUSH_WITHIN: Duration = Duration::from_secs(10);

enum Ending {
    Stop,
    Reload(Box<Context>),
}

/// Runs the daemon until SIGTERM or Ctrl-C.
pub async fn run(
    config_flag: Option<&Path>,
    listen: Option<std::net::SocketAddr>,
) -> anyhow::Result<()> {
    let mut ctx = Context::load_checked(config_flag)?;
    raise_nofile_limit();
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let (_watching, changes) = watch_config(ctx.config_path.clone());
    // The configuration that ran before a reload, to go back to if the new
    // one cannot be started (a plugin that does not load, a busy port).
    let mut previous: Option<Context> = None;
    loop {
        let served = serve(
            &ctx,
            listen,
            config_flag,
            &mut hangup,
            &mut terminate,
            &changes,
        )
        .await;
        match served {
            Ok(Ending::Stop) => return Ok(()),
            Ok(Ending::Reload(next)) => {
                say!("pincer: configuration reloaded");
                tracing::info!("configuration reloaded");
                previous = Some(std::mem::replace(&mut ctx, *next));
            }
            // `serve` fails only while starting.
            Err(e) => match previous.take() {
                Some(old) => {
                    say_err!(
                        "pincer: the new configuration could not be started, so the previous one runs again: {e:#}"
                    );
                    ctx = old;
                }
                None => return Err(e),
            },
        }
    }
}

/// One configuration's life: build, serve, stop.
async fn serve(
    ctx: &Context,
    listen: Option<std::net::SocketAddr>,
    config_flag: Option<&Path>,
    hangup: &mut tokio::signal::unix::Signal,
    terminate: &mut tokio::signal::unix::Signal,
    changes: &tokio::sync::Mutex<tokio::sync::mpsc::UnboundedReceiver<()>>,
) -> anyhow::Result<Ending> {
    let (stop_tx, stop) = watch::channel(false);
    let control_socket = control::bind(&ctx.home)?;
    let plugins = Arc::new(ctx.plugin_host()?);
    let audit = plugins.audit().clone();
    let agent = Arc::new(build::agent_with(ctx, Some(plugins.clone())).await?);

    let configured: Vec<String> = ctx.config.workspaces.keys().cloned().collect();
    match agent.runtime().reconcile(&configured).await {
        Ok(removed) => {
            for name in removed {
                say!("pincer: removed {name}: its workspace is no longer configured");
            }
        }
        Err(e) => say_err!("pincer: cannot reconcile containers: {e}"),
    }

    let addr = listen.unwrap_or(ctx.config.gateway.listen);
    crate::gateway::check_listen(&ctx.config.gateway, addr)?;
    let tcp = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} (gateway.listen)"))?;
    let bound = tcp.local_addr()?;
    let gateway = {
        let gateway = agent.gateway().clone();
        let mut stop = stop.clone();
        tokio::spawn(async move {
            gateway
                .serve_tcp(tcp, async move {
                    let _ = stop.wait_for(|s| *s).await;
                })
                .await;
        })
    };
    for workspace in ctx.config.workspaces.keys() {
        agent
            .gateway_sockets()
            .check(workspace)
            .map_err(anyhow::Error::msg)?;
    }

    let cluster = crate::cluster::Node::join(
        &ctx.state()?,
        crate::cluster::daemon_id(agent.runtime().instance()),
        ctx.config.state.lease.0,
        configured.clone(),
    )
    .context("joining the cluster of daemons on the state")?;
    // No workspace reaches the state's database, whatever it lists.
    let _database: Vec<crate::listener::Protected> = ctx
        .state()?
        .tcp_addresses()
        .into_iter()
        .map(|at| crate::listener::protect(at, "state.url"))
        .collect();
    let store = Arc::new(ctx.channel_store()?);
    store.fence_turns_with(cluster.clone());
    let channels = Arc::new(
        ChannelHost::load(
            &ctx.config,
            plugins.clone(),
            &ctx.catalog(),
            ctx.limits(),
            store,
        )
        .await?,
    );
    agent.attach_channels(channels.clone());
    let router = ChannelRouter::new(
        agent.clone(),
        channels.clone(),
        audit.clone(),
        Arc::new(ctx.config.clone()),
        Arc::new(ctx.pairing_store()?),
        cluster.clone(),
        (stop.clone(), TURN_GRACE),
    );
    let inbox: Arc<dyn Inbox> = router.clone();
    let mut tasks = tokio::task::JoinSet::new();
    let schedules = Schedules::start(
        Arc::new(ctx.config.clone()),
        ctx.config_path.as_deref(),
        ctx.schedule_store()?,
        cluster.clone(),
        Runners {
            agent: agent.clone(),
            plugins: plugins.clone(),
            catalog: ctx.catalog(),
            limits: ctx.limits(),
            channels: channels.clone(),
            audit: audit.clone(),
        },
    )
    .await?;
    // The workspaces this daemon runs: all of them when it is alone; their
    // unfinished messages are taken up before any new one arrives.
    let follow = {
        let (router, schedules, agent) = (router.clone(), schedules.clone(), agent.clone());
        move |change: crate::cluster::Change| {
            if let crate::cluster::Change::Gained { workspace, from } = &change {
                agent.runtime().taken_up(workspace);
                schedules.gained(workspace);
                if let Some((instance, _)) = from.as_deref().and_then(|f| f.split_once(':')) {
                    let (agent, instance, workspace) =
                        (agent.clone(), instance.to_owned(), workspace.clone());
                    tokio::spawn(async move {
                        if let Err(e) = agent
                            .runtime()
                            .stop_predecessor(&instance, &workspace)
                            .await
                        {
                            tracing::warn!(%workspace, "cannot stop the previous daemon's container: {e}");
                        }
                    });
                }
            }
            router.follow(change);
        }
    };
    for change in cluster.step() {
        follow(change);
    }
    let (cluster_stop_tx, cluster_stop) = watch::channel(false);
    let membership = {
        let (changes_tx, mut changes) = tokio::sync::mpsc::unbounded_channel();
        let running = tokio::spawn(cluster.clone().run(cluster_stop, changes_tx));
        let follow = Arc::new(follow);
        let following = tokio::spawn(async move {
            while let Some(change) = changes.recv().await {
                // Taking a workspace up reads and writes the state.
                let follow = follow.clone();
                let _ = tokio::task::spawn_blocking(move || follow(change)).await;
            }
        });
        (running, following)
    };
    tasks.spawn(schedules.clone().run(stop.clone()));
    tasks.spawn(crate::containers::idle::supervise(
        agent.runtime().clone(),
        Arc::new(ctx.config.clone()),
        stop.clone(),
    ));
    tasks.spawn(prune::prune_daily(
        ctx.state()?,
        ctx.config.state.retention,
        audit.clone(),
        stop.clone(),
    ));
    tasks.spawn(crate::channels::run_outbox(
        channels.clone(),
        audit.clone(),
        cluster.clone(),
        stop.clone(),
    ));
    for name in channels.names().map(str::to_string).collect::<Vec<_>>() {
        tasks.spawn(crate::channels::hold_connection(
            channels.clone(),
            inbox.clone(),
            name,
            stop.clone(),
        ));
    }
    let webhooks = if ctx.config.channels.is_empty() {
        None
    } else {
        let at = ctx.config.channels.listen;
        if !ctx.config.channels.allow_remote && !crate::config::is_loopback(&at) {
            anyhow::bail!("{}", crate::config::remote_refusal("channels", &at));
        }
        let listener = tokio::net::TcpListener::bind(at)
            .await
            .with_context(|| format!("cannot listen on {at} (channels.listen)"))?;
        let bound = listener.local_addr()?;
        let routes = crate::channels::webhook_routes(channels.clone(), inbox.clone());
        let limits = ctx.config.channels.limits.into();
        let mut stop = stop.clone();
        tasks.spawn(crate::listener::serve(
            listener,
            routes,
            limits,
            "channels.listen".into(),
            async move {
                let _ = stop.wait_for(|s| *s).await;
            },
        ));
        Some(bound)
    };
    let console = match crate::web::bind(&ctx.config).await? {
        Some(listener) => {
            let bound = listener.local_addr()?;
            let console =
                crate::web::Console::new(ctx, agent.clone(), audit.clone(), bound, stop.clone())?;
            let mut stop = stop.clone();
            tasks.spawn(crate::listener::serve(
                listener,
                console.router(),
                crate::config::ListenerLimits::default().into(),
                "web.listen".into(),
                async move {
                    let _ = stop.wait_for(|s| *s).await;
                },
            ));
            Some(bound)
        }
        None => None,
    };
    let turns = tokio::spawn(control::serve(
        control_socket,
        agent.clone(),
        cluster.clone(),
    ));
    let status = status::Reporter::new(
        &ctx.home,
        ctx.config.clone(),
        channels.clone(),
        schedules.clone(),
        &status::Bound {
            gateway: bound,
            webhooks,
            console,
        },
    );
    status.write();
    tasks.spawn(status.clone().run(stop.clone()));
    cluster.describe(serde_json::json!({
        "gateway": bound.to_string(),
        "webhooks": webhooks.map(|a| a.to_string()),
        "console": console.map(|a| a.to_string()),
        "channels": channels.names().collect::<Vec<_>>(),
    }));
    say!(
        "pincer is running: gateway on http://{bound}/v1, turns on {}, {} workspace(s), {} channel(s), {} scheduled task(s){}; Ctrl-C stops it",
        control::socket_path(&ctx.home).display(),
        ctx.config.workspaces.len(),
        ctx.config.channels.len(),
        schedules.task_count(),
        webhooks
            .map(|a| format!(", webhooks on http://{a}/channels/NAME/"))
            .unwrap_or_default(),
    );
    if let Some(at) = console {
        say!("pincer: web console on http://{at}/ (run `pincer web login` to sign in)");
    }

    let ending = loop {
        let reload = tokio::select! {
            _ = tokio::signal::ctrl_c() => break Ending::Stop,
            _ = terminate.recv() => break Ending::Stop,
            _ = hangup.recv() => true,
            // No file is watched (built-in defaults): the channel is
            // closed, and a closed channel is no change.
            Some(()) = async { changes.lock().await.recv().await } => true,
        };
        if reload {
            // A reload that cannot start falls back to the running
            // configuration (`run`), so the file's own checks suffice here.
            match Context::load(config_flag) {
                Ok(next) => break Ending::Reload(Box::new(next)),
                Err(e) => {
                    say_err!(
                        "pincer: the new configuration is not valid, so the running one stays: {e:#}"
                    );
                    audit.record(
                        crate::audit::Actor::Pincer,
                        None,
                        crate::audit::Action::ConfigReloadRefused,
                        &format!("{e:#}"),
                    );
                }
            }
        }
    };

    // Stop taking input; let turns end; deliver what is queued.
    let _ = stop_tx.send(true);
    turns.abort();
    let _ = std::fs::remove_file(control::socket_path(&ctx.home));
    router.drain(TURN_GRACE + Duration::from_secs(5)).await;
    let flushed = tokio::time::timeout(FLUSH_WITHIN, async {
        use crate::cluster::Membership as _;
        while crate::channels::deliver_due(&channels, &audit, cluster.id()).await > 0 {}
    })
    .await;
    if flushed.is_err() {
        say_err!("pincer: undelivered replies stay in the outbox for the next start");
    }
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    // Leases are held until the turns above ended; a stop hands them over
    // at once, a reload keeps them for the next configuration.
    let _ = cluster_stop_tx.send(true);
    let _ = membership.0.await;
    membership.1.abort();
    if matches!(ending, Ending::Stop) {
        cluster.leave();
    }
    let _ = gateway.await;
    agent.close(Duration::from_secs(3)).await;
    status.clear();
    Ok(ending)
}

/// Raises the soft open-file limit to the hard one (`pincer start`,
/// `pincer gateway serve`): the listeners' caps are sized against it, and
/// containers get far fewer (`containers.nofile`).
pub fn raise_nofile_limit() {
    match crate::listener::raise_nofile_limit() {
        Ok(limit) => tracing::info!("open-file limit: {limit}"),
        Err(e) => tracing::warn!("cannot raise the open-file limit: {e}"),
    }
}

/// Sends a unit when the configuration file's content changes
/// ([`FileWatch`]); the watch lives as long as the returned value.
fn watch_config(
    path: Option<PathBuf>,
) -> (
    Option<FileWatch<()>>,
    tokio::sync::Mutex<tokio::sync::mpsc::UnboundedReceiver<()>>,
) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let watching = path.and_then(|path| {
        let watching = FileWatch::new(tx).and_then(|mut w| w.add(&path, ()).map(|()| w));
        match watching {
            Ok(w) => Some(w),
            Err(e) => {
                say_err!(
                    "pincer: not watching {} for changes ({e}); send SIGHUP to reload",
                    path.display()
                );
                None
            }
        }
    });
    (watching, tokio::sync::Mutex::new(rx))
}
