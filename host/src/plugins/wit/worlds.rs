//! The four worlds as the host calls them, whichever release a plugin was
//! built against. Each release file implements these traits for its own
//! bindings (calling the guest and converting to and from the host's API
//! types, the newest release's); the plugin runtime calls only these, so a
//! new release adds a file, not arms to the runtime.

use std::future::Future;
use std::pin::Pin;

use wasmtime::Store;

use super::latest as api;
use crate::plugins::state::PluginState;

/// One call into a guest.
pub type Call<'a, T> = Pin<Box<dyn Future<Output = wasmtime::Result<T>> + Send + 'a>>;

/// The host's store of one call.
pub type PluginStore = Store<PluginState>;

pub trait ChannelExports: Send + Sync {
    fn handle_webhook<'a>(
        &'a self,
        store: &'a mut PluginStore,
        request: &'a api::WebhookRequest,
    ) -> Call<'a, Result<api::WebhookOutcome, api::ChannelError>>;

    fn connect<'a>(
        &'a self,
        store: &'a mut PluginStore,
    ) -> Call<'a, Result<Option<api::ConnectionRequest>, api::ChannelError>>;

    fn on_frame<'a>(
        &'a self,
        store: &'a mut PluginStore,
        frame: &'a api::Frame,
    ) -> Call<'a, Result<api::FrameOutcome, api::ChannelError>>;

    fn send<'a>(
        &'a self,
        store: &'a mut PluginStore,
        message: &'a api::Outbound,
    ) -> Call<'a, Result<api::Delivery, api::ChannelError>>;

    /// From 0.2.0 ([`super::WitRelease::channel_can_describe`]).
    fn describe<'a>(&'a self, _store: &'a mut PluginStore) -> Call<'a, api::ChannelInfo> {
        Box::pin(async { Err(before_0_2("describe")) })
    }

    /// From 0.2.0.
    fn status<'a>(
        &'a self,
        _store: &'a mut PluginStore,
        _update: &'a api::StatusUpdate,
    ) -> Call<'a, Result<Option<String>, api::ChannelError>> {
        Box::pin(async { Err(before_0_2("status")) })
    }

    /// From 0.2.0.
    fn check<'a>(&'a self, _store: &'a mut PluginStore) -> Call<'a, Vec<api::CheckItem>> {
        Box::pin(async { Err(before_0_2("check")) })
    }

    /// From 0.4.0 (for channels whose `describe` says `interactive`).
    fn update<'a>(
        &'a self,
        _store: &'a mut PluginStore,
        _id: &'a str,
        _message: &'a api::Outbound,
    ) -> Call<'a, Result<api::Delivery, api::ChannelError>> {
        Box::pin(async {
            Err(wasmtime::format_err!(
                "not a channel of WIT 0.4 or later (no `update`)"
            ))
        })
    }

    /// From 0.5.0; older channels have no history.
    fn history<'a>(
        &'a self,
        _store: &'a mut PluginStore,
        _request: &'a api::HistoryRequest,
    ) -> Call<'a, Result<Vec<api::PastMessage>, api::ChannelError>> {
        Box::pin(async { Ok(Err(before_0_5("history"))) })
    }

    /// From 0.5.0; older channels report no files.
    fn file_request<'a>(
        &'a self,
        _store: &'a mut PluginStore,
        _message_id: &'a str,
        _file: &'a api::Attachment,
    ) -> Call<'a, Result<api::HttpRequest, api::ChannelError>> {
        Box::pin(async { Ok(Err(before_0_5("file-request"))) })
    }

    /// From 0.5.0 (for channels whose `describe` gives a `max-upload-bytes`).
    fn send_file<'a>(
        &'a self,
        _store: &'a mut PluginStore,
        _file: &'a api::OutboundFile,
    ) -> Call<'a, Result<api::Delivery, api::ChannelError>> {
        Box::pin(async { Ok(Err(before_0_5("send-file"))) })
    }
}

pub trait SkillExports: Send + Sync {
    fn tools<'a>(&'a self, store: &'a mut PluginStore) -> Call<'a, Vec<api::ToolSpec>>;

    fn invoke<'a>(
        &'a self,
        store: &'a mut PluginStore,
        tool: &'a str,
        args_json: &'a str,
    ) -> Call<'a, Result<api::ToolOutput, api::ToolError>>;
}

pub trait ObserverExports: Send + Sync {
    fn on_event<'a>(&'a self, store: &'a mut PluginStore, event: &'a api::Event) -> Call<'a, ()>;
}

pub trait TunnelExports: Send + Sync {
    fn service<'a>(&'a self, store: &'a mut PluginStore) -> Call<'a, String>;

    fn forward<'a>(
        &'a self,
        store: &'a mut PluginStore,
        request: &'a api::HttpRequest,
    ) -> Call<'a, Result<api::HttpResponse, api::TunnelError>>;
}

/// A fresh instance of a plugin, by world.
pub enum Instance {
    Channel(Box<dyn ChannelExports>),
    Skill(Box<dyn SkillExports>),
    Observer(Box<dyn ObserverExports>),
    Tunnel(Box<dyn TunnelExports>),
}

impl Instance {
    pub fn channel(&self) -> wasmtime::Result<&dyn ChannelExports> {
        match self {
            Self::Channel(c) => Ok(c.as_ref()),
            _ => Err(not_a("channel")),
        }
    }

    pub fn skill(&self) -> wasmtime::Result<&dyn SkillExports> {
        match self {
            Self::Skill(s) => Ok(s.as_ref()),
            _ => Err(not_a("skill")),
        }
    }

    pub fn observer(&self) -> wasmtime::Result<&dyn ObserverExports> {
        match self {
            Self::Observer(o) => Ok(o.as_ref()),
            _ => Err(not_a("observer")),
        }
    }

    pub fn tunnel(&self) -> wasmtime::Result<&dyn TunnelExports> {
        match self {
            Self::Tunnel(t) => Ok(t.as_ref()),
            _ => Err(not_a("tunnel")),
        }
    }
}

/// A component linked against one release's world, ready to instantiate.
pub trait Prepared: Send + Sync {
    fn instantiate<'a>(&'a self, store: &'a mut PluginStore) -> Call<'a, Instance>;
}

/// What each release file provides: its world's `*Pre` types, wrapped.
/// `prepare(kind, pre)` links `pre` to the release's world of `kind`.
macro_rules! release_worlds {
    ($($kind:ident => $pre:ident),* $(,)?) => {
        /// Links `pre` against this release's world of `kind`.
        pub fn prepare(
            kind: $crate::plugins::manifest::PluginKind,
            pre: ::wasmtime::component::InstancePre<$crate::plugins::state::PluginState>,
        ) -> ::wasmtime::Result<Box<dyn $crate::plugins::wit::worlds::Prepared>> {
            Ok(match kind {
                $($crate::plugins::manifest::PluginKind::$kind => Box::new($pre::new(pre)?),)*
            })
        }

        $(
            impl $crate::plugins::wit::worlds::Prepared for $pre<$crate::plugins::state::PluginState> {
                fn instantiate<'a>(
                    &'a self,
                    store: &'a mut $crate::plugins::wit::worlds::PluginStore,
                ) -> $crate::plugins::wit::worlds::Call<'a, $crate::plugins::wit::worlds::Instance> {
                    Box::pin(async move {
                        let bound = self.instantiate_async(store).await?;
                        Ok($crate::plugins::wit::worlds::Instance::$kind(Box::new(bound)))
                    })
                }
            }
        )*
    };
}
pub(crate) use release_worlds;

fn not_a(kind: &str) -> wasmtime::Error {
    wasmtime::format_err!("not a {kind}")
}

/// What an older channel answers for a call of 0.5.0: not a fault, a
/// refusal the host reads as "this channel cannot".
fn before_0_5(export: &str) -> api::ChannelError {
    api::ChannelError::Unsupported(format!("a channel of WIT 0.4 or older has no `{export}`"))
}

fn before_0_2(export: &str) -> wasmtime::Error {
    wasmtime::format_err!("not a channel of WIT 0.2 or later (no `{export}`)")
}
