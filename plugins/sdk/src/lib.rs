//! Write pincer plugins as typed Rust.
//!
//! The crate owns the WIT (`wit/`, one frozen release of `pincer:plugin`) and
//! its bindings, so a plugin needs no `wit_bindgen::generate!` of its own:
//!
//! ```ignore
//! use pincer_plugin_sdk::skill::{Skill, Tools};
//! use pincer_plugin_sdk::types::ToolError;
//!
//! #[derive(serde::Deserialize, schemars::JsonSchema)]
//! #[serde(deny_unknown_fields)]
//! struct EchoArgs {
//!     /// What to say back.
//!     text: String,
//! }
//!
//! struct Echo;
//!
//! impl Skill for Echo {
//!     fn tools() -> Tools {
//!         Tools::new().tool("echo", "Returns its `text`", |args: EchoArgs| {
//!             Ok::<_, ToolError>(serde_json::json!({ "text": args.text }))
//!         })
//!     }
//! }
//!
//! pincer_plugin_sdk::export_skill!(Echo);
//! ```
//!
//! One Cargo feature per world: `skill`, `channel`, `observer`, `tunnel`.
//! Host imports are plain calls: [`log`], [`config`] (typed, checked at
//! load), [`kv`], [`http`] (a request builder; secrets are named, never
//! seen), [`secrets`], [`clock`].

pub mod args;
pub mod config;
pub mod http;
pub mod kv;
pub mod log;

#[cfg(feature = "channel")]
pub mod channel;
#[cfg(feature = "observer")]
pub mod observer;
#[cfg(feature = "skill")]
pub mod skill;
#[cfg(feature = "tunnel")]
pub mod tunnel;

/// The raw bindings, one module per world (`host` is the channel world,
/// whose imports every other world shares).
#[doc(hidden)]
#[allow(clippy::all, unsafe_op_in_unsafe_fn, missing_docs)]
pub mod wit {
    include!(concat!(env!("OUT_DIR"), "/bindings.rs"));
}

/// The `pincer:plugin` release this SDK targets: a plugin built on it says
/// `wit = "<this>"` in its `plugin.toml`.
pub const WIT_VERSION: &str = env!("PINCER_SDK_WIT_VERSION");

/// The contract's shared types (messages, HTTP, tool specs and errors, events).
pub mod types {
    pub use crate::wit::host::pincer::plugin::types::*;
}

/// Milliseconds since the Unix epoch, from the host.
pub mod clock {
    pub use crate::wit::host::pincer::plugin::clock::now_ms;
}

/// The body of a channel's `send-file`: the file goes out through
/// `upload::send`, never through the plugin's memory (channels only).
#[cfg(feature = "channel")]
pub mod upload {
    pub use crate::wit::host::pincer::plugin::upload::*;
}

/// Secrets used by name: the plugin never sees their values.
pub mod secrets {
    pub use crate::wit::host::pincer::plugin::secrets::*;
}

/// Exports `$ty` (implementing [`skill::Skill`]) as the plugin's skill.
#[cfg(feature = "skill")]
#[macro_export]
macro_rules! export_skill {
    ($ty:ident) => {
        impl $crate::wit::skill_world::exports::pincer::plugin::skill::Guest for $ty {
            fn tools() -> ::std::vec::Vec<$crate::types::ToolSpec> {
                <$ty as $crate::skill::Skill>::tools().specs()
            }

            fn invoke(
                tool: ::std::string::String,
                args_json: ::std::string::String,
            ) -> ::std::result::Result<$crate::types::ToolOutput, $crate::types::ToolError> {
                <$ty as $crate::skill::Skill>::tools().invoke(&tool, &args_json)
            }
        }
        $crate::wit::skill_world::export!($ty with_types_in $crate::wit::skill_world);
    };
}

/// Exports `$ty` (implementing [`channel::Guest`]) as the plugin's channel.
#[cfg(feature = "channel")]
#[macro_export]
macro_rules! export_channel {
    ($ty:ident) => {
        $crate::wit::host::export!($ty with_types_in $crate::wit::host);
    };
}

/// Exports `$ty` (implementing [`observer::Guest`]) as the plugin's observer.
#[cfg(feature = "observer")]
#[macro_export]
macro_rules! export_observer {
    ($ty:ident) => {
        $crate::wit::observer_world::export!($ty with_types_in $crate::wit::observer_world);
    };
}

/// Exports `$ty` (implementing [`tunnel::Guest`]) as the plugin's tunnel.
#[cfg(feature = "tunnel")]
#[macro_export]
macro_rules! export_tunnel {
    ($ty:ident) => {
        $crate::wit::tunnel_world::export!($ty with_types_in $crate::wit::tunnel_world);
    };
}
