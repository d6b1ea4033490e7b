use std::path::PathBuf;

use super::PluginKind;

sentence_error! {
    /// Why a manifest value, a name, a host pattern or a component is not
    /// valid, said for a person; the caller adds which plugin and where.
    pub struct Invalid;
}

/// Everything that can go wrong loading or calling a plugin. Every variant
/// names the plugin, so a message read alone says which one failed.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    #[error("plugin {plugin}: invalid plugin.toml: {reason}")]
    Manifest { plugin: String, reason: String },

    #[error("plugin {plugin}: cannot read {}: {source}", path.display())]
    Io {
        plugin: String,
        path: PathBuf,
        source: std::io::Error,
    },

    #[error("plugin {plugin}: {reason}")]
    InvalidComponent { plugin: String, reason: String },

    #[error(
        "plugin {plugin}: built against pincer:plugin@{wanted}, but this host serves {served} (WIT major-version mismatch); rebuild the plugin against a served version"
    )]
    WitVersion {
        plugin: String,
        wanted: String,
        served: String,
    },

    #[error("plugin {plugin}: plugin.toml says kind `{manifest}`, but the component {actual}")]
    KindMismatch {
        plugin: String,
        manifest: PluginKind,
        actual: String,
    },

    #[error(
        "plugin {plugin}: sha256 {actual} does not match the pinned {pinned}; reinstall it with `pincer plugin install`"
    )]
    PinMismatch {
        plugin: String,
        pinned: String,
        actual: String,
    },

    #[error("plugin {plugin}: config: {reason}")]
    Config { plugin: String, reason: String },

    #[error(
        "plugin {plugin}: built against WIT {wit}, so it reads the values of its secret config keys {} through `config`; refused by plugins.legacy_secrets (default `refuse`). Rebuild it against WIT 0.2.0 or later, or set `plugins.legacy_secrets: warn` to let it read them",
        keys.join(", ")
    )]
    LegacySecrets {
        plugin: String,
        wit: String,
        keys: Vec<String>,
    },

    #[error(
        "plugin {plugin}: the {by} plugin has this name, so {ignored} is ignored (it would take over that plugin's state); rename it in its plugin.toml, or install it with `pincer plugin install --replace`"
    )]
    NameTaken {
        plugin: String,
        by: String,
        ignored: String,
    },

    #[error("no plugin named `{0}` (see `pincer plugin list`)")]
    NotFound(String),

    #[error(
        "plugin `{0}` is not enabled: plugins.enabled does not list it and no channel, skills rule or workspace names it (add it to plugins.enabled)"
    )]
    NotEnabled(String),

    #[error("plugin {plugin} is a {actual}, not a {wanted}")]
    WrongKind {
        plugin: String,
        wanted: PluginKind,
        actual: PluginKind,
    },

    #[error("plugin {plugin}: call exceeded its deadline of {ms} ms and was stopped")]
    Deadline { plugin: String, ms: u64 },

    #[error("plugin {plugin}: call exceeded its memory limit of {limit_mb} MiB and was stopped")]
    MemoryLimit { plugin: String, limit_mb: u64 },

    #[error("plugin {plugin}: trapped: {message}")]
    Trap { plugin: String, message: String },

    #[error(
        "plugin {plugin}: passed the host more than {limit_mb} MiB in one host call and was stopped"
    )]
    HostcallFuel { plugin: String, limit_mb: u64 },

    #[error("plugin {plugin}: too many concurrent calls; try again")]
    Busy { plugin: String },

    #[error("plugin {plugin}: {message}")]
    Host { plugin: String, message: String },
}

impl PluginError {
    /// Whether this is a fault of the running plugin (reported as a plugin fault).
    pub fn is_fault(&self) -> bool {
        matches!(
            self,
            Self::Deadline { .. }
                | Self::MemoryLimit { .. }
                | Self::Trap { .. }
                | Self::HostcallFuel { .. }
        )
    }
}
