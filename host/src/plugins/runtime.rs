//! Loading plugins (validation, compilation, pre-instantiation) and calling
//! them: a fresh instance per call, under a deadline and a memory limit.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sha2::{Digest, Sha256};
use wasmtime::Store;
use wasmtime::component::{Component, Linker};

use super::PluginError;
use super::capabilities::data::DataQuota;
use super::capabilities::fetch;
use super::capabilities::http::{DenialSink, HttpEgress};
pub use super::capabilities::http::{HttpError, Streaming};
use super::capabilities::kv::KvStore;
use super::capabilities::secrets::{Inbound, Secrets};
use super::catalog::{PluginPackage, PluginSource};
use super::engine::{CompileSource, MAX_PLUGIN_MEMORY, PluginEngine};
use super::manifest::{Manifest, PluginKind};
use super::scope::{HttpReach, LEGACY_WORKSPACE, Scope};
use super::state::{Grants, PluginState};
use super::wit::worlds::{Instance, Prepared};
use super::wit::{self, WitRelease, latest};
use crate::audit::AuditLog;

/// Limits applied to every call of a plugin.
#[derive(Debug, Clone, Copy)]
pub struct CallLimits {
    pub memory_bytes: usize,
    pub timeout: Duration,
    /// Bytes one plugin's `/data` folder may hold in one scope.
    pub data_quota_bytes: u64,
}

impl Default for CallLimits {
    fn default() -> Self {
        Self {
            memory_bytes: 64 << 20,
            timeout: Duration::from_secs(5),
            data_quota_bytes: 100 << 20,
        }
    }
}

/// Bytes a plugin may pass to the host in one host call (kv values, HTTP
/// request bodies, log lines); past it the call traps and is audited.
pub const HOSTCALL_FUEL: usize = 32 << 20;

/// Where the host keeps what plugins own.
#[derive(Debug, Clone)]
pub struct HostPaths {
    /// Compiled-component cache; `None` disables it.
    pub cache_dir: Option<PathBuf>,
    /// Where the host's state is (kv).
    pub state: crate::db::Location,
    /// Parent of the scopes' folders (`workspace.NAME/`, `channel.NAME/`)
    /// holding each plugin's private `/data` folder.
    pub data_root: PathBuf,
}

impl HostPaths {
    /// Under `home`, with the state in its `pincer.db`.
    pub fn under(home: &std::path::Path) -> Self {
        Self::with_state(
            home,
            crate::db::Location::Sqlite(home.join(crate::db::FILE_NAME)),
        )
    }

    /// Under `home`, with the state at `state` (`state.backend`).
    pub fn with_state(home: &std::path::Path, state: crate::db::Location) -> Self {
        Self {
            cache_dir: Some(super::engine::cache_dir_for(home)),
            state,
            data_root: home.join("plugin-data"),
        }
    }
}

pub struct PluginHost {
    engine: PluginEngine,
    linker: Linker<PluginState>,
    kv: Arc<KvStore>,
    audit: Arc<AuditLog>,
    paths: HostPaths,
    trace: Option<super::trace::Trace>,
    /// `plugins.legacy_secrets`: whether a WIT 0.1.0 plugin with secret
    /// keys may be loaded with its config (default: refused).
    legacy_secrets: crate::config::LegacySecrets,
}

/// What a channel built against WIT 0.1.0 (which cannot say) may send in
/// one message.
pub const V1_CHANNEL_MAX_TEXT_BYTES: u32 = 4000;

/// Why a channel's file could not be opened for download.
#[derive(Debug, thiserror::Error)]
pub enum OpenFileError {
    #[error("the channel gave no request for it: {0:?}")]
    Channel(latest::ChannelError),
    #[error("{0}")]
    Http(HttpError),
}

pub struct LoadedPlugin {
    pub manifest: Manifest,
    pub sha256: String,
    pub source: PluginSource,
    pub compiled: CompileSource,
    pub wit: WitRelease,
    pub size_bytes: usize,
    /// Interfaces the component imports (WASI and pincer).
    pub imports: Vec<String>,
    pub limits: CallLimits,
    faults: Arc<AtomicU64>,
    grants: Arc<Grants>,
    pre: Arc<dyn Prepared>,
}

impl LoadedPlugin {
    pub fn name(&self) -> &str {
        self.manifest.name()
    }

    pub fn kind(&self) -> PluginKind {
        self.manifest.kind()
    }

    /// The linear memory one instance of it may grow to.
    pub fn memory_limit_bytes(&self) -> usize {
        self.grants.memory_limit
    }

    /// Built against a release that uses secrets by name (0.2.0 and later),
    /// so what a platform sends reaches it with secrets marked or masked.
    fn uses_secrets_by_name(&self) -> bool {
        self.wit != WitRelease::V0_1_0
    }

    /// Calls that trapped, ran out of time or memory since load (in every
    /// scope it was given).
    pub fn faults(&self) -> u64 {
        self.faults.load(Ordering::Relaxed)
    }

    /// The scope whose state this instance works with.
    pub fn scope(&self) -> &Scope {
        &self.grants.scope
    }

    /// The host folder this instance sees as `/data`, if it has one.
    pub fn data_dir(&self) -> Option<&std::path::Path> {
        self.grants.data_dir.as_deref()
    }

    /// The addresses of `host` this instance may connect to: its HTTP
    /// reach's address rule applied to the resolution (refusals audited).
    // String: the refusal is already audited; the text is the connection's
    // `Dropped::Refused` reason.
    pub async fn resolve(
        &self,
        host: &str,
        port: u16,
    ) -> Result<Vec<std::net::SocketAddr>, String> {
        let Some(http) = self.grants.http.as_ref() else {
            return Err("this plugin's manifest requests no http capability".into());
        };
        crate::plugins::capabilities::http::resolve_checked(
            http.reach(),
            &self.grants.on_denied,
            host,
            port,
        )
        .await
        .map_err(|e| e.to_string())
    }

    /// Whether this instance may reach `host:port` (its HTTP reach).
    pub fn reaches(&self, host: &str, port: u16, default_port: u16) -> bool {
        self.grants
            .http
            .as_ref()
            .is_some_and(|h| h.reach().allows(host, port, default_port))
    }
}

impl PluginHost {
    /// A plugin host over `paths`, recording denials, faults and state
    /// migrations to `audit`.
    pub fn new(paths: HostPaths, audit: Arc<AuditLog>) -> anyhow::Result<Self> {
        let engine = PluginEngine::new(paths.cache_dir.clone())?;
        let mut linker = Linker::new(engine.engine());
        wit::add_to_linker(&mut linker)?;
        if let crate::db::Location::Sqlite(database) = &paths.state
            && let Some(parent) = database.parent()
        {
            std::fs::create_dir_all(parent)?;
        }
        let legacy = Scope::workspace(LEGACY_WORKSPACE);
        let (kv, migrated) = KvStore::open_migrating_at(&paths.state, &legacy.key())?;
        let migrated_note = |what: String| {
            tracing::warn!("{what}");
            audit.record(
                crate::audit::Actor::Pincer,
                Some(LEGACY_WORKSPACE),
                crate::audit::Action::PluginStateMigrated,
                &what,
            );
        };
        if migrated.rows > 0 {
            migrated_note(format!(
                "{} kv entries kept by plugin name only (from before per-workspace plugin state) now belong to workspace `{LEGACY_WORKSPACE}`",
                migrated.rows
            ));
        }
        let moved = migrate_data_dirs(&paths.data_root, &legacy)?;
        if !moved.is_empty() {
            migrated_note(format!(
                "/data folders of {} (from before per-workspace plugin state) now belong to workspace `{LEGACY_WORKSPACE}` (moved under {})",
                moved.join(", "),
                paths.data_root.join(legacy.dir_name()).display()
            ));
        }
        Ok(Self {
            engine,
            linker,
            kv,
            audit,
            paths,
            trace: super::trace::Trace::from_env(),
            legacy_secrets: crate::config::LegacySecrets::default(),
        })
    }

    /// This host under `plugins.legacy_secrets: policy`.
    #[must_use]
    pub fn with_legacy_secrets(mut self, policy: crate::config::LegacySecrets) -> Self {
        self.legacy_secrets = policy;
        self
    }

    pub fn kv(&self) -> &Arc<KvStore> {
        &self.kv
    }

    pub fn audit(&self) -> &Arc<AuditLog> {
        &self.audit
    }

    pub fn engine(&self) -> &PluginEngine {
        &self.engine
    }

    /// Validates and prepares a plugin: manifest, WIT version, component
    /// format, world against manifest kind, config against schema, imports.
    /// `config: None` skips the config check (inspecting, installing); with
    /// a config, a WIT 0.1.0 plugin with secret keys is refused unless
    /// `plugins.legacy_secrets` is `warn` ([`Self::with_legacy_secrets`]).
    pub fn load(
        &self,
        package: &PluginPackage,
        config: Option<&serde_json::Value>,
        limits: CallLimits,
    ) -> Result<Arc<LoadedPlugin>, PluginError> {
        self.load_in(package, config, limits, &Scope::default(), None)
    }

    /// [`Self::load`] for `scope`'s state, reaching `reach` over HTTP
    /// (`None`: the manifest's hosts).
    pub fn load_in(
        &self,
        package: &PluginPackage,
        config: Option<&serde_json::Value>,
        limits: CallLimits,
        scope: &Scope,
        reach: Option<HttpReach>,
    ) -> Result<Arc<LoadedPlugin>, PluginError> {
        let origin = package.label();
        let manifest = Manifest::parse(&package.manifest_text, &origin)?;
        let name = manifest.name().to_string();
        let sha256 = hex::encode(Sha256::digest(&package.wasm));
        if let Some(pinned) = &package.pinned_sha256
            && *pinned != sha256
        {
            return Err(PluginError::PinMismatch {
                plugin: name,
                pinned: pinned.clone(),
                actual: sha256,
            });
        }
        let wit = WitRelease::for_plugin(&manifest.plugin.wit).ok_or_else(|| {
            PluginError::WitVersion {
                plugin: name.clone(),
                wanted: manifest.plugin.wit.to_string(),
                served: WitRelease::served_list(),
            }
        })?;
        check_component_header(&package.wasm).map_err(|reason| PluginError::InvalidComponent {
            plugin: name.clone(),
            reason: reason.0,
        })?;
        let (component, compiled) = self.engine.load(&package.wasm, &sha256).map_err(|e| {
            PluginError::InvalidComponent {
                plugin: name.clone(),
                reason: format!("not a valid component: {}", e.root_cause()),
            }
        })?;
        self.check_world(&name, &manifest, &component)?;
        let empty = serde_json::json!({});
        let config = match config {
            Some(config) => {
                let reads = super::escalation::readable_secret_keys(&manifest);
                if !reads.is_empty() {
                    if self.legacy_secrets == crate::config::LegacySecrets::Refuse {
                        return Err(PluginError::LegacySecrets {
                            plugin: name,
                            wit: manifest.plugin.wit.to_string(),
                            keys: reads,
                        });
                    }
                    tracing::warn!(
                        plugin = %name,
                        "built against WIT {}: reads its secret config keys {} (plugins.legacy_secrets: warn)",
                        manifest.plugin.wit,
                        reads.join(", ")
                    );
                }
                manifest
                    .check_config(config)
                    .map_err(|reason| PluginError::Config {
                        plugin: name.clone(),
                        reason: reason.0,
                    })?;
                config
            }
            None => &empty,
        };
        let imports = component
            .component_type()
            .imports(self.engine.engine())
            .map(|(name, _)| name.to_string())
            .collect();
        let reach = reach.unwrap_or_else(|| HttpReach::manifest_only(&manifest));
        let grants = Arc::new(self.grants(&manifest, config, limits, scope, reach)?);
        let pre = self.pre_instantiate(&name, manifest.kind(), wit, &component)?;
        Ok(Arc::new(LoadedPlugin {
            manifest,
            sha256,
            source: package.source.clone(),
            compiled,
            wit,
            size_bytes: package.wasm.len(),
            imports,
            limits,
            faults: Arc::new(AtomicU64::new(0)),
            grants,
            pre,
        }))
    }

    /// Plugin `name` from `catalog` with its `plugins.config.<name>`,
    /// working with `workspace`'s state and HTTP reach: the one way the
    /// CLI, the daemon's schedules and tools load a plugin for a workspace.
    pub fn load_for_workspace(
        &self,
        catalog: &super::Catalog,
        config: &crate::config::Config,
        limits: CallLimits,
        name: &str,
        workspace: &str,
    ) -> Result<Arc<LoadedPlugin>, PluginError> {
        let package = catalog.get(name)?;
        let plugin_config = config
            .plugins
            .config
            .get(name)
            .cloned()
            .unwrap_or_else(|| serde_json::json!({}));
        let manifest = Manifest::parse(&package.manifest_text, name)?;
        let reach = super::plugin_http_reach(config, workspace, name, &manifest);
        self.load_in(
            package,
            Some(&plugin_config),
            limits,
            &Scope::workspace(workspace),
            Some(reach),
        )
    }

    /// The same loaded plugin working with `scope`'s state and `reach`
    /// (no compiling again).
    pub fn rescope(
        &self,
        plugin: &LoadedPlugin,
        scope: &Scope,
        reach: HttpReach,
    ) -> Result<Arc<LoadedPlugin>, PluginError> {
        let config = plugin.grants.config.clone();
        let grants =
            Arc::new(self.grants(&plugin.manifest, &config, plugin.limits, scope, reach)?);
        Ok(Arc::new(LoadedPlugin {
            manifest: plugin.manifest.clone(),
            sha256: plugin.sha256.clone(),
            source: plugin.source.clone(),
            compiled: plugin.compiled,
            wit: plugin.wit,
            size_bytes: plugin.size_bytes,
            imports: plugin.imports.clone(),
            limits: plugin.limits,
            faults: plugin.faults.clone(),
            grants,
            pre: plugin.pre.clone(),
        }))
    }

    fn check_world(
        &self,
        name: &str,
        manifest: &Manifest,
        component: &Component,
    ) -> Result<(), PluginError> {
        let exported: Vec<(PluginKind, String)> = component
            .component_type()
            .exports(self.engine.engine())
            .filter_map(|(export, _)| {
                let rest = export.strip_prefix("pincer:plugin/")?;
                let (iface, version) = rest.split_once('@')?;
                Some((PluginKind::parse(iface)?, version.to_string()))
            })
            .collect();
        let Some((kind, version)) = exported.first() else {
            return Err(PluginError::InvalidComponent {
                plugin: name.to_string(),
                reason: "exports no pincer:plugin interface; build it with wit-bindgen against one of the worlds in wit/".into(),
            });
        };
        if *kind != manifest.kind() || exported.len() > 1 {
            let actual = exported
                .iter()
                .map(|(k, v)| format!("pincer:plugin/{k}@{v} (the {} world)", k.world()))
                .collect::<Vec<_>>()
                .join(" and ");
            return Err(PluginError::KindMismatch {
                plugin: name.to_string(),
                manifest: manifest.kind(),
                actual: format!("exports {actual}"),
            });
        }
        if *version != manifest.plugin.wit.to_string() {
            return Err(PluginError::InvalidComponent {
                plugin: name.to_string(),
                reason: format!(
                    "plugin.toml says wit = \"{}\", but the component was built against pincer:plugin@{version}",
                    manifest.plugin.wit
                ),
            });
        }
        Ok(())
    }

    fn grants(
        &self,
        manifest: &Manifest,
        config: &serde_json::Value,
        limits: CallLimits,
        scope: &Scope,
        reach: HttpReach,
    ) -> Result<Grants, PluginError> {
        let name = manifest.name().to_string();
        let caps = &manifest.capabilities;
        let on_denied: DenialSink = {
            let audit = self.audit.clone();
            let plugin = name.to_string();
            let scope = scope.clone();
            Arc::new(move |what: &str| {
                tracing::warn!(plugin = %plugin, %scope, "denied {what}");
                audit.record(
                    crate::audit::Actor::Plugin(&plugin),
                    scope.workspace_name(),
                    crate::audit::Action::PluginDenied,
                    &format!("{what} [{scope}]"),
                );
            })
        };
        let http = if caps.http.is_empty() {
            None
        } else {
            Some(
                HttpEgress::new(reach, on_denied.clone()).map_err(|e| PluginError::Host {
                    plugin: name.clone(),
                    message: format!("cannot build its http client: {e}"),
                })?,
            )
        };
        let data_dir = caps
            .data_dir
            .then(|| self.paths.data_root.join(scope.dir_name()).join(&name));
        let data_quota = data_dir
            .as_ref()
            .map(|dir| Arc::new(DataQuota::new(dir.clone(), limits.data_quota_bytes)));
        let config = if config.is_null() {
            serde_json::json!({})
        } else {
            config.clone()
        };
        let secrets = Secrets::new(manifest.secret_keys(), &config)
            .bound(manifest.bindings(), manifest.webhook.verify.clone());
        Ok(Grants {
            kv: caps.kv.then(|| self.kv.namespace(&scope.key(), &name)),
            http,
            data_dir,
            data_quota,
            public_config: secrets.public_config(&config),
            secrets,
            config,
            memory_limit: manifest
                .limits
                .memory_bytes(limits.memory_bytes)
                .min(MAX_PLUGIN_MEMORY),
            scope: scope.clone(),
            on_denied,
            plugin: name,
            trace: self.trace.clone(),
        })
    }

    fn pre_instantiate(
        &self,
        name: &str,
        kind: PluginKind,
        wit: WitRelease,
        component: &Component,
    ) -> Result<Arc<dyn Prepared>, PluginError> {
        let invalid = |e: wasmtime::Error| PluginError::InvalidComponent {
            plugin: name.to_string(),
            reason: format!("cannot be linked against this host: {}", e.root_cause()),
        };
        let pre = self.linker.instantiate_pre(component).map_err(invalid)?;
        Ok(Arc::from(wit.prepare(kind, pre).map_err(invalid)?))
    }

    /// Records what goes into (`→`) or comes out of (`←`) a call, when
    /// `PINCER_PLUGIN_TRACE` is set.
    fn traced(&self, plugin: &LoadedPlugin, what: &str, value: &dyn std::fmt::Debug) {
        if let Some(trace) = &self.trace {
            trace.record(plugin.name(), what, value);
        }
    }

    /// Runs `call` and traces its result.
    async fn call_traced<T: std::fmt::Debug>(
        &self,
        plugin: &LoadedPlugin,
        export: &str,
        call: impl AsyncFnOnce(&mut Store<PluginState>, &Instance) -> wasmtime::Result<T>,
    ) -> Result<T, PluginError> {
        let outcome = self.call(plugin, call).await;
        self.traced(plugin, &format!("← {export}"), &outcome);
        outcome
    }

    /// Runs `call` on a fresh instance of `plugin` under its limits. A trap,
    /// deadline or memory blow-up fails only this call and is reported.
    async fn call<T>(
        &self,
        plugin: &LoadedPlugin,
        call: impl AsyncFnOnce(&mut Store<PluginState>, &Instance) -> wasmtime::Result<T>,
    ) -> Result<T, PluginError> {
        let state = PluginState::new(plugin.grants.clone()).map_err(|e| PluginError::Host {
            plugin: plugin.name().to_string(),
            message: e.to_string(),
        })?;
        let _running = self.engine.running();
        let mut store = Store::new(self.engine.engine(), state);
        store.limiter(|s| &mut s.limiter);
        store.set_hostcall_fuel(HOSTCALL_FUEL);
        // Yield to the runtime every tick so the deadline below can fire even
        // while the guest spins.
        store.set_epoch_deadline(1);
        store.epoch_deadline_async_yield_and_update(1);
        let outcome = tokio::time::timeout(plugin.limits.timeout, async {
            let instance = plugin.pre.instantiate(&mut store).await?;
            call(&mut store, &instance).await
        })
        .await;
        let error = match outcome {
            Ok(Ok(value)) => return Ok(value),
            Err(_elapsed) => PluginError::Deadline {
                plugin: plugin.name().to_string(),
                ms: plugin.limits.timeout.as_millis() as u64,
            },
            Ok(Err(e)) => classify(plugin, store.data(), e),
        };
        if error.is_fault() {
            plugin.faults.fetch_add(1, Ordering::Relaxed);
            crate::events::plugin_fault(plugin.name());
            tracing::warn!(plugin = plugin.name(), "{error}");
            self.audit.record(
                crate::audit::Actor::Plugin(plugin.name()),
                plugin.scope().workspace_name(),
                crate::audit::Action::PluginFault,
                &format!("{error} [{}]", plugin.scope()),
            );
        }
        Err(error)
    }

    pub async fn skill_tools(
        &self,
        plugin: &LoadedPlugin,
    ) -> Result<Vec<latest::ToolSpec>, PluginError> {
        expect_kind(plugin, PluginKind::Skill)?;
        self.call_traced(plugin, "skill.tools", async |store, instance| {
            instance.skill()?.tools(store).await
        })
        .await
    }

    pub async fn skill_invoke(
        &self,
        plugin: &LoadedPlugin,
        tool: &str,
        args_json: &str,
    ) -> Result<Result<latest::ToolOutput, latest::ToolError>, PluginError> {
        expect_kind(plugin, PluginKind::Skill)?;
        self.traced(plugin, "→ skill.invoke", &(tool, args_json));
        self.call_traced(plugin, "skill.invoke", async |store, instance| {
            instance.skill()?.invoke(store, tool, args_json).await
        })
        .await
    }

    pub async fn observe(
        &self,
        plugin: &LoadedPlugin,
        event: &latest::Event,
    ) -> Result<(), PluginError> {
        expect_kind(plugin, PluginKind::Observer)?;
        self.traced(plugin, "→ observer.on-event", event);
        self.call_traced(plugin, "observer.on-event", async |store, instance| {
            instance.observer()?.on_event(store, event).await
        })
        .await
    }

    pub async fn channel_webhook(
        &self,
        plugin: &LoadedPlugin,
        request: &latest::WebhookRequest,
    ) -> Result<Result<latest::WebhookOutcome, latest::ChannelError>, PluginError> {
        expect_kind(plugin, PluginKind::Channel)?;
        // The host checks the webhook tokens the manifest declares on the
        // parsed body, removes them, and scrubs every other secret value,
        // before the plugin sees anything (every release: a 0.1.0 plugin
        // reads its secrets anyway, but the check protects it too).
        let secrets = &plugin.grants.secrets;
        let body = match secrets.inbound_body(&request.body, Inbound::Request) {
            Ok(body) => body,
            // Not audited: anyone who reaches the listener could fill the
            // log; the listener logs the refusal.
            Err(e) => return Ok(Err(latest::ChannelError::Unauthorized(e.to_string()))),
        };
        let values = secrets.inbound_headers(request.headers.iter().map(|h| h.value.as_str()));
        let checked = latest::WebhookRequest {
            headers: request
                .headers
                .iter()
                .zip(values)
                .map(|(h, value)| latest::Header {
                    name: h.name.clone(),
                    value,
                })
                .collect(),
            body,
            ..request.clone()
        };
        let request = &checked;
        self.traced(plugin, "→ channel.handle-webhook", request);
        self.call_traced(plugin, "channel.handle-webhook", async |store, instance| {
            instance.channel()?.handle_webhook(store, request).await
        })
        .await
    }

    pub async fn channel_connect(
        &self,
        plugin: &LoadedPlugin,
    ) -> Result<Result<Option<latest::ConnectionRequest>, latest::ChannelError>, PluginError> {
        expect_kind(plugin, PluginKind::Channel)?;
        self.call_traced(plugin, "channel.connect", async |store, instance| {
            instance.channel()?.connect(store).await
        })
        .await
    }

    pub async fn channel_on_frame(
        &self,
        plugin: &LoadedPlugin,
        frame: &latest::Frame,
    ) -> Result<Result<latest::FrameOutcome, latest::ChannelError>, PluginError> {
        expect_kind(plugin, PluginKind::Channel)?;
        let masked;
        let frame = if plugin.uses_secrets_by_name() {
            masked = match frame {
                latest::Frame::Text(t) => {
                    let mut bytes = t.clone().into_bytes();
                    plugin.grants.secrets.mask_in_place(&mut bytes);
                    latest::Frame::Text(String::from_utf8_lossy(&bytes).into_owned())
                }
                latest::Frame::Binary(b) => {
                    let mut bytes = b.clone();
                    plugin.grants.secrets.mask_in_place(&mut bytes);
                    latest::Frame::Binary(bytes)
                }
            };
            &masked
        } else {
            frame
        };
        self.traced(plugin, "→ channel.on-frame", frame);
        self.call_traced(plugin, "channel.on-frame", async |store, instance| {
            instance.channel()?.on_frame(store, frame).await
        })
        .await
    }

    pub async fn channel_send(
        &self,
        plugin: &LoadedPlugin,
        message: &latest::Outbound,
    ) -> Result<Result<latest::Delivery, latest::ChannelError>, PluginError> {
        expect_kind(plugin, PluginKind::Channel)?;
        self.traced(plugin, "→ channel.send", message);
        self.call_traced(plugin, "channel.send", async |store, instance| {
            instance.channel()?.send(store, message).await
        })
        .await
    }

    /// Replaces message `id` by `message` (an interactive channel's
    /// `update`: WIT 0.4.0 and later).
    pub async fn channel_update(
        &self,
        plugin: &LoadedPlugin,
        id: &str,
        message: &latest::Outbound,
    ) -> Result<Result<latest::Delivery, latest::ChannelError>, PluginError> {
        expect_kind(plugin, PluginKind::Channel)?;
        self.traced(plugin, "→ channel.update", &(id, message));
        self.call_traced(plugin, "channel.update", async |store, instance| {
            instance.channel()?.update(store, id, message).await
        })
        .await
    }

    /// The earlier messages of a thread or conversation (WIT 0.5.0;
    /// older channels answer `unsupported`).
    pub async fn channel_history(
        &self,
        plugin: &LoadedPlugin,
        request: &latest::HistoryRequest,
    ) -> Result<Result<Vec<latest::PastMessage>, latest::ChannelError>, PluginError> {
        expect_kind(plugin, PluginKind::Channel)?;
        self.traced(plugin, "→ channel.history", request);
        self.call_traced(plugin, "channel.history", async |store, instance| {
            instance.channel()?.history(store, request).await
        })
        .await
    }

    /// The request that downloads `file` of message `message_id` (WIT 0.5.0).
    pub async fn channel_file_request(
        &self,
        plugin: &LoadedPlugin,
        message_id: &str,
        file: &latest::Attachment,
    ) -> Result<Result<latest::HttpRequest, latest::ChannelError>, PluginError> {
        expect_kind(plugin, PluginKind::Channel)?;
        self.traced(plugin, "→ channel.file-request", &(message_id, file));
        self.call_traced(plugin, "channel.file-request", async |store, instance| {
            instance
                .channel()?
                .file_request(store, message_id, file)
                .await
        })
        .await
    }

    /// Asks the channel for the request that downloads `file` and sends it
    /// under the plugin's HTTP grant, handing back the body as a stream:
    /// the bytes go from the platform to the host's file, never through
    /// the plugin.
    pub async fn channel_open_file(
        &self,
        plugin: &LoadedPlugin,
        message_id: &str,
        file: &latest::Attachment,
    ) -> Result<Result<Streaming, OpenFileError>, PluginError> {
        let request = match self.channel_file_request(plugin, message_id, file).await? {
            Ok(request) => request,
            Err(e) => return Ok(Err(OpenFileError::Channel(e))),
        };
        let request = crate::plugins::wit::v0_5_0::plugin_request(request);
        self.traced(plugin, "→ file download", &request.url);
        Ok(fetch::open(plugin.grants.clone(), request)
            .await
            .map_err(OpenFileError::Http))
    }

    /// Sends `file` with `bytes` as what `upload.send` sends (WIT 0.5.0).
    pub async fn channel_send_file(
        &self,
        plugin: &LoadedPlugin,
        file: &latest::OutboundFile,
        bytes: Arc<crate::plugins::state::UploadFile>,
    ) -> Result<Result<latest::Delivery, latest::ChannelError>, PluginError> {
        expect_kind(plugin, PluginKind::Channel)?;
        self.traced(plugin, "→ channel.send-file", file);
        self.call_traced(plugin, "channel.send-file", async |store, instance| {
            store.data_mut().upload = Some(bytes);
            instance.channel()?.send_file(store, file).await
        })
        .await
    }

    /// The channel's limits (WIT 0.1.0 channels: [`V1_CHANNEL_MAX_TEXT_BYTES`]).
    pub async fn channel_describe(
        &self,
        plugin: &LoadedPlugin,
    ) -> Result<latest::ChannelInfo, PluginError> {
        expect_kind(plugin, PluginKind::Channel)?;
        if !plugin.wit.channel_can_describe() {
            return Ok(latest::ChannelInfo {
                max_text_bytes: V1_CHANNEL_MAX_TEXT_BYTES,
                interactive: false,
                max_upload_bytes: 0,
            });
        }
        self.call_traced(plugin, "channel.describe", async |store, instance| {
            instance.channel()?.describe(store).await
        })
        .await
    }

    /// Shows a turn's state on the platform (WIT 0.1.0 channels cannot:
    /// nothing is called).
    pub async fn channel_status(
        &self,
        plugin: &LoadedPlugin,
        update: &latest::StatusUpdate,
    ) -> Result<Result<Option<String>, latest::ChannelError>, PluginError> {
        expect_kind(plugin, PluginKind::Channel)?;
        if !plugin.wit.channel_can_describe() {
            return Ok(Ok(None));
        }
        self.traced(plugin, "→ channel.status", update);
        self.call_traced(plugin, "channel.status", async |store, instance| {
            instance.channel()?.status(store, update).await
        })
        .await
    }

    /// The channel's own check of its settings against the platform
    /// (WIT 0.1.0 channels have none: one item saying so).
    pub async fn channel_check(
        &self,
        plugin: &LoadedPlugin,
    ) -> Result<Vec<latest::CheckItem>, PluginError> {
        expect_kind(plugin, PluginKind::Channel)?;
        if !plugin.wit.channel_can_describe() {
            return Ok(vec![latest::CheckItem {
                name: "self-check".into(),
                ok: true,
                detail: format!(
                    "{} is built against WIT 0.1.0, which has no check; it loaded with this configuration",
                    plugin.name()
                ),
            }]);
        }
        self.call_traced(plugin, "channel.check", async |store, instance| {
            instance.channel()?.check(store).await
        })
        .await
    }

    pub async fn tunnel_service(&self, plugin: &LoadedPlugin) -> Result<String, PluginError> {
        expect_kind(plugin, PluginKind::Tunnel)?;
        self.call_traced(plugin, "tunnel.service", async |store, instance| {
            instance.tunnel()?.service(store).await
        })
        .await
    }

    pub async fn tunnel_forward(
        &self,
        plugin: &LoadedPlugin,
        request: &latest::HttpRequest,
    ) -> Result<Result<latest::HttpResponse, latest::TunnelError>, PluginError> {
        expect_kind(plugin, PluginKind::Tunnel)?;
        self.traced(plugin, "→ tunnel.forward", request);
        self.call_traced(plugin, "tunnel.forward", async |store, instance| {
            instance.tunnel()?.forward(store, request).await
        })
        .await
    }

    /// Instantiates without calling anything (for benchmarks and checks).
    pub async fn instantiate_only(&self, plugin: &LoadedPlugin) -> Result<(), PluginError> {
        self.call(plugin, async |_, _| Ok(())).await
    }
}

/// Moves `/data` folders of the old layout (`DATA_ROOT/PLUGIN/`, from before
/// per-workspace state) to `legacy`'s folder. Returns the plugins moved.
fn migrate_data_dirs(data_root: &std::path::Path, legacy: &Scope) -> std::io::Result<Vec<String>> {
    let Ok(entries) = std::fs::read_dir(data_root) else {
        return Ok(Vec::new());
    };
    let mut moved = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        // Scope folders have a `.` in their name; plugin names never do.
        if !is_dir || super::manifest::check_name(&name).is_err() {
            continue;
        }
        let target_dir = data_root.join(legacy.dir_name());
        std::fs::create_dir_all(&target_dir)?;
        let target = target_dir.join(&name);
        if target.exists() {
            tracing::warn!(
                "not moving {}: {} exists already",
                entry.path().display(),
                target.display()
            );
            continue;
        }
        std::fs::rename(entry.path(), &target)?;
        moved.push(name);
    }
    moved.sort();
    Ok(moved)
}

fn expect_kind(plugin: &LoadedPlugin, wanted: PluginKind) -> Result<(), PluginError> {
    if plugin.kind() == wanted {
        Ok(())
    } else {
        Err(PluginError::WrongKind {
            plugin: plugin.name().to_string(),
            wanted,
            actual: plugin.kind(),
        })
    }
}

fn classify(plugin: &LoadedPlugin, state: &PluginState, error: wasmtime::Error) -> PluginError {
    let name = plugin.name().to_string();
    if state.limiter.exceeded {
        return PluginError::MemoryLimit {
            plugin: name,
            limit_mb: (plugin.grants.memory_limit >> 20) as u64,
        };
    }
    if error.is::<wasmtime::PoolConcurrencyLimitError>() {
        return PluginError::Busy { plugin: name };
    }
    if error.chain().any(|e| {
        e.to_string()
            .contains("fuel allocated for hostcalls has been exhausted")
    }) {
        return PluginError::HostcallFuel {
            plugin: name,
            limit_mb: (HOSTCALL_FUEL >> 20) as u64,
        };
    }
    if let Some(trap) = error.downcast_ref::<wasmtime::Trap>() {
        let message = match state.stderr.last_line() {
            Some(line) => format!("{trap} (plugin stderr: {line})"),
            None => trap.to_string(),
        };
        return PluginError::Trap {
            plugin: name,
            message,
        };
    }
    PluginError::Host {
        plugin: name,
        message: format!("{:#}", error),
    }
}

/// Tells a component from a core module, a non-wasm file and a truncated one.
fn check_component_header(bytes: &[u8]) -> Result<(), super::Invalid> {
    const MAGIC: &[u8] = b"\0asm";
    if bytes.len() < 8 {
        return Err(super::Invalid::from(format!(
            "not a WebAssembly component: the file is {} bytes (truncated?)",
            bytes.len()
        )));
    }
    if &bytes[..4] != MAGIC {
        return Err(super::Invalid::from(
            "not a WebAssembly file (no `\\0asm` header)",
        ));
    }
    match bytes[4..8] {
        [0x0d, 0x00, 0x01, 0x00] => Ok(()),
        [0x01, 0x00, 0x00, 0x00] => Err(super::Invalid::from(
            "is a core WebAssembly module, not a component; build it for wasm32-wasip2 (cargo build --target wasm32-wasip2)",
        )),
        _ => Err(super::Invalid::from(
            "unsupported WebAssembly version or layer",
        )),
    }
}
