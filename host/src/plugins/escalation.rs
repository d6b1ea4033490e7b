//! What a plugin replacing another one (`plugin update`, `plugin install
//! --replace`) may do that the one it replaces could not: the reasons the
//! operator is asked again, or the replacement refused.
//!
//! [`compare`] is the one comparison; each reason is one [`Escalation`]
//! variant with its own plain-words line. A new kind of reason is one more
//! variant and one more arm in [`compare`].

use std::collections::BTreeSet;
use std::fmt;

use semver::Version;

use super::manifest::{Manifest, PluginKind};
use crate::hosts::HostPattern;

/// The first WIT release in which a plugin uses its secrets by name and
/// never reads their values (`config` leaves secret keys out).
pub const SECRETS_BY_NAME_SINCE: Version = Version::new(0, 2, 0);

/// One thing a new version may do that the installed one may not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Escalation {
    /// A version lower than the installed one: refused outright unless the
    /// operator says `--allow-downgrade`.
    Downgrade {
        installed: Version,
        new: Version,
    },
    /// Another kind (another WIT world, called at other places).
    KindChanged {
        installed: PluginKind,
        new: PluginKind,
    },
    /// Built against a WIT release before [`SECRETS_BY_NAME_SINCE`], so the
    /// plugin reads these secret keys' values through `config`, which the
    /// installed version could not.
    ReadsSecrets {
        wit: Version,
        keys: Vec<String>,
    },
    /// Keys secret in the installed version and not in the new one: their
    /// values reach the plugin through `config` and are no longer redacted.
    NoLongerSecret {
        keys: Vec<String>,
    },
    /// HTTP destinations no pattern of the installed version covers.
    NewHttpHosts {
        hosts: Vec<String>,
    },
    Kv,
    DataDir,
    /// More linear memory per instance, in MiB.
    MoreMemory {
        installed_mb: usize,
        new_mb: usize,
    },
    /// Config keys the installed version does not take, `(name, secret)`.
    NewConfigKeys {
        keys: Vec<(String, bool)>,
    },
    /// Places a secret (or a capture) may now go that the installed
    /// version's bindings did not allow, `(secret, where)`.
    NewSecretBindings {
        bindings: Vec<(String, String)>,
    },
}

impl Escalation {
    /// Whether `--yes` alone is not enough (a rollback needs its own flag).
    pub fn needs_allow_downgrade(&self) -> bool {
        matches!(self, Self::Downgrade { .. })
    }
}

impl fmt::Display for Escalation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Downgrade { installed, new } => write!(
                f,
                "an older version: {new} is lower than the installed {installed} (a rollback can bring back what a later version fixed)"
            ),
            Self::KindChanged { installed, new } => write!(
                f,
                "another kind: a {new} plugin, not a {installed} (another WIT world, called from other places)"
            ),
            Self::ReadsSecrets { wit, keys } => write!(
                f,
                "reads its secrets: built against WIT {wit}, older than {SECRETS_BY_NAME_SINCE}, so the plugin reads the values of its secret config keys {} through `config`",
                keys.join(", ")
            ),
            Self::NoLongerSecret { keys } => write!(
                f,
                "no longer secret: {} (the plugin would read their values through `config`, and they are no longer redacted)",
                keys.join(", ")
            ),
            Self::NewHttpHosts { hosts } => write!(f, "http to: {}", hosts.join(", ")),
            Self::Kv => f.write_str("kv: a private key-value store per workspace"),
            Self::DataDir => f.write_str("data_dir: a private folder per workspace"),
            Self::MoreMemory {
                installed_mb,
                new_mb,
            } => write!(
                f,
                "memory: up to {new_mb} MiB per call (the installed version gets {installed_mb} MiB)"
            ),
            Self::NewConfigKeys { keys } => write!(
                f,
                "config keys: {}",
                keys.iter()
                    .map(|(k, secret)| if *secret {
                        format!("{k} (secret)")
                    } else {
                        k.clone()
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Self::NewSecretBindings { bindings } => write!(
                f,
                "secrets sent to new places: {}",
                bindings
                    .iter()
                    .map(|(secret, to)| format!("{secret} → {to}"))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        }
    }
}

/// The secret keys a plugin reads the values of: all of them when it is
/// built against a WIT release before [`SECRETS_BY_NAME_SINCE`], none after.
pub fn readable_secret_keys(manifest: &Manifest) -> Vec<String> {
    if manifest.plugin.wit < SECRETS_BY_NAME_SINCE {
        manifest.secret_keys().into_iter().collect()
    } else {
        Vec::new()
    }
}

/// Config keys whose values `manifest`'s plugin reads.
fn readable_keys(manifest: &Manifest) -> BTreeSet<String> {
    let secrets = manifest.secret_keys();
    manifest
        .config
        .keys()
        .filter(|k| manifest.plugin.wit < SECRETS_BY_NAME_SINCE || !secrets.contains(*k))
        .cloned()
        .collect()
}

/// What `new` may do that `installed` may not, most serious first; empty
/// when it asks for nothing more. `operator_memory_bytes` is
/// `plugins.limits.memory_mb` in bytes (what a plugin that asks for no
/// memory gets).
pub fn compare(
    installed: &Manifest,
    new: &Manifest,
    operator_memory_bytes: usize,
) -> Vec<Escalation> {
    let mut out = Vec::new();
    let (old_v, new_v) = (&installed.plugin.version, &new.plugin.version);
    if new_v < old_v {
        out.push(Escalation::Downgrade {
            installed: old_v.clone(),
            new: new_v.clone(),
        });
    }
    if installed.kind() != new.kind() {
        out.push(Escalation::KindChanged {
            installed: installed.kind(),
            new: new.kind(),
        });
    }
    let could_read = readable_keys(installed);
    let reads: Vec<String> = readable_secret_keys(new)
        .into_iter()
        .filter(|k| !could_read.contains(k))
        .collect();
    if !reads.is_empty() {
        out.push(Escalation::ReadsSecrets {
            wit: new.plugin.wit.clone(),
            keys: reads,
        });
    }
    let (old_secrets, new_secrets) = (installed.secret_keys(), new.secret_keys());
    let unsecret: Vec<String> = old_secrets
        .iter()
        .filter(|k| new.config.contains_key(*k) && !new_secrets.contains(*k))
        .cloned()
        .collect();
    if !unsecret.is_empty() {
        out.push(Escalation::NoLongerSecret { keys: unsecret });
    }
    let old_hosts: Vec<HostPattern> = installed
        .capabilities
        .http
        .iter()
        .filter_map(|h| HostPattern::parse(h).ok())
        .collect();
    let hosts: Vec<String> = new
        .capabilities
        .http
        .iter()
        .filter(|h| match HostPattern::parse(h) {
            Ok(p) => !old_hosts.iter().any(|o| o.covers(&p)),
            Err(_) => true,
        })
        .cloned()
        .collect();
    if !hosts.is_empty() {
        out.push(Escalation::NewHttpHosts { hosts });
    }
    if new.capabilities.kv && !installed.capabilities.kv {
        out.push(Escalation::Kv);
    }
    if new.capabilities.data_dir && !installed.capabilities.data_dir {
        out.push(Escalation::DataDir);
    }
    let (old_mem, new_mem) = (
        installed.limits.memory_bytes(operator_memory_bytes),
        new.limits.memory_bytes(operator_memory_bytes),
    );
    if new_mem > old_mem {
        out.push(Escalation::MoreMemory {
            installed_mb: old_mem >> 20,
            new_mb: new_mem >> 20,
        });
    }
    let keys: Vec<(String, bool)> = new
        .config
        .keys()
        .filter(|k| !installed.config.contains_key(*k))
        .map(|k| (k.clone(), new_secrets.contains(k)))
        .collect();
    if !keys.is_empty() {
        out.push(Escalation::NewConfigKeys { keys });
    }
    let old_bindings = installed.bindings();
    let bindings: Vec<(String, String)> = new
        .bindings()
        .into_iter()
        .flat_map(|(secret, list)| {
            let had = old_bindings.get(&secret).cloned().unwrap_or_default();
            list.into_iter()
                .filter(move |b| !had.contains(b))
                .map(move |b| (secret.clone(), b.to_string()))
        })
        .collect();
    if !bindings.is_empty() {
        out.push(Escalation::NewSecretBindings { bindings });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
[plugin]
name = "acme"
kind = "skill"
version = "1.0.0"
wit = "0.3.0"

[capabilities]
http = ["api.example.com", "*.acme.dev"]
kv = true

[config.api_key]
type = "string"
secret = true

[config.region]
type = "string"
"#;

    fn manifest(text: &str) -> Manifest {
        Manifest::parse(text, "test").unwrap()
    }

    fn against_base(edit: impl Fn(&str) -> String) -> Vec<Escalation> {
        compare(&manifest(BASE), &manifest(&edit(BASE)), 64 << 20)
    }

    #[test]
    fn the_same_manifest_or_a_newer_version_asks_for_nothing_more() {
        assert_eq!(against_base(|m| m.to_owned()), vec![]);
        assert_eq!(
            against_base(|m| m.replace("version = \"1.0.0\"", "version = \"1.0.1\"")),
            vec![]
        );
        // A host an installed pattern covers is nothing new.
        assert_eq!(
            against_base(|m| m.replace("\"*.acme.dev\"", "\"*.acme.dev\", \"eu.acme.dev\"")),
            vec![]
        );
        // Fewer capabilities, a key made secret, a removed key: nothing more.
        let less = BASE
            .replace("kv = true", "kv = false")
            .replace("[config.region]\ntype = \"string\"", "");
        assert_eq!(compare(&manifest(BASE), &manifest(&less), 64 << 20), vec![]);
    }

    #[test]
    fn a_wit_0_1_0_build_with_secret_keys_reads_them() {
        let got = against_base(|m| m.replace("wit = \"0.3.0\"", "wit = \"0.1.0\""));
        assert_eq!(
            got,
            vec![Escalation::ReadsSecrets {
                wit: Version::new(0, 1, 0),
                keys: vec!["api_key".into()],
            }]
        );
        assert!(got[0].to_string().contains("WIT 0.1.0"), "{}", got[0]);
        // Already 0.1.0 on both sides: it could read them before.
        let legacy = BASE.replace("wit = \"0.3.0\"", "wit = \"0.1.0\"");
        assert_eq!(
            compare(&manifest(&legacy), &manifest(&legacy), 64 << 20),
            vec![]
        );
        // 0.1.0 without secret keys reads nothing secret.
        let plain = legacy.replace("secret = true", "secret = false");
        assert!(
            !compare(&manifest(BASE), &manifest(&plain), 64 << 20)
                .iter()
                .any(|e| matches!(e, Escalation::ReadsSecrets { .. }))
        );
    }

    #[test]
    fn a_new_place_for_a_secret_is_an_escalation() {
        let bound = BASE.replace(
            "[config.api_key]\ntype = \"string\"\nsecret = true\n",
            "[config.api_key]\ntype = \"string\"\nsecret = true\nbind = [{ host = \"api.example.com\", header = \"Authorization\", prefix = \"Bearer \" }]\n",
        );
        assert_ne!(bound, BASE);
        let wider = bound.replace(
            "prefix = \"Bearer \" }]",
            "prefix = \"Bearer \" }, { host = \"api.example.com\", json = \"/text\" }]",
        );
        assert_eq!(
            compare(&manifest(&bound), &manifest(&wider), 64 << 20),
            [Escalation::NewSecretBindings {
                bindings: vec![(
                    "api_key".into(),
                    "JSON member `/text` of api.example.com".into()
                )]
            }]
        );
        assert!(compare(&manifest(&wider), &manifest(&bound), 64 << 20).is_empty());
        assert!(compare(&manifest(&bound), &manifest(&bound), 64 << 20).is_empty());
    }

    #[test]
    fn a_secret_made_plain_is_an_escalation() {
        assert_eq!(
            against_base(|m| m.replace("secret = true", "secret = false")),
            vec![Escalation::NoLongerSecret {
                keys: vec!["api_key".into()]
            }]
        );
    }

    #[test]
    fn a_kind_change_and_a_downgrade_are_escalations() {
        let got = against_base(|m| {
            m.replace("kind = \"skill\"", "kind = \"observer\"")
                .replace("version = \"1.0.0\"", "version = \"0.9.9\"")
        });
        assert_eq!(
            got,
            vec![
                Escalation::Downgrade {
                    installed: Version::new(1, 0, 0),
                    new: Version::new(0, 9, 9),
                },
                Escalation::KindChanged {
                    installed: PluginKind::Skill,
                    new: PluginKind::Observer,
                },
            ]
        );
        assert!(got[0].needs_allow_downgrade() && !got[1].needs_allow_downgrade());
    }

    #[test]
    fn new_hosts_capabilities_memory_and_keys_are_escalations() {
        let got = against_base(|m| {
            m.replace("\"*.acme.dev\"", "\"*.acme.dev\", \"evil.example\"")
                .replace("kv = true", "kv = true\ndata_dir = true")
                .replace(
                    "[config.region]",
                    "[limits]\nmemory_mb = 128\n\n[config.token]\ntype = \"string\"\nsecret = true\n\n[config.region]",
                )
        });
        assert_eq!(
            got,
            vec![
                Escalation::NewHttpHosts {
                    hosts: vec!["evil.example".into()]
                },
                Escalation::DataDir,
                Escalation::MoreMemory {
                    installed_mb: 64,
                    new_mb: 128
                },
                Escalation::NewConfigKeys {
                    keys: vec![("token".into(), true)]
                },
            ]
        );
        assert_eq!(got[0].to_string(), "http to: evil.example");
        assert_eq!(got[3].to_string(), "config keys: token (secret)");
        // A wider pattern than the installed one is new.
        assert_eq!(
            against_base(|m| m.replace("\"api.example.com\"", "\"api.example.com:*\"")),
            vec![Escalation::NewHttpHosts {
                hosts: vec!["api.example.com:*".into()]
            }]
        );
        let no_kv = BASE.replace("kv = true", "kv = false");
        assert_eq!(
            compare(&manifest(&no_kv), &manifest(BASE), 64 << 20),
            vec![Escalation::Kv]
        );
    }
}
