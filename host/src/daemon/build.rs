//! Building the services one configuration needs, for the daemon and for
//! the one-shot commands that run a turn in their own process.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::Context as _;

use super::Context;
use crate::audit::AuditLog;
use crate::containers::ContainerRuntime;
use crate::gateway::{Gateway, Services, WorkspaceSockets};
use crate::memory::MemoryStore;
use crate::plugins::PluginHost;
use crate::sessions::SessionStore;
use crate::turn::{Agent, Observers, Recall};

/// Builds the turn engine for the configuration in `ctx`.
pub async fn agent(ctx: &Context) -> anyhow::Result<Agent> {
    agent_with(ctx, None).await
}

/// [`agent`] with the process's plugin host, when it has one already.
pub async fn agent_with(
    ctx: &Context,
    plugins: Option<Arc<crate::plugins::PluginHost>>,
) -> anyhow::Result<Agent> {
    let audit = match &plugins {
        Some(host) => host.audit().clone(),
        None => ctx.audit_log()?,
    };
    let memory = Arc::new(ctx.memory_store()?);
    let gateway = gateway(ctx, audit.clone(), plugins.clone(), memory.clone())?;
    let egress = egress_proxies(
        ctx,
        gateway.reaches(),
        &audit,
        plugins.clone(),
        Some(gateway.approvals().clone()),
    )
    .await;
    let runtime =
        Arc::new(ContainerRuntime::connect(&ctx.home, audit, gateway.container_grants()).await?);
    let sessions = Arc::new(SessionStore::open_at(&ctx.state()?)?);
    let memory: Arc<dyn Recall> = memory;
    let observers = observers(ctx, plugins)?;
    let sockets = WorkspaceSockets::start(&gateway, &ctx.home, ctx.config.workspaces.keys());
    Ok(Agent::new(
        Arc::new(ctx.config.clone()),
        &ctx.home,
        runtime,
        sessions,
        memory,
        gateway,
        sockets,
        egress,
        observers,
    ))
}

/// The egress proxy of every workspace, over `reaches` (the gateway's,
/// where there is one: what `policy audit` prints), with the tunnel
/// plugins the workspaces list, loaded on `plugins` (the process's plugin
/// host, else one of its own). A tunnel that cannot be served is logged;
/// requests for it are answered 502. `approvals`: where "always"
/// decisions on egress are read.
pub async fn egress_proxies(
    ctx: &Context,
    reaches: &crate::policy::Reaches,
    audit: &Arc<AuditLog>,
    plugins: Option<Arc<PluginHost>>,
    approvals: Option<Arc<crate::approvals::Approvals>>,
) -> crate::egress::EgressProxies {
    let tunnels = if ctx
        .config
        .workspaces
        .values()
        .all(|ws| ws.tunnels.is_empty())
    {
        crate::egress::Tunnels::default()
    } else {
        let host = match plugins {
            Some(host) => Ok(host),
            None => ctx.plugin_host().map(Arc::new),
        };
        match host {
            Ok(host) => {
                let (tunnels, problems) =
                    crate::egress::Tunnels::load(host, &ctx.catalog(), &ctx.config, ctx.limits())
                        .await;
                for problem in problems {
                    tracing::warn!("{problem}");
                }
                tunnels
            }
            Err(e) => {
                tracing::warn!("no tunnel is served: the plugin host did not start: {e:#}");
                crate::egress::Tunnels::default()
            }
        }
    };
    let parts = crate::egress::Parts {
        limits: crate::egress::Limits::from(ctx.config.containers.egress),
        tunnels: Arc::new(tunnels),
        approvals,
        ..crate::egress::Parts::new(audit)
    };
    crate::egress::EgressProxies::start(&ctx.home, reaches, parts)
}

/// The gateway over this home's `pincer.db`: its key store and ledger, the
/// memory and schedule stores its MCP tools use, the process's audit log
/// and, when the process has one, its plugin host.
pub fn gateway(
    ctx: &Context,
    audit: Arc<AuditLog>,
    plugins: Option<Arc<PluginHost>>,
    memory: Arc<MemoryStore>,
) -> anyhow::Result<Arc<Gateway>> {
    let services = Services {
        audit,
        keys: Arc::new(ctx.key_store()?),
        ledger: ctx.ledger()?,
        plugins,
        memory,
        schedules: Arc::new(ctx.schedule_store()?),
        approvals: Arc::new(ctx.approvals()?),
    };
    Ok(Arc::new(Gateway::new(&ctx.config, &ctx.home, services)?))
}

/// Loads each workspace's observer plugins; a plugin that cannot load is an
/// error (an observer that silently observes nothing is worse).
fn observers(
    ctx: &Context,
    plugins: Option<Arc<crate::plugins::PluginHost>>,
) -> anyhow::Result<HashMap<String, Observers>> {
    let wanted: Vec<_> = ctx
        .config
        .workspaces
        .iter()
        .filter(|(_, ws)| !ws.observers.is_empty())
        .collect();
    let mut out = HashMap::new();
    if wanted.is_empty() {
        return Ok(out);
    }
    let host = match plugins {
        Some(host) => host,
        None => Arc::new(ctx.plugin_host()?),
    };
    for (name, ws) in wanted {
        let plugins = ws
            .observers
            .iter()
            .map(|plugin| {
                ctx.load_plugin_for(&host, plugin, name)
                    .with_context(|| format!("loading observer `{plugin}` of workspace `{name}`"))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        out.insert(name.clone(), Observers::start(host.clone(), plugins));
    }
    Ok(out)
}
