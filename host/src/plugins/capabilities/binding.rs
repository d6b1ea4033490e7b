//! Where a secret may go: each secret key's `bind` entries in plugin.toml.
//!
//! A use of a secret (a [`Place`] in one request) is allowed only when one
//! of its bindings names that exact place and the request's destination:
//! the binding's host pattern (or a destination the operator named for
//! this plugin: `channels.NAME.http`, a literal address in its config),
//! its path prefix and method. A secret with no binding goes nowhere.

use url::Url;

use super::secrets::Place;
use crate::hosts::HostPattern;
use crate::plugins::manifest::Binding;
use crate::plugins::scope::HttpReach;

/// Where one request goes.
pub struct Destination<'a> {
    pub method: &'a str,
    pub url: &'a Url,
}

impl Destination<'_> {
    /// Host as the http capability compares it (lower-case, IPv6 bracketed),
    /// port, and the scheme's default port.
    fn host_port(&self) -> Option<(String, u16, u16)> {
        let host = match self.url.host()? {
            url::Host::Domain(d) => d.to_ascii_lowercase(),
            url::Host::Ipv4(ip) => ip.to_string(),
            url::Host::Ipv6(ip) => format!("[{ip}]"),
        };
        let default_port = if self.url.scheme() == "https" {
            443
        } else {
            80
        };
        Some((host, self.url.port_or_known_default()?, default_port))
    }
}

/// Whether `binding` allows `place` in a request to `to`.
fn permits(binding: &Binding, place: &Place, to: &Destination<'_>, reach: &HttpReach) -> bool {
    let place_ok = match place {
        Place::Header { name, prefix } => {
            binding
                .header
                .as_deref()
                .is_some_and(|h| h.eq_ignore_ascii_case(name))
                && binding.prefix.as_deref().unwrap_or("") == prefix
        }
        Place::JsonField(pointer) => binding.json.as_deref() == Some(pointer),
        Place::FormField(field) => binding.form.as_deref() == Some(field),
        Place::QueryParam(name) => binding.query.as_deref() == Some(name),
    };
    let method_ok = binding
        .method
        .as_deref()
        .is_none_or(|m| m.eq_ignore_ascii_case(to.method));
    let path_ok = binding
        .path
        .as_deref()
        .is_none_or(|p| to.url.path().starts_with(p));
    let host_ok = to.host_port().is_some_and(|(host, port, default_port)| {
        HostPattern::parse(&binding.host).is_ok_and(|p| p.matches(&host, port, default_port))
            || reach.operator_names(&host, port, default_port)
    });
    place_ok && method_ok && path_ok && host_ok
}

/// `Ok` when some binding of `secret` allows `place` in a request to `to`;
/// otherwise why not, in words that say what plugin.toml allows.
pub fn check(
    secret: &str,
    bindings: &[Binding],
    place: &Place,
    to: &Destination<'_>,
    reach: &HttpReach,
) -> Result<(), crate::plugins::Invalid> {
    if bindings.iter().any(|b| permits(b, place, to, reach)) {
        return Ok(());
    }
    let asked = format!(
        "{} of {} {}",
        describe_place(place),
        to.method,
        crate::plugins::capabilities::http::shown(to.url)
    );
    let allowed = if bindings.is_empty() {
        "its plugin.toml binds it nowhere (add `bind = [...]` to the key)".to_string()
    } else {
        format!(
            "plugin.toml binds it only to {}",
            bindings
                .iter()
                .map(Binding::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        )
    };
    Err(crate::plugins::Invalid::from(format!(
        "secret `{secret}` may not go into {asked}: {allowed}"
    )))
}

fn describe_place(place: &Place) -> String {
    match place {
        Place::Header { name, prefix } if prefix.is_empty() => format!("header `{name}`"),
        Place::Header { name, prefix } => format!("header `{name}` after `{prefix}`"),
        Place::JsonField(p) => format!("JSON member `{p}`"),
        Place::FormField(f) => format!("form field `{f}`"),
        Place::QueryParam(q) => format!("query parameter `{q}`"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slack() -> Vec<Binding> {
        vec![Binding {
            host: "slack.com".into(),
            path: Some("/api/".into()),
            method: None,
            header: Some("Authorization".into()),
            prefix: Some("Bearer ".into()),
            json: None,
            form: None,
            query: None,
        }]
    }

    fn reach(added: &[&str]) -> HttpReach {
        HttpReach {
            manifest: vec!["slack.com".into()],
            granted: None,
            operator_addresses: vec!["10.0.0.7".parse().unwrap()],
            added: added.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn bearer() -> Place {
        Place::Header {
            name: "authorization".into(),
            prefix: "Bearer ".into(),
        }
    }

    fn to(
        url: &str,
        f: impl FnOnce(&Destination<'_>) -> Result<(), crate::plugins::Invalid>,
    ) -> Result<(), crate::plugins::Invalid> {
        let url = Url::parse(url).unwrap();
        f(&Destination {
            method: "POST",
            url: &url,
        })
    }

    #[test]
    fn a_secret_goes_only_to_its_bound_place_host_and_path() {
        let r = reach(&[]);
        let at = |url: &str, place: Place| to(url, |d| check("bot_token", &slack(), &place, d, &r));
        at("https://slack.com/api/chat.postMessage", bearer()).unwrap();
        let json = at(
            "https://slack.com/api/chat.postMessage",
            Place::JsonField("/text".into()),
        )
        .unwrap_err();
        assert!(
            json.0.contains("JSON member `/text`")
                && json.0.contains(
                    "binds it only to header `Authorization` after `Bearer ` of slack.com/api/"
                ),
            "{json}"
        );
        let other_header = Place::Header {
            name: "x-echo".into(),
            prefix: "Bearer ".into(),
        };
        assert!(at("https://slack.com/api/x", other_header).is_err());
        let no_prefix = Place::Header {
            name: "authorization".into(),
            prefix: String::new(),
        };
        assert!(at("https://slack.com/api/x", no_prefix).is_err());
        assert!(at("https://slack.com/other", bearer()).is_err(), "path");
        assert!(at("https://evil.com/api/x", bearer()).is_err(), "host");
        assert!(
            at("https://slack.com:8443/api/x", bearer()).is_err(),
            "port"
        );
    }

    #[test]
    fn destinations_the_operator_named_take_the_bound_place_only() {
        let r = reach(&["127.0.0.1:*"]);
        let at = |url: &str, place: Place| to(url, |d| check("bot_token", &slack(), &place, d, &r));
        at("http://127.0.0.1:9000/api/chat.postMessage", bearer()).unwrap();
        at("http://10.0.0.7/api/x", bearer()).unwrap();
        assert!(
            at(
                "http://127.0.0.1:9000/api/x",
                Place::FormField("text".into())
            )
            .is_err()
        );
        assert!(at("http://127.0.0.2/api/x", bearer()).is_err());
    }

    #[test]
    fn an_unbound_secret_goes_nowhere() {
        let err = to("https://slack.com/api/x", |d| {
            check("signing_secret", &[], &bearer(), d, &reach(&[]))
        })
        .unwrap_err();
        assert!(err.0.contains("binds it nowhere"), "{err}");
    }
}
