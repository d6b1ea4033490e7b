//! The WebAssembly plugin host: channels, skills, observers and tunnels as
//! components behind the versioned WIT package `pincer:plugin` (`wit/`).
//!
//! - [`catalog`] finds plugins (built-in, installed, configured folders);
//! - [`runtime::PluginHost`] validates, compiles (with an on-disk cache) and
//!   calls them, each call on a fresh instance under a deadline and a memory
//!   limit;
//! - [`capabilities`] are the host imports, each granted by the manifest.

mod build;
mod capabilities;
pub use capabilities::kv::KvStore;
mod catalog;
mod enabled;
mod engine;
mod error;
mod escalation;
mod manifest;
mod registry;
mod runtime;
mod scaffold;
mod scope;
mod state;
mod trace;
mod wit;

pub use build::{Toolchain, build as build_plugin};
pub use capabilities::data::usage as data_usage;
pub use catalog::{
    Catalog, MANIFEST_FILE, PluginPackage, PluginSource, install as install_package,
    origin as package_origin,
};
pub use enabled::{resolve as resolve_enabled, restrict as restrict_to_enabled};
pub use engine::CompileSource;
pub use error::{Invalid, PluginError};
pub use escalation::{Escalation, compare as compare_replacement, readable_secret_keys};
pub use manifest::{Manifest, PluginKind, check_name};
pub use registry::signing::parse_public as parse_publisher_key;
pub use registry::{
    Package as RegistryPackage, PublisherKey, Pulled, Signature, Trusted, check_name_glob, publish,
    pull,
};
pub use runtime::{
    CallLimits, HostPaths, HttpError, LoadedPlugin, OpenFileError, PluginHost, Streaming,
    V1_CHANNEL_MAX_TEXT_BYTES,
};
pub use scaffold::{Lang as ScaffoldLang, create as scaffold_plugin};
pub use scope::{HttpReach, LEGACY_WORKSPACE, Scope, plugin_http_reach};
pub use state::UploadFile;
pub use wit::latest as api;

/// The shortest secret value accepted (`config check`, load): shorter ones
/// are too likely to be ordinary text for the host to keep them out of what
/// a plugin reads.
pub const MIN_SECRET_BYTES: usize = capabilities::secrets::MASKED_FRAGMENT;

/// A skill's tool error as one line for a person: what kind, then its text.
pub fn describe_tool_error(error: &api::ToolError) -> String {
    match error {
        api::ToolError::UnknownTool(m) => format!("unknown tool: {m}"),
        api::ToolError::InvalidArgs(m) => format!("invalid arguments: {m}"),
        api::ToolError::Failed(m) => format!("failed: {m}"),
        api::ToolError::Denied(m) => format!("denied: {m}"),
    }
}
