//! `pincer egress`: which rule lets a workspace's container reach a URL
//! (the very [`crate::policy::EgressReach`] its proxy enforces), and the
//! connections its proxy let through or refused.

use clap::Subcommand;

use super::Context;
use crate::audit::Action;
use crate::hosts::{address_class, normalized_host};
use crate::policy::{EgressRule, Reaches};

#[derive(Debug, Subcommand)]
pub enum EgressCommand {
    /// Which rule allows or refuses URL (http://host/…, https://host:port,
    /// or host:port) for WORKSPACE, without starting anything
    Test { workspace: String, url: String },
    /// Connections through the egress proxies, newest first
    Log {
        #[arg(long, short)]
        workspace: Option<String>,
        /// Only the refused ones
        #[arg(long)]
        denied: bool,
        #[arg(long, default_value_t = 50)]
        limit: u32,
    },
}

pub fn run(config_flag: Option<&std::path::Path>, command: EgressCommand) -> anyhow::Result<()> {
    let ctx = Context::load(config_flag)?;
    match command {
        EgressCommand::Test { workspace, url } => {
            ctx.check_workspace(&workspace)?;
            let (host, port) = destination(&url)?;
            let reaches = Reaches::compute(&ctx.config);
            let Some(reach) = reaches.get(&workspace) else {
                anyhow::bail!("no workspace named `{workspace}`");
            };
            let egress = &reach.egress;
            if egress.unfiltered {
                println!(
                    "allowed, unfiltered: workspace `{workspace}` has network bridge_unfiltered and bypasses the egress proxy"
                );
                return Ok(());
            }
            let Some(rule) = egress.rule(&host, port) else {
                println!("refused: {}", egress.why_refused(&workspace, &host, port));
                return Err(super::ExitStatus(1).into());
            };
            let bare = host.trim_start_matches('[').trim_end_matches(']');
            match bare.parse::<std::net::IpAddr>().ok() {
                Some(ip) => match address_class(ip) {
                    Some(class) if !egress.names_address(ip, port) => {
                        println!(
                            "refused: {host}:{port} matches {rule}, but it is a {class} address; a non-public address is reached only when workspaces.{workspace}.egress lists it literally"
                        );
                        return Err(super::ExitStatus(1).into());
                    }
                    _ => println!("allowed: {host}:{port} by {rule}"),
                },
                None => {
                    println!("allowed: {host}:{port} by {rule}");
                    if matches!(rule, EgressRule::Listed(_) | EgressRule::AnyPublic) {
                        println!(
                            "  (the name is resolved on the host when the container connects; an address that is not public is refused unless an entry names it literally)"
                        );
                    }
                }
            }
            Ok(())
        }
        EgressCommand::Log {
            workspace,
            denied,
            limit,
        } => {
            let kinds: &[Action] = if denied {
                &[Action::EgressRefused]
            } else {
                &[Action::EgressAllowed, Action::EgressRefused]
            };
            let events = ctx
                .audit_log()?
                .of_kinds(kinds, workspace.as_deref(), limit)?;
            if events.is_empty() {
                println!("no egress connections recorded");
            }
            for event in events {
                let at = chrono::DateTime::from_timestamp_millis(event.timestamp_ms)
                    .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
                    .unwrap_or_default();
                let verdict = if event.kind == Action::EgressRefused.as_str() {
                    "REFUSED"
                } else {
                    "allowed"
                };
                println!(
                    "{at}  {:<12} {verdict:<8} {}",
                    event.workspace.unwrap_or_default(),
                    event.detail
                );
            }
            Ok(())
        }
    }
}

/// What a person upgrading from the bridge network should read: a
/// workspace that lists no way out and did not say it wants none.
pub(super) fn no_way_out_note(name: &str, egress: &crate::policy::EgressReach) -> Option<String> {
    if egress.is_open() || egress.unfiltered || !egress.closed.is_empty() {
        return None;
    }
    Some(format!(
        "note: `{name}` has no network: its container reaches out only through the egress \
         proxy, to what workspaces.{name}.egress lists (nothing yet). List the hosts it needs, \
         e.g. `egress: [pypi.org, files.pythonhosted.org]`; `pincer egress test {name} URL` \
         says what a URL would meet"
    ))
}

/// The host (normalized) and port a URL or `host:port` names.
fn destination(url: &str) -> anyhow::Result<(String, u16)> {
    let (authority, default_port) = if let Some(rest) = url.strip_prefix("http://") {
        (rest, Some(80))
    } else if let Some(rest) = url.strip_prefix("https://") {
        (rest, Some(443))
    } else {
        (url, None)
    };
    let authority = authority.split(['/', '?', '#']).next().unwrap_or_default();
    let (host, port) = match authority.strip_prefix('[') {
        Some(_) => match authority.find(']') {
            Some(end) => (&authority[..=end], authority[end + 1..].strip_prefix(':')),
            None => anyhow::bail!("`{url}`: an IPv6 address opens a bracket it does not close"),
        },
        None => match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        },
    };
    let port = match (port, default_port) {
        (Some(port), _) => port
            .parse::<u16>()
            .map_err(|_| anyhow::anyhow!("`{url}`: `{port}` is not a port"))?,
        (None, Some(port)) => port,
        (None, None) => {
            anyhow::bail!("`{url}`: give a URL (http://…, https://…) or host:port")
        }
    };
    let host = normalized_host(host).map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_authorities_name_a_destination() {
        for (written, host, port) in [
            ("https://PyPI.org/simple/", "pypi.org", 443),
            ("http://example.com", "example.com", 80),
            ("http://0x7f.1:8080/x", "127.0.0.1", 8080),
            ("crates.io:443", "crates.io", 443),
            ("https://[::1]:8443/", "[::1]", 8443),
        ] {
            assert_eq!(
                destination(written).unwrap(),
                (host.to_owned(), port),
                "{written}"
            );
        }
        for bad in ["crates.io", "http://a:b/", "https://[::1/", "http://a b/"] {
            assert!(destination(bad).is_err(), "{bad}");
        }
    }
}
