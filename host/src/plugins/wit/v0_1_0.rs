//! Bindings and host imports for the frozen WIT release `pincer:plugin@0.1.0`
//! (`wit/v0.1.0/`). The newest release's types are the host's own API types;
//! an older release, once there is a newer one, converts into them here.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use wasmtime::component::{HasSelf, Linker};

use crate::plugins::capabilities::http::{self as egress, HttpError as EgressError};
use crate::plugins::capabilities::kv::KvError as StoreKvError;
use crate::plugins::state::PluginState;

pub const VERSION: &str = "0.1.0";

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

use channel_world::pincer::plugin::{clock, config, http, kv, logging, types};

pub use channel_world::exports::pincer::plugin::channel::{
    ChannelError, ConnectionRequest, Delivery, Frame, FrameOutcome, WebhookOutcome, WebhookRequest,
};
pub use channel_world::{ChannelPlugin, ChannelPluginPre};
pub use observer_world::{ObserverPlugin, ObserverPluginPre};
pub use skill_world::{SkillPlugin, SkillPluginPre};
pub use tunnel_world::exports::pincer::plugin::tunnel::TunnelError;
pub use tunnel_world::{TunnelPlugin, TunnelPluginPre};
pub use types::{
    Event, EventBody, Header, HttpRequest, HttpResponse, LlmUsage, Message, Outbound, ToolCall,
    ToolError, ToolOutput, ToolSpec,
};

/// Adds this release's host imports to `linker`. Every world of the release
/// imports a subset of the channel world's imports, so one call serves all.
pub fn add_to_linker(linker: &mut Linker<PluginState>) -> wasmtime::Result<()> {
    ChannelPlugin::add_to_linker::<_, HasSelf<_>>(linker, |state| state)
}

impl types::Host for PluginState {}

impl logging::Host for PluginState {
    async fn log(&mut self, level: logging::Level, message: String) -> wasmtime::Result<()> {
        let plugin = self.grants.plugin.as_str();
        let message = truncate(&message, 4096);
        match level {
            logging::Level::Trace => tracing::trace!(plugin, "{message}"),
            logging::Level::Debug => tracing::debug!(plugin, "{message}"),
            logging::Level::Info => tracing::info!(plugin, "{message}"),
            logging::Level::Warn => tracing::warn!(plugin, "{message}"),
            logging::Level::Error => tracing::error!(plugin, "{message}"),
        }
        Ok(())
    }
}

impl config::Host for PluginState {
    async fn get_json(&mut self) -> wasmtime::Result<String> {
        Ok(self.grants.config.to_string())
    }

    async fn get(&mut self, key: String) -> wasmtime::Result<Option<String>> {
        Ok(self.grants.config.get(&key).map(|value| match value {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        }))
    }
}

impl clock::Host for PluginState {
    async fn now_ms(&mut self) -> wasmtime::Result<u64> {
        Ok(SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64))
    }
}

impl kv::Host for PluginState {
    async fn get(
        &mut self,
        key: String,
    ) -> wasmtime::Result<Result<Option<kv::Entry>, kv::KvError>> {
        Ok(self.kv().and_then(|ns| {
            ns.get(&key)
                .map(|e| {
                    e.map(|e| kv::Entry {
                        value: e.value,
                        version: e.version,
                    })
                })
                .map_err(kv_error)
        }))
    }

    async fn set(
        &mut self,
        key: String,
        value: Vec<u8>,
        ttl_ms: Option<u64>,
    ) -> wasmtime::Result<Result<u64, kv::KvError>> {
        Ok(self
            .kv()
            .and_then(|ns| ns.set(&key, &value, ttl_ms).map_err(kv_error)))
    }

    async fn compare_and_set(
        &mut self,
        key: String,
        expected: Option<u64>,
        value: Vec<u8>,
        ttl_ms: Option<u64>,
    ) -> wasmtime::Result<Result<Option<u64>, kv::KvError>> {
        Ok(self.kv().and_then(|ns| {
            ns.compare_and_set(&key, expected, &value, ttl_ms)
                .map_err(kv_error)
        }))
    }

    async fn delete(&mut self, key: String) -> wasmtime::Result<Result<bool, kv::KvError>> {
        Ok(self.kv().and_then(|ns| ns.delete(&key).map_err(kv_error)))
    }

    async fn list_keys(
        &mut self,
        prefix: String,
        limit: u32,
    ) -> wasmtime::Result<Result<Vec<String>, kv::KvError>> {
        Ok(self
            .kv()
            .and_then(|ns| ns.list_keys(&prefix, limit).map_err(kv_error)))
    }
}

impl PluginState {
    fn kv(&self) -> Result<&crate::plugins::capabilities::kv::KvNamespace, kv::KvError> {
        self.grants.kv.as_ref().ok_or_else(|| {
            self.report_denial("kv", "is not in this plugin's manifest capabilities");
            kv::KvError::Denied
        })
    }
}

fn kv_error(e: StoreKvError) -> kv::KvError {
    match e {
        StoreKvError::QuotaExceeded(m) => kv::KvError::QuotaExceeded(m),
        StoreKvError::InvalidKey(m) => kv::KvError::InvalidKey(m),
        StoreKvError::Storage(m) => kv::KvError::Storage(m),
    }
}

impl http::Host for PluginState {
    async fn fetch(
        &mut self,
        request: types::HttpRequest,
    ) -> wasmtime::Result<Result<types::HttpResponse, types::HttpError>> {
        let Some(egress) = self.grants.http.clone() else {
            let what = "this plugin's manifest requests no http capability".to_string();
            let url = url::Url::parse(&request.url)
                .map(|u| egress::shown(&u))
                .unwrap_or_else(|_| "an unparsable URL".to_string());
            self.report_denial("http", &format!("{url}: {what}"));
            return Ok(Err(types::HttpError::Denied(what)));
        };
        let request = egress::Request {
            method: request.method,
            url: request.url,
            headers: request
                .headers
                .into_iter()
                .map(|h| (h.name, h.value))
                .collect(),
            body: request.body,
            timeout: request
                .timeout_ms
                .map(|ms| Duration::from_millis(ms.into())),
        };
        Ok(egress
            .fetch(request)
            .await
            .map(|r| types::HttpResponse {
                status: r.status,
                headers: r
                    .headers
                    .into_iter()
                    .map(|(name, value)| types::Header { name, value })
                    .collect(),
                body: r.body,
            })
            .map_err(|e| match e {
                EgressError::Denied(m) => types::HttpError::Denied(m),
                EgressError::InvalidRequest(m) => types::HttpError::InvalidRequest(m),
                EgressError::Transport(m) => types::HttpError::Transport(m),
                EgressError::Timeout => types::HttpError::Timeout,
                EgressError::TooLarge => types::HttpError::TooLarge,
            }))
    }
}

fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}
