//! `pincer plugin new`: a plugin crate that builds on its own, with a copy of
//! the WIT it targets, a manifest, and a working example for its kind.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use super::manifest::{PluginKind, check_name};
use super::wit::latest::VERSION as WIT_VERSION;

/// The WIT files of the newest release, embedded so scaffolds need no checkout.
const WIT_FILES: &[(&str, &str)] = &[
    ("types.wit", include_str!("../../../wit/v0.3.0/types.wit")),
    ("host.wit", include_str!("../../../wit/v0.3.0/host.wit")),
    ("worlds.wit", include_str!("../../../wit/v0.3.0/worlds.wit")),
];

/// Creates `<parent>/<name>/`; refuses to touch an existing folder.
pub fn create(parent: &Path, kind: &str, name: &str) -> anyhow::Result<PathBuf> {
    let kind = PluginKind::parse(kind).with_context(|| {
        format!("unknown kind `{kind}`: use skill, channel, observer or tunnel")
    })?;
    check_name(name).map_err(anyhow::Error::msg)?;
    let root = parent.join(name);
    if root.exists() {
        bail!(
            "{} already exists; pick another name or folder",
            root.display()
        );
    }
    let files = files(kind, name);
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
        ("Cargo.toml".to_string(), cargo_toml(name)),
        ("plugin.toml".to_string(), manifest(kind, name)),
        (
            ".cargo/config.toml".to_string(),
            "[build]\ntarget = \"wasm32-wasip2\"\n".to_string(),
        ),
        (".gitignore".to_string(), "/target\n".to_string()),
        ("src/lib.rs".to_string(), lib_rs(kind)),
        ("README.md".to_string(), readme(kind, name, &crate_name)),
    ];
    for (file, text) in WIT_FILES {
        files.push((format!("wit/{file}"), (*text).to_string()));
    }
    files
}

fn cargo_toml(name: &str) -> String {
    format!(
        r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2024"
publish = false

[lib]
crate-type = ["cdylib"]

[dependencies]
wit-bindgen = "0.63"
serde_json = "1"

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
# One table per config key the plugin accepts (`plugins.config.{name}` in pincer.yaml):
# [config.greeting]
# type = "string"
# required = false
"#
    )
}

fn lib_rs(kind: PluginKind) -> String {
    let world = kind.world();
    let body = match kind {
        PluginKind::Skill => {
            r##"use exports::pincer::plugin::skill::Guest;
use pincer::plugin::types::{ToolError, ToolOutput, ToolSpec};

struct Plugin;

impl Guest for Plugin {
    fn tools() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "echo".into(),
            description: "Returns its `text` argument".into(),
            input_schema: r#"{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}"#.into(),
        }]
    }

    fn invoke(tool: String, args_json: String) -> Result<ToolOutput, ToolError> {
        if tool != "echo" {
            return Err(ToolError::UnknownTool(tool));
        }
        let args: serde_json::Value = serde_json::from_str(&args_json)
            .map_err(|e| ToolError::InvalidArgs(e.to_string()))?;
        let text = args["text"]
            .as_str()
            .ok_or_else(|| ToolError::InvalidArgs("`text` must be a string".into()))?;
        Ok(ToolOutput { json: serde_json::json!({ "text": text }).to_string() })
    }
}
"##
        }
        PluginKind::Observer => {
            r#"use exports::pincer::plugin::observer::Guest;
use pincer::plugin::logging::{log, Level};
use pincer::plugin::types::{Event, EventBody};

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
        log(Level::Info, &what);
    }
}
"#
        }
        PluginKind::Channel => {
            r#"use exports::pincer::plugin::channel::{
    ChannelError, ChannelInfo, CheckItem, ConnectionRequest, Delivery, Frame, FrameOutcome,
    Guest, StatusUpdate, WebhookOutcome, WebhookRequest,
};
use pincer::plugin::clock::now_ms;
use pincer::plugin::types::{HttpResponse, Message, Outbound};

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
        };
        Ok(WebhookOutcome {
            response: HttpResponse { status: 200, headers: vec![], body: b"ok".to_vec() },
            messages: vec![message],
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
        ChannelInfo { max_text_bytes: 4000 }
    }

    fn status(_update: StatusUpdate) -> Result<Option<String>, ChannelError> {
        Ok(None)
    }

    fn check() -> Vec<CheckItem> {
        vec![CheckItem { name: "settings".into(), ok: true, detail: "nothing to check yet".into() }]
    }
}
"#
        }
        PluginKind::Tunnel => {
            r#"use exports::pincer::plugin::tunnel::{Guest, TunnelError};
use pincer::plugin::http::fetch;
use pincer::plugin::types::{HttpError, HttpRequest, HttpResponse};

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
        fetch(&HttpRequest { url, ..request }).map_err(|e| match e {
            HttpError::Denied(m) => TunnelError::Denied(m),
            other => TunnelError::Upstream(format!("{other:?}")),
        })
    }
}
"#
        }
    };
    format!(
        "wit_bindgen::generate!({{ path: \"wit\", world: \"{world}\" }});\n\n{body}\nexport!(Plugin);\n"
    )
}

fn readme(kind: PluginKind, name: &str, crate_name: &str) -> String {
    format!(
        r#"# {name}

A pincer {kind} plugin (WIT world `pincer:plugin/{world}@{WIT_VERSION}`, copied into `wit/`).

    cargo build --release                      # target wasm32-wasip2 is set in .cargo/config.toml
    cp target/wasm32-wasip2/release/{crate_name}.wasm plugin.wasm
    pincer plugin inspect .                    # validate: world, WIT version, capabilities
    pincer plugin install .                    # copy into $PINCER_HOME/plugins, pin its sha256
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
        assert!(create(dir.path(), "skill", "Bad Name").is_err());
        assert!(create(dir.path(), "robot", "ok").is_err());
        create(dir.path(), "skill", "ok").unwrap();
        let again = create(dir.path(), "skill", "ok").unwrap_err();
        assert!(again.to_string().contains("already exists"));
    }
}
