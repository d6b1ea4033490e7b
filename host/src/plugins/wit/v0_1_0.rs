//! Bindings and host imports for the frozen WIT release `pincer:plugin@0.1.0`
//! (`wit/v0.1.0/`). Its imports delegate to the newest release's
//! implementations; its exported types convert to and from the newest
//! release's, which are the host's API types.
//!
//! One behaviour differs on purpose: `config` returns secret keys to 0.1.0
//! plugins, which have no other way to use them. Plugins that hold secrets
//! should move to 0.2.0 or later, which use them by name.

use wasmtime::component::{HasSelf, Linker};

use super::latest as new;
use crate::plugins::state::PluginState;

mod channel_world {
    wasmtime::component::bindgen!({
        path: "../wit/v0.1.0",
        world: "channel-plugin",
        imports: { default: async | trappable },
        exports: { default: async },
    });
}

mod skill_world {
    wasmtime::component::bindgen!({
        path: "../wit/v0.1.0",
        world: "skill-plugin",
        imports: { default: async | trappable },
        exports: { default: async },
        with: { "pincer:plugin": super::channel_world::pincer::plugin },
    });
}

mod observer_world {
    wasmtime::component::bindgen!({
        path: "../wit/v0.1.0",
        world: "observer-plugin",
        imports: { default: async | trappable },
        exports: { default: async },
        with: { "pincer:plugin": super::channel_world::pincer::plugin },
    });
}

mod tunnel_world {
    wasmtime::component::bindgen!({
        path: "../wit/v0.1.0",
        world: "tunnel-plugin",
        imports: { default: async | trappable },
        exports: { default: async },
        with: { "pincer:plugin": super::channel_world::pincer::plugin },
    });
}

use channel_world::exports::pincer::plugin::channel as ch;
use channel_world::pincer::plugin::{clock, config, http, kv, logging, types};
use tunnel_world::exports::pincer::plugin::tunnel as tn;

pub use channel_world::{ChannelPlugin, ChannelPluginPre};
pub use observer_world::{ObserverPlugin, ObserverPluginPre};
pub use skill_world::{SkillPlugin, SkillPluginPre};
pub use tunnel_world::{TunnelPlugin, TunnelPluginPre};

/// Adds this release's host imports to `linker`.
pub fn add_to_linker(linker: &mut Linker<PluginState>) -> wasmtime::Result<()> {
    ChannelPlugin::add_to_linker::<_, HasSelf<_>>(linker, |state| state)
}

// Imports unchanged since 0.1.0: the newest release's implementation.
super::convert::delegating_imports!();

impl config::Host for PluginState {
    async fn get_json(&mut self) -> wasmtime::Result<String> {
        let out = self.grants.config.to_string();
        self.traced("config.get-json (0.1.0)", &out);
        Ok(out)
    }

    async fn get(&mut self, key: String) -> wasmtime::Result<Option<String>> {
        let out = new::config_value(&self.grants.config, &key);
        self.traced("config.get (0.1.0)", &(&key, &out));
        Ok(out)
    }
}

impl http::Host for PluginState {
    async fn fetch(
        &mut self,
        request: types::HttpRequest,
    ) -> wasmtime::Result<Result<types::HttpResponse, types::HttpError>> {
        let request = new::HttpRequest {
            method: request.method,
            url: request.url,
            headers: request.headers.into_iter().map(Into::into).collect(),
            body: request.body,
            timeout_ms: request.timeout_ms,
            secrets: Vec::new(),
            capture: None,
        };
        Ok(new::http::Host::fetch(self, request)
            .await?
            .map(Into::into)
            .map_err(|e| {
                use new::types::HttpError as E;
                match e {
                    E::Denied(m) => types::HttpError::Denied(m),
                    E::InvalidRequest(m) => types::HttpError::InvalidRequest(m),
                    E::Transport(m) => types::HttpError::Transport(m),
                    E::Timeout => types::HttpError::Timeout,
                    E::TooLarge => types::HttpError::TooLarge,
                }
            }))
    }
}

// Exported types: the host calls with the newest release's values; these
// turn them into this release's and the results back.

impl From<ch::ConnectionRequest> for new::ConnectionRequest {
    fn from(c: ch::ConnectionRequest) -> Self {
        Self {
            url: c.url,
            headers: c.headers.into_iter().map(Into::into).collect(),
            idle_timeout_ms: c.idle_timeout_ms,
            keepalive: None,
            reconnect: None,
        }
    }
}

impl From<ch::FrameOutcome> for new::FrameOutcome {
    fn from(o: ch::FrameOutcome) -> Self {
        Self {
            replies: o.replies.into_iter().map(Into::into).collect(),
            messages: o.messages.into_iter().map(Into::into).collect(),
            interactions: Vec::new(),
            reconnect: o.reconnect,
            keepalive: None,
            reconnect_policy: None,
        }
    }
}

impl From<ch::ChannelError> for new::ChannelError {
    fn from(e: ch::ChannelError) -> Self {
        match e {
            ch::ChannelError::Unauthorized(m) => Self::Unauthorized(m),
            ch::ChannelError::BadRequest(m) => Self::BadRequest(m),
            ch::ChannelError::Upstream(m) => Self::Upstream(m),
            ch::ChannelError::Unsupported(m) => Self::Unsupported(m),
        }
    }
}

impl From<&new::HttpRequest> for types::HttpRequest {
    fn from(r: &new::HttpRequest) -> Self {
        Self {
            method: r.method.clone(),
            url: r.url.clone(),
            headers: r.headers.iter().cloned().map(Into::into).collect(),
            body: r.body.clone(),
            timeout_ms: r.timeout_ms,
        }
    }
}

// Records and enums unchanged since 0.1.0.
super::convert::unchanged_since_0_1!();

// The host's calls into the worlds (`worlds.rs`): the host's API values
// convert to this release's and the results back.

use super::worlds::{
    self, Call, ChannelExports, ObserverExports, PluginStore, SkillExports, TunnelExports,
};

worlds::release_worlds!(
    Channel => ChannelPluginPre,
    Skill => SkillPluginPre,
    Observer => ObserverPluginPre,
    Tunnel => TunnelPluginPre,
);

super::convert::converting_exports!();
