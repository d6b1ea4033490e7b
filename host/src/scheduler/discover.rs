//! Finding and loading each workspace's `schedules.yaml`: where it lives
//! (beside `pincer.yaml`, never where a container can see it), which skills
//! and tools it may name, and the checks `pincer schedule check` and the
//! daemon share.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::file::{self, Checks};
use super::{Action, Task, agent};
use crate::config::{Config, ConfigError, SkillReference};
use crate::plugins::PluginHost;

/// Why a workspace's schedule file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum DiscoverError {
    /// The file is where it must not be, or cannot be resolved.
    #[error("{0}")]
    Location(String),
    /// The file does not parse or check.
    #[error(transparent)]
    File(#[from] ConfigError),
}

/// Where workspace `name`'s `schedules.yaml` belongs:
/// `workspaces/NAME/schedules.yaml` beside the configuration file (none
/// without one).
pub fn schedule_file(config_path: Option<&Path>, name: &str) -> Option<PathBuf> {
    let dir = config_path?.parent()?.to_path_buf();
    Some(dir.join("workspaces").join(name).join(file::FILE_NAME))
}

/// Workspace `name`'s `schedules.yaml`, if it exists.
pub fn schedule_path(config_path: Option<&Path>, name: &str) -> Option<PathBuf> {
    schedule_file(config_path, name).filter(|p| p.is_file())
}

/// Refuses a schedule file a workspace's container could see or write:
/// inside any workspace folder or any mount source, read-only ones too.
fn check_location(config: &Config, path: &Path) -> Result<(), DiscoverError> {
    let resolved = std::fs::canonicalize(path)
        .map_err(|e| DiscoverError::Location(format!("cannot resolve {}: {e}", path.display())))?;
    let mut places: Vec<(PathBuf, &str)> = config
        .workspaces
        .keys()
        .map(|name| (config.workspace_dir(name), "a workspace folder"))
        .collect();
    places.extend(
        config
            .workspaces
            .values()
            .flat_map(|ws| ws.mounts.iter())
            .map(|m| {
                let why = if m.read_only {
                    "a read-only mount source"
                } else {
                    "a read-write mount source"
                };
                (crate::config::expand_tilde(&m.source), why)
            }),
    );
    for (place, why) in places {
        let place = std::fs::canonicalize(&place).unwrap_or(place);
        if resolved.starts_with(&place) {
            return Err(DiscoverError::Location(format!(
                "{} lies inside {} ({why}), which a workspace container can see; an agent could read or change its own schedule. Keep schedules.yaml beside pincer.yaml (workspaces/NAME/schedules.yaml)",
                path.display(),
                place.display()
            )));
        }
    }
    Ok(())
}

/// The tools of each skill plugin, by plugin name (see [`Checks::tools`]).
pub type ToolLists = BTreeMap<String, Result<Vec<String>, String>>;

/// The skill plugins `text` (a `schedules.yaml`) names, as far as it parses.
pub fn named_plugins(text: &str, path: &Path) -> BTreeSet<String> {
    let Ok(tasks) = file::parse(text, path, &Checks::offline(chrono_tz::Tz::UTC)) else {
        return BTreeSet::new();
    };
    tasks
        .iter()
        .filter_map(|task| match &task.action {
            Action::Skill { skill, .. } => Some(SkillReference::plugin_of(skill).to_owned()),
            Action::Prompt(_) => None,
        })
        .collect()
}

/// The tools of `plugins` as workspace `workspace` would load them.
pub async fn list_tools(
    host: &PluginHost,
    catalog: &crate::plugins::Catalog,
    config: &Config,
    limits: crate::plugins::CallLimits,
    workspace: &str,
    plugins: &BTreeSet<String>,
) -> ToolLists {
    let mut lists = ToolLists::new();
    for name in plugins {
        let listed = match host.load_for_workspace(catalog, config, limits, name, workspace) {
            Ok(plugin) => host
                .skill_tools(&plugin)
                .await
                .map(|tools| tools.into_iter().map(|t| t.name).collect())
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        lists.insert(name.clone(), listed);
    }
    lists
}

/// The configured channels, and those of them without a
/// `default_conversation` (which `channel:NAME` cannot name).
pub fn channel_names(config: &Config) -> (BTreeSet<String>, BTreeSet<String>) {
    let without_default = config
        .channels
        .iter()
        .filter(|(_, c)| c.default_conversation.is_none())
        .map(|(name, _)| name.clone())
        .collect();
    (config.channels.keys().cloned().collect(), without_default)
}

/// Loads and checks workspace `name`'s tasks from `path`; with `tools`,
/// named tools are checked and a plugin's only tool is resolved.
pub fn load_tasks(
    config: &Config,
    name: &str,
    path: &Path,
    tools: Option<&ToolLists>,
) -> Result<Vec<Task>, DiscoverError> {
    check_location(config, path)?;
    let (channels, without_default) = channel_names(config);
    let skills: Vec<String> = config
        .workspaces
        .get(name)
        .map(|ws| ws.skills.clone())
        .unwrap_or_default();
    let skill = |wanted: &str| {
        let plugin = SkillReference::plugin_of(wanted);
        if skills.iter().any(|s| s == plugin) {
            Ok(())
        } else {
            Err(format!(
                "workspace `{name}` may not use skill `{plugin}` (add it to workspaces.{name}.skills)"
            ))
        }
    };
    let checks = Checks {
        default_zone: agent::default_zone(config),
        channels: Some(&channels),
        without_default: Some(&without_default),
        skill: Some(&skill),
        tools,
    };
    Ok(file::load(path, &checks)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A configuration whose workspaces live under `dir/ws`, with a
    /// writable mount from `dir/shared` and a read-only one from
    /// `dir/docs`, and its `schedules.yaml` at `at`.
    fn setup(at: &str, text: &str) -> (tempfile::TempDir, Config, PathBuf) {
        let dir = tempfile::tempdir().expect("dir");
        let base = dir.path().join("ws");
        let shared = dir.path().join("shared");
        let docs = dir.path().join("docs");
        std::fs::create_dir_all(base.join("team")).expect("workspace folder");
        std::fs::create_dir_all(&shared).expect("mount source");
        std::fs::create_dir_all(&docs).expect("read-only mount source");
        let config = Config::from_str_with_env(
            &format!(
                "containers: {{workspace_base_path: {}}}
workspaces:
  team:
    skills: [skill-calc]
    mounts:
      - {{source: {}, target: /shared, read_only: false}}
      - {{source: {}, target: /docs, read_only: true}}
channels:
  chat: {{plugin: channel-slack, workspace: team}}
",
                base.display(),
                shared.display(),
                docs.display()
            ),
            Path::new("pincer.yaml"),
            |_| None,
        )
        .expect("config");
        let path = dir.path().join(at);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("folder");
        std::fs::write(&path, text).expect("schedule");
        (dir, config, path)
    }

    const TASK: &str = "tasks:\n  - id: a\n    every: 1h\n    prompt: x\n";

    #[test]
    fn a_schedule_a_container_could_see_is_refused() {
        for (at, inside, why) in [
            ("ws/team/schedules.yaml", "ws/team", "a workspace folder"),
            (
                "shared/schedules.yaml",
                "shared",
                "a read-write mount source",
            ),
            (
                "docs/sub/schedules.yaml",
                "docs",
                "a read-only mount source",
            ),
        ] {
            let (dir, config, path) = setup(at, TASK);
            let root = dir.path().canonicalize().expect("real path");
            let got = format!(
                "{:#}",
                load_tasks(&config, "team", &path, None).unwrap_err()
            );
            assert_eq!(
                got,
                format!(
                    "{} lies inside {} ({why}), which a workspace container can see; an agent could read or change its own schedule. Keep schedules.yaml beside pincer.yaml (workspaces/NAME/schedules.yaml)",
                    path.display(),
                    root.join(inside).display()
                ),
                "{at}"
            );
        }
        let (_dir, config, path) = setup("workspaces/team/schedules.yaml", TASK);
        assert_eq!(
            load_tasks(&config, "team", &path, None)
                .expect("beside pincer.yaml")
                .len(),
            1
        );
    }

    #[test]
    fn skills_and_channels_the_workspace_cannot_use_are_located_errors() {
        let at = "workspaces/team/schedules.yaml";
        for (text, want) in [
            (
                "tasks:\n  - id: a\n    every: 1h\n    skill: skill-notes\n",
                "4:12: workspace `team` may not use skill `skill-notes` (add it to workspaces.team.skills)",
            ),
            (
                "tasks:\n  - id: a\n    every: 1h\n    prompt: x\n    deliver_to: [\"channel:nope\"]\n",
                "5:18: unknown channel `nope`",
            ),
            (
                "tasks:\n  - id: a\n    every: 1h\n    prompt: x\n    deliver_to: [\"channel:chat\"]\n",
                "5:18: channel `chat` has no default conversation: set channels.chat.default_conversation or write {channel: chat, conversation: ID}",
            ),
        ] {
            let (_dir, config, path) = setup(at, text);
            let got = format!(
                "{:#}",
                load_tasks(&config, "team", &path, None).unwrap_err()
            );
            assert_eq!(got, format!("{}:{want}", path.display()));
        }
    }
}
