//! Where outbound connections may go, one set of rules for every path out
//! of the host (a plugin's HTTP, a channel's WebSocket, a container's
//! egress proxy): host patterns as written in a manifest or configuration,
//! and which addresses count as public. Anything not public (loopback,
//! private, link-local, …) is reached only where the operator names the
//! literal address.

use std::net::{IpAddr, Ipv4Addr};

sentence_error! {
    /// Why a host pattern is not valid (the caller says where it was
    /// written).
    pub struct BadPattern;
}

/// One allowed outbound destination: `host` (the scheme's default port
/// only), `host:PORT`, or `host:*` (any port). `host` is a name, `*.name`
/// (any subdomain, not the apex), an IPv4 address or a bracketed IPv6 one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPattern {
    host: HostMatch,
    port: PortMatch,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum HostMatch {
    Exact(String),
    /// `*.example.com`: any subdomain, not the apex.
    Suffix(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PortMatch {
    /// No port given: the URL scheme's default port (80 for http, 443 for https).
    Default,
    Exact(u16),
    /// `:*`
    Any,
}

impl HostPattern {
    /// # Errors
    /// What is wrong with it; the caller says where it was written.
    pub fn parse(pattern: &str) -> Result<Self, BadPattern> {
        let bad = |why: &str| BadPattern(why.to_owned());
        if pattern.contains("://") || pattern.contains('/') {
            return Err(bad("give a host, host:port or host:*, not a URL"));
        }
        let (host, port) = split_host_port(pattern).ok_or_else(|| bad("bad port"))?;
        let host = host.to_ascii_lowercase();
        if host.is_empty() || host == "*" {
            return Err(bad("a host is required; `*` (everything) is not allowed"));
        }
        if host.starts_with('[') {
            let inner = host.trim_start_matches('[').trim_end_matches(']');
            if inner.parse::<std::net::Ipv6Addr>().is_err() {
                return Err(bad("not an IPv6 address in brackets"));
            }
        }
        let host = match host.strip_prefix("*.") {
            Some(suffix) if !suffix.is_empty() && !suffix.contains('*') => {
                HostMatch::Suffix(suffix.to_string())
            }
            Some(_) => return Err(bad("wildcards are only allowed as a leading `*.`")),
            None if host.contains('*') => {
                return Err(bad("wildcards are only allowed as a leading `*.`"));
            }
            None => HostMatch::Exact(host),
        };
        Ok(Self { host, port })
    }

    /// Whether `host` (lower-case, IPv6 in brackets) and `port` match, where
    /// `default_port` is the port of the URL's scheme.
    pub fn matches(&self, host: &str, port: u16, default_port: u16) -> bool {
        let port_ok = match self.port {
            PortMatch::Default => port == default_port,
            PortMatch::Exact(p) => p == port,
            PortMatch::Any => true,
        };
        port_ok
            && match &self.host {
                HostMatch::Exact(h) => h == host,
                HostMatch::Suffix(s) => host
                    .strip_suffix(s.as_str())
                    .is_some_and(|rest| rest.ends_with('.') && rest.len() > 1),
            }
    }

    /// The IP address this pattern names literally (`127.0.0.1`, `[::1]`).
    pub fn literal_ip(&self) -> Option<std::net::IpAddr> {
        match &self.host {
            HostMatch::Exact(h) => h.trim_start_matches('[').trim_end_matches(']').parse().ok(),
            HostMatch::Suffix(_) => None,
        }
    }

    /// Whether this pattern names `ip` literally, on `port` (where
    /// `default_port` is the port of the scheme): only such a grant reaches
    /// a non-public address.
    pub fn names_address(&self, ip: IpAddr, port: u16, default_port: u16) -> bool {
        let ip = canonical(ip);
        self.literal_ip().map(canonical) == Some(ip) && {
            let written = match ip {
                IpAddr::V4(v4) => v4.to_string(),
                IpAddr::V6(v6) => format!("[{v6}]"),
            };
            self.matches(&written, port, default_port)
        }
    }

    /// Whether every destination `other` allows, this one allows too.
    pub fn covers(&self, other: &HostPattern) -> bool {
        let port_ok = match (self.port, other.port) {
            (PortMatch::Any, _) => true,
            (a, b) => a == b,
        };
        port_ok
            && match (&self.host, &other.host) {
                (HostMatch::Exact(a), HostMatch::Exact(b)) => a == b,
                (HostMatch::Suffix(a), HostMatch::Exact(b)) => b
                    .strip_suffix(a.as_str())
                    .is_some_and(|rest| rest.ends_with('.') && rest.len() > 1),
                (HostMatch::Suffix(a), HostMatch::Suffix(b)) => {
                    a == b
                        || b.strip_suffix(a.as_str())
                            .is_some_and(|rest| rest.ends_with('.') && rest.len() > 1)
                }
                (HostMatch::Exact(_), HostMatch::Suffix(_)) => false,
            }
    }
}

/// Splits `host[:port]`, keeping IPv6 brackets on the host.
fn split_host_port(s: &str) -> Option<(&str, PortMatch)> {
    let port = |p: &str| match p {
        "*" => Some(PortMatch::Any),
        p => p.parse().ok().map(PortMatch::Exact),
    };
    if s.starts_with('[') {
        let end = s.find(']')?;
        let (host, rest) = s.split_at(end + 1);
        return match rest.strip_prefix(':') {
            Some(p) => Some((host, port(p)?)),
            None if rest.is_empty() => Some((host, PortMatch::Default)),
            None => None,
        };
    }
    match s.rsplit_once(':') {
        Some((host, p)) => Some((host, port(p)?)),
        None => Some((s, PortMatch::Default)),
    }
}

/// Why `ip` is not a public address, if it is not.
pub fn address_class(ip: IpAddr) -> Option<&'static str> {
    match canonical(ip) {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            if v4.is_loopback() {
                Some("loopback")
            } else if v4.is_unspecified() || a == 0 {
                Some("unspecified")
            } else if v4.is_link_local() {
                Some("link-local")
            } else if v4.is_private() || (a == 100 && (64..128).contains(&b)) {
                Some("private")
            } else if v4.is_multicast() || v4.is_broadcast() || a >= 240 {
                Some("multicast or reserved")
            } else {
                None
            }
        }
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            if v6.is_loopback() {
                Some("loopback")
            } else if v6.is_unspecified() {
                Some("unspecified")
            } else if first & 0xffc0 == 0xfe80 {
                Some("link-local")
            } else if first & 0xfe00 == 0xfc00 || first & 0xffc0 == 0xfec0 {
                Some("unique-local")
            } else if v6.is_multicast() {
                Some("multicast")
            } else if let Some(v4) = v6.to_ipv4().filter(|_| first == 0) {
                // IPv4-compatible (::a.b.c.d): judged as the IPv4 address.
                address_class(IpAddr::V4(v4))
            } else {
                None
            }
        }
    }
}

/// A v4-mapped IPv6 address as the IPv4 address it is.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    }
}

/// A destination host as a client wrote it (a URL's or a CONNECT line's),
/// in the one form rules match: a name in lower case without a trailing
/// dot; an IPv4 address in dotted decimal whatever form it was written in
/// (`2130706433`, `0x7f.1`, `127.1` and `0177.0.0.1` are all `127.0.0.1`);
/// an IPv6 address in brackets, or as the IPv4 address it maps.
///
/// # Errors
/// Anything that is neither a DNS name nor an address.
pub fn normalized_host(written: &str) -> Result<String, BadPattern> {
    let bad = |why: &str| BadPattern(format!("`{written}` {why}"));
    if let Some(inner) = written.strip_prefix('[') {
        let inner = inner
            .strip_suffix(']')
            .ok_or_else(|| bad("opens a bracket it does not close"))?;
        let v6: std::net::Ipv6Addr = inner
            .parse()
            .map_err(|_| bad("is not an IPv6 address in brackets"))?;
        return Ok(match canonical(IpAddr::V6(v6)) {
            IpAddr::V4(v4) => v4.to_string(),
            IpAddr::V6(v6) => format!("[{v6}]"),
        });
    }
    let name = written
        .strip_suffix('.')
        .unwrap_or(written)
        .to_ascii_lowercase();
    let last = name.rsplit('.').next().unwrap_or_default();
    if ipv4_part(last).is_some() || last.chars().all(|c| c.is_ascii_digit()) {
        return loose_ipv4(&name)
            .map(|v4| v4.to_string())
            .ok_or_else(|| bad("ends in a number but is not an IPv4 address"));
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && l.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    };
    if name.is_empty() || name.len() > 253 || !name.split('.').all(label_ok) {
        return Err(bad("is not a host name"));
    }
    Ok(name)
}

/// One part of an IPv4 address as `inet_aton` reads it: `0x…` hex, `0…`
/// octal, else decimal.
fn ipv4_part(part: &str) -> Option<u64> {
    let (digits, radix) =
        if let Some(hex) = part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
            (hex, 16)
        } else if part.len() > 1 && part.starts_with('0') {
            (&part[1..], 8)
        } else {
            (part, 10)
        };
    if digits.is_empty() {
        // `0x` alone is zero, as inet_aton reads it
        return (radix == 16).then_some(0);
    }
    if digits.len() > 12 {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

/// An IPv4 address in any form `inet_aton` accepts: `a.b.c.d`, `a.b.c`
/// (c: 16 bits), `a.b` (b: 24 bits) or `a` (32 bits).
fn loose_ipv4(text: &str) -> Option<Ipv4Addr> {
    let parts: Vec<u64> = text.split('.').map(ipv4_part).collect::<Option<_>>()?;
    let (last, head) = parts.split_last()?;
    if head.len() > 3 || head.iter().any(|p| *p > 255) {
        return None;
    }
    let room = 8 * (4 - head.len() as u32);
    if *last >= 1u64 << room {
        return None;
    }
    let value = head
        .iter()
        .fold(0u64, |acc, p| (acc << 8) | p)
        .checked_shl(room)?
        | last;
    u32::try_from(value).ok().map(Ipv4Addr::from)
}

/// The scheme port a connection on `port` stands for when a pattern has no
/// port of its own: 80 and 443 (http and https), else none, so a bare
/// host matches only those two (the egress proxy's rule).
pub fn web_scheme_port(port: u16) -> u16 {
    if matches!(port, 80 | 443) { port } else { 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_patterns_match_exactly() {
        let p = HostPattern::parse("*.slack.com").unwrap();
        assert!(p.matches("hooks.slack.com", 443, 443));
        assert!(!p.matches("slack.com", 443, 443));
        assert!(!p.matches("evilslack.com", 443, 443));
        let p = HostPattern::parse("localhost:8080").unwrap();
        assert!(p.matches("localhost", 8080, 80));
        assert!(!p.matches("localhost", 8081, 80));
        // A bare host allows only the scheme's default port.
        let p = HostPattern::parse("api.example.com").unwrap();
        assert!(p.matches("api.example.com", 443, 443));
        assert!(!p.matches("api.example.com", 8443, 443));
        let p = HostPattern::parse("[::1]:*").unwrap();
        assert!(p.matches("[::1]", 1, 80));
        assert_eq!(p.literal_ip(), Some("::1".parse().unwrap()));
        assert!(HostPattern::parse("[nonsense]").is_err());
        let any = HostPattern::parse("*.example.com:*").unwrap();
        assert!(any.covers(&HostPattern::parse("a.example.com:8080").unwrap()));
        assert!(!HostPattern::parse("a.example.com").unwrap().covers(&any));
    }

    #[test]
    fn hosts_are_normalized_before_any_rule_sees_them() {
        for (written, want) in [
            ("Example.COM.", "example.com"),
            ("2130706433", "127.0.0.1"),
            ("0x7f.1", "127.0.0.1"),
            ("127.1", "127.0.0.1"),
            ("0177.0.0.1", "127.0.0.1"),
            ("0x7f000001", "127.0.0.1"),
            ("10.0.1", "10.0.0.1"),
            ("169.254.169.254", "169.254.169.254"),
            ("[::ffff:127.0.0.1]", "127.0.0.1"),
            ("[::1]", "[::1]"),
            ("[2001:DB8::1]", "[2001:db8::1]"),
            ("files.pythonhosted.org", "files.pythonhosted.org"),
        ] {
            assert_eq!(normalized_host(written).as_deref(), Ok(want), "{written}");
        }
        for written in [
            "",
            "256.1.1.1",
            "1.2.3.4.5",
            "4294967296",
            "[::1",
            "[nonsense]",
            "a b",
            "evil.com\r\nHost: x",
            "a..b",
            "-a.com",
            "x@y.com",
            "1.2.3.999",
        ] {
            assert!(normalized_host(written).is_err(), "{written:?} is refused");
        }
    }
}
