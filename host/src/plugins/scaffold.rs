//! `pincer plugin new`: a plugin crate on the plugin SDK that builds on its
//! own, offline and outside pincer's checkout: the SDK's sources (and the
//! WIT release it targets, as real files) are embedded in `pincer` and
//! written out beside the plugin, which uses them as a path dependency.
//! With `--lang python`, a skill in Python for componentize-py instead:
//! `app.py`, the manifest and the same WIT as files.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use super::manifest::{PluginKind, check_name};

mod sdk {
    include!(concat!(env!("OUT_DIR"), "/sdk_files.rs"));
}

/// The WIT release the embedded SDK targets (what scaffolds declare).
pub const WIT_VERSION: &str = sdk::SDK_WIT_VERSION;
/// The folder, inside a scaffold, the SDK is written to.
pub const SDK_DIR: &str = "pincer-plugin-sdk";

/// The language of a new plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lang {
    Rust,
    Python,
}

impl Lang {
    pub fn parse(s: &str) -> anyhow::Result<Self> {
        match s {
            "rust" => Ok(Self::Rust),
            "python" => Ok(Self::Python),
            _ => bail!("unknown language `{s}`: use rust or python"),
        }
    }
}

/// Creates `<parent>/<name>/`; refuses to touch an existing folder.
pub fn create(parent: &Path, kind: &str, name: &str, lang: Lang) -> anyhow::Result<PathBuf> {
    let kind = PluginKind::parse(kind).with_context(|| {
        format!("unknown kind `{kind}`: use skill, channel, observer or tunnel")
    })?;
    check_name(name).map_err(anyhow::Error::msg)?;
    if lang == Lang::Python && kind != PluginKind::Skill {
        bail!("a Python plugin can only be a skill (--kind skill); write {kind} plugins in Rust");
    }
    let root = parent.join(name);
    if root.exists() {
        bail!(
            "{} already exists; pick another name or folder",
            root.display()
        );
    }
    let files = match lang {
        Lang::Rust => files(kind, name),
        Lang::Python => python_files(name),
    };
    for (path, text) in &files {
        let path = root.join(path);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(root)
}

fn files(kind: PluginKind, name: &str) -> Vec<(String, String)> {
    let crate_name = name.replace('-', "_");
    let mut files = vec![
        ("Cargo.toml".to_string(), cargo_toml(kind, name)),
        ("plugin.toml".to_string(), manifest(kind, name)),
        (
            ".cargo/config.toml".to_string(),
            "[build]\ntarget = \"wasm32-wasip2\"\n".to_string(),
        ),
        (".gitignore".to_string(), "/target\n".to_string()),
        ("src/lib.rs".to_string(), lib_rs(kind)),
        ("README.md".to_string(), readme(kind, name, &crate_name)),
    ];
    for (file, text) in sdk::SDK_FILES {
        files.push((format!("{SDK_DIR}/{file}"), (*text).to_string()));
    }
    files
}

/// A Python skill: `app.py`, the manifest, the WIT the SDK targets as
/// files (componentize-py reads them), a README with the recipe.
fn python_files(name: &str) -> Vec<(String, String)> {
    let mut files = vec![
        ("plugin.toml".to_string(), manifest(PluginKind::Skill, name)),
        ("app.py".to_string(), PYTHON_APP.to_string()),
        (
            ".gitignore".to_string(),
            "/dist\n__pycache__/\n".to_string(),
        ),
        ("README.md".to_string(), python_readme(name)),
    ];
    for (file, text) in sdk::SDK_FILES {
        if file.starts_with("wit/") {
            files.push(((*file).to_string(), (*text).to_string()));
        }
    }
    files
}

const PYTHON_APP: &str = r#""""A pincer skill in Python, built with componentize-py against wit/."""

import json

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import config, types

ECHO_SCHEMA = {
    "type": "object",
    "properties": {"text": {"type": "string", "description": "The text to say back"}},
    "required": ["text"],
    "additionalProperties": False,
}


class Skill(exports.Skill):
    def tools(self):
        return [
            types.ToolSpec(
                name="echo",
                description="Returns its `text`",
                input_schema=json.dumps(ECHO_SCHEMA),
            )
        ]

    def invoke(self, tool, args_json):
        if tool != "echo":
            raise Err(types.ToolError_UnknownTool(tool))
        try:
            args = json.loads(args_json)
        except ValueError as e:
            raise Err(types.ToolError_InvalidArgs(f"arguments are not JSON: {e}"))
        text = args.get("text") if isinstance(args, dict) else None
        if not isinstance(text, str) or set(args) - {"text"}:
            raise Err(types.ToolError_InvalidArgs('expected {"text": string}'))
        greeting = config.get("greeting")
        return types.ToolOutput(json=json.dumps({"text": text, "greeting": greeting}))
"#;

fn python_readme(name: &str) -> String {
    format!(
        r#"# {name}

A pincer skill in Python (WIT world `pincer:plugin/skill-plugin@{WIT_VERSION}`,
its WIT in `wit/`), built with componentize-py:

    pip install componentize-py=={cpy}         # or set PINCER_COMPONENTIZE_PY
    componentize-py -d wit -w skill-plugin bindings bindings   # optional: the Python API to read
    pincer plugin build .                      # -> dist/: plugin.toml, the component, SHA256SUMS
    pincer plugin install dist
    pincer skill invoke {name} echo --args '{{"text": "hi"}}'
"#,
        cpy = super::build::COMPONENTIZE_PY_VERSION
    )
}

fn cargo_toml(kind: PluginKind, name: &str) -> String {
    let schemars = if kind == PluginKind::Skill {
        "schemars = \"1\"\n"
    } else {
        ""
    };
    format!(
        r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2024"
publish = false

[lib]
crate-type = ["cdylib"]

[dependencies]
pincer-plugin-sdk = {{ path = "{SDK_DIR}", features = ["{kind}"] }}
serde = {{ version = "1", features = ["derive"] }}
serde_json = "1"
{schemars}
[profile.release]
opt-level = "s"
lto = true
strip = true

# A crate of its own, even inside another Cargo workspace.
[workspace]
"#
    )
}

fn manifest(kind: PluginKind, name: &str) -> String {
    let capabilities = match kind {
        PluginKind::Channel => {
            "http = [\"api.example.com\"]   # hosts the channel may call: host (default port), host:PORT or host:*\n"
        }
        PluginKind::Tunnel => {
            "http = [\"127.0.0.1:*\"]   # loopback must be named as a literal address\n"
        }
        PluginKind::Skill | PluginKind::Observer => {
            "# http = [\"api.example.com\"]\n# kv = true\n# data_dir = true\n"
        }
    };
    let config = match kind {
        PluginKind::Skill => {
            "[config.greeting]\ntype = \"string\"\nrequired = false\ndescription = \"Returned beside the echoed text\"\n"
        }
        _ => "# [config.greeting]\n# type = \"string\"\n# required = false\n",
    };
    format!(
        r#"[plugin]
name = "{name}"
kind = "{kind}"
version = "0.1.0"
wit = "{WIT_VERSION}"
description = "A {kind} plugin"
# component = "plugin.wasm"   # the built file is copied here by `pincer plugin install`

[capabilities]
{capabilities}
# One table per config key the plugin accepts (`plugins.config.{name}` in pincer.yaml);
# `secret = true` keys never reach the plugin: it names them in requests.
{config}"#
    )
}

fn lib_rs(kind: PluginKind) -> String {
    match kind {
        PluginKind::Skill => SKILL_RS,
        PluginKind::Observer => OBSERVER_RS,
        PluginKind::Channel => CHANNEL_RS,
        PluginKind::Tunnel => TUNNEL_RS,
    }
    .to_string()
}

const SKILL_RS: &str = r##"use pincer_plugin_sdk::skill::{Skill, Tools};
use pincer_plugin_sdk::types::ToolError;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The arguments of `echo`: its JSON Schema, what agents are offered, is
/// derived from this struct (doc comments become descriptions).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct EchoArgs {
    /// The text to say back.
    text: String,
}

#[derive(Serialize)]
struct Echoed {
    text: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    greeting: Option<String>,
}

/// `plugins.config.<name>` in pincer.yaml, checked when read: a wrong value
/// is an error naming the key. Declare each key in plugin.toml too.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default)]
    greeting: Option<String>,
}

struct Plugin;

impl Skill for Plugin {
    fn tools() -> Tools {
        Tools::new().tool("echo", "Returns its `text` argument", echo)
    }
}

fn echo(args: EchoArgs) -> Result<Echoed, ToolError> {
    let config: Config = pincer_plugin_sdk::config::load()?;
    Ok(Echoed {
        text: args.text,
        greeting: config.greeting,
    })
}

pincer_plugin_sdk::export_skill!(Plugin);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemas_are_derived_and_inlined() {
        Plugin::tools().check_schemas().unwrap();
    }
}
"##;

const OBSERVER_RS: &str = r#"use pincer_plugin_sdk::log;
use pincer_plugin_sdk::observer::Guest;
use pincer_plugin_sdk::types::{Event, EventBody};

struct Plugin;

impl Guest for Plugin {
    fn on_event(event: Event) {
        let what = match event.body {
            EventBody::MessageIn(m) => format!("message in: {}", m.text),
            EventBody::MessageOut(m) => format!("message out: {}", m.text),
            EventBody::ToolCall(c) => format!("tool call: {}", c.tool),
            EventBody::LlmUsage(u) => format!("llm usage: {} tokens", u.input_tokens + u.output_tokens),
            EventBody::PluginFault(f) => format!("plugin fault: {f}"),
            EventBody::Error(e) => format!("error: {e}"),
        };
        log::info(&what);
    }
}

pincer_plugin_sdk::export_observer!(Plugin);
"#;

const CHANNEL_RS: &str = r#"use pincer_plugin_sdk::channel::{
    ChannelError, ChannelInfo, CheckItem, ConnectionRequest, Delivery, Frame, FrameOutcome,
    Guest, HistoryRequest, OutboundFile, PastMessage, StatusUpdate, WebhookOutcome,
    WebhookRequest,
};
use pincer_plugin_sdk::clock::now_ms;
use pincer_plugin_sdk::types::{Attachment, HttpRequest, HttpResponse, Message, Outbound};

struct Plugin;

impl Guest for Plugin {
    /// Accepts `POST` with a plain-text body as one message.
    fn handle_webhook(request: WebhookRequest) -> Result<WebhookOutcome, ChannelError> {
        let text = String::from_utf8(request.body)
            .map_err(|_| ChannelError::BadRequest("body must be UTF-8 text".into()))?;
        let message = Message {
            id: now_ms().to_string(),
            conversation: "default".into(),
            thread: None,
            sender: "webhook".into(),
            sender_name: None,
            text,
            timestamp_ms: now_ms(),
            files: vec![],
        };
        Ok(WebhookOutcome {
            response: HttpResponse { status: 200, headers: vec![], body: b"ok".to_vec() },
            messages: vec![message],
            interactions: vec![],
        })
    }

    fn connect() -> Result<Option<ConnectionRequest>, ChannelError> {
        Ok(None)
    }

    fn on_frame(_frame: Frame) -> Result<FrameOutcome, ChannelError> {
        Err(ChannelError::Unsupported("this channel has no connection mode".into()))
    }

    fn send(_message: Outbound) -> Result<Delivery, ChannelError> {
        Err(ChannelError::Unsupported("sending is not implemented yet".into()))
    }

    fn describe() -> ChannelInfo {
        ChannelInfo { max_text_bytes: 4000, interactive: false, max_upload_bytes: 0 }
    }

    fn history(_request: HistoryRequest) -> Result<Vec<PastMessage>, ChannelError> {
        Err(ChannelError::Unsupported("history is not implemented yet".into()))
    }

    fn file_request(_message_id: String, _file: Attachment) -> Result<HttpRequest, ChannelError> {
        Err(ChannelError::Unsupported("files are not implemented yet".into()))
    }

    fn send_file(_file: OutboundFile) -> Result<Delivery, ChannelError> {
        Err(ChannelError::Unsupported("files are not implemented yet".into()))
    }

    fn update(_id: String, _message: Outbound) -> Result<Delivery, ChannelError> {
        Err(ChannelError::Unsupported("buttons and updates are not implemented yet".into()))
    }

    fn status(_update: StatusUpdate) -> Result<Option<String>, ChannelError> {
        Ok(None)
    }

    fn check() -> Vec<CheckItem> {
        vec![CheckItem { name: "settings".into(), ok: true, detail: "nothing to check yet".into() }]
    }
}

pincer_plugin_sdk::export_channel!(Plugin);
"#;

const TUNNEL_RS: &str = r#"use pincer_plugin_sdk::http;
use pincer_plugin_sdk::tunnel::{Guest, TunnelError};
use pincer_plugin_sdk::types::{HttpRequest, HttpResponse};

/// The host-side service this tunnel reaches.
const TARGET: &str = "http://127.0.0.1:8080";

struct Plugin;

impl Guest for Plugin {
    fn service() -> String {
        "example".into()
    }

    fn forward(request: HttpRequest) -> Result<HttpResponse, TunnelError> {
        if !request.url.starts_with('/') || request.url.starts_with("//") || request.url.contains("..") {
            return Err(TunnelError::BadRequest("only relative paths are forwarded".into()));
        }
        let url = format!("{TARGET}{}", request.url);
        // A container names no secrets and captures nothing.
        let upstream = HttpRequest { url, secrets: Vec::new(), capture: None, ..request };
        Ok(http::fetch(&upstream)?)
    }
}

pincer_plugin_sdk::export_tunnel!(Plugin);
"#;

fn readme(kind: PluginKind, name: &str, crate_name: &str) -> String {
    format!(
        r#"# {name}

A pincer {kind} plugin (WIT world `pincer:plugin/{world}@{WIT_VERSION}`) on
`pincer-plugin-sdk`, whose sources (and the WIT it targets) are in
`{SDK_DIR}/`. It builds offline: `cargo build --release --offline`.

    pincer plugin build .                      # cargo build --release --target wasm32-wasip2, checked -> dist/
    pincer plugin install dist                 # copy into $PINCER_HOME/plugins, pin its sha256
    # by hand: cargo build --release && cp target/wasm32-wasip2/release/{crate_name}.wasm plugin.wasm

Unit tests run natively: `cargo test --target $(rustc -vV | sed -n 's/^host: //p')`.
"#,
        world = kind.world()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_bad_names_and_existing_folders() {
        let dir = tempfile::tempdir().unwrap();
        assert!(create(dir.path(), "skill", "Bad Name", Lang::Rust).is_err());
        assert!(create(dir.path(), "robot", "ok", Lang::Rust).is_err());
        create(dir.path(), "skill", "ok", Lang::Rust).unwrap();
        let again = create(dir.path(), "skill", "ok", Lang::Rust).unwrap_err();
        assert!(again.to_string().contains("already exists"));
    }

    #[test]
    fn the_sdk_and_the_wit_it_targets_are_written_out_as_files() {
        let dir = tempfile::tempdir().unwrap();
        let root = create(dir.path(), "tunnel", "t", Lang::Rust).unwrap();
        let sdk = root.join(SDK_DIR);
        for file in ["Cargo.toml", "build.rs", "src/lib.rs", "wit/worlds.wit"] {
            let meta = std::fs::symlink_metadata(sdk.join(file)).unwrap();
            assert!(meta.file_type().is_file(), "{file}");
        }
        let worlds = std::fs::read_to_string(sdk.join("wit/worlds.wit")).unwrap();
        assert!(worlds.contains(&format!("package pincer:plugin@{WIT_VERSION};")));
        let manifest = std::fs::read_to_string(root.join("plugin.toml")).unwrap();
        assert!(manifest.contains(&format!("wit = \"{WIT_VERSION}\"")));
        let cargo = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
        assert!(cargo.contains(r#"features = ["tunnel"]"#), "{cargo}");
        // What the SDK targets is a release this host serves.
        let version = semver::Version::parse(WIT_VERSION).unwrap();
        assert!(super::super::wit::WitRelease::for_plugin(&version).is_some());
    }
}
