//! The typed schema of `pincer.yaml`. Every section is optional; unknown keys
//! are errors everywhere except inside `plugins.config` (free-form).

use std::collections::BTreeMap;
use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, MapAccess, Visitor};

use crate::approvals::{Approvers, Rule, Selector, Tier, Unattended};

/// The whole configuration file.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub gateway: Gateway,
    pub containers: Containers,
    /// Workspaces by name (`[a-z0-9][a-z0-9_-]{0,62}`).
    pub workspaces: BTreeMap<String, Workspace>,
    pub plugins: Plugins,
    /// Channels by name, and `listen`: where their webhooks are served.
    pub channels: Channels,
    /// Per-skill access rules by skill name. A workspace may also use skills
    /// (plugins) that have no entry here.
    pub skills: BTreeMap<String, Skill>,
    /// MCP servers by name.
    pub mcp_servers: BTreeMap<String, McpServer>,
    /// The IANA time zone of schedule tasks that give none (e.g.
    /// `Asia/Shanghai`); default: the host's.
    pub timezone: Option<String>,
    /// What the host keeps in `pincer.db`, and for how long.
    pub state: State,
    /// The web console `pincer start` serves.
    pub web: Web,
    /// Long-term memory, host-wide (per workspace: `workspaces.NAME.memory`).
    pub memory: Memory,
}

/// `memory`: how memories are recalled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Memory {
    /// Recall by meaning with the local embedding model when it is in
    /// `$PINCER_HOME/models` (`on`, the default), or by words only (`off`).
    pub embeddings: OnOff,
}

/// `on` or `off` (YAML's `true`/`false` too).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnOff {
    #[default]
    On,
    Off,
}

impl OnOff {
    pub fn is_on(self) -> bool {
        self == OnOff::On
    }
}

impl<'de> Deserialize<'de> for OnOff {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Bool(bool),
            Text(String),
        }
        match Raw::deserialize(deserializer)? {
            Raw::Bool(true) => Ok(OnOff::On),
            Raw::Bool(false) => Ok(OnOff::Off),
            Raw::Text(t) if t == "on" => Ok(OnOff::On),
            Raw::Text(t) if t == "off" => Ok(OnOff::Off),
            Raw::Text(t) => Err(serde::de::Error::custom(format!(
                "expected on or off, got `{t}`"
            ))),
        }
    }
}

/// `web`: the console `pincer start` serves (`pincer web login` signs in).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Web {
    /// Where the console listens. Left out: `127.0.0.1:4200`, and a busy
    /// port is a warning; given, a port that cannot be bound is an error.
    /// An address other than loopback needs `allow_remote: true`.
    pub listen: Option<SocketAddr>,
    /// Whether `listen` may be an address other than loopback (then put
    /// TLS in front of it). Default false.
    pub allow_remote: bool,
    /// Whether the console sits behind TLS (cookies get `Secure`). Default
    /// false.
    pub tls: bool,
    /// How long a sign-in lasts. Default `12h`.
    pub session_ttl: WebSessionTtl,
    /// `false` turns the console off. Default true.
    pub enabled: bool,
    /// More `Host` header values the console answers (`console.example.com`
    /// behind a TLS proxy); besides these only `listen` itself (and
    /// `localhost:PORT` on loopback), so DNS rebinding finds nothing.
    pub hosts: Vec<String>,
}

impl Default for Web {
    fn default() -> Self {
        Self {
            listen: None,
            allow_remote: false,
            tls: false,
            session_ttl: WebSessionTtl::default(),
            enabled: true,
            hosts: Vec::new(),
        }
    }
}

impl Web {
    pub const DEFAULT_LISTEN: SocketAddr =
        SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), 4200);

    /// Where the console listens.
    pub fn address(&self) -> SocketAddr {
        self.listen.unwrap_or(Self::DEFAULT_LISTEN)
    }
}

/// `web.session_ttl`, a duration such as `12h` (between 1 minute and 30 days).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WebSessionTtl(pub std::time::Duration);

impl Default for WebSessionTtl {
    fn default() -> Self {
        Self(std::time::Duration::from_secs(12 * 3600))
    }
}

impl<'de> Deserialize<'de> for WebSessionTtl {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        let ttl = humantime::parse_duration(&text).map_err(|e| {
            de::Error::custom(format!("`{text}` is not a duration such as `12h`: {e}"))
        })?;
        if ttl < std::time::Duration::from_secs(60)
            || ttl > std::time::Duration::from_secs(30 * 86400)
        {
            return Err(de::Error::custom(format!("`{text}` is outside 1m..30d")));
        }
        Ok(Self(ttl))
    }
}

/// `state`: where the host's state lives and how long it is kept.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct State {
    pub retention: Retention,
    /// `sqlite` (default: `$PINCER_HOME/pincer.db`) or `postgres` (`url`).
    pub backend: StateBackend,
    /// The PostgreSQL database (`postgres://user@host:5432/pincer`, or
    /// `host=/run/postgresql user=pincer dbname=pincer`); required with
    /// `backend: postgres`, refused with `sqlite`.
    pub url: Option<String>,
    /// How long a daemon holds a workspace without renewing it (default
    /// `15s`): after a daemon dies, another takes its workspaces over
    /// within this time. Renewed every third of it.
    pub lease: LeaseTime,
}

/// `state.lease`, as written (`15s`, `1m`), 3 s to 10 min.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTime(pub std::time::Duration);

impl Default for LeaseTime {
    fn default() -> Self {
        Self(std::time::Duration::from_secs(15))
    }
}

impl<'de> Deserialize<'de> for LeaseTime {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        let lease = humantime::parse_duration(text.trim()).map_err(|e| {
            de::Error::custom(format!("`{text}` is not a duration such as `15s`: {e}"))
        })?;
        if lease < std::time::Duration::from_secs(3) || lease > std::time::Duration::from_secs(600)
        {
            return Err(de::Error::custom(format!(
                "`{text}` is outside 3s..10m: a shorter lease is lost to a slow database \
                 round trip, a longer one keeps a dead daemon's workspaces waiting"
            )));
        }
        Ok(Self(lease))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StateBackend {
    #[default]
    Sqlite,
    Postgres,
}

impl State {
    /// Where the state of `home` lives, as this section says.
    ///
    /// # Errors
    /// `backend: postgres` without a `url`, or a `url` with `sqlite`.
    pub fn location(&self, home: &std::path::Path) -> Result<crate::db::Location, String> {
        match (self.backend, &self.url) {
            (StateBackend::Sqlite, None) => {
                Ok(crate::db::Location::Sqlite(home.join(crate::db::FILE_NAME)))
            }
            (StateBackend::Sqlite, Some(_)) => Err(
                "state.url is set but state.backend is sqlite (the default): \
                 say `backend: postgres` to use the database at url, or remove url"
                    .into(),
            ),
            (StateBackend::Postgres, Some(url)) if !url.trim().is_empty() => {
                Ok(crate::db::Location::Postgres(url.clone()))
            }
            (StateBackend::Postgres, _) => Err(
                "state.backend is postgres but state.url is missing or empty \
                 (e.g. url: ${PINCER_DATABASE_URL})"
                    .into(),
            ),
        }
    }
}

/// `state.retention`: how long rows are kept before `pincer state prune`
/// (and the daemon, daily) deletes them. An inbound message not yet
/// answered and an outbox row not yet delivered or given up are kept
/// whatever their age.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Retention {
    /// Channel messages received (`channel_inbound`). Default `30d`.
    pub inbound: RetentionPeriod,
    /// Channel messages sent or given up (`channel_outbox`). Default `30d`.
    pub outbox: RetentionPeriod,
    /// The audit log (`audit_events`). Default `180d`.
    pub audit: RetentionPeriod,
}

impl Default for Retention {
    fn default() -> Self {
        let days = |n: u64| RetentionPeriod(std::time::Duration::from_secs(n * 24 * 3600));
        Retention {
            inbound: days(30),
            outbox: days(30),
            audit: days(180),
        }
    }
}

/// A retention period as written (`30d`, `12h`, `2w`), at least an hour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionPeriod(pub std::time::Duration);

impl RetentionPeriod {
    /// The shortest period accepted.
    pub const MIN: std::time::Duration = std::time::Duration::from_secs(3600);
}

impl<'de> Deserialize<'de> for RetentionPeriod {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        let period = humantime::parse_duration(text.trim()).map_err(|e| {
            de::Error::custom(format!(
                "invalid period `{text}` ({e}): write e.g. `30d`, `12h` or `2w`"
            ))
        })?;
        if period < Self::MIN {
            return Err(de::Error::custom(format!(
                "`{text}` is shorter than an hour: write at least `1h`"
            )));
        }
        Ok(RetentionPeriod(period))
    }
}

/// The model gateway. `model_list`, `fallbacks`, `routing_strategy`,
/// `num_retries` and `timeout` follow LiteLLM's router configuration.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Gateway {
    /// Where the gateway listens. Default `127.0.0.1:4000`. An address
    /// other than loopback needs `allow_remote: true` and `metrics_key`.
    pub listen: SocketAddr,
    /// Whether `listen` may be an address other than loopback (reachable
    /// from other machines and from every bridge-networked container).
    /// Default false.
    pub allow_remote: bool,
    /// The bearer key `GET /metrics` requires (`Authorization: Bearer KEY`),
    /// e.g. `${PINCER_METRICS_KEY}`; at least 16 characters. Required when
    /// `listen` is not loopback; without it `/metrics` needs no key.
    pub metrics_key: Option<String>,
    /// Timeouts and connection caps of the TCP listener and of each
    /// workspace's gateway socket.
    pub limits: GatewayLimits,
    /// Model deployments; several entries may share a `model_name` (alias).
    pub model_list: Vec<ModelDeployment>,
    /// LiteLLM shape: a list of single-key maps `alias -> [fallback aliases]`.
    pub fallbacks: Vec<BTreeMap<String, Vec<String>>>,
    pub routing_strategy: RoutingStrategy,
    /// Default 2.
    pub num_retries: u32,
    /// Request timeout in seconds. Default 60.
    pub timeout: f64,
    /// Prices in USD per million tokens, by `provider/model` or by alias;
    /// override and extend the built-in table
    /// (`pincer::gateway::PriceTable`).
    pub prices: BTreeMap<String, ModelPrice>,
    /// The exact-match response cache (off by default).
    pub cache: GatewayCache,
    /// Largest accepted request body in bytes. Default 4 MiB.
    pub max_request_bytes: u64,
}

impl Gateway {
    pub const DEFAULT_MAX_REQUEST_BYTES: u64 = 4 << 20;
    pub const MIN_MAX_REQUEST_BYTES: u64 = 1 << 10;
    pub const MAX_MAX_REQUEST_BYTES: u64 = 256 << 20;
    pub const MIN_METRICS_KEY_CHARS: usize = 16;
}

impl Default for Gateway {
    fn default() -> Self {
        Gateway {
            listen: SocketAddr::from((Ipv4Addr::LOCALHOST, 4000)),
            allow_remote: false,
            metrics_key: None,
            limits: GatewayLimits::default(),
            model_list: Vec::new(),
            fallbacks: Vec::new(),
            routing_strategy: RoutingStrategy::default(),
            num_retries: 2,
            timeout: 60.0,
            prices: BTreeMap::new(),
            cache: GatewayCache::default(),
            max_request_bytes: Self::DEFAULT_MAX_REQUEST_BYTES,
        }
    }
}

/// How long a listener waits for a client and how many clients it holds at
/// once (`channels.limits`, and the first four of `gateway.limits`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ListenerLimits {
    /// Seconds a client has to send a request's headers, from the moment
    /// it connects or sends the first byte of its next request. Default 10.
    pub header_read_secs: u64,
    /// Seconds a client has to send a request's whole body, from the end
    /// of its headers. Default 30.
    pub body_secs: u64,
    /// Seconds a kept-alive connection may sit without a request (never
    /// while a response, such as a stream, is being sent). Default 60.
    pub idle_secs: u64,
    /// Connections served at once; more are accepted and closed at once.
    /// Default 1024.
    pub max_connections: u64,
}

impl ListenerLimits {
    pub const MAX_SECS: u64 = 3600;
    pub const MAX_CONNECTIONS: u64 = 65_536;
}

impl Default for ListenerLimits {
    fn default() -> Self {
        ListenerLimits {
            header_read_secs: 10,
            body_secs: 30,
            idle_secs: 60,
            max_connections: 1024,
        }
    }
}

/// `gateway.limits`: [`ListenerLimits`] of the TCP listener and of every
/// workspace socket, plus each workspace socket's own connection cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GatewayLimits {
    /// Default 10.
    pub header_read_secs: u64,
    /// Default 30.
    pub body_secs: u64,
    /// Default 60.
    pub idle_secs: u64,
    /// Connections the TCP listener serves at once. Default 1024.
    pub max_connections: u64,
    /// Connections each workspace's gateway socket serves at once (each
    /// socket has its own: one workspace cannot starve another). Default 64.
    pub max_connections_per_workspace: u64,
}

impl GatewayLimits {
    /// The limits of the TCP listener.
    pub fn tcp(&self) -> ListenerLimits {
        ListenerLimits {
            header_read_secs: self.header_read_secs,
            body_secs: self.body_secs,
            idle_secs: self.idle_secs,
            max_connections: self.max_connections,
        }
    }

    /// The limits of one workspace's gateway socket.
    pub fn workspace(&self) -> ListenerLimits {
        ListenerLimits {
            max_connections: self.max_connections_per_workspace,
            ..self.tcp()
        }
    }
}

impl Default for GatewayLimits {
    fn default() -> Self {
        let listener = ListenerLimits::default();
        GatewayLimits {
            header_read_secs: listener.header_read_secs,
            body_secs: listener.body_secs,
            idle_secs: listener.idle_secs,
            max_connections: listener.max_connections,
            max_connections_per_workspace: 64,
        }
    }
}

/// One entry of `gateway.prices`: USD per million tokens. Zero is allowed
/// (free or local models).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelPrice {
    pub input_per_1m: f64,
    pub output_per_1m: f64,
}

/// `gateway.cache`: the exact-match response cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GatewayCache {
    /// Default false.
    pub enabled: bool,
    /// How long an answer stays cached, 1..=2592000 (30 days). Default 300.
    pub ttl_secs: u64,
    /// Most answers kept (least recently used go first),
    /// 1..=1000000. Default 1000.
    pub max_entries: u64,
}

impl GatewayCache {
    pub const MAX_TTL_SECS: u64 = 30 * 24 * 3600;
    pub const MAX_ENTRIES: u64 = 1_000_000;
}

impl Default for GatewayCache {
    fn default() -> Self {
        GatewayCache {
            enabled: false,
            ttl_secs: 300,
            max_entries: 1000,
        }
    }
}

/// One entry of `gateway.model_list`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelDeployment {
    /// The alias workspaces and fallbacks refer to.
    pub model_name: String,
    pub litellm_params: LitellmParams,
    /// What the model can do, in LiteLLM's shape.
    #[serde(default)]
    pub model_info: ModelInfo,
}

/// `model_info` of a deployment (LiteLLM's keys; the others it defines
/// are accepted and not used).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct ModelInfo {
    /// The model takes images as `image_url` content parts: images people
    /// send reach it as images, not only as files in the workspace.
    #[serde(default)]
    pub supports_vision: bool,
}

/// `litellm_params` of a deployment. `api_key` is hidden from `Debug`.
#[derive(Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LitellmParams {
    /// Provider-qualified model, e.g. `openai/gpt-4o-mini`.
    pub model: String,
    #[serde(default)]
    pub api_base: Option<String>,
    #[serde(default)]
    pub api_key: Option<String>,
    /// Requests per minute.
    #[serde(default)]
    pub rpm: Option<u64>,
    /// Tokens per minute.
    #[serde(default)]
    pub tpm: Option<u64>,
    /// Seconds.
    #[serde(default)]
    pub timeout: Option<f64>,
}

impl fmt::Debug for LitellmParams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LitellmParams")
            .field("model", &self.model)
            .field("api_base", &self.api_base)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("rpm", &self.rpm)
            .field("tpm", &self.tpm)
            .field("timeout", &self.timeout)
            .finish()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RoutingStrategy {
    #[default]
    SimpleShuffle,
    LeastBusy,
    LatencyBased,
}

/// How workspace containers are run.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Containers {
    pub runtime: ContainerRuntime,
    /// Default `pincer-agent:latest`.
    pub image: String,
    /// Kept as written; expand `~` with [`super::expand_tilde`] when used.
    /// Default `~/pincer_workspaces`.
    pub workspace_base_path: PathBuf,
    /// Extra folders of user policy groups.
    pub policy_dirs: Vec<PathBuf>,
    /// The old name of `idle.stop_after`, in seconds (0: never); giving
    /// both is an error.
    pub idle_timeout_secs: Option<u64>,
    /// When an unused container is frozen, then stopped.
    pub idle: ContainersIdle,
    /// The open-file limit (RLIMIT_NOFILE, soft and hard) of every
    /// container pincer starts, well below the daemon's own. Default 1024.
    pub nofile: u64,
    /// Bounds of each workspace's egress proxy.
    pub egress: EgressLimits,
}

/// `containers.egress`: bounds of each workspace's egress proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EgressLimits {
    /// Connections through one workspace's proxy at once; one more is
    /// answered 503. Default 64.
    pub max_connections: u32,
    /// A connection with no byte either way for this long is closed.
    /// Default 300.
    pub idle_timeout_secs: u64,
    /// Bytes one workspace's connections may move in a minute, both ways
    /// together; past it they wait for the next minute. 0: no cap
    /// (default).
    pub bytes_per_minute: u64,
}

impl Default for EgressLimits {
    fn default() -> Self {
        EgressLimits {
            max_connections: 64,
            idle_timeout_secs: 300,
            bytes_per_minute: 0,
        }
    }
}

impl Containers {
    pub const DEFAULT_NOFILE: u64 = 1024;
    pub const MIN_NOFILE: u64 = 64;
    pub const MAX_NOFILE: u64 = 65_536;
}

impl Default for Containers {
    fn default() -> Self {
        Containers {
            runtime: ContainerRuntime::default(),
            image: "pincer-agent:latest".to_owned(),
            workspace_base_path: PathBuf::from("~/pincer_workspaces"),
            policy_dirs: Vec::new(),
            idle_timeout_secs: None,
            idle: ContainersIdle::default(),
            nofile: Self::DEFAULT_NOFILE,
            egress: EgressLimits::default(),
        }
    }
}

/// `containers.idle`: two-stage idleness of every workspace container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ContainersIdle {
    /// Freeze (`docker pause`) a container this long unused. Default `2m`.
    pub pause_after: Option<IdleAfter>,
    /// Stop it this long unused (frozen or not); the next use cold-starts.
    /// Default `6h` (or `idle_timeout_secs`).
    pub stop_after: Option<IdleAfter>,
    /// Past this many frozen containers, the least recently used ones are
    /// stopped. Default 50.
    pub max_paused: u32,
}

impl Default for ContainersIdle {
    fn default() -> Self {
        ContainersIdle {
            pause_after: None,
            stop_after: None,
            max_paused: Self::DEFAULT_MAX_PAUSED,
        }
    }
}

impl ContainersIdle {
    pub const DEFAULT_PAUSE_AFTER: Duration = Duration::from_secs(120);
    pub const DEFAULT_STOP_AFTER: Duration = Duration::from_secs(6 * 3600);
    pub const DEFAULT_MAX_PAUSED: u32 = 50;
}

/// `workspaces.NAME.idle`: overrides `containers.idle` for one workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkspaceIdle {
    pub pause_after: Option<IdleAfter>,
    pub stop_after: Option<IdleAfter>,
}

/// How long unused before a step of idleness: a duration as written
/// (`30s`, `2m`, `6h`); `0` never takes the step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdleAfter(pub Duration);

impl IdleAfter {
    /// `None` for `0` (never).
    pub fn get(self) -> Option<Duration> {
        (!self.0.is_zero()).then_some(self.0)
    }
}

impl<'de> Deserialize<'de> for IdleAfter {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        let text = text.trim();
        if text == "0" {
            return Ok(IdleAfter(Duration::ZERO));
        }
        let after = humantime::parse_duration(text).map_err(|e| {
            de::Error::custom(format!(
                "invalid duration `{text}` ({e}): write e.g. `30s`, `2m` or `6h`, or `0` for never"
            ))
        })?;
        if after < Duration::from_secs(1) {
            return Err(de::Error::custom(format!(
                "`{text}` is shorter than a second: write at least `1s`, or `0` for never"
            )));
        }
        Ok(IdleAfter(after))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ContainerRuntime {
    #[default]
    Docker,
}

/// One workspace.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Workspace {
    /// An alias from `gateway.model_list`; `None` = the gateway's default.
    pub model: Option<String>,
    /// The model aliases this workspace may call through the gateway
    /// (aliases from `gateway.model_list`). Default (`None`): `model` and its
    /// fallbacks when `model` is set, every alias when it is not. When set,
    /// it must contain `model` (or `default` when `model` is unset: turns
    /// use that alias) and every fallback of each listed alias.
    pub models: Option<Vec<String>>,
    /// The workspace folder (mounted at `/workspace`), kept as written (`~`
    /// allowed; `${workspace_base_path}` refers to
    /// `containers.workspace_base_path`). Default:
    /// `containers.workspace_base_path/NAME`.
    pub path: Option<PathBuf>,
    /// Policy groups: names, or the one-key mapping
    /// `{allowed_executables: [paths]}`.
    pub policies: Vec<PolicyEntry>,
    pub mounts: Vec<Mount>,
    /// Names from `mcp_servers`.
    pub mcp_servers: Vec<String>,
    /// Skill (plugin) names.
    pub skills: Vec<String>,
    /// Names from `channels`.
    pub channels: Vec<String>,
    /// Instructions file (e.g. `AGENTS.md`). Relative: beneath the
    /// workspace folder (no symlinks, regular files only, capped). Absolute:
    /// inside the workspace folder, read beneath it; elsewhere, the
    /// operator's own file, read only if no component is a symlink or `..`.
    pub instructions: Option<PathBuf>,
    /// Spending limits for model calls through the gateway; none by default.
    pub budget: Budget,
    /// Observer plugins that receive this workspace's turn events.
    pub observers: Vec<String>,
    /// Long-term memory: tools and automatic recall.
    pub memory: WorkspaceMemory,
    /// Bounds of one agent turn.
    pub agent: AgentLimits,
    /// HTTP hosts each plugin may reach for this workspace, by plugin name
    /// (patterns as in a manifest's `[capabilities] http`). A plugin reaches
    /// its manifest's hosts ∩ these; without an entry, its manifest's hosts.
    pub plugin_http: BTreeMap<String, Vec<String>>,
    /// Where the workspace's container may connect through the egress
    /// proxy (`pypi.org`, `*.github.com:443`, `10.0.0.5:8080`: patterns as
    /// in `plugin_http`; a bare host means ports 80 and 443). Joined with
    /// the `egress:` of its policy groups. Default: none, no way out.
    pub egress: Vec<String>,
    /// The tunnel services its container may reach as
    /// `http://SERVICE.tunnel/…` through the egress proxy (the `service` of
    /// a configured tunnel plugin, e.g. `grafana`). Default: none.
    pub tunnels: Vec<String>,
    /// Ask a person, in the running turn's conversation, before a
    /// connection to a host `egress` does not list, instead of refusing
    /// it ("once": this connection; "always": a stored `egress:` rule,
    /// listed and revoked with `pincer approvals rules|revoke`). Default
    /// false.
    pub egress_ask: bool,
    /// Whether the agent may schedule its own tasks (the `schedule__*`
    /// tools). Default `none`.
    pub agent_schedules: AgentSchedules,
    /// Which tool calls wait for a person's decision.
    pub approvals: WorkspaceApprovals,
    /// Overrides `containers.idle` for this workspace's container.
    pub idle: WorkspaceIdle,
}

/// `workspaces.NAME.approvals`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkspaceApprovals {
    /// `read-only`, `approval` or `yolo`. Default: `approval` when a
    /// channel serves the workspace, `yolo` otherwise.
    pub tier: Option<Tier>,
    /// What waits for a decision in tier `approval`: tool names, `mcp:NAME`,
    /// `skill:NAME` (`*` for every source). Default: the write-class tools.
    pub ask: Vec<Selector>,
    /// Auto-allow rules: tool names, sources, or `bash: PROGRAM ARGS…` argv
    /// prefixes (never a shell or an interpreter).
    pub allow: Vec<Rule>,
    /// Allow the built-in read commands (`ls`, `cat`, `grep` … as one simple
    /// command) unasked. Default true.
    pub read_commands: bool,
    /// How long a request waits; then it is denied. Default `5m`.
    pub timeout: ApprovalTimeout,
    /// Who may decide: `originator` (default) or a list of sender ids.
    pub approvers: Approvers,
    /// Scheduled runs (nobody to ask): `deny` (default) or `allow`.
    pub unattended: Unattended,
}

impl Default for WorkspaceApprovals {
    fn default() -> Self {
        WorkspaceApprovals {
            tier: None,
            ask: crate::approvals::default_ask(),
            allow: Vec::new(),
            read_commands: true,
            timeout: ApprovalTimeout(crate::approvals::DEFAULT_TIMEOUT),
            approvers: Approvers::Originator,
            unattended: Unattended::Deny,
        }
    }
}

/// `approvals.timeout` as written (`5m`, `90s`), from 10 s to a day.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApprovalTimeout(pub std::time::Duration);

impl ApprovalTimeout {
    pub const MIN: std::time::Duration = std::time::Duration::from_secs(10);
    pub const MAX: std::time::Duration = std::time::Duration::from_secs(24 * 3600);
}

impl<'de> Deserialize<'de> for ApprovalTimeout {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        let period = humantime::parse_duration(text.trim()).map_err(|e| {
            de::Error::custom(format!(
                "invalid timeout `{text}` ({e}): write e.g. `5m` or `90s`"
            ))
        })?;
        if !(Self::MIN..=Self::MAX).contains(&period) {
            return Err(de::Error::custom(format!(
                "timeout `{text}` is outside 10s to 24h"
            )));
        }
        Ok(ApprovalTimeout(period))
    }
}

/// A tier that tightens the workspace's: `channels.NAME.approvals` and
/// `channels.NAME.senders.ID`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TierSetting {
    pub tier: Tier,
}

/// `workspaces.NAME.agent_schedules`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AgentSchedules {
    /// No `schedule__*` tools.
    #[default]
    None,
    /// The agent proposes; a person enables each task with `pincer schedule
    /// approve`.
    Propose,
    /// The agent's tasks run as soon as they are created (audited).
    Auto,
}

impl AgentSchedules {
    pub fn as_str(self) -> &'static str {
        match self {
            AgentSchedules::None => "none",
            AgentSchedules::Propose => "propose",
            AgentSchedules::Auto => "auto",
        }
    }
}

/// `workspaces.NAME.memory`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkspaceMemory {
    /// Offer `memory__memorize/recall/forget` and recall into each turn.
    pub enabled: bool,
    /// Memories recalled automatically into a turn's context (0 = none).
    pub recall_limit: usize,
    /// Characters of recalled memories a turn's context may hold.
    pub recall_chars: usize,
}

impl Default for WorkspaceMemory {
    fn default() -> Self {
        WorkspaceMemory {
            enabled: true,
            recall_limit: 5,
            recall_chars: 2000,
        }
    }
}

/// `workspaces.NAME.agent`: what bounds one turn of the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentLimits {
    /// Model calls per turn.
    pub max_steps: u32,
    /// Bytes of one tool result that enter the model's context.
    pub max_tool_output_bytes: usize,
    /// Seconds one tool call may take.
    pub tool_timeout_secs: u64,
    /// Prompt + completion tokens one turn may use.
    pub max_turn_tokens: u64,
    /// Estimated tokens of history sent with each turn (oldest turns are
    /// dropped first, and the turn says so).
    pub history_tokens: u64,
    /// Seconds a whole turn may take.
    pub turn_timeout_secs: u64,
    /// Events the runner may stream in one turn; past it the turn is
    /// stopped (the runner is inside the container: it is not trusted).
    pub max_turn_events: u64,
    /// Bytes of events the runner may stream in one turn (all of it is
    /// stored); past it the turn is stopped.
    pub max_turn_stored_bytes: u64,
}

impl Default for AgentLimits {
    fn default() -> Self {
        AgentLimits {
            max_steps: 16,
            max_tool_output_bytes: 16 * 1024,
            tool_timeout_secs: 60,
            max_turn_tokens: 200_000,
            history_tokens: 24_000,
            turn_timeout_secs: 600,
            max_turn_events: 4096,
            max_turn_stored_bytes: 8 * 1024 * 1024,
        }
    }
}

/// `workspaces.NAME.budget`: limits per UTC day and per calendar month (UTC).
/// Every limit is optional and, when set, positive. Tokens count prompt plus
/// completion tokens.
#[derive(Debug, Clone, Copy, PartialEq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Budget {
    pub daily_usd: Option<f64>,
    pub monthly_usd: Option<f64>,
    pub daily_tokens: Option<u64>,
    pub monthly_tokens: Option<u64>,
}

impl Budget {
    /// True when no limit is set.
    pub fn is_unlimited(&self) -> bool {
        *self == Budget::default()
    }

    /// True when a USD limit is set (calls then need a known price).
    pub fn has_usd_limit(&self) -> bool {
        self.daily_usd.is_some() || self.monthly_usd.is_some()
    }
}

/// One entry of `workspaces.NAME.policies`: a policy group name, or the
/// one-key mapping `{allowed_executables: [/bin/busybox, ...]}`. Compares
/// equal to a `&str` holding the group name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PolicyEntry {
    Group(String),
    AllowedExecutables(Vec<String>),
}

impl PolicyEntry {
    /// The group name (`allowed_executables` for the mapping form).
    pub fn name(&self) -> &str {
        match self {
            PolicyEntry::Group(name) => name,
            PolicyEntry::AllowedExecutables(_) => "allowed_executables",
        }
    }
}

impl fmt::Display for PolicyEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicyEntry::Group(name) => f.write_str(name),
            PolicyEntry::AllowedExecutables(paths) => {
                write!(f, "allowed_executables: [{}]", paths.join(", "))
            }
        }
    }
}

impl From<&str> for PolicyEntry {
    fn from(name: &str) -> Self {
        PolicyEntry::Group(name.to_owned())
    }
}

impl PartialEq<&str> for PolicyEntry {
    fn eq(&self, other: &&str) -> bool {
        matches!(self, PolicyEntry::Group(name) if name == other)
    }
}

impl<'de> Deserialize<'de> for PolicyEntry {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct EntryVisitor;

        impl<'de> Visitor<'de> for EntryVisitor {
            type Value = PolicyEntry;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a policy group name or {allowed_executables: [paths]}")
            }

            fn visit_str<E: de::Error>(self, name: &str) -> Result<PolicyEntry, E> {
                // Pynchy writes the mapping as a string:
                // "allowed_executables: [/usr/bin/python3]".
                if let Some(list) = name
                    .trim()
                    .strip_prefix("allowed_executables")
                    .and_then(|rest| rest.trim_start().strip_prefix(':'))
                {
                    return super::compat::parse_path_list(list)
                        .map(PolicyEntry::AllowedExecutables)
                        .map_err(|why| {
                            de::Error::custom(format!(
                                "cannot read `{name}` as a policy entry ({why}); write allowed_executables: [/usr/bin/python3, ...] with absolute paths, or the mapping {{allowed_executables: [...]}}"
                            ))
                        });
                }
                Ok(PolicyEntry::Group(name.to_owned()))
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<PolicyEntry, A::Error> {
                let Some(key) = map.next_key::<String>()? else {
                    return Err(de::Error::custom(
                        "expected {allowed_executables: [paths]}, found an empty mapping",
                    ));
                };
                if key != "allowed_executables" {
                    return Err(de::Error::unknown_field(&key, &["allowed_executables"]));
                }
                let paths: Vec<String> = map.next_value()?;
                if map.next_key::<String>()?.is_some() {
                    return Err(de::Error::custom(
                        "a policy mapping has exactly one key, `allowed_executables`",
                    ));
                }
                Ok(PolicyEntry::AllowedExecutables(paths))
            }
        }

        deserializer.deserialize_any(EntryVisitor)
    }
}

/// A host folder mounted into a workspace container.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mount {
    /// Host path, kept as written (`~` allowed).
    pub source: PathBuf,
    /// Absolute path in the container; not `/` and not `/workspace`.
    pub target: String,
    /// Default true.
    #[serde(default = "yes")]
    pub read_only: bool,
}

fn yes() -> bool {
    true
}

/// Plugin discovery, limits and per-plugin configuration.
#[derive(Clone, PartialEq, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Plugins {
    /// Extra folders scanned for plugins.
    pub dirs: Vec<PathBuf>,
    /// When set, only these plugins (names of installed or built-in
    /// plugins; Pynchy's entry-point names map to pincer's plugin where one
    /// exists) and those the configuration names elsewhere (channels,
    /// skills, observers) are loaded.
    pub enabled: Option<Vec<String>>,
    pub limits: PluginLimits,
    /// Free-form configuration by plugin name, `${...}` interpolated. Values
    /// are hidden from `Debug` (they often hold secrets).
    pub config: BTreeMap<String, serde_json::Value>,
    /// Publishers whose signed plugins `pincer plugin install REF` accepts.
    pub trusted_publishers: Vec<TrustedPublisher>,
    /// What to do with a plugin built against WIT 0.1.0 that has secret
    /// config keys (it reads their values through `config`). Default
    /// `refuse`.
    pub legacy_secrets: LegacySecrets,
}

impl Plugins {
    /// Each configured instance of plugin `name`: `plugins.config.NAME` is
    /// one instance's configuration, or a list of several (one tunnel
    /// plugin serving several services).
    pub fn instances(&self, name: &str) -> Vec<&serde_json::Value> {
        match self.config.get(name) {
            Some(serde_json::Value::Array(list)) => list.iter().collect(),
            Some(one) => vec![one],
            None => Vec::new(),
        }
    }

    /// The `service` each instance of each plugin configures, with the
    /// plugin's name: the tunnels a workspace may list.
    pub fn configured_services(&self) -> Vec<(&str, &str)> {
        self.config
            .keys()
            .flat_map(|name| {
                self.instances(name).into_iter().filter_map(move |value| {
                    value
                        .get("service")
                        .and_then(serde_json::Value::as_str)
                        .map(|service| (service, name.as_str()))
                })
            })
            .collect()
    }
}

/// `plugins.trusted_publishers[]`: a name for messages and an `ed25519:`
/// public key (`pincer plugin key generate` prints one); `plugins`, when
/// given, the names (globs: `*` is any run of characters) of the plugins
/// this key may sign. Without it the key may sign any name.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrustedPublisher {
    pub name: String,
    pub key: String,
    #[serde(default)]
    pub plugins: Option<Vec<String>>,
}

/// `plugins.legacy_secrets`: a WIT 0.1.0 plugin with secret config keys is
/// refused (installed and loaded: never), or installed and loaded with a
/// warning that it reads its secrets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LegacySecrets {
    #[default]
    Refuse,
    Warn,
}

impl fmt::Debug for Plugins {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plugins")
            .field("dirs", &self.dirs)
            .field("enabled", &self.enabled)
            .field("limits", &self.limits)
            .field("config", &Redacted(self.config.keys()))
            .field("trusted_publishers", &self.trusted_publishers)
            .field("legacy_secrets", &self.legacy_secrets)
            .finish()
    }
}

/// Default resource limits for one plugin instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PluginLimits {
    /// 1..=4096, default 64.
    pub memory_mb: u32,
    /// 1..=600000, default 5000.
    pub call_timeout_ms: u64,
    /// Size of one plugin's `/data` folder in one workspace (or channel), in
    /// MiB; 1..=1048576, default 100.
    pub data_quota_mb: u64,
}

impl PluginLimits {
    pub const MAX_MEMORY_MB: u32 = 4096;
    pub const MAX_CALL_TIMEOUT_MS: u64 = 600_000;
    pub const DEFAULT_DATA_QUOTA_MB: u64 = 100;
    pub const MAX_DATA_QUOTA_MB: u64 = 1 << 20;
}

impl Default for PluginLimits {
    fn default() -> Self {
        PluginLimits {
            memory_mb: 64,
            call_timeout_ms: 5000,
            data_quota_mb: Self::DEFAULT_DATA_QUOTA_MB,
        }
    }
}

/// `channels:` — each channel by name, plus the reserved keys `listen`,
/// `allow_remote` and `limits`.
#[derive(Debug, Clone, PartialEq)]
pub struct Channels {
    /// Where the daemon serves channel webhooks
    /// (`http://LISTEN/channels/NAME/...`). Default `127.0.0.1:4100`. An
    /// address other than loopback needs `allow_remote: true`.
    pub listen: SocketAddr,
    /// Whether `listen` may be an address other than loopback (reachable
    /// from other machines and from every bridge-networked container).
    /// Default false.
    pub allow_remote: bool,
    /// Timeouts and connection cap of the webhook listener.
    pub limits: ListenerLimits,
    named: BTreeMap<String, Channel>,
}

impl Channels {
    pub const DEFAULT_LISTEN: SocketAddr =
        SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), 4100);
    /// The keys under `channels:` that are not channels.
    pub const LISTEN_KEY: &'static str = "listen";
    pub const ALLOW_REMOTE_KEY: &'static str = "allow_remote";
    pub const LIMITS_KEY: &'static str = "limits";
    pub const RESERVED_KEYS: [&'static str; 3] =
        [Self::LISTEN_KEY, Self::ALLOW_REMOTE_KEY, Self::LIMITS_KEY];

    pub fn new(listen: SocketAddr, named: BTreeMap<String, Channel>) -> Self {
        Self {
            listen,
            allow_remote: false,
            limits: ListenerLimits::default(),
            named,
        }
    }
}

impl Default for Channels {
    fn default() -> Self {
        Self::new(Self::DEFAULT_LISTEN, BTreeMap::new())
    }
}

impl std::ops::Deref for Channels {
    type Target = BTreeMap<String, Channel>;
    fn deref(&self) -> &Self::Target {
        &self.named
    }
}

impl std::ops::DerefMut for Channels {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.named
    }
}

impl<'a> IntoIterator for &'a Channels {
    type Item = (&'a String, &'a Channel);
    type IntoIter = std::collections::btree_map::Iter<'a, String, Channel>;
    fn into_iter(self) -> Self::IntoIter {
        self.named.iter()
    }
}

impl<'de> Deserialize<'de> for Channels {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ChannelsVisitor;
        impl<'de> Visitor<'de> for ChannelsVisitor {
            type Value = Channels;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(
                    "a mapping of channel names (and `listen: HOST:PORT`, `allow_remote`, `limits`)",
                )
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Channels, A::Error> {
                let mut out = Channels::default();
                while let Some(key) = map.next_key::<String>()? {
                    if key == Channels::LISTEN_KEY {
                        out.listen = map.next_value()?;
                        continue;
                    }
                    if key == Channels::ALLOW_REMOTE_KEY {
                        out.allow_remote = map.next_value()?;
                        continue;
                    }
                    if key == Channels::LIMITS_KEY {
                        out.limits = map.next_value()?;
                        continue;
                    }
                    match out.named.entry(key) {
                        std::collections::btree_map::Entry::Occupied(e) => {
                            return Err(de::Error::custom(format!(
                                "channel `{}` is defined twice",
                                e.key()
                            )));
                        }
                        std::collections::btree_map::Entry::Vacant(e) => {
                            e.insert(map.next_value()?);
                        }
                    }
                }
                Ok(out)
            }
        }
        deserializer.deserialize_map(ChannelsVisitor)
    }
}

/// A channel: a channel plugin bound to a workspace.
#[derive(Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Channel {
    /// The channel plugin, e.g. `channel-slack`.
    pub plugin: String,
    /// The workspace messages go to, unless `conversations` binds theirs
    /// elsewhere.
    pub workspace: String,
    /// Sender ids (the platform's user ids) allowed to use this channel;
    /// `*` allows everyone. Empty: nobody (every message is refused).
    #[serde(default)]
    pub allowed_senders: Vec<String>,
    /// The plugin's settings, `${...}` interpolated. Keys its manifest marks
    /// secret are used by the host on the plugin's behalf and never given
    /// to it. Values are hidden from `Debug`.
    #[serde(default)]
    pub config: BTreeMap<String, serde_json::Value>,
    /// HTTP destinations this channel's plugin may reach besides its
    /// manifest's (patterns as in a manifest's `[capabilities] http`), e.g.
    /// a local proxy or test server named in `config.api_base`.
    #[serde(default)]
    pub http: Vec<String>,
    /// Per-conversation workspace bindings: platform conversation id →
    /// workspace name.
    #[serde(default)]
    pub conversations: BTreeMap<String, String>,
    /// What a sender not in `allowed_senders` sees. Default `silent`.
    #[serde(default)]
    pub refusal: Refusal,
    /// Where `deliver_to: [channel:NAME]` in a `schedules.yaml` posts (a
    /// platform conversation id).
    #[serde(default)]
    pub default_conversation: Option<String>,
    /// A stricter approvals tier for everything this channel serves.
    #[serde(default)]
    pub approvals: Option<TierSetting>,
    /// Stricter approvals tiers per sender id.
    #[serde(default)]
    pub senders: BTreeMap<String, TierSetting>,
    /// Earlier messages of the thread (or channel) given to the model as
    /// quoted, untrusted context.
    #[serde(default)]
    pub context: ChannelContext,
    /// Files sent with messages: how large, which kinds (sniffed from the
    /// bytes) the host downloads into the workspace's `inbox/`.
    #[serde(default)]
    pub files: ChannelFiles,
}

/// `channels.NAME.files`: what the host takes of the files people send.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ChannelFiles {
    /// Larger files are refused (before download when the platform says
    /// the size, else when the stream passes it): a number or `25m`.
    pub max_bytes: ByteSize,
    /// The kinds taken, told by the file's first bytes, not its name;
    /// an empty list takes no files. Executables are never taken.
    pub types: Vec<FileType>,
}

impl Default for ChannelFiles {
    fn default() -> Self {
        Self {
            max_bytes: ByteSize(25 << 20),
            types: vec![
                FileType::Text,
                FileType::Image,
                FileType::Pdf,
                FileType::Office,
            ],
        }
    }
}

/// A kind of file, as its content shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FileType {
    /// UTF-8 text without NUL bytes: logs, CSV, JSON, source code.
    Text,
    /// PNG, JPEG, GIF, WebP.
    Image,
    Pdf,
    /// Office Open XML and OpenDocument files (zip containers).
    Office,
    /// Other zip archives and gzip.
    Archive,
}

impl FileType {
    pub fn name(self) -> &'static str {
        match self {
            FileType::Text => "text",
            FileType::Image => "image",
            FileType::Pdf => "pdf",
            FileType::Office => "office",
            FileType::Archive => "archive",
        }
    }
}

/// `channels.NAME.context`: how much of a conversation's earlier messages
/// a turn sees, always as quoted content, never as instructions.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ChannelContext {
    /// Earlier messages of the thread a mention arrives in; 0: none.
    pub thread: u32,
    /// Latest messages of the channel for a mention outside a thread; 0: none.
    pub channel: u32,
    /// At most this many bytes of quoted text (the newest kept): a number
    /// or `16k`, `1m`.
    pub max_bytes: ByteSize,
    /// Whose messages are quoted: `all` (default; senders outside
    /// `allowed_senders` marked as such) or `allowed` only.
    pub senders: ContextSenders,
}

impl Default for ChannelContext {
    fn default() -> Self {
        Self {
            thread: 30,
            channel: 0,
            max_bytes: ByteSize(16 * 1024),
            senders: ContextSenders::All,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContextSenders {
    #[default]
    All,
    Allowed,
}

/// A size in bytes, written as a number or with a `k`/`m` suffix (1024s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteSize(pub u64);

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            Number(u64),
            Text(String),
        }
        match Written::deserialize(d)? {
            Written::Number(n) => Ok(ByteSize(n)),
            Written::Text(text) => parse_byte_size(&text).map(ByteSize).ok_or_else(|| {
                serde::de::Error::custom(format!(
                    "`{text}` is not a size: write bytes (16384) or with k or m (16k, 1m)"
                ))
            }),
        }
    }
}

fn parse_byte_size(text: &str) -> Option<u64> {
    let t = text.trim().to_ascii_lowercase();
    let t = t
        .strip_suffix("ib")
        .or_else(|| t.strip_suffix('b'))
        .unwrap_or(&t);
    let (digits, unit) = match t.strip_suffix('k') {
        Some(d) => (d, 1024),
        None => match t.strip_suffix('m') {
            Some(d) => (d, 1024 * 1024),
            None => (t, 1),
        },
    };
    digits.trim().parse::<u64>().ok()?.checked_mul(unit)
}

impl fmt::Debug for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Channel")
            .field("plugin", &self.plugin)
            .field("workspace", &self.workspace)
            .field("allowed_senders", &self.allowed_senders)
            .field("config", &Redacted(self.config.keys()))
            .field("http", &self.http)
            .field("conversations", &self.conversations)
            .field("refusal", &self.refusal)
            .field("default_conversation", &self.default_conversation)
            .field("approvals", &self.approvals)
            .field("senders", &self.senders)
            .field("context", &self.context)
            .finish()
    }
}

impl Channel {
    /// The workspace answering `conversation`.
    pub fn workspace_for(&self, conversation: &str) -> &str {
        self.conversations
            .get(conversation)
            .map_or(self.workspace.as_str(), String::as_str)
    }

    pub fn allows(&self, sender: &str) -> bool {
        self.allowed_senders
            .iter()
            .any(|allowed| allowed == "*" || allowed == sender)
    }

    /// The plugin config as a JSON object.
    pub fn plugin_config(&self) -> serde_json::Value {
        serde_json::Value::Object(self.config.clone().into_iter().collect())
    }
}

/// What a refused sender sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Refusal {
    /// Nothing (the refusal is audited).
    #[default]
    Silent,
    /// A short reply saying they are not allowed, with their sender id (so
    /// an operator can add it).
    Reply,
    /// A pairing code sent to them by direct message; the operator approves
    /// it with `pincer pairing approve CODE` and they are allowed from their
    /// next message on.
    Pair,
}

/// Access rules for one skill.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Skill {
    /// Workspace names, or `*` for all. Default `["*"]`.
    pub allowed_workspaces: Vec<String>,
    /// Tool filter; empty = all tools.
    pub tools: Vec<String>,
    /// Believe the skill's `plugin.toml` where it says a tool only reads
    /// (`[tools.NAME] effect = "read"`): such a tool then runs without
    /// asking in tier `approval`. Default false: every skill tool is
    /// write-class.
    pub trust_effects: bool,
}

impl Default for Skill {
    fn default() -> Self {
        Skill {
            allowed_workspaces: vec!["*".to_owned()],
            tools: Vec::new(),
            trust_effects: false,
        }
    }
}

/// An MCP server: exactly one of `command`, `url`, `container`.
#[derive(Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpServer {
    /// stdio server: program and arguments.
    pub command: Option<Vec<String>>,
    /// Remote streamable-HTTP server.
    pub url: Option<String>,
    /// Server run in its own container.
    pub container: Option<McpContainer>,
    /// Environment for the server; values hidden from `Debug`.
    pub env: BTreeMap<String, String>,
    /// Tool filter; empty = all tools.
    pub tools: Vec<String>,
    /// Workspace names, or `*` for all. Default `["*"]`.
    pub allowed_workspaces: Vec<String>,
    /// Seconds one tool call may take (a hung server is given up on, and a
    /// container server is replaced on next use). Default 300.
    pub call_timeout_secs: u64,
    /// Believe the server's tool annotations: a tool it marks
    /// `readOnlyHint` (and not `destructiveHint`) then runs without asking
    /// in tier `approval`. Default false: every tool of it is write-class.
    pub trust_annotations: bool,
}

impl McpServer {
    pub const DEFAULT_CALL_TIMEOUT_SECS: u64 = 300;
    pub const MAX_CALL_TIMEOUT_SECS: u64 = 3600;
}

impl Default for McpServer {
    fn default() -> Self {
        McpServer {
            command: None,
            url: None,
            container: None,
            env: BTreeMap::new(),
            tools: Vec::new(),
            allowed_workspaces: vec!["*".to_owned()],
            call_timeout_secs: Self::DEFAULT_CALL_TIMEOUT_SECS,
            trust_annotations: false,
        }
    }
}

impl fmt::Debug for McpServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpServer")
            .field("command", &self.command)
            .field("url", &self.url)
            .field("container", &self.container)
            .field("env", &Redacted(self.env.keys()))
            .field("tools", &self.tools)
            .field("allowed_workspaces", &self.allowed_workspaces)
            .field("call_timeout_secs", &self.call_timeout_secs)
            .field("trust_annotations", &self.trust_annotations)
            .finish()
    }
}

/// `mcp_servers.NAME.container`: a server pincer runs in a container of its
/// own and speaks to over stdio (Docker's attach stream), never over a
/// network.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpContainer {
    /// An image on the local engine (never pulled).
    pub image: String,
    /// Overrides the image's command; empty: the image's own.
    #[serde(default)]
    pub command: Vec<String>,
    /// `HOST_PATH:CONTAINER_PATH[:ro|rw]` (default `ro`); sources are
    /// checked like workspace mounts when the server starts.
    #[serde(default)]
    pub volumes: Vec<String>,
    /// Policy groups of the server's container. Default
    /// `[no_internet_access, read_only_rootfs]`; the baseline (no
    /// capabilities, no new privileges, memory and pids limits) always
    /// applies.
    #[serde(default)]
    pub policies: Option<Vec<PolicyEntry>>,
}

impl McpContainer {
    /// The groups a server's container gets when `policies` is not set.
    pub const DEFAULT_POLICIES: [&'static str; 2] = ["no_internet_access", "read_only_rootfs"];

    /// `policies`, or the default.
    pub fn policy_entries(&self) -> Vec<PolicyEntry> {
        match &self.policies {
            Some(list) => list.clone(),
            None => Self::DEFAULT_POLICIES
                .iter()
                .map(|name| PolicyEntry::from(*name))
                .collect(),
        }
    }
}

/// Debug-prints map keys with hidden values.
struct Redacted<I>(I);

impl<'a, I> fmt::Debug for Redacted<I>
where
    I: Iterator<Item = &'a String> + Clone,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.clone().map(|k| (k, "<redacted>")))
            .finish()
    }
}
