//! `pincer config check` and `pincer config explain`.

use std::path::{Path, PathBuf};

use super::ExitStatus;
use crate::config::{self, Checked};

fn checked(path: &Path) -> anyhow::Result<Checked> {
    Ok(crate::preflight::check_file(path, &config::pincer_home()?)?)
}

fn resolve(config_flag: Option<&Path>) -> Option<PathBuf> {
    config::resolve_config_path(config_flag)
}

pub fn check(config_flag: Option<&Path>) -> anyhow::Result<()> {
    let Some(path) = resolve(config_flag) else {
        println!("no configuration file found; using built-in defaults (they are valid)");
        println!("searched: --config, $PINCER_CONFIG, ./pincer.yaml, $PINCER_HOME/pincer.yaml");
        return Ok(());
    };
    let checked = checked(&path)?;
    for warning in &checked.warnings {
        eprintln!("{warning}");
    }
    let Some(config) = checked.config else {
        for error in &checked.errors {
            eprintln!("{error}");
        }
        eprintln!(
            "{}",
            crate::preflight::problem_count(&path, checked.errors.len())
        );
        return Err(ExitStatus(1).into());
    };
    println!(
        "{}: ok ({} workspace{}, {} model alias{}, {} channel{}, {} MCP server{})",
        path.display(),
        config.workspaces.len(),
        plural(config.workspaces.len()),
        config.gateway.model_list.len(),
        if config.gateway.model_list.len() == 1 {
            ""
        } else {
            "es"
        },
        config.channels.len(),
        plural(config.channels.len()),
        config.mcp_servers.len(),
        plural(config.mcp_servers.len()),
    );
    let reaches = crate::policy::Reaches::compute(&config);
    for (name, reach) in reaches.iter() {
        if let Some(note) = super::egress::no_way_out_note(name, &reach.egress) {
            println!("{note}");
        }
    }
    for line in paired_senders(&config) {
        println!("{line}");
    }
    Ok(())
}

/// The senders pairing allowed beside each channel's `allowed_senders`,
/// with their origin (from `pincer.db`, when this home has one).
pub fn paired_senders(config: &crate::config::Config) -> Vec<String> {
    let Ok(home) = crate::config::pincer_home() else {
        return Vec::new();
    };
    let state = match config.state.location(&home) {
        Ok(crate::db::Location::Sqlite(db)) if !db.exists() => return Vec::new(),
        Ok(state) => state,
        Err(e) => return vec![format!("paired senders cannot be read: {e}")],
    };
    let allowed = match crate::pairing::PairingStore::open_at(&state).and_then(|s| s.allowed()) {
        Ok(allowed) => allowed,
        Err(e) => return vec![format!("paired senders cannot be read: {e}")],
    };
    allowed
        .into_iter()
        .map(|a| {
            let known = if config.channels.contains_key(&a.channel) {
                ""
            } else {
                " (no such channel in this configuration)"
            };
            format!(
                "channels.{}: also allows {}{} ({}){known}",
                a.channel,
                a.sender,
                a.sender_name.map(|n| format!(" ({n})")).unwrap_or_default(),
                a.origin
            )
        })
        .collect()
}

pub fn explain(file: Option<&Path>) -> anyhow::Result<()> {
    let Some(path) = resolve(file) else {
        anyhow::bail!("no configuration file found; name one: pincer config explain FILE");
    };
    let checked = checked(&path)?;
    if checked.explained.is_empty() {
        println!(
            "{}: no Pynchy-style keys; every key is pincer's own",
            path.display()
        );
    }
    for item in &checked.explained {
        println!("{}: {}\n    → {}", item.at, item.written, item.became);
        // The folder a workspace path resolved to.
        if let (Some(config), Some(name)) = (
            &checked.config,
            item.written
                .strip_prefix("workspaces.")
                .and_then(|rest| rest.strip_suffix(".path")),
        ) {
            println!("      = {}", config.workspace_dir(name).display());
        }
    }
    for warning in &checked.warnings {
        println!("{warning}");
    }
    if !checked.errors.is_empty() {
        println!(
            "\n{} problem{} (see `pincer config check`):",
            checked.errors.len(),
            plural(checked.errors.len())
        );
        for error in &checked.errors {
            println!("{error}");
        }
    }
    Ok(())
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}
