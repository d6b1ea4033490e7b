//! Bindings and host imports for the frozen WIT release `pincer:plugin@0.5.0`
//! (`wit/v0.5.0/`), the newest: its types are the host's own API types, and
//! older releases' imports delegate to the implementations here.

use std::time::{SystemTime, UNIX_EPOCH};

use wasmtime::component::{HasSelf, Linker};

use crate::plugins::capabilities::fetch;
use crate::plugins::capabilities::http::HttpError as EgressError;
use crate::plugins::capabilities::kv::KvError as StoreKvError;
use crate::plugins::capabilities::secrets::{self as store, SecretError as StoreSecretError};
use crate::plugins::state::PluginState;

pub const VERSION: &str = "0.5.0";

mod channel_world {
    wasmtime::component::bindgen!({
        path: "../wit/v0.5.0",
        world: "channel-plugin",
        imports: { default: async | trappable },
        exports: { default: async },
    });
}

mod skill_world {
    wasmtime::component::bindgen!({
        path: "../wit/v0.5.0",
        world: "skill-plugin",
        imports: { default: async | trappable },
        exports: { default: async },
        with: { "pincer:plugin": super::channel_world::pincer::plugin },
    });
}

mod observer_world {
    wasmtime::component::bindgen!({
        path: "../wit/v0.5.0",
        world: "observer-plugin",
        imports: { default: async | trappable },
        exports: { default: async },
        with: { "pincer:plugin": super::channel_world::pincer::plugin },
    });
}

mod tunnel_world {
    wasmtime::component::bindgen!({
        path: "../wit/v0.5.0",
        world: "tunnel-plugin",
        imports: { default: async | trappable },
        exports: { default: async },
        with: { "pincer:plugin": super::channel_world::pincer::plugin },
    });
}

pub(super) use channel_world::pincer::plugin::{
    clock, config, http, kv, logging, secrets, types, upload,
};

pub use channel_world::exports::pincer::plugin::channel::{
    ChannelError, ChannelInfo, CheckItem, ConnectionRequest, Delivery, Frame, FrameOutcome,
    HistoryRequest, Keepalive, OutboundFile, PastMessage, ReconnectPolicy, RetryAfter,
    StatusUpdate, TurnState, WebhookOutcome, WebhookRequest,
};
pub use channel_world::{ChannelPlugin, ChannelPluginPre};
pub use observer_world::{ObserverPlugin, ObserverPluginPre};
pub use skill_world::{SkillPlugin, SkillPluginPre};
pub use tunnel_world::exports::pincer::plugin::tunnel::TunnelError;
pub use tunnel_world::{TunnelPlugin, TunnelPluginPre};
pub use types::{
    Action, ActionStyle, Attachment, Capture, Event, EventBody, Header, HttpRequest, HttpResponse,
    Interaction, LlmUsage, Message, Outbound, SecretHeader, SecretPlace, SecretUse, ToolCall,
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
        let out = self.grants.public_config.to_string();
        self.traced("config.get-json", &out);
        Ok(out)
    }

    async fn get(&mut self, key: String) -> wasmtime::Result<Option<String>> {
        let out = config_value(&self.grants.public_config, &key);
        self.traced("config.get", &(&key, &out));
        Ok(out)
    }
}

/// One top-level key of a plugin's config, as the `config` interface shows it.
pub(super) fn config_value(config: &serde_json::Value, key: &str) -> Option<String> {
    config.get(key).map(|value| match value {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    })
}

impl secrets::Host for PluginState {
    async fn is_set(&mut self, secret: String) -> wasmtime::Result<bool> {
        let out = self.grants.secrets.is_set(&secret);
        self.traced("secrets.is-set", &(&secret, out));
        Ok(out)
    }

    async fn verify(
        &mut self,
        digest: secrets::Digest,
        key: Option<String>,
        parts: Vec<secrets::Part>,
        expected: Vec<u8>,
    ) -> wasmtime::Result<Result<bool, secrets::SecretError>> {
        let digest = match digest {
            secrets::Digest::HmacSha256 => store::Digest::HmacSha256,
            secrets::Digest::Sha256 => store::Digest::Sha256,
        };
        let parts: Vec<store::Part> = parts
            .into_iter()
            .map(|p| match p {
                secrets::Part::Bytes(b) => store::Part::Bytes(b),
                secrets::Part::Secret(name) => store::Part::Secret(name),
            })
            .collect();
        let out = self
            .grants
            .secrets
            .verify(digest, key.as_deref(), &parts, &expected)
            .map_err(|e| self.secret_error(e));
        self.traced("secrets.verify", &out);
        Ok(out)
    }

    async fn decrypt(
        &mut self,
        cipher: secrets::Cipher,
        key: String,
        data: Vec<u8>,
    ) -> wasmtime::Result<Result<Vec<u8>, secrets::SecretError>> {
        let cipher = match cipher {
            secrets::Cipher::Aes256CbcSha256Key => store::Cipher::Aes256CbcSha256Key,
        };
        let out = self
            .grants
            .secrets
            .decrypt(cipher, &key, &data)
            .map_err(|e| self.secret_error(e));
        self.traced("secrets.decrypt", &out);
        Ok(out)
    }
}

impl PluginState {
    fn secret_error(&self, e: StoreSecretError) -> secrets::SecretError {
        self.report_secret_refusal(&e);
        match e {
            StoreSecretError::Unknown(name) => secrets::SecretError::Unknown(name),
            StoreSecretError::Denied(name) => secrets::SecretError::Denied(name),
            StoreSecretError::NotBound(why) => secrets::SecretError::Denied(why),
            StoreSecretError::Invalid(m) | StoreSecretError::Forged(m) => {
                secrets::SecretError::Invalid(m)
            }
        }
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
        let out = self.kv().and_then(|ns| {
            ns.get(&key)
                .map(|e| {
                    e.map(|e| kv::Entry {
                        value: e.value,
                        version: e.version,
                    })
                })
                .map_err(kv_error)
        });
        self.traced("kv.get", &out);
        Ok(out)
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
        self.kv_grant().ok_or(kv::KvError::Denied)
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
        let out = self.fetched(plugin_request(request)).await;
        self.traced("http.fetch", &out);
        Ok(out)
    }
}

impl upload::Host for PluginState {
    async fn send(
        &mut self,
        request: types::HttpRequest,
        body: upload::Body,
    ) -> wasmtime::Result<Result<types::HttpResponse, types::HttpError>> {
        let Some(file) = self.upload.clone() else {
            let out = Err(types::HttpError::InvalidRequest(
                "no file is being sent: `upload.send` works only during `send-file`".into(),
            ));
            self.traced("upload.send", &out);
            return Ok(out);
        };
        let mut request = plugin_request(request);
        match body {
            upload::Body::Raw => request.body = file.bytes.clone(),
            upload::Body::Multipart(form) => {
                let fields: Vec<(String, String)> =
                    form.fields.into_iter().map(|f| (f.name, f.value)).collect();
                let (content_type, body) = crate::plugins::capabilities::multipart::encode(
                    &fields,
                    &form.file_field,
                    &file,
                );
                request
                    .headers
                    .retain(|(name, _)| !name.eq_ignore_ascii_case("content-type"));
                request.headers.push(("content-type".into(), content_type));
                request.body = body;
            }
        }
        let out = self.fetched(request).await;
        self.traced("upload.send", &out);
        Ok(out)
    }
}

impl PluginState {
    /// `request` under the plugin's HTTP grant, in this release's types.
    async fn fetched(
        &mut self,
        request: fetch::PluginRequest,
    ) -> Result<types::HttpResponse, types::HttpError> {
        // Not `&self` across the await: the store's state is not `Sync`.
        fetch::fetch(self.grants.clone(), request)
            .await
            .map(|response| types::HttpResponse {
                status: response.status,
                headers: response
                    .headers
                    .into_iter()
                    .map(|(name, value)| types::Header { name, value })
                    .collect(),
                body: response.body,
            })
            .map_err(http_error)
    }
}

pub(crate) fn plugin_request(request: types::HttpRequest) -> fetch::PluginRequest {
    fetch::PluginRequest {
        method: request.method,
        url: request.url,
        headers: request
            .headers
            .into_iter()
            .map(|h| (h.name, h.value))
            .collect(),
        body: request.body,
        timeout_ms: request.timeout_ms,
        secrets: request.secrets.into_iter().map(secret_use).collect(),
        capture: request.capture.map(|c| store::Capture {
            pointer: c.pointer,
            secret: c.secret,
            expires_in_pointer: c.expires_in_pointer,
        }),
    }
}

fn secret_use(u: types::SecretUse) -> store::Use {
    store::Use {
        secret: u.secret,
        place: match u.place {
            types::SecretPlace::Header(h) => store::Place::Header {
                name: h.name,
                prefix: h.prefix,
            },
            types::SecretPlace::JsonField(p) => store::Place::JsonField(p),
            types::SecretPlace::FormField(f) => store::Place::FormField(f),
            types::SecretPlace::QueryParam(q) => store::Place::QueryParam(q),
        },
    }
}

fn http_error(e: EgressError) -> types::HttpError {
    match e {
        EgressError::Denied(m) => types::HttpError::Denied(m),
        EgressError::InvalidRequest(m) => types::HttpError::InvalidRequest(m),
        EgressError::Transport(m) => types::HttpError::Transport(m),
        EgressError::Timeout => types::HttpError::Timeout,
        EgressError::TooLarge => types::HttpError::TooLarge,
    }
}

fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    &s[..s.floor_char_boundary(max)]
}

// The host's calls into the worlds (`worlds.rs`): this release's types are
// the host's API types, so nothing converts.

use super::worlds::{
    self, Call, ChannelExports, ObserverExports, PluginStore, SkillExports, TunnelExports,
};

worlds::release_worlds!(
    Channel => ChannelPluginPre,
    Skill => SkillPluginPre,
    Observer => ObserverPluginPre,
    Tunnel => TunnelPluginPre,
);

impl ChannelExports for ChannelPlugin {
    fn handle_webhook<'a>(
        &'a self,
        store: &'a mut PluginStore,
        request: &'a WebhookRequest,
    ) -> Call<'a, Result<WebhookOutcome, ChannelError>> {
        Box::pin(
            self.pincer_plugin_channel()
                .call_handle_webhook(store, request),
        )
    }

    fn connect<'a>(
        &'a self,
        store: &'a mut PluginStore,
    ) -> Call<'a, Result<Option<ConnectionRequest>, ChannelError>> {
        Box::pin(self.pincer_plugin_channel().call_connect(store))
    }

    fn on_frame<'a>(
        &'a self,
        store: &'a mut PluginStore,
        frame: &'a Frame,
    ) -> Call<'a, Result<FrameOutcome, ChannelError>> {
        Box::pin(self.pincer_plugin_channel().call_on_frame(store, frame))
    }

    fn send<'a>(
        &'a self,
        store: &'a mut PluginStore,
        message: &'a Outbound,
    ) -> Call<'a, Result<Delivery, ChannelError>> {
        Box::pin(self.pincer_plugin_channel().call_send(store, message))
    }

    fn describe<'a>(&'a self, store: &'a mut PluginStore) -> Call<'a, ChannelInfo> {
        Box::pin(self.pincer_plugin_channel().call_describe(store))
    }

    fn status<'a>(
        &'a self,
        store: &'a mut PluginStore,
        update: &'a StatusUpdate,
    ) -> Call<'a, Result<Option<String>, ChannelError>> {
        Box::pin(self.pincer_plugin_channel().call_status(store, update))
    }

    fn check<'a>(&'a self, store: &'a mut PluginStore) -> Call<'a, Vec<CheckItem>> {
        Box::pin(self.pincer_plugin_channel().call_check(store))
    }

    fn update<'a>(
        &'a self,
        store: &'a mut PluginStore,
        id: &'a str,
        message: &'a Outbound,
    ) -> Call<'a, Result<Delivery, ChannelError>> {
        Box::pin(self.pincer_plugin_channel().call_update(store, id, message))
    }

    fn history<'a>(
        &'a self,
        store: &'a mut PluginStore,
        request: &'a HistoryRequest,
    ) -> Call<'a, Result<Vec<PastMessage>, ChannelError>> {
        Box::pin(self.pincer_plugin_channel().call_history(store, request))
    }

    fn file_request<'a>(
        &'a self,
        store: &'a mut PluginStore,
        message_id: &'a str,
        file: &'a Attachment,
    ) -> Call<'a, Result<HttpRequest, ChannelError>> {
        Box::pin(
            self.pincer_plugin_channel()
                .call_file_request(store, message_id, file),
        )
    }

    fn send_file<'a>(
        &'a self,
        store: &'a mut PluginStore,
        file: &'a OutboundFile,
    ) -> Call<'a, Result<Delivery, ChannelError>> {
        Box::pin(self.pincer_plugin_channel().call_send_file(store, file))
    }
}

impl SkillExports for SkillPlugin {
    fn tools<'a>(&'a self, store: &'a mut PluginStore) -> Call<'a, Vec<ToolSpec>> {
        Box::pin(self.pincer_plugin_skill().call_tools(store))
    }

    fn invoke<'a>(
        &'a self,
        store: &'a mut PluginStore,
        tool: &'a str,
        args_json: &'a str,
    ) -> Call<'a, Result<ToolOutput, ToolError>> {
        Box::pin(
            self.pincer_plugin_skill()
                .call_invoke(store, tool, args_json),
        )
    }
}

impl ObserverExports for ObserverPlugin {
    fn on_event<'a>(&'a self, store: &'a mut PluginStore, event: &'a Event) -> Call<'a, ()> {
        Box::pin(self.pincer_plugin_observer().call_on_event(store, event))
    }
}

impl TunnelExports for TunnelPlugin {
    fn service<'a>(&'a self, store: &'a mut PluginStore) -> Call<'a, String> {
        Box::pin(self.pincer_plugin_tunnel().call_service(store))
    }

    fn forward<'a>(
        &'a self,
        store: &'a mut PluginStore,
        request: &'a HttpRequest,
    ) -> Call<'a, Result<HttpResponse, TunnelError>> {
        Box::pin(self.pincer_plugin_tunnel().call_forward(store, request))
    }
}
