//! `plugin.toml`: what a plugin says it is and what it asks for.

use std::collections::BTreeMap;
use std::fmt;

use semver::Version;
use serde::Deserialize;

use super::PluginError;
use crate::hosts::HostPattern;

/// The four plugin kinds; each is one WIT world.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PluginKind {
    Channel,
    Skill,
    Observer,
    Tunnel,
}

impl PluginKind {
    pub const ALL: [PluginKind; 4] = [Self::Channel, Self::Skill, Self::Observer, Self::Tunnel];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Channel => "channel",
            Self::Skill => "skill",
            Self::Observer => "observer",
            Self::Tunnel => "tunnel",
        }
    }

    /// The WIT world a component of this kind targets.
    pub fn world(self) -> &'static str {
        match self {
            Self::Channel => "channel-plugin",
            Self::Skill => "skill-plugin",
            Self::Observer => "observer-plugin",
            Self::Tunnel => "tunnel-plugin",
        }
    }

    /// The interface the world exports (`pincer:plugin/<this>@<version>`).
    pub fn export_interface(self) -> &'static str {
        self.as_str()
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

impl fmt::Display for PluginKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub plugin: PluginSection,
    #[serde(default)]
    pub capabilities: Capabilities,
    /// What one instance needs beyond the operator's defaults.
    #[serde(default)]
    pub limits: ManifestLimits,
    /// The plugin's config schema: one entry per accepted key.
    #[serde(default)]
    pub config: BTreeMap<String, ConfigKey>,
    /// Values the host may keep from a response for the plugin (`capture`),
    /// by name, with where each may be placed.
    #[serde(default)]
    pub captures: BTreeMap<String, CaptureKey>,
    /// Credentials the host checks in every webhook request before the
    /// plugin sees it.
    #[serde(default)]
    pub webhook: WebhookSection,
    /// A skill's word on its tools, by tool name (`[tools.NAME]`).
    #[serde(default)]
    pub tools: BTreeMap<String, ToolDecl>,
}

/// What a skill says of one of its tools. A claim, not a fact: the host
/// honours `effect = "read"` only where the operator trusts the skill
/// (`skills.NAME.trust_effects: true`).
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolDecl {
    #[serde(default)]
    pub effect: Effect,
}

/// Whether a tool only reads (`read`) or may change something (`write`,
/// the default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Effect {
    Read,
    #[default]
    Write,
}

/// `[captures.NAME]`: a value the host keeps from a response.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaptureKey {
    #[serde(default)]
    pub bind: Vec<Binding>,
    #[serde(default)]
    pub description: String,
}

/// One place a secret may be put: a request to `host` (an http capability
/// pattern), under `path` (a prefix), with `method`, into exactly one of a
/// header (with `prefix` before the value), a JSON member (by JSON
/// Pointer), a form field or a query parameter.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Binding {
    pub host: String,
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub method: Option<String>,
    #[serde(default)]
    pub header: Option<String>,
    #[serde(default)]
    pub prefix: Option<String>,
    #[serde(default)]
    pub json: Option<String>,
    #[serde(default)]
    pub form: Option<String>,
    #[serde(default)]
    pub query: Option<String>,
}

impl Binding {
    fn check(&self, secret: &str) -> Result<(), super::Invalid> {
        let bad = |why: String| -> super::Invalid {
            format!("config.{secret}.bind (host `{}`): {why}", self.host).into()
        };
        HostPattern::parse(&self.host)
            .map_err(|e| bad(format!("http capability `{}`: {e}", self.host)))?;
        let places = [&self.header, &self.json, &self.form, &self.query]
            .iter()
            .filter(|p| p.is_some())
            .count();
        if places != 1 {
            return Err(bad(
                "name exactly one place: `header`, `json`, `form` or `query`".into(),
            ));
        }
        if self.prefix.is_some() && self.header.is_none() {
            return Err(bad("`prefix` goes with `header` only".into()));
        }
        if let Some(p) = &self.json
            && !p.starts_with('/')
        {
            return Err(bad(format!(
                "`json = \"{p}\"` is not a JSON Pointer (it starts with `/`)"
            )));
        }
        if let Some(p) = &self.path
            && !p.starts_with('/')
        {
            return Err(bad(format!("`path = \"{p}\"` must start with `/`")));
        }
        if let Some(h) = &self.header {
            let lower = h.to_ascii_lowercase();
            if lower.is_empty()
                || !lower
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            {
                return Err(bad(format!("`header = \"{h}\"` is not a header name")));
            }
        }
        Ok(())
    }
}

impl fmt::Display for Binding {
    /// E.g. "header `Authorization` after `Bearer ` of POST slack.com/api/".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(h) = &self.header {
            match self.prefix.as_deref() {
                Some(p) if !p.is_empty() => write!(f, "header `{h}` after `{p}`")?,
                _ => write!(f, "header `{h}`")?,
            }
        } else if let Some(p) = &self.json {
            write!(f, "JSON member `{p}`")?;
        } else if let Some(field) = &self.form {
            write!(f, "form field `{field}`")?;
        } else {
            write!(
                f,
                "query parameter `{}`",
                self.query.as_deref().unwrap_or("")
            )?;
        }
        f.write_str(" of ")?;
        if let Some(m) = &self.method {
            write!(f, "{m} ")?;
        }
        write!(f, "{}{}", self.host, self.path.as_deref().unwrap_or(""))
    }
}

/// `[webhook]` of plugin.toml.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookSection {
    #[serde(default)]
    pub verify: Vec<WebhookToken>,
}

/// A token a platform puts in its webhook JSON (Feishu's verification
/// token): when the secret is set, the host compares every member named by
/// `json` with it in constant time, refuses the request (401) on a missing
/// or different value, and removes the members before the plugin sees the
/// event. A body with a member at `encrypted` is checked after the plugin
/// has the host decrypt it (`secrets.decrypt`), on the decrypted event.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookToken {
    pub secret: String,
    pub json: Vec<String>,
    #[serde(default)]
    pub encrypted: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginSection {
    pub name: String,
    pub kind: PluginKind,
    pub version: Version,
    /// The `pincer:plugin` WIT version the component was built against.
    pub wit: Version,
    #[serde(default)]
    pub description: String,
    /// File name of the component beside the manifest.
    #[serde(default = "default_component")]
    pub component: String,
}

fn default_component() -> String {
    "plugin.wasm".to_string()
}

#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Capabilities {
    /// Outbound HTTP destinations: `host`, `host:port`, or `*.suffix`.
    #[serde(default)]
    pub http: Vec<String>,
    #[serde(default)]
    pub kv: bool,
    #[serde(default)]
    pub data_dir: bool,
}

/// `[limits]` of plugin.toml.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestLimits {
    /// Linear memory one instance may grow to, in MiB, when it needs more
    /// than `plugins.limits.memory_mb` (an interpreter's heap, e.g. a
    /// componentize-py skill). Never lowers the operator's setting.
    pub memory_mb: Option<u32>,
}

impl ManifestLimits {
    pub const MAX_MEMORY_MB: u32 = 4096;

    /// The memory an instance gets: the operator's default, or this
    /// plugin's ask when larger.
    pub fn memory_bytes(&self, operator_default: usize) -> usize {
        self.memory_mb.map_or(operator_default, |mb| {
            operator_default.max((mb as usize) << 20)
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ConfigType {
    String,
    Integer,
    Number,
    Boolean,
    Array,
    Object,
}

impl ConfigType {
    fn accepts(self, value: &serde_json::Value) -> bool {
        use serde_json::Value as V;
        match self {
            Self::String => value.is_string(),
            Self::Integer => value.is_i64() || value.is_u64(),
            Self::Number => value.is_number(),
            Self::Boolean => value.is_boolean(),
            Self::Array => matches!(value, V::Array(_)),
            Self::Object => matches!(value, V::Object(_)),
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Self::String => "string",
            Self::Integer => "integer",
            Self::Number => "number",
            Self::Boolean => "boolean",
            Self::Array => "array",
            Self::Object => "object",
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigKey {
    #[serde(rename = "type")]
    pub ty: ConfigType,
    #[serde(default)]
    pub required: bool,
    /// Secrets are redacted wherever the config is shown.
    #[serde(default)]
    pub secret: bool,
    /// Where the host may put this secret; nowhere when empty.
    #[serde(default)]
    pub bind: Vec<Binding>,
    #[serde(default)]
    pub description: String,
}

impl Manifest {
    /// Parses and checks a manifest. `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Self, PluginError> {
        let manifest: Manifest = toml::from_str(text).map_err(|e| PluginError::Manifest {
            plugin: origin.to_string(),
            reason: e.to_string().trim_end().to_string(),
        })?;
        manifest.check().map_err(|reason| PluginError::Manifest {
            plugin: origin.to_string(),
            reason: reason.0,
        })?;
        Ok(manifest)
    }

    pub fn name(&self) -> &str {
        &self.plugin.name
    }

    /// The config keys marked `secret = true`.
    pub fn secret_keys(&self) -> std::collections::BTreeSet<String> {
        self.config
            .iter()
            .filter(|(_, k)| k.secret)
            .map(|(name, _)| name.clone())
            .collect()
    }

    pub fn kind(&self) -> PluginKind {
        self.plugin.kind
    }

    fn check(&self) -> Result<(), super::Invalid> {
        check_name(&self.plugin.name)?;
        let component = &self.plugin.component;
        if component.is_empty()
            || component.contains('/')
            || component.contains('\\')
            || component.starts_with('.')
            || !component.ends_with(".wasm")
        {
            return Err(super::Invalid::from(format!(
                "component `{component}` must be a plain `.wasm` file name beside plugin.toml"
            )));
        }
        for pattern in &self.capabilities.http {
            HostPattern::parse(pattern)
                .map_err(|why| super::Invalid(format!("http capability `{pattern}`: {why}")))?;
        }
        if let Some(mb) = self.limits.memory_mb
            && !(1..=ManifestLimits::MAX_MEMORY_MB).contains(&mb)
        {
            return Err(super::Invalid::from(format!(
                "limits.memory_mb = {mb}: must be between 1 and {}",
                ManifestLimits::MAX_MEMORY_MB
            )));
        }
        for (key, spec) in &self.config {
            if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(super::Invalid::from(format!(
                    "config key `{key}` must be [A-Za-z0-9_]+"
                )));
            }
            if !spec.bind.is_empty() && !spec.secret {
                return Err(super::Invalid::from(format!(
                    "config.{key}.bind: only a `secret = true` key has bindings"
                )));
            }
            for binding in &spec.bind {
                binding.check(key)?;
            }
        }
        for (name, capture) in &self.captures {
            if self.config.contains_key(name) {
                return Err(super::Invalid::from(format!(
                    "captures.{name}: a capture cannot share its name with a config key"
                )));
            }
            for binding in &capture.bind {
                binding.check(name)?;
            }
        }
        for token in &self.webhook.verify {
            if !self.config.get(&token.secret).is_some_and(|k| k.secret) {
                return Err(super::Invalid::from(format!(
                    "webhook.verify: `{}` is not a `secret = true` config key",
                    token.secret
                )));
            }
            if token.json.is_empty() {
                return Err(super::Invalid::from(format!(
                    "webhook.verify `{}`: `json` names no member",
                    token.secret
                )));
            }
            for pointer in token.json.iter().chain(&token.encrypted) {
                if !pointer.starts_with('/') {
                    return Err(super::Invalid::from(format!(
                        "webhook.verify `{}`: `{pointer}` is not a JSON Pointer (it starts with `/`)",
                        token.secret
                    )));
                }
            }
        }
        if !self.tools.is_empty() && self.plugin.kind != PluginKind::Skill {
            return Err(super::Invalid::from(format!(
                "[tools] declares tool effects, which only a skill has (this is a {})",
                self.plugin.kind
            )));
        }
        for name in self.tools.keys() {
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
            {
                return Err(super::Invalid::from(format!(
                    "[tools.{name}]: a tool name is [a-z0-9_-]+"
                )));
            }
        }
        Ok(())
    }

    /// The tools this skill declares read-only (`effect = "read"`).
    pub fn read_tools(&self) -> impl Iterator<Item = &str> {
        self.tools
            .iter()
            .filter(|(_, d)| d.effect == Effect::Read)
            .map(|(name, _)| name.as_str())
    }

    /// Where each secret the host holds for this plugin may be placed:
    /// its secret config keys and its captures.
    pub fn bindings(&self) -> BTreeMap<String, Vec<Binding>> {
        self.config
            .iter()
            .filter(|(_, k)| k.secret)
            .map(|(name, k)| (name.clone(), k.bind.clone()))
            .chain(
                self.captures
                    .iter()
                    .map(|(name, c)| (name.clone(), c.bind.clone())),
            )
            .collect()
    }

    /// Checks a plugin's configured values against its declared config schema.
    pub fn check_config(&self, config: &serde_json::Value) -> Result<(), super::Invalid> {
        let empty = serde_json::Map::new();
        let values = match config {
            serde_json::Value::Object(map) => map,
            serde_json::Value::Null => &empty,
            _ => {
                return Err(super::Invalid::from(
                    "plugin config must be a map of keys to values",
                ));
            }
        };
        for key in values.keys() {
            if !self.config.contains_key(key) {
                let known: Vec<&str> = self.config.keys().map(String::as_str).collect();
                return Err(super::Invalid::from(if known.is_empty() {
                    format!("unknown config key `{key}`: this plugin takes no configuration")
                } else {
                    format!(
                        "unknown config key `{key}`; expected one of: {}",
                        known.join(", ")
                    )
                }));
            }
        }
        for (key, spec) in &self.config {
            match values.get(key) {
                None if spec.required => {
                    return Err(super::Invalid::from(format!(
                        "config key `{key}` is required"
                    )));
                }
                Some(value) if !spec.ty.accepts(value) => {
                    return Err(super::Invalid::from(format!(
                        "config key `{key}` must be a {}",
                        spec.ty.as_str()
                    )));
                }
                // An empty secret reads as unset to the plugin (`is-set`),
                // which a plugin may take as "unsigned is fine": refuse it.
                Some(serde_json::Value::String(value)) if spec.secret && value.is_empty() => {
                    return Err(super::Invalid::from(format!(
                        "config key `{key}` is a secret and is empty: give it a value, or leave the key out"
                    )));
                }
                // Shorter values cannot be told from ordinary text, so the
                // host could not keep them out of what the plugin reads.
                Some(serde_json::Value::String(value))
                    if spec.secret && value.len() < crate::plugins::MIN_SECRET_BYTES =>
                {
                    return Err(super::Invalid::from(format!(
                        "config key `{key}` is a secret of {} bytes; secrets must be at least {} bytes (a real token or key is longer)",
                        value.len(),
                        crate::plugins::MIN_SECRET_BYTES
                    )));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The config with secret values replaced, for display.
    pub fn redact_config(&self, config: &serde_json::Value) -> serde_json::Value {
        let mut shown = config.clone();
        if let serde_json::Value::Object(map) = &mut shown {
            for (key, value) in map.iter_mut() {
                if self.config.get(key).is_some_and(|k| k.secret) {
                    *value = serde_json::Value::String("[redacted]".to_string());
                }
            }
        }
        shown
    }
}

/// Plugin names: `[a-z0-9][a-z0-9-]{0,63}`.
pub fn check_name(name: &str) -> Result<(), super::Invalid> {
    let valid = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-');
    if valid {
        Ok(())
    } else {
        Err(super::Invalid::from(format!(
            "plugin name `{name}` must be 1-64 characters of a-z, 0-9 and `-`, not starting with `-`"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[plugin]
name = "skill-x"
kind = "skill"
version = "0.1.0"
wit = "0.1.0"

[capabilities]
http = ["localhost", "api.example.com:443", "*.slack.com"]
kv = true

[config.token]
type = "string"
required = true
secret = true
"#;

    #[test]
    fn parses_a_full_manifest() {
        let m = Manifest::parse(GOOD, "skill-x").unwrap();
        assert_eq!(m.kind(), PluginKind::Skill);
        assert_eq!(m.plugin.component, "plugin.wasm");
        assert!(m.capabilities.kv);
        assert!(!m.capabilities.data_dir);
    }

    #[test]
    fn a_skill_may_say_which_tools_only_read() {
        let with = |extra: &str| Manifest::parse(&format!("{GOOD}{extra}"), "skill-x");
        let m = with(
            "\n[tools.list]\neffect = \"read\"\n\n[tools.put]\neffect = \"write\"\n\n[tools.get]\n",
        )
        .expect("effects");
        assert_eq!(
            m.read_tools().collect::<Vec<_>>(),
            ["list"],
            "write is the default"
        );
        let err = with("\n[tools.list]\neffect = \"harmless\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown variant `harmless`"), "{err}");
        let err = with("\n[tools.List]\neffect = \"read\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("a tool name is [a-z0-9_-]+"), "{err}");
        let channel = GOOD.replace("kind = \"skill\"", "kind = \"channel\"");
        let err = Manifest::parse(
            &format!("{channel}\n[tools.list]\neffect = \"read\"\n"),
            "x",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("only a skill has"), "{err}");
    }

    #[test]
    fn a_plugin_may_ask_for_more_memory_but_never_less() {
        let m = Manifest::parse(&format!("{GOOD}\n[limits]\nmemory_mb = 160\n"), "p").unwrap();
        assert_eq!(m.limits.memory_bytes(64 << 20), 160 << 20);
        assert_eq!(
            m.limits.memory_bytes(256 << 20),
            256 << 20,
            "operator's larger default"
        );
        let plain = Manifest::parse(GOOD, "p").unwrap();
        assert_eq!(plain.limits.memory_bytes(64 << 20), 64 << 20);
        for bad in ["0", "4097"] {
            let err = Manifest::parse(&format!("{GOOD}\n[limits]\nmemory_mb = {bad}\n"), "p")
                .unwrap_err();
            assert!(err.to_string().contains("between 1 and 4096"), "{err}");
        }
        let err = Manifest::parse(&format!("{GOOD}\n[limits]\nmemory = 1\n"), "p").unwrap_err();
        assert!(err.to_string().contains("unknown field `memory`"), "{err}");
    }

    #[test]
    fn an_empty_secret_is_refused_not_taken_as_unset() {
        let m = Manifest::parse(GOOD, "p").unwrap();
        let err = m
            .check_config(&serde_json::json!({"token": ""}))
            .unwrap_err();
        assert!(err.0.contains("`token` is a secret and is empty"), "{err}");
        m.check_config(&serde_json::json!({"token": "t0k3n-of-8+"}))
            .unwrap();
        let short = m
            .check_config(&serde_json::json!({"token": "1234567"}))
            .unwrap_err();
        assert!(
            short
                .0
                .contains("`token` is a secret of 7 bytes; secrets must be at least 8 bytes"),
            "{short}"
        );
    }

    #[test]
    fn bindings_webhook_tokens_and_captures_are_checked() {
        let bound = format!(
            "{GOOD}bind = [{{ host = \"api.example.com\", path = \"/v1/\", header = \"Authorization\", prefix = \"Bearer \" }}]\n\n[captures.session]\nbind = [{{ host = \"api.example.com\", query = \"s\" }}]\n\n[[webhook.verify]]\nsecret = \"token\"\njson = [\"/token\"]\n"
        );
        let m = Manifest::parse(&bound, "p").unwrap();
        let b = m.bindings();
        assert_eq!(b["token"][0].header.as_deref(), Some("Authorization"));
        assert_eq!(b["session"][0].query.as_deref(), Some("s"));
        assert_eq!(m.webhook.verify[0].json, vec!["/token".to_string()]);
        for (bind, why) in [
            ("{ host = \"a.com\" }", "exactly one place"),
            (
                "{ host = \"a.com\", header = \"A\", json = \"/x\" }",
                "exactly one place",
            ),
            ("{ host = \"a.com\", json = \"x\" }", "not a JSON Pointer"),
            (
                "{ host = \"a.com\", form = \"x\", prefix = \"B \" }",
                "`prefix` goes with `header`",
            ),
            ("{ host = \"*\", header = \"A\" }", "not allowed"),
            (
                "{ host = \"a.com\", header = \"A: b\" }",
                "not a header name",
            ),
            (
                "{ host = \"a.com\", path = \"v1\", header = \"A\" }",
                "must start with `/`",
            ),
        ] {
            let err = Manifest::parse(&format!("{GOOD}bind = [{bind}]\n"), "p").unwrap_err();
            assert!(err.to_string().contains(why), "{bind}: {err}");
        }
        let plain = GOOD.replace("secret = true", "secret = false");
        let err = Manifest::parse(
            &format!("{plain}bind = [{{ host = \"a.com\", query = \"k\" }}]\n"),
            "p",
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("only a `secret = true` key"),
            "{err}"
        );
        let err = Manifest::parse(
            &format!("{plain}\n[[webhook.verify]]\nsecret = \"token\"\njson = [\"/t\"]\n"),
            "p",
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("not a `secret = true` config key"),
            "{err}"
        );
    }

    #[test]
    fn refuses_unknown_fields_and_kinds() {
        let err = Manifest::parse(&GOOD.replace("kv = true", "kvv = true"), "p").unwrap_err();
        assert!(err.to_string().contains("unknown field `kvv`"), "{err}");
        let err =
            Manifest::parse(&GOOD.replace("kind = \"skill\"", "kind = \"bot\""), "p").unwrap_err();
        assert!(err.to_string().contains("unknown variant `bot`"), "{err}");
    }

    #[test]
    fn refuses_bad_names_components_and_hosts() {
        for (from, to, why) in [
            ("name = \"skill-x\"", "name = \"Skill X\"", "plugin name"),
            (
                "wit = \"0.1.0\"",
                "wit = \"0.1.0\"\ncomponent = \"../x.wasm\"",
                "component",
            ),
            ("\"localhost\"", "\"*\"", "not allowed"),
            ("\"localhost\"", "\"https://a.b\"", "not a URL"),
            ("\"localhost\"", "\"a.*.com\"", "leading"),
        ] {
            let err = Manifest::parse(&GOOD.replace(from, to), "p").unwrap_err();
            assert!(err.to_string().contains(why), "{to}: {err}");
        }
    }

    #[test]
    fn config_is_checked_against_the_schema() {
        let m = Manifest::parse(GOOD, "p").unwrap();
        assert!(
            m.check_config(&serde_json::json!({"token": "t0k3n-of-8+"}))
                .is_ok()
        );
        let missing = m.check_config(&serde_json::json!({})).unwrap_err();
        assert!(missing.0.contains("`token` is required"));
        let unknown = m
            .check_config(&serde_json::json!({"token": "t", "x": 1}))
            .unwrap_err();
        assert!(unknown.0.contains("unknown config key `x`"));
        let typed = m
            .check_config(&serde_json::json!({"token": 5}))
            .unwrap_err();
        assert!(typed.0.contains("must be a string"));
        let shown = m.redact_config(&serde_json::json!({"token": "secret"}));
        assert_eq!(shown["token"], "[redacted]");
    }
}
