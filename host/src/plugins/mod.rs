//! The WebAssembly plugin host: channels, skills, observers and tunnels as
//! components behind the versioned WIT package `pincer:plugin` (`wit/`).
//!
//! - [`catalog`] finds plugins (built-in, installed, configured folders);
//! - [`runtime::PluginHost`] validates, compiles (with an on-disk cache) and
//!   calls them, each call on a fresh instance under a deadline and a memory
//!   limit;
//! - [`capabilities`] are the host imports, each granted by the manifest.

pub mod build;
pub mod capabilities;
pub mod catalog;
pub mod enabled;
pub mod engine;
mod error;
pub mod escalation;
pub mod manifest;
pub mod registry;
pub mod runtime;
pub mod scaffold;
pub mod scope;
mod state;
pub mod trace;
pub mod wit;

pub use catalog::{Catalog, PluginPackage, PluginSource};
pub use error::PluginError;
pub use manifest::{Manifest, PluginKind};
pub use runtime::{CallLimits, HostPaths, LoadedPlugin, PluginHost};
pub use scope::{HttpReach, Scope, plugin_http_reach};
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
