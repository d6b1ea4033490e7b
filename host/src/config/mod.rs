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

mod de;
mod error;
mod interpolate;
mod located;
mod node;
mod paths;
mod schema;
mod validate;

#[cfg(test)]
mod tests;

use std::path::Path;

pub mod starter;

pub use error::{ConfigError, Position};
pub use paths::{CONFIG_FILE_NAME, expand_tilde, pincer_home, resolve_config_path};
pub use schema::{
    AgentLimits, AgentSchedules, Budget, Channel, Channels, Config, ContainerRuntime, Containers,
    Gateway, GatewayCache, LitellmParams, McpContainer, McpServer, ModelDeployment, ModelPrice,
    Mount, PluginLimits, Plugins, PolicyEntry, Refusal, RoutingStrategy, Skill, TrustedPublisher,
    Workspace, WorkspaceMemory,
};

pub(crate) use located::{Document, parse_located};
pub(crate) use node::Seg;
pub(crate) use validate::is_valid_name;

impl Config {
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
    /// up variables for `${NAME}` (return `None` for unset).
    ///
    /// # Errors
    /// The first problem found, with its position: [`ConfigError::Syntax`]
    /// (YAML or `${...}` syntax, duplicate keys), [`ConfigError::MissingEnv`],
    /// [`ConfigError::Schema`] (unknown key, wrong type, missing key) or
    /// [`ConfigError::Invalid`] (semantic checks).
    pub fn from_str_with_env<F>(text: &str, file: &Path, env: F) -> Result<Config, ConfigError>
    where
        F: Fn(&str) -> Option<String>,
    {
        let mut doc = Document::parse(text, file)?;
        doc.interpolate(env)?;
        let config: Config = doc.deserialize()?;
        validate::validate(&config)
            .map_err(|issue| doc.invalid(&issue.path, issue.at_key, &issue.message))?;
        tracing::debug!(file = doc.file(), "configuration loaded");
        Ok(config)
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
  # Model deployments in LiteLLM's own format; entries may share a
  # model_name (the alias that workspaces and fallbacks refer to).
  model_list: []
  # model_list:
  #   - model_name: default
  #     litellm_params:
  #       model: openai/gpt-4o-mini
  #       api_key: "${OPENAI_API_KEY}"
  #       rpm: 60
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
  idle_timeout_secs: 900

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
#   webhook:
#     plugin: channel-webhook
#     workspace: default
#     allowed_senders: []

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
"#;
