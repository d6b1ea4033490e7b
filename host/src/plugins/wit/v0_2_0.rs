//! Bindings and host imports for the frozen WIT release `pincer:plugin@0.2.0`
//! (`wit/v0.2.0/`). 0.3.0 only added a secret placement (`query-param`), so
//! every import delegates to the newest release's implementation and every
//! type converts one to one.

use wasmtime::component::{HasSelf, Linker};

use super::latest as new;
use crate::plugins::state::PluginState;

mod channel_world {
    wasmtime::component::bindgen!({
        path: "../wit/v0.2.0",
        world: "channel-plugin",
        imports: { default: async | trappable },
        exports: { default: async },
    });
}

mod skill_world {
    wasmtime::component::bindgen!({
        path: "../wit/v0.2.0",
        world: "skill-plugin",
        imports: { default: async | trappable },
        exports: { default: async },
        with: { "pincer:plugin": super::channel_world::pincer::plugin },
    });
}

mod observer_world {
    wasmtime::component::bindgen!({
        path: "../wit/v0.2.0",
        world: "observer-plugin",
        imports: { default: async | trappable },
        exports: { default: async },
        with: { "pincer:plugin": super::channel_world::pincer::plugin },
    });
}

mod tunnel_world {
    wasmtime::component::bindgen!({
        path: "../wit/v0.2.0",
        world: "tunnel-plugin",
        imports: { default: async | trappable },
        exports: { default: async },
        with: { "pincer:plugin": super::channel_world::pincer::plugin },
    });
}

use channel_world::exports::pincer::plugin::channel as ch;
use channel_world::pincer::plugin::{clock, config, http, kv, logging, secrets, types};
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
        new::config::Host::get_json(self).await
    }

    async fn get(&mut self, key: String) -> wasmtime::Result<Option<String>> {
        new::config::Host::get(self, key).await
    }
}

fn secret_error(e: new::secrets::SecretError) -> secrets::SecretError {
    use new::secrets::SecretError as E;
    match e {
        E::Unknown(m) => secrets::SecretError::Unknown(m),
        E::Denied(m) => secrets::SecretError::Denied(m),
        E::Invalid(m) => secrets::SecretError::Invalid(m),
    }
}

impl secrets::Host for PluginState {
    async fn is_set(&mut self, secret: String) -> wasmtime::Result<bool> {
        new::secrets::Host::is_set(self, secret).await
    }

    async fn verify(
        &mut self,
        digest: secrets::Digest,
        key: Option<String>,
        parts: Vec<secrets::Part>,
        expected: Vec<u8>,
    ) -> wasmtime::Result<Result<bool, secrets::SecretError>> {
        let digest = match digest {
            secrets::Digest::HmacSha256 => new::secrets::Digest::HmacSha256,
            secrets::Digest::Sha256 => new::secrets::Digest::Sha256,
        };
        let parts = parts
            .into_iter()
            .map(|p| match p {
                secrets::Part::Bytes(b) => new::secrets::Part::Bytes(b),
                secrets::Part::Secret(s) => new::secrets::Part::Secret(s),
            })
            .collect();
        Ok(
            new::secrets::Host::verify(self, digest, key, parts, expected)
                .await?
                .map_err(secret_error),
        )
    }

    async fn decrypt(
        &mut self,
        cipher: secrets::Cipher,
        key: String,
        data: Vec<u8>,
    ) -> wasmtime::Result<Result<Vec<u8>, secrets::SecretError>> {
        let cipher = match cipher {
            secrets::Cipher::Aes256CbcSha256Key => new::secrets::Cipher::Aes256CbcSha256Key,
        };
        Ok(new::secrets::Host::decrypt(self, cipher, key, data)
            .await?
            .map_err(secret_error))
    }
}

impl http::Host for PluginState {
    async fn fetch(
        &mut self,
        request: types::HttpRequest,
    ) -> wasmtime::Result<Result<types::HttpResponse, types::HttpError>> {
        Ok(new::http::Host::fetch(self, request.into())
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

// Requests, both as the plugin sends them (http.fetch) and as a tunnel
// receives them (forward).

impl From<types::HttpRequest> for new::HttpRequest {
    fn from(r: types::HttpRequest) -> Self {
        Self {
            method: r.method,
            url: r.url,
            headers: r.headers.into_iter().map(Into::into).collect(),
            body: r.body,
            timeout_ms: r.timeout_ms,
            secrets: r.secrets.into_iter().map(Into::into).collect(),
            capture: r.capture.map(|c| new::Capture {
                pointer: c.pointer,
                secret: c.secret,
                expires_in_pointer: c.expires_in_pointer,
            }),
        }
    }
}

impl From<types::SecretUse> for new::SecretUse {
    fn from(u: types::SecretUse) -> Self {
        Self {
            secret: u.secret,
            place: match u.place {
                types::SecretPlace::Header(h) => new::SecretPlace::Header(new::SecretHeader {
                    name: h.name,
                    prefix: h.prefix,
                }),
                types::SecretPlace::JsonField(p) => new::SecretPlace::JsonField(p),
                types::SecretPlace::FormField(f) => new::SecretPlace::FormField(f),
            },
        }
    }
}

/// A tunnel receives the request a client sent, which never names secrets;
/// a `query-param` use (0.3.0 only) cannot be expressed and is dropped.
impl From<&new::HttpRequest> for types::HttpRequest {
    fn from(r: &new::HttpRequest) -> Self {
        Self {
            method: r.method.clone(),
            url: r.url.clone(),
            headers: r.headers.iter().cloned().map(Into::into).collect(),
            body: r.body.clone(),
            timeout_ms: r.timeout_ms,
            secrets: r
                .secrets
                .iter()
                .filter_map(|u| {
                    let place = match &u.place {
                        new::SecretPlace::Header(h) => {
                            types::SecretPlace::Header(types::SecretHeader {
                                name: h.name.clone(),
                                prefix: h.prefix.clone(),
                            })
                        }
                        new::SecretPlace::JsonField(p) => types::SecretPlace::JsonField(p.clone()),
                        new::SecretPlace::FormField(f) => types::SecretPlace::FormField(f.clone()),
                        new::SecretPlace::QueryParam(_) => return None,
                    };
                    Some(types::SecretUse {
                        secret: u.secret.clone(),
                        place,
                    })
                })
                .collect(),
            capture: r.capture.as_ref().map(|c| types::Capture {
                pointer: c.pointer.clone(),
                secret: c.secret.clone(),
                expires_in_pointer: c.expires_in_pointer.clone(),
            }),
        }
    }
}

// Exported types: the host calls with the newest release's values; these
// turn them into this release's and the results back.

impl From<ch::Keepalive> for new::Keepalive {
    fn from(k: ch::Keepalive) -> Self {
        Self {
            frame: k.frame.into(),
            interval_ms: k.interval_ms,
        }
    }
}

impl From<ch::ReconnectPolicy> for new::ReconnectPolicy {
    fn from(p: ch::ReconnectPolicy) -> Self {
        Self {
            min_delay_ms: p.min_delay_ms,
            max_delay_ms: p.max_delay_ms,
            jitter_ms: p.jitter_ms,
            max_attempts: p.max_attempts,
        }
    }
}

impl From<ch::ConnectionRequest> for new::ConnectionRequest {
    fn from(c: ch::ConnectionRequest) -> Self {
        Self {
            url: c.url,
            headers: c.headers.into_iter().map(Into::into).collect(),
            idle_timeout_ms: c.idle_timeout_ms,
            keepalive: c.keepalive.map(Into::into),
            reconnect: c.reconnect.map(Into::into),
        }
    }
}

impl From<ch::FrameOutcome> for new::FrameOutcome {
    fn from(o: ch::FrameOutcome) -> Self {
        Self {
            replies: o.replies.into_iter().map(Into::into).collect(),
            messages: o.messages.into_iter().map(Into::into).collect(),
            reconnect: o.reconnect,
            keepalive: o.keepalive.map(Into::into),
            reconnect_policy: o.reconnect_policy.map(Into::into),
        }
    }
}

impl From<ch::ChannelInfo> for new::ChannelInfo {
    fn from(i: ch::ChannelInfo) -> Self {
        Self {
            max_text_bytes: i.max_text_bytes,
        }
    }
}

impl From<&new::StatusUpdate> for ch::StatusUpdate {
    fn from(u: &new::StatusUpdate) -> Self {
        Self {
            conversation: u.conversation.clone(),
            thread: u.thread.clone(),
            message_id: u.message_id.clone(),
            state: match u.state {
                new::TurnState::Working => ch::TurnState::Working,
                new::TurnState::Done => ch::TurnState::Done,
                new::TurnState::Failed => ch::TurnState::Failed,
            },
            handle: u.handle.clone(),
        }
    }
}

impl From<ch::CheckItem> for new::CheckItem {
    fn from(c: ch::CheckItem) -> Self {
        Self {
            name: c.name,
            ok: c.ok,
            detail: c.detail,
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
            ch::ChannelError::Rejected(m) => Self::Rejected(m),
            ch::ChannelError::RetryLater(r) => Self::RetryLater(new::RetryAfter {
                after_ms: r.after_ms,
                reason: r.reason,
            }),
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

super::convert::converting_exports!(
    fn describe<'a>(&'a self, store: &'a mut PluginStore) -> Call<'a, new::ChannelInfo> {
        Box::pin(async move {
            Ok(self
                .pincer_plugin_channel()
                .call_describe(store)
                .await?
                .into())
        })
    }

    fn status<'a>(
        &'a self,
        store: &'a mut PluginStore,
        update: &'a new::StatusUpdate,
    ) -> Call<'a, Result<Option<String>, new::ChannelError>> {
        Box::pin(async move {
            Ok(self
                .pincer_plugin_channel()
                .call_status(store, &update.into())
                .await?
                .map_err(Into::into))
        })
    }

    fn check<'a>(&'a self, store: &'a mut PluginStore) -> Call<'a, Vec<new::CheckItem>> {
        Box::pin(async move {
            Ok(self
                .pincer_plugin_channel()
                .call_check(store)
                .await?
                .into_iter()
                .map(Into::into)
                .collect())
        })
    }
);
