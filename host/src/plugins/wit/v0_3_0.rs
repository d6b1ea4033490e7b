//! Bindings and host imports for the frozen WIT release `pincer:plugin@0.3.0`
//! (`wit/v0.3.0/`). 0.4.0 added interactive messages (actions, interactions, `update`);
//! every import delegates to the newest release's implementation and every
//! type converts one to one, minus what 0.3.0 cannot express.

use wasmtime::component::{HasSelf, Linker};

use super::latest as new;
use crate::plugins::state::PluginState;

mod channel_world {
    wasmtime::component::bindgen!({
        path: "../wit/v0.3.0",
        world: "channel-plugin",
        imports: { default: async | trappable },
        exports: { default: async },
    });
}

mod skill_world {
    wasmtime::component::bindgen!({
        path: "../wit/v0.3.0",
        world: "skill-plugin",
        imports: { default: async | trappable },
        exports: { default: async },
        with: { "pincer:plugin": super::channel_world::pincer::plugin },
    });
}

mod observer_world {
    wasmtime::component::bindgen!({
        path: "../wit/v0.3.0",
        world: "observer-plugin",
        imports: { default: async | trappable },
        exports: { default: async },
        with: { "pincer:plugin": super::channel_world::pincer::plugin },
    });
}

mod tunnel_world {
    wasmtime::component::bindgen!({
        path: "../wit/v0.3.0",
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

super::convert::since_0_2!();

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
