//! Configuration: `pincer.yaml`.
//!
//! Loading runs in four steps, each reporting `FILE:LINE:COLUMN: message`:
//! 1. `serde-saphyr` parses the YAML into a located tree (syntax errors,
//!    duplicate keys, anchors and merge keys, nesting limits);
//! 2. `${NAME}` references in string values are expanded on that tree
//!    (rules below), so environment values are never parsed as YAML;
//! 3. the tree is deserialized into [`Config`] (unknown keys, wrong types);
//! 4. semantic checks (names, references between sections, ranges).
//!
//! Interpolation: `${NAME}` (error if unset), `${NAME:-default}` (default if
//! unset or empty), `$${` for a literal `${`; names are
//! `[A-Za-z_][A-Za-z0-9_]*`. It applies to string values in every scalar
//! style, including free-form plugin config, but not to mapping keys.

mod compat;
mod contract;
mod de;
mod error;
mod interpolate;
mod located;
mod node;
mod paths;
mod references;
mod schema;
mod validate;

#[cfg(test)]
mod tests;

use std::path::Path;

pub mod starter;

pub use compat::{Explained, GEMINI_API_BASE, ResolvedModel, Warning, resolve_model};
pub use contract::{
    DEFAULT_MODEL_ALIAS, MAX_MESSAGE_BYTES, MEMORY_SOURCE, SCHEDULE_SOURCE, SkillReference,
    ToolName, with_fallbacks,
};
pub use error::{ConfigError, Invalid, Position};
pub use paths::{CONFIG_FILE_NAME, expand_tilde, pincer_home, resolve_config_path};
pub use schema::{
    AgentLimits, AgentSchedules, ApprovalTimeout, Budget, ByteSize, Channel, ChannelContext,
    ChannelFiles, Channels, Config, ContainerRuntime, Containers, ContainersIdle, ContextSenders,
    EgressLimits, FileType, Gateway, GatewayCache, GatewayLimits, IdleAfter, LegacySecrets,
    ListenerLimits, LitellmParams, McpContainer, McpServer, ModelDeployment, ModelInfo, ModelPrice,
    Mount, PluginLimits, Plugins, PolicyEntry, Refusal, Retention, RetentionPeriod,
    RoutingStrategy, Skill, State, TierSetting, TrustedPublisher, Workspace, WorkspaceApprovals,
    WorkspaceIdle, WorkspaceMemory,
};
pub use validate::{Volume, is_loopback, metrics_key_refusal, parse_volume, remote_refusal};

pub(crate) use located::{Document, parse_located};
pub(crate) use node::Seg;
pub(crate) use validate::is_valid_name;

/// When one workspace's container is frozen and stopped ([`Config::idleness`]);
/// `None`: never.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Idleness {
    pub pause_after: Option<std::time::Duration>,
    pub stop_after: Option<std::time::Duration>,
}

impl Config {
    /// Whether a channel serves workspace `name` (its `workspace`, one of
    /// its `conversations`, or listed in the workspace's `channels`).
    pub fn served_by_a_channel(&self, name: &str) -> bool {
        self.channels
            .values()
            .any(|c| c.workspace == name || c.conversations.values().any(|w| w == name))
            || self
                .workspaces
                .get(name)
                .is_some_and(|ws| !ws.channels.is_empty())
    }

    /// Workspace `name`'s approvals for a call asked through `channel` by
    /// `sender`: the workspace's tier (default `approval` when a channel
    /// serves it, `yolo` otherwise), tightened by the channel's and the
    /// sender's. `None`: no such workspace.
    pub fn approval_policy(
        &self,
        name: &str,
        channel: Option<&str>,
        sender: Option<&str>,
    ) -> Option<crate::approvals::Policy> {
        use crate::approvals::Tier;
        let ws = self.workspaces.get(name)?;
        let a = &ws.approvals;
        let mut tier = a.tier.unwrap_or(if self.served_by_a_channel(name) {
            Tier::Approval
        } else {
            Tier::Yolo
        });
        if let Some(c) = channel.and_then(|c| self.channels.get(c)) {
            if let Some(setting) = c.approvals {
                tier = tier.tightened_by(setting.tier);
            }
            if let Some(setting) = sender.and_then(|s| c.senders.get(s)) {
                tier = tier.tightened_by(setting.tier);
            }
        }
        Some(crate::approvals::Policy {
            tier,
            ask: a.ask.clone(),
            allow: a.allow.clone(),
            read_commands: a.read_commands,
            timeout: a.timeout.0,
            approvers: a.approvers.clone(),
            unattended: a.unattended,
        })
    }

    /// Whether the operator believes what source `name` says of its tools
    /// (`skills.NAME.trust_effects`, `mcp_servers.NAME.trust_annotations`):
    /// its tools it says only read then run unasked in tier `approval`.
    pub fn trusts_read_claims(&self, kind: crate::approvals::SourceKind, name: &str) -> bool {
        match kind {
            crate::approvals::SourceKind::Skill => {
                self.skills.get(name).is_some_and(|s| s.trust_effects)
            }
            crate::approvals::SourceKind::Mcp => self
                .mcp_servers
                .get(name)
                .is_some_and(|s| s.trust_annotations),
        }
    }

    /// The host folder of workspace `name` (mounted at `/workspace`):
    /// `workspaces.NAME.path`, else `containers.workspace_base_path/NAME`;
    /// `~` expanded.
    pub fn workspace_dir(&self, name: &str) -> std::path::PathBuf {
        match self.workspaces.get(name).and_then(|ws| ws.path.as_ref()) {
            Some(path) => expand_tilde(path),
            None => expand_tilde(&self.containers.workspace_base_path).join(name),
        }
    }

    /// When workspace `name`'s container is frozen and stopped:
    /// `workspaces.NAME.idle` over `containers.idle` over the defaults
    /// (`containers.idle_timeout_secs` is the old name of `stop_after`).
    pub fn idleness(&self, name: &str) -> Idleness {
        let global = &self.containers.idle;
        let own = self
            .workspaces
            .get(name)
            .map(|ws| ws.idle)
            .unwrap_or_default();
        let pause_after = own
            .pause_after
            .or(global.pause_after)
            .map_or(Some(ContainersIdle::DEFAULT_PAUSE_AFTER), IdleAfter::get);
        let stop_after = match own.stop_after.or(global.stop_after) {
            Some(after) => after.get(),
            None => match self.containers.idle_timeout_secs {
                Some(0) => None,
                Some(secs) => Some(std::time::Duration::from_secs(secs)),
                None => Some(ContainersIdle::DEFAULT_STOP_AFTER),
            },
        };
        Idleness {
            pause_after,
            stop_after,
        }
    }

    /// Reads and checks the file at `path`, interpolating from the process
    /// environment.
    ///
    /// # Errors
    /// [`ConfigError::Read`] if the file cannot be read; otherwise as
    /// [`Config::from_str_with_env`].
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            file: path.display().to_string(),
            source,
        })?;
        Self::from_str_with_env(&text, path, |name| std::env::var(name).ok())
    }

    /// The built-in configuration, used when no file is found:
    /// [`DEFAULT_CONFIG`] with the `default` model alias chosen from the
    /// environment ([`starter::starter_config`]).
    ///
    /// # Errors
    /// Only if the embedded text is broken, which a test rules out.
    pub fn embedded() -> Result<Config, ConfigError> {
        let set = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty());
        let (text, _) = starter::starter_config(&set);
        Self::from_str_with_env(&text, Path::new("<built-in pincer.yaml>"), |name| {
            std::env::var(name).ok()
        })
    }

    /// Parses and checks `text`. `file` is only used in messages; `env` looks
    /// up variables for `${NAME}` (return `None` for unset). Warnings are
    /// logged.
    ///
    /// # Errors
    /// Every problem found, each with its position (one error, or
    /// [`ConfigError::Several`]): [`ConfigError::Syntax`] (YAML or `${...}`
    /// syntax, duplicate keys), [`ConfigError::MissingEnv`],
    /// [`ConfigError::Schema`] (unknown key, wrong type, missing key) or
    /// [`ConfigError::Invalid`] (semantic checks).
    pub fn from_str_with_env<F>(text: &str, file: &Path, env: F) -> Result<Config, ConfigError>
    where
        F: Fn(&str) -> Option<String>,
    {
        let checked = Self::check_str_with_env(text, file, &env, &|_| Vec::new());
        for warning in &checked.warnings {
            tracing::warn!("{warning}");
        }
        match (ConfigError::from_all(checked.errors), checked.config) {
            (Some(err), _) => Err(err),
            (None, Some(config)) => Ok(config),
            (None, None) => Err(ConfigError::Syntax {
                at: Position {
                    file: file.display().to_string(),
                    line: 1,
                    column: 1,
                },
                message: "the configuration could not be read".to_owned(),
            }),
        }
    }

    /// Everything [`Config::from_str_with_env`] checks, reporting every
    /// problem instead of failing, plus `extra` (checks that need more than
    /// the file, e.g. the policy catalog; run only on a configuration that
    /// has no other problem so far... and located like the others).
    pub fn check_str_with_env(
        text: &str,
        file: &Path,
        env: &dyn Fn(&str) -> Option<String>,
        extra: &dyn Fn(&Config) -> Vec<Problem>,
    ) -> Checked {
        let mut checked = Checked::default();
        let mut doc = match Document::parse(text, file) {
            Ok(doc) => doc,
            Err(err) => {
                checked.errors.push(err);
                return checked;
            }
        };
        let compat = doc.rewrite_compat(env);
        checked.explained = compat.explained;
        checked.warnings = compat.warnings;
        checked.errors = compat.errors;
        let references = references::values(&doc, env);
        checked
            .warnings
            .extend(references::shadowed(text, file, &references, env));
        let lookup = |name: &str| references.get(name).cloned().or_else(|| env(name));
        let (errors, failed) = doc.interpolate_all(&lookup);
        checked.errors.extend(errors);
        let (config, errors) = doc.deserialize_all::<Config>(&failed);
        checked.errors.extend(errors);
        if let Some(config) = &config {
            for issue in validate::validate(config) {
                checked
                    .errors
                    .push(doc.invalid(&issue.path, issue.at_key, &issue.message));
            }
            for problem in extra(config) {
                let path: Vec<Seg<'_>> = problem
                    .path
                    .iter()
                    .map(|part| match part {
                        PathPart::Key(key) => Seg::Key(key),
                        PathPart::Index(i) => Seg::Index(*i),
                    })
                    .collect();
                checked
                    .errors
                    .push(doc.invalid(&path, problem.at_key, &problem.message));
            }
        }
        checked
            .errors
            .sort_by_key(|e| e.position().map_or((0, 0), |p| (p.line, p.column)));
        if checked.errors.is_empty() {
            checked.config = config;
        }
        tracing::debug!(file = doc.file(), "configuration checked");
        checked
    }
}

/// What [`Config::check_str_with_env`] found.
#[derive(Debug, Default)]
pub struct Checked {
    /// Set when there is no error.
    pub config: Option<Config>,
    /// Every problem, in file order.
    pub errors: Vec<ConfigError>,
    pub warnings: Vec<Warning>,
    /// How each Pynchy-style key was understood.
    pub explained: Vec<Explained>,
}

/// A problem found by a check outside this module, about the node at `path`
/// (with `at_key`, the mapping key holding it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub path: Vec<PathPart>,
    pub at_key: bool,
    pub message: String,
}

/// One step of a [`Problem`]'s path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathPart {
    Key(String),
    Index(usize),
}

impl Problem {
    /// A problem about the node at `path` (`"a.b"` keys and `3` indices).
    pub fn at(path: Vec<PathPart>, message: impl Into<String>) -> Self {
        Problem {
            path,
            at_key: false,
            message: message.into(),
        }
    }
}

/// The built-in configuration, used when no file is found: the defaults of
/// every section plus one empty workspace named `default`. Also a commented
/// starting point for a `pincer.yaml`.
pub const DEFAULT_CONFIG: &str = r#"# pincer.yaml: configuration for pincer.
#
# Looked up in this order: --config, $PINCER_CONFIG, ./pincer.yaml,
# $PINCER_HOME/pincer.yaml (PINCER_HOME defaults to ~/.pincer); without one,
# pincer uses this built-in file. Every section is optional and unknown keys
# are errors.
#
# Strings may use ${NAME} (an environment variable; an error if it is not
# set), ${NAME:-default} (used when NAME is unset or empty) and $${ for a
# literal "${". Put secrets in the environment, not in this file. Inside
# [...] or {...}, quote values that contain ${...}.

gateway:
  listen: "127.0.0.1:4000"
  # allow_remote: false             # true to listen beyond loopback (then set metrics_key)
  # metrics_key: "${PINCER_METRICS_KEY}"  # bearer key of GET /metrics (16+ characters)
  # limits:                         # of the TCP listener and each workspace socket
  #   header_read_secs: 10          # to send a request's head
  #   body_secs: 30                 # to send its body
  #   idle_secs: 60                 # a kept-alive connection without a request
  #   max_connections: 1024         # TCP connections at once; more are closed at once
  #   max_connections_per_workspace: 64
  # Model deployments in LiteLLM's own format; entries may share a
  # model_name (the alias that workspaces and fallbacks refer to).
  model_list: []
  # model_list:
  #   - model_name: default
  #     litellm_params:
  #       model: openai/gpt-4o-mini
  #       api_key: "${OPENAI_API_KEY}"
  #       rpm: 60
  #     model_info: {supports_vision: true}   # images people send reach it as images
  #   - model_name: backup
  #     litellm_params: {model: "anthropic/claude-3-5-haiku-latest", api_key: "${ANTHROPIC_API_KEY}"}
  fallbacks: []                     # e.g. [{default: [backup]}]
  routing_strategy: simple-shuffle  # simple-shuffle | least-busy | latency-based
  num_retries: 2
  timeout: 60                       # seconds
  # max_request_bytes: 4194304      # largest request body accepted (4 MiB)
  # Prices in USD per 1M input/output tokens, by provider/model or by alias.
  # pincer knows list prices of common OpenAI and Anthropic models (ollama/*
  # and local/* are free); entries here override and extend them. A
  # workspace with a USD budget cannot call a model without a price.
  # prices:
  #   openai/gpt-4o-mini: {input_per_1m: 0.15, output_per_1m: 0.60}
  #   default: {input_per_1m: 1.00, output_per_1m: 4.00}
  # Exact-match response cache for non-streaming, tool-free requests with
  # temperature 0 or unset; per workspace; hits cost nothing.
  # cache:
  #   enabled: false
  #   ttl_secs: 300
  #   max_entries: 1000

containers:
  runtime: docker
  image: "pincer-agent:latest"
  workspace_base_path: "~/pincer_workspaces"
  policy_dirs: []                   # extra folders of policy groups
  # idle:                           # unused containers: frozen, then stopped
  #   pause_after: 2m               # `docker pause`: memory kept, no CPU; 0 = never
  #   stop_after: 6h                # then stopped; the next use starts a fresh one
  #   max_paused: 50                # past this, the least recently used frozen ones stop
  # nofile: 1024                    # open-file limit of every container (64..65536)

workspaces:
  default:
    # model: default                # a model_name from gateway.model_list
    # models: [default, backup]     # the aliases it may call through the gateway;
    #                               # default: `model` and its fallbacks, or every
    #                               # alias when `model` is unset (see `pincer policy audit`)
    policies: []                    # e.g. [no_internet_access]
    mounts: []                      # e.g. [{source: "~/notes", target: /notes, read_only: true}]
    mcp_servers: []                 # names from mcp_servers
    skills: []
    channels: []                    # names from channels
    observers: []                   # observer plugins, e.g. [observer-jsonl]
    # instructions: AGENTS.md       # default: AGENTS.md in the workspace folder, if any
    # budget:                       # gateway spend limits, all optional;
    #   daily_usd: 5.00             # days and months are UTC; reserved
    #   monthly_usd: 50             # before each call, settled after
    #   daily_tokens: 2000000       # (prompt + completion tokens)
    #   monthly_tokens: 20000000
    # memory:                       # long-term memory (SQLite FTS5 + jieba)
    #   enabled: true               # memory__* tools and recall into turns
    #   recall_limit: 5             # memories recalled into each turn
    #   recall_chars: 2000
    # agent:                        # bounds of one turn
    #   max_steps: 16               # model calls
    #   max_tool_output_bytes: 16384
    #   tool_timeout_secs: 60
    #   max_turn_tokens: 200000
    #   history_tokens: 24000       # history sent with each turn (estimated)
    #   turn_timeout_secs: 600
    #   max_turn_events: 4096       # events the runner may stream in one turn
    #   max_turn_stored_bytes: 8388608  # bytes of them (all stored)

plugins:
  dirs: []                          # extra folders scanned for plugins
  limits:
    memory_mb: 64                   # 1..4096
    call_timeout_ms: 5000           # 1..600000
  config: {}
  # config:                         # free-form, per plugin
  #   channel-webhook:
  #     secret: "${WEBHOOK_SECRET}"

channels: {}
# channels:
#   listen: "127.0.0.1:4100"        # the webhook listener (loopback unless allow_remote: true)
#   limits: {header_read_secs: 10, body_secs: 30, idle_secs: 60, max_connections: 1024}
#   webhook:
#     plugin: channel-webhook
#     workspace: default
#     allowed_senders: []
#     context: {thread: 30, channel: 0, max_bytes: 16k, senders: all}   # quoted earlier messages
#     files: {max_bytes: 25m, types: [text, image, pdf, office]}        # files people send (also: archive)

skills: {}
# skills:
#   web-search:
#     allowed_workspaces: ["*"]     # "*" = every workspace
#     tools: []                     # empty = all tools

mcp_servers: {}
# mcp_servers:
#   files:                          # exactly one of command (stdio) / url (streamable HTTP)
#     command: [npx, -y, "@modelcontextprotocol/server-filesystem", /workspace]
#     env: {}
#     tools: []
#     allowed_workspaces: ["*"]
#   docs:
#     url: "https://example.com/mcp"

# Recall memories by meaning too when the local embedding model is in
# $PINCER_HOME/models (`pincer model fetch multilingual-e5-small`); off: words only.
# memory:
#   embeddings: on

# Where the state lives (SQLite in $PINCER_HOME/pincer.db by default) and how
# long rows are kept (`pincer state prune`; the daemon prunes daily).
# state:
#   retention: {inbound: 30d, outbox: 30d, audit: 180d}
#   backend: postgres                 # sqlite (default) | postgres
#   url: ${PINCER_DATABASE_URL}       # postgres://user@host:5432/pincer
#   lease: 15s                        # several daemons on one database: a dead
#                                     # one's workspaces move within this time

# The web console of `pincer start` (`pincer web login` prints a sign-in URL).
# web:
#   listen: "127.0.0.1:4200"        # loopback unless allow_remote: true (then put TLS in front)
#   tls: false                      # true behind a TLS proxy: cookies get `Secure`
#   session_ttl: 12h
#   enabled: true
"#;
