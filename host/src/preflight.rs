//! What `pincer config check` verifies beyond the file itself: everything
//! `workspace up`, the gateway and the plugin host would refuse, computed by
//! the very functions they use, so the check and the start never disagree.
//! Nothing here needs Docker, an image, a model file or an MCP server's
//! volume sources.
//!
//! - every workspace's policy groups merge ([`PolicyCatalog::effective`]);
//! - every workspace folder and mount source passes the checks
//!   [`crate::containers::plan`] applies (mount sources must exist);
//! - every container MCP server's policy merges and can be enforced without
//!   pincer's runner, and its volumes are not places a container must never
//!   reach (sources that exist are checked now, the others at start);
//! - every `gateway.model_list` entry loads as the router loads it;
//! - every `plugins.enabled` name is a plugin of this host;
//! - every channel's plugin exists and its `config`, and every
//!   `plugins.config.PLUGIN` of a plugin this host has, pass that plugin's
//!   manifest schema (the check the plugin host makes when it loads one);
//! - no plugin of WIT 0.1.0 with secret config keys (it would read them)
//!   while `plugins.legacy_secrets` is `refuse`, as the plugin host refuses
//!   to load one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::config::{Checked, Config, PathPart, PolicyEntry, Problem, expand_tilde};
use crate::containers;
use crate::plugins::Catalog;
use crate::policy::{PolicyCatalog, PolicyError};

/// The configuration file could not be read.
#[derive(Debug, thiserror::Error)]
#[error("{}: cannot read", path.display())]
pub struct ReadError {
    path: PathBuf,
    #[source]
    source: std::io::Error,
}

/// Reads and checks the configuration at `path` with everything `workspace
/// up` would check ([`problems`] for `home`).
pub fn check_file(path: &Path, home: &Path) -> Result<Checked, ReadError> {
    let text = std::fs::read_to_string(path).map_err(|source| ReadError {
        path: path.to_path_buf(),
        source,
    })?;
    let env = |name: &str| std::env::var(name).ok();
    Ok(Config::check_str_with_env(&text, path, &env, &|config| {
        problems(config, home)
    }))
}

/// What `config check` refuses in the file at `path`, one line each
/// (`FILE:LINE:COLUMN: message`), then the count; empty when it passes.
/// Commands that start something refuse the same.
pub fn refusals(path: &Path, home: &Path) -> Result<Vec<String>, ReadError> {
    let checked = check_file(path, home)?;
    let mut lines: Vec<String> = checked.errors.iter().map(ToString::to_string).collect();
    if !lines.is_empty() {
        lines.push(problem_count(path, lines.len()));
    }
    Ok(lines)
}

/// `FILE: N problems (nothing was started)`.
pub fn problem_count(path: &Path, n: usize) -> String {
    let plural = if n == 1 { "" } else { "s" };
    format!(
        "{}: {n} problem{plural} (nothing was started)",
        path.display()
    )
}

fn key(k: &str) -> PathPart {
    PathPart::Key(k.to_owned())
}

/// Every problem of `config` that the file alone does not show.
pub fn problems(config: &Config, home: &Path) -> Vec<Problem> {
    let mut out = Vec::new();
    match PolicyCatalog::load(&config.containers.policy_dirs) {
        Ok(catalog) => {
            for (name, ws) in &config.workspaces {
                match catalog.effective(name, &ws.policies) {
                    Err(e) => {
                        let base = vec![key("workspaces"), key(name), key("policies")];
                        out.push(Problem::at(
                            entry_path(base, &ws.policies, &e),
                            e.to_string(),
                        ));
                    }
                    Ok(policy) => {
                        let egress = crate::policy::EgressReach::compute(
                            name,
                            &policy.egress,
                            &ws.egress,
                            &ws.tunnels,
                            policy.network.value,
                        );
                        if let Some(why) = egress.refused {
                            let listed = if ws.egress.is_empty() {
                                "tunnels"
                            } else {
                                "egress"
                            };
                            out.push(Problem::at(
                                vec![key("workspaces"), key(name), key(listed)],
                                why,
                            ));
                        }
                    }
                }
            }
            mcp_servers(config, home, &catalog, &mut out);
        }
        Err(e) => out.push(Problem::at(
            vec![key("containers"), key("policy_dirs")],
            e.to_string(),
        )),
    }
    folders(config, home, &mut out);
    for (i, entry) in config.gateway.model_list.iter().enumerate() {
        if let Err(e) = crate::gateway::check_deployment(i, entry) {
            out.push(Problem::at(
                vec![
                    key("gateway"),
                    key("model_list"),
                    PathPart::Index(i),
                    key("litellm_params"),
                    key("model"),
                ],
                e.to_string(),
            ));
        }
    }
    let catalog = Catalog::discover(home, &config.plugins.dirs);
    plugin_configs(config, &catalog, &mut out);
    legacy_secrets(config, &catalog, &mut out);
    if let Some(names) = &config.plugins.enabled {
        for (i, name) in names.iter().enumerate() {
            if let Err(why) = crate::plugins::resolve_enabled(name, &catalog) {
                out.push(Problem::at(
                    vec![key("plugins"), key("enabled"), PathPart::Index(i)],
                    why.0,
                ));
            }
        }
    }
    out
}

/// Channel and plugin configurations against their plugins' manifests.
fn plugin_configs(config: &Config, catalog: &Catalog, out: &mut Vec<Problem>) {
    let manifest = |name: &str| {
        let package = catalog.get(name).ok()?;
        crate::plugins::Manifest::parse(&package.manifest_text, name).ok()
    };
    let as_value = |map: &BTreeMap<String, serde_json::Value>| {
        serde_json::Value::Object(map.clone().into_iter().collect())
    };
    for (name, channel) in &config.channels {
        let at = |k: &str| vec![key("channels"), key(name), key(k)];
        match manifest(&channel.plugin) {
            None => out.push(Problem::at(
                at("plugin"),
                format!(
                    "no plugin named `{}` (see `pincer plugin list`)",
                    channel.plugin
                ),
            )),
            Some(m) => {
                if let Err(why) = m.check_config(&as_value(&channel.config)) {
                    out.push(Problem::at(at("config"), why.0));
                }
            }
        }
    }
    for (plugin, value) in &config.plugins.config {
        let Some(m) = manifest(plugin) else { continue };
        let at = || vec![key("plugins"), key("config"), key(plugin)];
        if value.is_array() && m.kind() != crate::plugins::PluginKind::Tunnel {
            out.push(Problem::at(
                at(),
                format!(
                    "a list of configurations is for a tunnel plugin serving several services; {plugin} is a {} plugin: give one mapping",
                    m.kind()
                ),
            ));
            continue;
        }
        for (i, instance) in config.plugins.instances(plugin).into_iter().enumerate() {
            if let Err(why) = m.check_config(instance) {
                let mut path = at();
                if value.is_array() {
                    path.push(PathPart::Index(i));
                }
                out.push(Problem::at(path, why.0));
            }
        }
    }
}

/// Plugins of WIT 0.1.0 with secret keys, which the plugin host refuses to
/// load under `plugins.legacy_secrets: refuse`: reported where the file
/// names the plugin (its `plugins.config` entry, a channel, a workspace),
/// else at `plugins`.
fn legacy_secrets(config: &Config, catalog: &Catalog, out: &mut Vec<Problem>) {
    if config.plugins.legacy_secrets == crate::config::LegacySecrets::Warn {
        return;
    }
    for (name, package) in &catalog.plugins {
        let Ok(manifest) = crate::plugins::Manifest::parse(&package.manifest_text, name) else {
            continue;
        };
        let keys = crate::plugins::readable_secret_keys(&manifest);
        if keys.is_empty() {
            continue;
        }
        let listed = |list: &[String]| list.iter().position(|n| n == name);
        let path = if config.plugins.config.contains_key(name) {
            vec![key("plugins"), key("config"), key(name)]
        } else if let Some(channel) = config
            .channels
            .iter()
            .find_map(|(c, ch)| (ch.plugin == *name).then_some(c))
        {
            vec![key("channels"), key(channel), key("plugin")]
        } else if let Some(path) = config.workspaces.iter().find_map(|(w, ws)| {
            listed(&ws.skills)
                .map(|i| vec![key("workspaces"), key(w), key("skills"), PathPart::Index(i)])
                .or_else(|| {
                    listed(&ws.observers).map(|i| {
                        vec![
                            key("workspaces"),
                            key(w),
                            key("observers"),
                            PathPart::Index(i),
                        ]
                    })
                })
        }) {
            path
        } else {
            vec![key("plugins")]
        };
        let error = crate::plugins::PluginError::LegacySecrets {
            plugin: name.clone(),
            wit: manifest.plugin.wit.to_string(),
            keys,
        };
        out.push(Problem {
            path,
            at_key: true,
            message: error.to_string(),
        });
    }
}

/// The path of the policies entry `error` is about, else of the list.
fn entry_path(base: Vec<PathPart>, entries: &[PolicyEntry], error: &PolicyError) -> Vec<PathPart> {
    let group = match error {
        PolicyError::UnknownGroup { group, .. } | PolicyError::InvalidEntry { group, .. } => {
            Some(group)
        }
        _ => None,
    };
    let mut path = base;
    if let Some(i) = group.and_then(|g| entries.iter().rposition(|e| e.name() == g)) {
        path.push(PathPart::Index(i));
    }
    path
}

/// Workspace folders and mount sources, as `containers::plan` checks them.
fn folders(config: &Config, home: &Path, out: &mut Vec<Problem>) {
    let base = expand_tilde(&config.containers.workspace_base_path);
    let mut protected = containers::protected_paths(home, &base);
    protected.extend(containers::writable_sources(config));
    protected.extend(containers::workspace_folders(config));
    let mut seen: BTreeMap<std::path::PathBuf, &str> = BTreeMap::new();
    for (name, ws) in &config.workspaces {
        let dir = config.workspace_dir(name);
        let at = || {
            let mut p = vec![key("workspaces"), key(name)];
            if ws.path.is_some() {
                p.push(key("path"));
            }
            p
        };
        if let Err(e) = containers::check_workspace_folder(&dir, home, &base) {
            out.push(Problem::at(at(), format!("workspace {name}: {e}")));
        }
        if let Some(other) = seen.insert(dir.clone(), name) {
            out.push(Problem::at(
                at(),
                format!(
                    "workspaces {other} and {name} have the same folder {}: give each its own",
                    dir.display()
                ),
            ));
        }
        for (i, mount) in ws.mounts.iter().enumerate() {
            if let Err(e) = containers::check_source(&mount.source, &protected) {
                out.push(Problem::at(
                    vec![
                        key("workspaces"),
                        key(name),
                        key("mounts"),
                        PathPart::Index(i),
                        key("source"),
                    ],
                    format!("workspace {name}: {e}"),
                ));
            }
        }
    }
}

fn mcp_servers(config: &Config, home: &Path, catalog: &PolicyCatalog, out: &mut Vec<Problem>) {
    for (name, server) in &config.mcp_servers {
        let Some(container) = &server.container else {
            continue;
        };
        let base = || vec![key("mcp_servers"), key(name), key("container")];
        let entries = container.policy_entries();
        if let Err(e) = containers::server_policy(catalog, name, container) {
            let mut path = base();
            if container.policies.is_some() {
                path.push(key("policies"));
                if let Some(error) = e.policy() {
                    path = entry_path(path, &entries, error);
                }
            }
            out.push(Problem::at(path, e.to_string()));
        }
        for (i, problem) in containers::volume_problems(config, home, container) {
            let mut path = base();
            path.extend([key("volumes"), PathPart::Index(i)]);
            out.push(Problem::at(path, format!("MCP server {name}: {problem}")));
        }
    }
}
