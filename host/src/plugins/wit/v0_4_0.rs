//! Bindings and host imports for the frozen WIT release `pincer:plugin@0.4.0`
//! (`wit/v0.4.0/`). 0.5.0 added files, history and progress (a message's
//! `files`, `status-update.detail`, `channel-info.max-upload-bytes`,
//! `history`, `file-request`, `send-file` and the `upload` import); every
//! import delegates to the newest release's implementation and every type
//! converts one to one, minus what 0.4.0 cannot express.

use wasmtime::component::{HasSelf, Linker};

use super::latest as new;
use crate::plugins::state::PluginState;

mod channel_world {
    wasmtime::component::bindgen!({
        path: "../wit/v0.4.0",
        world: "channel-plugin",
        imports: { default: async | trappable },
        exports: { default: async },
    });
}

mod skill_world {
    wasmtime::component::bindgen!({
        path: "../wit/v0.4.0",
        world: "skill-plugin",
        imports: { default: async | trappable },
        exports: { default: async },
        with: { "pincer:plugin": super::channel_world::pincer::plugin },
    });
}

mod observer_world {
    wasmtime::component::bindgen!({
        path: "../wit/v0.4.0",
        world: "observer-plugin",
        imports: { default: async | trappable },
        exports: { default: async },
        with: { "pincer:plugin": super::channel_world::pincer::plugin },
    });
}

mod tunnel_world {
    wasmtime::component::bindgen!({
        path: "../wit/v0.4.0",
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

// Imports unchanged since 0.1.0 and since 0.2.0: the newest release's
// implementation.
super::convert::delegating_imports!();
super::convert::imports_since_0_2!();
super::convert::channel_records_since_0_2!();
super::convert::records_since_0_1!();

fn secret_place(p: types::SecretPlace) -> new::SecretPlace {
    match p {
        types::SecretPlace::Header(h) => new::SecretPlace::Header(new::SecretHeader {
            name: h.name,
            prefix: h.prefix,
        }),
        types::SecretPlace::JsonField(p) => new::SecretPlace::JsonField(p),
        types::SecretPlace::FormField(f) => new::SecretPlace::FormField(f),
        types::SecretPlace::QueryParam(q) => new::SecretPlace::QueryParam(q),
    }
}

fn secret_place_back(p: &new::SecretPlace) -> Option<types::SecretPlace> {
    Some(match p {
        new::SecretPlace::Header(h) => types::SecretPlace::Header(types::SecretHeader {
            name: h.name.clone(),
            prefix: h.prefix.clone(),
        }),
        new::SecretPlace::JsonField(p) => types::SecretPlace::JsonField(p.clone()),
        new::SecretPlace::FormField(f) => types::SecretPlace::FormField(f.clone()),
        new::SecretPlace::QueryParam(q) => types::SecretPlace::QueryParam(q.clone()),
    })
}

// What 0.4.0 has and 0.1.0 to 0.3.0 did not: buttons, clicks, `update`.

impl From<&new::Outbound> for types::Outbound {
    fn from(o: &new::Outbound) -> Self {
        Self {
            conversation: o.conversation.clone(),
            thread: o.thread.clone(),
            text: o.text.clone(),
            reply_to: o.reply_to.clone(),
            actions: o
                .actions
                .iter()
                .map(|a| types::Action {
                    id: a.id.clone(),
                    label: a.label.clone(),
                    style: match a.style {
                        new::ActionStyle::Plain => types::ActionStyle::Plain,
                        new::ActionStyle::Primary => types::ActionStyle::Primary,
                        new::ActionStyle::Danger => types::ActionStyle::Danger,
                    },
                })
                .collect(),
            visible_to: o.visible_to.clone(),
        }
    }
}

impl From<types::Interaction> for new::Interaction {
    fn from(i: types::Interaction) -> Self {
        Self {
            id: i.id,
            action: i.action,
            conversation: i.conversation,
            thread: i.thread,
            message: i.message,
            user: i.user,
            user_name: i.user_name,
            timestamp_ms: i.timestamp_ms,
        }
    }
}

impl From<ch::WebhookOutcome> for new::WebhookOutcome {
    fn from(o: ch::WebhookOutcome) -> Self {
        Self {
            response: o.response.into(),
            messages: o.messages.into_iter().map(Into::into).collect(),
            interactions: o.interactions.into_iter().map(Into::into).collect(),
        }
    }
}

impl From<ch::FrameOutcome> for new::FrameOutcome {
    fn from(o: ch::FrameOutcome) -> Self {
        Self {
            replies: o.replies.into_iter().map(Into::into).collect(),
            messages: o.messages.into_iter().map(Into::into).collect(),
            interactions: o.interactions.into_iter().map(Into::into).collect(),
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
            interactive: i.interactive,
            max_upload_bytes: 0,
        }
    }
}

super::convert::channel_calls_since_0_2!(
    fn update<'a>(
        &'a self,
        store: &'a mut PluginStore,
        id: &'a str,
        message: &'a new::Outbound,
    ) -> Call<'a, Result<new::Delivery, new::ChannelError>> {
        Box::pin(async move {
            Ok(self
                .pincer_plugin_channel()
                .call_update(store, id, &message.into())
                .await?
                .map(Into::into)
                .map_err(Into::into))
        })
    }
);
