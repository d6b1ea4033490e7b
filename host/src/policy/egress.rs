//! Where a workspace's container may connect through the egress proxy: the
//! `egress:` of its policy groups joined with `workspaces.NAME.egress`,
//! computed once per configuration load as part of the
//! [`super::WorkspaceReach`]. The proxy enforces it and `pincer policy
//! audit` prints it: one computation (invariant 7).
//!
//! Rules:
//! - a host pattern (`pypi.org`, `*.github.com:443`, `10.0.0.5:*`) allows
//!   the host and port it names; a bare host allows ports 80 and 443;
//! - `any_public` (the `egress_any_public` group) allows every host on
//!   ports 80 and 443 whose addresses are public;
//! - a loopback, private, link-local, … address is reached only where an
//!   entry names that literal address, whatever name led to it;
//! - `egress: none` (the `egress_none` and `no_internet_access` groups)
//!   closes the way out, and a workspace list or tunnel beside it is a
//!   conflict: nothing leaves, and `config check` and `workspace up` say
//!   why;
//! - `http://SERVICE.tunnel/…` is the tunnel serving SERVICE, for a
//!   workspace whose `tunnels:` lists it; a `.tunnel` name is never
//!   resolved or matched by any other rule.

use std::net::IpAddr;

use serde::Serialize;

use super::group::NetworkMode;
use super::merge::GroupsEgress;
use crate::hosts::HostPattern;

/// One allowed destination and where it was written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EgressEntry {
    /// The pattern as written.
    pub host: String,
    /// `workspaces.NAME.egress` and/or the policy groups that list it.
    pub from: Vec<String>,
}

/// The rule that lets a connection through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EgressRule<'a> {
    Listed(&'a EgressEntry),
    AnyPublic,
    /// `SERVICE.tunnel`: handed to the tunnel plugin serving it.
    Tunnel(&'a str),
}

/// The host suffix that names a tunnel's service.
pub const TUNNEL_SUFFIX: &str = ".tunnel";

impl std::fmt::Display for EgressRule<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EgressRule::Listed(entry) => {
                write!(f, "`{}` (from {})", entry.host, entry.from.join(", "))
            }
            EgressRule::AnyPublic => f.write_str("any public address (egress: any_public)"),
            EgressRule::Tunnel(service) => write!(f, "tunnel `{service}`"),
        }
    }
}

/// Everything one workspace's container may reach through the proxy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EgressReach {
    pub entries: Vec<EgressEntry>,
    /// The groups that allow any public address.
    pub any_public: Vec<String>,
    /// The groups that close the way out (`egress: none`).
    pub closed: Vec<String>,
    /// The tunnel services it may reach (`workspaces.NAME.tunnels`).
    pub tunnels: Vec<String>,
    /// An unlisted host is asked about instead of refused
    /// (`workspaces.NAME.egress_ask`), unless the way out is closed.
    pub ask: bool,
    /// `network: bridge_unfiltered`: the container bypasses the proxy.
    pub unfiltered: bool,
    /// Why nothing may leave although something is listed, if so.
    pub refused: Option<String>,
    #[serde(skip)]
    patterns: Vec<HostPattern>,
}

/// The ports a pattern without one allows.
const DEFAULT_PORTS: [u16; 2] = [80, 443];

impl EgressReach {
    /// Nothing may leave (a workspace whose policy cannot be applied).
    pub fn closed(why: String) -> Self {
        EgressReach {
            entries: Vec::new(),
            any_public: Vec::new(),
            closed: Vec::new(),
            tunnels: Vec::new(),
            ask: false,
            unfiltered: false,
            refused: Some(why),
            patterns: Vec::new(),
        }
    }

    /// `groups` (from the effective policy) joined with `listed`
    /// (`workspaces.NAME.egress`) and `tunnels` (`workspaces.NAME.tunnels`),
    /// under `network`.
    pub fn compute(
        workspace: &str,
        groups: &GroupsEgress,
        listed: &[String],
        tunnels: &[String],
        network: NetworkMode,
    ) -> Self {
        let own = format!("workspaces.{workspace}.egress");
        let mut entries: Vec<EgressEntry> = Vec::new();
        let mut add = |host: &str, from: &str| match entries.iter_mut().find(|e| e.host == host) {
            Some(entry) => {
                if !entry.from.iter().any(|f| f == from) {
                    entry.from.push(from.to_owned());
                }
            }
            None => entries.push(EgressEntry {
                host: host.to_owned(),
                from: vec![from.to_owned()],
            }),
        };
        for host in listed {
            add(host, &own);
        }
        for (host, from) in &groups.hosts {
            for group in from {
                add(host, &format!("policy group {group}"));
            }
        }
        // Validated at load; one that does not parse allows nothing.
        let (entries, patterns): (Vec<_>, Vec<_>) = entries
            .into_iter()
            .filter_map(|e| HostPattern::parse(&e.host).ok().map(|p| (e, p)))
            .unzip();
        let refused = match groups.none.first() {
            Some(group) if !listed.is_empty() => Some(format!(
                "policy group {group} says `egress: none`, yet {own} lists {}: remove one of them",
                listed.join(", ")
            )),
            Some(group) if !tunnels.is_empty() => Some(format!(
                "policy group {group} says `egress: none`, yet workspaces.{workspace}.tunnels lists {}: remove one of them",
                tunnels.join(", ")
            )),
            _ => None,
        };
        EgressReach {
            entries,
            any_public: groups.any_public.clone(),
            closed: groups.none.clone(),
            tunnels: tunnels.to_vec(),
            ask: false,
            unfiltered: network == NetworkMode::BridgeUnfiltered,
            refused,
            patterns,
        }
    }

    /// With `ask`, an unlisted host is asked about (never where the way
    /// out is closed or refused, and never a `.tunnel` name).
    pub fn asking(mut self, ask: bool) -> Self {
        self.ask = ask && self.closed.is_empty() && self.refused.is_none();
        self
    }

    /// Whether `host:port`, which no rule allows, may be asked about.
    pub fn may_ask(&self, host: &str) -> bool {
        self.ask && !host.ends_with(TUNNEL_SUFFIX)
    }

    /// Whether anything may leave through the proxy.
    pub fn is_open(&self) -> bool {
        self.refused.is_none()
            && (!self.entries.is_empty()
                || !self.any_public.is_empty()
                || !self.tunnels.is_empty()
                || self.ask)
    }

    /// The rule that allows `host` (as [`crate::hosts::normalized_host`]
    /// writes it) on `port`, if one does. Addresses are checked after
    /// resolution ([`Self::names_address`]).
    pub fn rule(&self, host: &str, port: u16) -> Option<EgressRule<'_>> {
        if self.refused.is_some() {
            return None;
        }
        if let Some(service) = host.strip_suffix(TUNNEL_SUFFIX) {
            return self
                .tunnels
                .iter()
                .find(|t| *t == service)
                .map(|t| EgressRule::Tunnel(t.as_str()));
        }
        let scheme_port = crate::hosts::web_scheme_port(port);
        if let Some(i) = self
            .patterns
            .iter()
            .position(|p| p.matches(host, port, scheme_port))
        {
            return Some(EgressRule::Listed(&self.entries[i]));
        }
        (!self.any_public.is_empty() && DEFAULT_PORTS.contains(&port))
            .then_some(EgressRule::AnyPublic)
    }

    /// Why `workspace` may not reach `host:port` (when [`Self::rule`] finds
    /// none), naming the key to change.
    pub fn why_refused(&self, workspace: &str, host: &str, port: u16) -> String {
        if let Some(why) = &self.refused {
            return format!("workspace `{workspace}` has no way out: {why}");
        }
        if let Some(group) = self.closed.first() {
            return format!(
                "workspace `{workspace}` has no way out (egress: none, from policy group {group})"
            );
        }
        if let Some(service) = host.strip_suffix(TUNNEL_SUFFIX) {
            return format!(
                "workspace `{workspace}` may not use tunnel `{service}`: add `{service}` to workspaces.{workspace}.tunnels"
            );
        }
        let entry = if DEFAULT_PORTS.contains(&port) {
            host.to_owned()
        } else {
            format!("{host}:{port}")
        };
        format!(
            "`{host}:{port}` is not in the egress allowlist of workspace `{workspace}`: add `{entry}` to workspaces.{workspace}.egress"
        )
    }

    /// Whether an entry names the non-public address `ip` literally, for
    /// `port`: only then may the proxy connect to it.
    pub fn names_address(&self, ip: IpAddr, port: u16) -> bool {
        let scheme_port = crate::hosts::web_scheme_port(port);
        self.patterns
            .iter()
            .any(|p| p.names_address(ip, port, scheme_port))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reach(listed: &[&str], groups: GroupsEgress) -> EgressReach {
        let listed: Vec<String> = listed.iter().map(|s| (*s).to_owned()).collect();
        EgressReach::compute("w", &groups, &listed, &[], NetworkMode::None)
    }

    #[test]
    fn entries_allow_their_hosts_and_default_ports_only() {
        let r = reach(
            &["pypi.org", "*.github.com:443", "127.0.0.1:8080"],
            GroupsEgress::default(),
        );
        assert!(r.is_open());
        for (host, port, allowed) in [
            ("pypi.org", 443, true),
            ("pypi.org", 80, true),
            ("pypi.org", 22, false),
            ("evilpypi.org", 443, false),
            ("api.github.com", 443, true),
            ("api.github.com", 80, false),
            ("github.com", 443, false),
            ("127.0.0.1", 8080, true),
            ("127.0.0.1", 8081, false),
        ] {
            assert_eq!(r.rule(host, port).is_some(), allowed, "{host}:{port}");
        }
        let Some(EgressRule::Listed(entry)) = r.rule("pypi.org", 443) else {
            panic!("listed")
        };
        assert_eq!(entry.from, ["workspaces.w.egress"]);
        assert!(r.names_address("127.0.0.1".parse().unwrap(), 8080));
        assert!(r.names_address("::ffff:127.0.0.1".parse().unwrap(), 8080));
        assert!(!r.names_address("127.0.0.1".parse().unwrap(), 9));
        assert!(!r.names_address("10.0.0.1".parse().unwrap(), 443));
    }

    #[test]
    fn nothing_is_open_by_default_and_none_beside_a_list_is_a_conflict() {
        let r = reach(&[], GroupsEgress::default());
        assert!(!r.is_open());
        assert_eq!(r.rule("pypi.org", 443), None);
        let closed = GroupsEgress {
            none: vec!["egress_none".into()],
            ..GroupsEgress::default()
        };
        let r = reach(&["pypi.org"], closed);
        assert!(!r.is_open());
        assert_eq!(r.rule("pypi.org", 443), None);
        assert!(
            r.refused
                .as_deref()
                .is_some_and(|why| why.contains("egress_none") && why.contains("pypi.org")),
            "{r:?}"
        );
    }

    #[test]
    fn any_public_allows_default_ports_and_groups_are_named() {
        let groups = GroupsEgress {
            any_public: vec!["egress_any_public".into()],
            hosts: [("crates.io".to_owned(), vec!["rust".to_owned()])].into(),
            ..GroupsEgress::default()
        };
        let r = reach(&["crates.io"], groups);
        assert_eq!(r.rule("example.org", 443), Some(EgressRule::AnyPublic));
        assert_eq!(r.rule("example.org", 8080), None);
        let Some(EgressRule::Listed(entry)) = r.rule("crates.io", 443) else {
            panic!("listed")
        };
        assert_eq!(entry.from, ["workspaces.w.egress", "policy group rust"]);
    }

    #[test]
    fn a_tunnel_is_reached_by_its_service_name_only_where_listed() {
        let tunnels = ["grafana".to_owned()];
        let public = GroupsEgress {
            any_public: vec!["egress_any_public".into()],
            ..GroupsEgress::default()
        };
        let r = EgressReach::compute("w", &public, &[], &tunnels, NetworkMode::None);
        assert!(r.is_open());
        assert_eq!(
            r.rule("grafana.tunnel", 80),
            Some(EgressRule::Tunnel("grafana"))
        );
        // Not another service, and never as a public name.
        assert_eq!(r.rule("wiki.tunnel", 80), None);
        assert!(
            r.why_refused("w", "wiki.tunnel", 80)
                .contains("add `wiki` to workspaces.w.tunnels")
        );
        let only = EgressReach::compute(
            "w",
            &GroupsEgress::default(),
            &[],
            &tunnels,
            NetworkMode::None,
        );
        assert!(only.is_open());
        let closed = GroupsEgress {
            none: vec!["no_internet_access".into()],
            ..GroupsEgress::default()
        };
        let r = EgressReach::compute("w", &closed, &[], &tunnels, NetworkMode::None);
        assert_eq!(r.rule("grafana.tunnel", 80), None);
        assert!(
            r.refused
                .as_deref()
                .is_some_and(|why| why.contains("workspaces.w.tunnels"))
        );
    }
}
