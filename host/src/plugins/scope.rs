//! Whose state a plugin call works with, and what it may reach over HTTP.
//!
//! A plugin's kv namespace, its `/data` folder and its HTTP grant belong to
//! one (scope, plugin) pair: a workspace (skills, observers) or a channel
//! (channel plugins). Two workspaces using the same skill share nothing.

use std::fmt;
use std::net::IpAddr;

use super::manifest::Manifest;
use crate::config::Config;
use crate::hosts::{HostPattern, canonical};

/// The workspace that state from before per-workspace state (kept by plugin
/// name only) is assigned to.
pub const LEGACY_WORKSPACE: &str = "default";

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    Workspace(String),
    Channel(String),
}

impl Default for Scope {
    fn default() -> Self {
        Self::Workspace(LEGACY_WORKSPACE.to_string())
    }
}

impl Scope {
    pub fn workspace(name: &str) -> Self {
        Self::Workspace(name.to_string())
    }

    pub fn channel(name: &str) -> Self {
        Self::Channel(name.to_string())
    }

    /// The owner column of this scope's kv rows: `workspace:NAME`, `channel:NAME`.
    pub fn key(&self) -> String {
        self.to_string()
    }

    /// The folder under the plugin data root holding this scope's plugins'
    /// `/data` folders: `workspace.NAME` or `channel.NAME` (a `.` is in no
    /// plugin name, so these never collide with the old per-plugin folders).
    pub fn dir_name(&self) -> String {
        match self {
            Self::Workspace(w) => format!("workspace.{w}"),
            Self::Channel(c) => format!("channel.{c}"),
        }
    }

    /// The workspace audit records of this scope are filed under.
    pub fn workspace_name(&self) -> Option<&str> {
        match self {
            Self::Workspace(w) => Some(w),
            Self::Channel(_) => None,
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Workspace(w) => write!(f, "workspace:{w}"),
            Self::Channel(c) => write!(f, "channel:{c}"),
        }
    }
}

/// What one plugin may reach over HTTP in one workspace: the manifest's
/// hosts ∩ the workspace's grant (`workspaces.NAME.plugin_http.PLUGIN`,
/// default: the manifest's hosts).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HttpReach {
    /// `[capabilities] http` of the manifest.
    pub manifest: Vec<String>,
    /// The workspace's grant; `None`: no entry, the manifest's hosts.
    pub granted: Option<Vec<String>>,
    /// Addresses the operator's configuration names literally (URLs in the
    /// plugin's `plugins.config` entry), which may be private or loopback.
    pub operator_addresses: Vec<IpAddr>,
    /// Destinations the operator adds for a channel's plugin beyond its
    /// manifest (`channels.NAME.http`), e.g. a local proxy.
    pub added: Vec<String>,
}

impl HttpReach {
    /// Only the manifest's hosts (no workspace grant, no operator addresses).
    pub fn manifest_only(manifest: &Manifest) -> Self {
        Self {
            manifest: manifest.capabilities.http.clone(),
            granted: None,
            operator_addresses: Vec::new(),
            added: Vec::new(),
        }
    }

    /// A channel plugin's reach: its manifest's hosts and the operator's
    /// `channels.NAME.http` additions.
    pub fn for_channel(manifest: &Manifest, added: &[String]) -> Self {
        Self {
            added: added.to_vec(),
            ..Self::manifest_only(manifest)
        }
    }

    fn patterns(list: &[String]) -> Vec<HostPattern> {
        list.iter()
            .filter_map(|p| HostPattern::parse(p).ok())
            .collect()
    }

    /// Whether a URL with `host` (lower-case, IPv6 bracketed) and `port`
    /// passes both the manifest and the grant.
    pub fn allows(&self, host: &str, port: u16, default_port: u16) -> bool {
        let hit = |list: &[HostPattern]| list.iter().any(|p| p.matches(host, port, default_port));
        (hit(&Self::patterns(&self.manifest))
            && self
                .granted
                .as_ref()
                .is_none_or(|g| hit(&Self::patterns(g))))
            || hit(&Self::patterns(&self.added))
    }

    /// Whether a private, loopback or otherwise non-public `ip` is named
    /// literally: by the manifest (no grant), by the workspace's grant, or by
    /// the operator's plugin configuration.
    pub fn names_address(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        let named = |list: &[String]| {
            Self::patterns(list)
                .iter()
                .any(|p| p.literal_ip().map(canonical) == Some(ip))
        };
        // With a grant, the grant must name it (a manifest's literal outside
        // the grant is not reached at all).
        let by_config = match &self.granted {
            None => named(&self.manifest),
            Some(g) => named(g),
        };
        by_config
            || named(&self.added)
            || self.operator_addresses.iter().any(|a| canonical(*a) == ip)
    }

    /// Whether the operator named this destination for the plugin: a
    /// `channels.NAME.http` addition, or an address literally in its
    /// configuration. Such a destination may take a secret in its bound
    /// place (a test fake, a proxy) whatever host the binding names.
    pub fn operator_names(&self, host: &str, port: u16, default_port: u16) -> bool {
        Self::patterns(&self.added)
            .iter()
            .any(|p| p.matches(host, port, default_port))
            || host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<IpAddr>()
                .is_ok_and(|ip| {
                    self.operator_addresses
                        .iter()
                        .any(|a| canonical(*a) == canonical(ip))
                })
    }

    /// The effective destinations, for `pincer policy audit`: the manifest's
    /// patterns inside the grant and the grant's patterns inside the manifest.
    pub fn effective(&self) -> Vec<String> {
        let mut out = self.effective_of_manifest();
        for added in &self.added {
            if !out.contains(added) {
                out.push(added.clone());
            }
        }
        out
    }

    fn effective_of_manifest(&self) -> Vec<String> {
        let Some(granted) = &self.granted else {
            return self.manifest.clone();
        };
        let (m, g) = (Self::patterns(&self.manifest), Self::patterns(granted));
        let mut out: Vec<String> = Vec::new();
        for (text, p) in self.manifest.iter().zip(&m) {
            if g.iter().any(|q| q.covers(p)) {
                out.push(text.clone());
            }
        }
        for (text, p) in granted.iter().zip(&g) {
            if m.iter().any(|q| q.covers(p)) && !out.contains(text) {
                out.push(text.clone());
            }
        }
        out
    }
}

/// The HTTP reach of `plugin` (with manifest `manifest`) in `workspace`:
/// the one computation both the plugin host and `pincer policy audit` use.
pub fn plugin_http_reach(
    config: &Config,
    workspace: &str,
    plugin: &str,
    manifest: &Manifest,
) -> HttpReach {
    let granted = config
        .workspaces
        .get(workspace)
        .and_then(|ws| ws.plugin_http.get(plugin))
        .cloned();
    let mut operator_addresses = Vec::new();
    if let Some(value) = config.plugins.config.get(plugin) {
        collect_url_addresses(value, &mut operator_addresses);
    }
    HttpReach {
        manifest: manifest.capabilities.http.clone(),
        granted,
        operator_addresses,
        added: Vec::new(),
    }
}

/// IP-literal hosts of every URL among the string values of `value`.
fn collect_url_addresses(value: &serde_json::Value, out: &mut Vec<IpAddr>) {
    match value {
        serde_json::Value::String(s) => {
            if let Ok(url) = url::Url::parse(s) {
                match url.host() {
                    Some(url::Host::Ipv4(ip)) => out.push(IpAddr::V4(ip)),
                    Some(url::Host::Ipv6(ip)) => out.push(IpAddr::V6(ip)),
                    _ => {}
                }
            }
        }
        serde_json::Value::Array(items) => {
            items.iter().for_each(|v| collect_url_addresses(v, out));
        }
        serde_json::Value::Object(map) => {
            map.values().for_each(|v| collect_url_addresses(v, out));
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reach(manifest: &[&str], granted: Option<&[&str]>) -> HttpReach {
        HttpReach {
            manifest: manifest.iter().map(|s| s.to_string()).collect(),
            granted: granted.map(|g| g.iter().map(|s| s.to_string()).collect()),
            operator_addresses: Vec::new(),
            added: Vec::new(),
        }
    }

    #[test]
    fn reach_is_the_manifest_within_the_grant() {
        let r = reach(
            &["api.example.com", "*.slack.com"],
            Some(&["hooks.slack.com"]),
        );
        assert!(r.allows("hooks.slack.com", 443, 443));
        assert!(!r.allows("api.example.com", 443, 443));
        assert!(!r.allows("other.slack.com", 443, 443));
        assert_eq!(r.effective(), vec!["hooks.slack.com".to_string()]);
        let r = reach(&["api.example.com"], None);
        assert!(r.allows("api.example.com", 443, 443));
        assert_eq!(r.effective(), vec!["api.example.com".to_string()]);
        // A grant cannot widen the manifest.
        let r = reach(&["api.example.com"], Some(&["evil.example.com"]));
        assert!(!r.allows("evil.example.com", 443, 443));
        assert!(r.effective().is_empty());
    }

    #[test]
    fn only_literally_named_private_addresses_are_allowed() {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        assert!(!reach(&["localhost:*"], None).names_address(lo));
        assert!(reach(&["localhost:*", "127.0.0.1:*"], None).names_address(lo));
        let mapped: IpAddr = "::ffff:127.0.0.1".parse().unwrap();
        assert!(reach(&["127.0.0.1:*"], None).names_address(mapped));
        // The operator's grant names it.
        assert!(reach(&["localhost:*"], Some(&["localhost:*", "127.0.0.1:*"])).names_address(lo));
        // The manifest names it but the grant leaves it out.
        assert!(!reach(&["localhost:*", "127.0.0.1:*"], Some(&["localhost:*"])).names_address(lo));
    }
}
