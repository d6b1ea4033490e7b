//! `plugins.enabled`: when set, the only plugins loaded are those it lists
//! and those the configuration names elsewhere (channel plugins, workspace
//! skills and observers, `skills:` rules). Names are pincer plugin names;
//! Pynchy's Python entry-point names (`pynchy.builtin.channels.slack`) map
//! to pincer's plugin of that kind and name when there is one.

use std::collections::BTreeSet;

use super::Catalog;
use crate::config::Config;

/// Pynchy's entry-point kinds and pincer's plugin name prefix for each.
const KINDS: [(&str, &str); 4] = [
    ("channels", "channel"),
    ("skills", "skill"),
    ("observers", "observer"),
    ("tunnels", "tunnel"),
];

/// The pincer plugin `written` names in `catalog`.
///
/// # Errors
/// What to write instead: a did-you-mean for a near miss, or that a Python
/// plugin is not available in pincer.
pub fn resolve(written: &str, catalog: &Catalog) -> Result<String, super::Invalid> {
    let name = written.trim();
    if catalog.plugins.contains_key(name) {
        return Ok(name.to_owned());
    }
    let known: Vec<&str> = catalog.plugins.keys().map(String::as_str).collect();
    if let Some(rest) = name.strip_prefix("pynchy.builtin.")
        && let Some((kind, plugin)) = rest.split_once('.')
    {
        let Some((_, prefix)) = KINDS.iter().find(|(k, _)| *k == kind) else {
            return Err(super::Invalid::from(format!(
                "`{name}` is a Pynchy entry point of kind `{kind}`, which pincer does not have (it loads channels, skills, observers and tunnels): not available in pincer"
            )));
        };
        let mapped = format!("{prefix}-{}", plugin.replace('_', "-"));
        if catalog.plugins.contains_key(&mapped) {
            return Ok(mapped);
        }
        return Err(super::Invalid::from(format!(
            "`{name}` is Pynchy's built-in {prefix} `{plugin}`; pincer has no plugin `{mapped}`: not available in pincer (plugins here: {})",
            known.join(", ")
        )));
    }
    let hint = crate::suggest::closest(name, known.iter().copied())
        .or_else(|| crate::suggest::closest(&name.replace('_', "-"), known.iter().copied()))
        .map(|best| format!(", did you mean `{best}`?"))
        .unwrap_or_default();
    let python = if name.contains('.') || name.contains('_') {
        " If it is a Python package, it is not available in pincer: pincer loads WebAssembly plugins (`pincer plugin new`, `pincer plugin install PATH`)."
    } else {
        ""
    };
    Err(super::Invalid::from(format!(
        "no plugin named `{name}`{hint} (installed or built-in: {}).{python}",
        known.join(", ")
    )))
}

/// Plugins the configuration names outside `plugins.enabled`.
pub fn referenced(config: &Config) -> BTreeSet<String> {
    let mut out: BTreeSet<String> = config.channels.values().map(|c| c.plugin.clone()).collect();
    out.extend(config.skills.keys().cloned());
    for ws in config.workspaces.values() {
        out.extend(ws.skills.iter().cloned());
        out.extend(ws.observers.iter().cloned());
    }
    out
}

/// `catalog` restricted to what `plugins.enabled` allows (unchanged when it
/// is not set). Names that do not resolve are left out here; `pincer config
/// check` reports them.
pub fn restrict(mut catalog: Catalog, config: &Config) -> Catalog {
    let Some(enabled) = &config.plugins.enabled else {
        return catalog;
    };
    let mut keep = referenced(config);
    keep.extend(enabled.iter().filter_map(|n| resolve(n, &catalog).ok()));
    let left_out: Vec<String> = catalog
        .plugins
        .keys()
        .filter(|name| !keep.contains(*name))
        .cloned()
        .collect();
    for name in left_out {
        catalog.plugins.remove(&name);
        catalog.not_enabled.insert(name);
    }
    catalog
}
