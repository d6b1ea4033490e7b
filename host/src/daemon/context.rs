//! The composition root's inputs: the resolved configuration and
//! `PINCER_HOME`, and the constructors of the services built over them (the
//! plugin host, the audit log, the container runtime), used by the daemon
//! and by every one-shot command alike.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;

use crate::audit::AuditLog;
use crate::config::{self, Config};
use crate::containers::ContainerRuntime;
use crate::gateway::KeyStore;
use crate::plugins::{CallLimits, Catalog, HostPaths, LoadedPlugin, PluginHost};

#[derive(Clone)]
pub struct Context {
    /// `None`: built-in defaults, no file.
    pub config_path: Option<PathBuf>,
    pub config: Config,
    pub home: PathBuf,
}

impl Context {
    pub fn load(config_flag: Option<&Path>) -> anyhow::Result<Self> {
        let home = config::pincer_home()?;
        let config_path = config::resolve_config_path(config_flag);
        let config = match &config_path {
            Some(path) => Config::load(path)?,
            None => Config::embedded()?,
        };
        Ok(Self {
            config_path,
            config,
            home,
        })
    }

    /// [`Context::load`], refusing what `pincer config check` refuses (the
    /// same function, the same messages): for commands that start
    /// something (`workspace up`, `pincer start`), so a configuration the
    /// check refuses never starts. (A reload that cannot start falls
    /// back to the running configuration.)
    pub fn load_checked(config_flag: Option<&Path>) -> anyhow::Result<Self> {
        let ctx = Self::load(config_flag)?;
        if let Some(path) = &ctx.config_path {
            let refusals = crate::preflight::refusals(path, &ctx.home)?;
            if !refusals.is_empty() {
                anyhow::bail!("{}", refusals.join("\n"));
            }
        }
        Ok(ctx)
    }

    /// `name` is a configured workspace, or an error naming the configured
    /// ones (with a did-you-mean for a near miss).
    pub fn check_workspace(&self, name: &str) -> anyhow::Result<()> {
        if self.config.workspaces.contains_key(name) {
            return Ok(());
        }
        let known: Vec<&str> = self.config.workspaces.keys().map(String::as_str).collect();
        let hint = crate::suggest::closest(name, known.iter().copied())
            .map(|best| format!(", did you mean `{best}`?"))
            .unwrap_or_default();
        let configured = if known.is_empty() {
            "none".to_string()
        } else {
            known.join(", ")
        };
        anyhow::bail!("no workspace named `{name}`{hint} (configured: {configured})")
    }

    pub fn plugin_host(&self) -> anyhow::Result<PluginHost> {
        Ok(PluginHost::new(
            HostPaths::with_state(&self.home, self.state()?),
            self.audit_log()?,
        )
        .context("starting the plugin host")?
        .with_legacy_secrets(self.config.plugins.legacy_secrets))
    }

    /// This home's `pincer.db`.
    pub fn database(&self) -> std::path::PathBuf {
        self.home.join(crate::db::FILE_NAME)
    }

    /// Where this configuration keeps its state (`state.backend`).
    pub fn state(&self) -> anyhow::Result<crate::db::Location> {
        self.config
            .state
            .location(&self.home)
            .map_err(anyhow::Error::msg)
    }

    /// Opens one of the state's services with `open`, saying where when it
    /// fails.
    fn open_state<T, E>(
        &self,
        open: impl FnOnce(&crate::db::Location) -> Result<T, E>,
    ) -> anyhow::Result<T>
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        let at = self.state()?;
        open(&at).with_context(|| format!("opening {at}"))
    }

    pub fn audit_log(&self) -> anyhow::Result<Arc<AuditLog>> {
        Ok(Arc::new(self.open_state(AuditLog::open_at)?))
    }

    pub fn key_store(&self) -> anyhow::Result<KeyStore> {
        self.open_state(KeyStore::open_at)
    }

    pub fn ledger(&self) -> anyhow::Result<Arc<crate::gateway::Ledger>> {
        self.open_state(|at| crate::gateway::Ledger::open_at(at, crate::db::now_ms))
    }

    pub fn schedule_store(&self) -> anyhow::Result<crate::scheduler::Store> {
        self.open_state(crate::scheduler::Store::open_at)
    }

    /// Approval requests, decisions and "always" rules.
    pub fn approvals(&self) -> anyhow::Result<crate::approvals::Approvals> {
        Ok(crate::approvals::Approvals::new(
            self.open_state(crate::approvals::ApprovalStore::open_at)?,
        ))
    }

    pub fn channel_store(&self) -> anyhow::Result<crate::channels::ChannelStore> {
        self.open_state(crate::channels::ChannelStore::open_at)
    }

    /// Pairing codes and the senders they allowed.
    pub fn pairing_store(&self) -> anyhow::Result<crate::pairing::PairingStore> {
        self.open_state(crate::pairing::PairingStore::open_at)
    }

    pub fn memory_store(&self) -> anyhow::Result<crate::memory::MemoryStore> {
        let embedder =
            crate::gateway::memory_embedder(&self.home, self.config.memory.embeddings.is_on());
        let state = self.state()?;
        crate::memory::MemoryStore::open_at(&state, embedder)
            .with_context(|| format!("opening {state}"))
    }

    /// The container runtime for a one-shot command: containers' tokens
    /// are minted in this home's key store.
    pub async fn container_runtime(&self) -> anyhow::Result<ContainerRuntime> {
        let keys = Arc::new(self.key_store()?);
        Ok(ContainerRuntime::connect(&self.home, self.audit_log()?, keys).await?)
    }

    /// The plugins this configuration may load (`plugins.enabled`).
    pub fn catalog(&self) -> Catalog {
        crate::plugins::restrict_to_enabled(self.all_plugins(), &self.config)
    }

    /// Every plugin this host can see, enabled or not.
    pub fn all_plugins(&self) -> Catalog {
        Catalog::discover(&self.home, &self.config.plugins.dirs)
    }

    pub fn limits(&self) -> CallLimits {
        let limits = &self.config.plugins.limits;
        CallLimits {
            memory_bytes: (limits.memory_mb as usize) << 20,
            timeout: Duration::from_millis(limits.call_timeout_ms),
            data_quota_bytes: limits.data_quota_mb << 20,
        }
    }

    /// The workspace a plugin command works for: `flag`, else the only
    /// configured workspace, else `default` (when it is configured or no
    /// workspace is).
    pub fn plugin_workspace(&self, flag: Option<&str>) -> anyhow::Result<String> {
        let names: Vec<&str> = self.config.workspaces.keys().map(String::as_str).collect();
        match flag {
            Some(name) => {
                if !names.is_empty() || name != crate::plugins::LEGACY_WORKSPACE {
                    self.check_workspace(name)?;
                }
                Ok(name.to_string())
            }
            None => match names.as_slice() {
                [] => Ok(crate::plugins::LEGACY_WORKSPACE.to_string()),
                [only] => Ok((*only).to_string()),
                several if several.contains(&crate::plugins::LEGACY_WORKSPACE) => {
                    Ok(crate::plugins::LEGACY_WORKSPACE.to_string())
                }
                several => anyhow::bail!(
                    "several workspaces are configured ({}): say whose plugin state to use with --workspace NAME",
                    several.join(", ")
                ),
            },
        }
    }

    /// Loads a plugin by name with its configured `plugins.config.<name>`,
    /// working with the state of the `default` workspace.
    pub fn load_plugin(&self, host: &PluginHost, name: &str) -> anyhow::Result<Arc<LoadedPlugin>> {
        self.load_plugin_for(host, name, crate::plugins::LEGACY_WORKSPACE)
    }

    /// Loads a plugin by name with its configured `plugins.config.<name>`,
    /// working with `workspace`'s state and HTTP grant.
    pub fn load_plugin_for(
        &self,
        host: &PluginHost,
        name: &str,
        workspace: &str,
    ) -> anyhow::Result<Arc<LoadedPlugin>> {
        Ok(host.load_for_workspace(
            &self.catalog(),
            &self.config,
            self.limits(),
            name,
            workspace,
        )?)
    }
}
