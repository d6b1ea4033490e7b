//! `${name}` references to values of the configuration itself, as Pynchy
//! writes `path: "${workspace_base_path}/my_assistant"`.
//!
//! The names are fixed (see [`REFERENCES`]); each stands for the value the
//! file gives that setting (its own `${ENV}` references expanded), or the
//! default. **The configuration value wins over an environment variable of
//! the same name**: the name is a documented setting of this file, and an
//! unrelated variable that happens to share it must not move every
//! workspace folder from one shell to the next (`config check` would then
//! not say what `workspace up` does). Such a variable gets a warning. To
//! take the value from the environment, write
//! `workspace_base_path: ${MY_VARIABLE}` under `containers`.

use std::collections::BTreeMap;
use std::path::Path;

use super::compat::Warning;
use super::error::Site;
use super::interpolate;
use super::located::Document;
use super::node::{Seg, line_col};

/// Reference name, the setting it stands for, and that setting's default.
pub(crate) const REFERENCES: [(&str, [&str; 2], &str); 1] = [(
    "workspace_base_path",
    ["containers", "workspace_base_path"],
    "~/pincer_workspaces",
)];

/// The value of every reference name in `doc`.
pub(crate) fn values(
    doc: &Document<'_>,
    env: &dyn Fn(&str) -> Option<String>,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (name, path, default) in REFERENCES {
        let path: Vec<Seg<'_>> = path.iter().map(|k| Seg::Key(k)).collect();
        let value = match doc.string_at(&path) {
            // Its own `${ENV}` references; a broken one is reported where
            // it is written, and the reference is then left unresolved.
            Some(written) => match interpolate::expand(written, env) {
                Ok(expanded) => expanded.value,
                Err(_) => continue,
            },
            None => default.to_owned(),
        };
        out.insert(name.to_owned(), value);
    }
    out
}

/// A warning for each reference name used in `text` that the environment
/// also sets (the configuration value is used).
pub(crate) fn shadowed(
    text: &str,
    file: &Path,
    values: &BTreeMap<String, String>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Vec<Warning> {
    let site = Site::new(file.display().to_string());
    let mut out = Vec::new();
    for (name, setting, _) in REFERENCES {
        if !values.contains_key(name) || env(name).is_none() {
            continue;
        }
        let Some(offset) = text.find(&format!("${{{name}}}")) else {
            continue;
        };
        out.push(Warning {
            at: site.at(line_col(text, offset)),
            message: format!(
                "`${{{name}}}` is the configuration value {} (pincer uses it); the environment variable {name} is also set and is not used here",
                setting.join(".")
            ),
        });
    }
    out
}
