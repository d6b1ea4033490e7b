//! What each workspace may reach through the gateway: its tool sources
//! (memory, skills, MCP servers, each with its tool filter) and its model
//! aliases, computed **once per configuration load** from the configuration
//! and the workspace's effective policy.
//!
//! One computation serves both sides (invariant 7): `pincer policy audit`
//! prints a [`WorkspaceReach`] and the gateway enforces the very same values
//! (MCP `tools/list` and `tools/call`, `/v1/models`, `/v1/chat/completions`,
//! `/v1/messages`). `tests/e2e/reach.rs` holds the two together.
//!
//! Rules:
//! - a skill is reachable when `workspaces.NAME.skills` lists it,
//!   `skills.SKILL.allowed_workspaces` admits the workspace (default `*`) and
//!   the effective policy's `allowed_skills` lists it (unset = no
//!   restriction);
//! - an MCP server likewise with `workspaces.NAME.mcp_servers`,
//!   `mcp_servers.SERVER.allowed_workspaces` and `allowed_mcp_servers`;
//! - the built-in memory tools when `workspaces.NAME.memory.enabled` and
//!   `allowed_skills` (when set) lists `memory`;
//! - the built-in schedule tools when `workspaces.NAME.agent_schedules` is
//!   `propose` or `auto` and `allowed_skills` (when set) lists `schedule`;
//! - model aliases: `workspaces.NAME.models` when set (explicit); otherwise
//!   `workspaces.NAME.model` and its fallbacks (transitively, as the router
//!   tries them) when `model` is set; otherwise every alias of
//!   `gateway.model_list`;
//! - a workspace whose policy cannot be applied reaches nothing (fail
//!   closed), and every refusal says why.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::Serialize;

use super::egress::EgressReach;
use super::merge::{EffectivePolicy, Setting};
use super::{PolicyCatalog, PolicyError};
use crate::config::{AgentSchedules, Config};

/// The source name of the built-in memory tools (also its name in
/// `allowed_skills`).
pub const MEMORY: &str = crate::config::MEMORY_SOURCE;

/// The built-in memory tools, without the `memory__` prefix.
pub const MEMORY_TOOLS: [&str; 3] = ["memorize", "recall", "forget"];

/// The source name of the built-in schedule tools (also its name in
/// `allowed_skills`).
pub const SCHEDULE: &str = crate::config::SCHEDULE_SOURCE;

/// The built-in schedule tools, without the `schedule__` prefix.
pub const SCHEDULE_TOOLS: [&str; 3] = ["create", "list", "cancel"];

/// One tool source (memory, a skill or an MCP server) a workspace names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolSource {
    pub name: String,
    /// The tools let through; empty = every tool the source offers.
    pub tools: Vec<String>,
    /// `None` when reachable; otherwise why not and what to change.
    pub refused: Option<String>,
}

impl ToolSource {
    pub fn reachable(&self) -> bool {
        self.refused.is_none()
    }

    /// The tool filter lets `tool` through.
    pub fn allows_tool(&self, tool: &str) -> bool {
        self.tools.is_empty() || self.tools.iter().any(|t| t == tool)
    }
}

/// Where a workspace's model allowlist comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ModelsFrom {
    /// `workspaces.NAME.models`.
    Explicit,
    /// Default: `workspaces.NAME.model` and its fallbacks.
    ModelAndFallbacks,
    /// Default: no `model` set, every alias of `gateway.model_list`.
    EveryAlias,
    /// The workspace's policy cannot be applied: nothing.
    Unavailable,
}

/// The model aliases a workspace may call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModelReach {
    /// Sorted.
    pub aliases: Vec<String>,
    pub from: ModelsFrom,
}

/// Everything one workspace may reach through the gateway.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WorkspaceReach {
    pub workspace: String,
    /// Set when the workspace's policy cannot be applied: then nothing is
    /// reachable and this is why.
    pub unavailable: Option<String>,
    /// The built-in memory tools.
    pub memory: ToolSource,
    /// The built-in schedule tools (tasks the agent proposes or creates).
    pub schedule: ToolSource,
    /// Every skill `workspaces.NAME.skills` lists, reachable or not.
    pub skills: Vec<ToolSource>,
    /// Every MCP server `workspaces.NAME.mcp_servers` lists, reachable or not.
    pub mcp_servers: Vec<ToolSource>,
    pub models: ModelReach,
    /// Where its container may connect through the egress proxy.
    pub egress: EgressReach,
}

fn admits(allowed: &[String], workspace: &str) -> bool {
    allowed.iter().any(|w| w == "*" || w == workspace)
}

/// Why `policy`'s `key` (`allowed_skills` / `allowed_mcp_servers`) refuses
/// `name`, if it does.
fn policy_refusal(
    workspace: &str,
    key: &str,
    list: &Option<Setting<Vec<String>>>,
    name: &str,
) -> Option<String> {
    let setting = list.as_ref()?;
    if setting.value.iter().any(|n| n == name) {
        return None;
    }
    let allowed = if setting.value.is_empty() {
        "none".to_owned()
    } else {
        setting.value.join(", ")
    };
    Some(format!(
        "the effective policy's {key} ({allowed}; from policy group {}) does not list `{name}`: \
         add `{name}` to {key} in that group, or remove the group from workspaces.{workspace}.policies",
        setting.from.join(", ")
    ))
}

impl WorkspaceReach {
    /// The reach of `workspace` under `policy` (its effective policy, or the
    /// error that keeps it from being applied).
    pub fn compute(
        config: &Config,
        workspace: &str,
        policy: Result<&EffectivePolicy, String>,
    ) -> WorkspaceReach {
        let ws = config.workspaces.get(workspace);
        let unavailable = match (&policy, ws) {
            (_, None) => Some(format!(
                "workspace `{workspace}` is not in the configuration (workspaces.{workspace})"
            )),
            (Err(e), _) => Some(format!(
                "the policy of workspace `{workspace}` cannot be applied, so it reaches nothing: {e}"
            )),
            (Ok(_), Some(_)) => None,
        };
        let blocked = |refusal: Option<String>| unavailable.clone().or(refusal);
        let policy = policy.ok();
        let allowed_skills = policy.and_then(|p| p.allowed_skills.clone());
        let allowed_servers = policy.and_then(|p| p.allowed_mcp_servers.clone());

        let memory_enabled = ws.is_some_and(|w| w.memory.enabled);
        let memory = ToolSource {
            name: MEMORY.to_owned(),
            tools: MEMORY_TOOLS.map(str::to_owned).to_vec(),
            refused: blocked(if memory_enabled {
                policy_refusal(workspace, "allowed_skills", &allowed_skills, MEMORY)
            } else {
                Some(format!(
                    "workspaces.{workspace}.memory.enabled is false: set it to true to offer the memory tools"
                ))
            }),
        };

        let agent_schedules = ws.map_or(AgentSchedules::None, |w| w.agent_schedules);
        let schedule = ToolSource {
            name: SCHEDULE.to_owned(),
            tools: SCHEDULE_TOOLS.map(str::to_owned).to_vec(),
            refused: blocked(if agent_schedules == AgentSchedules::None {
                Some(format!(
                    "workspaces.{workspace}.agent_schedules is none: set it to propose (a person approves each task) or auto to offer the schedule tools"
                ))
            } else {
                policy_refusal(workspace, "allowed_skills", &allowed_skills, SCHEDULE)
            }),
        };

        let builtin = |name: &String| name != MEMORY && name != SCHEDULE;
        let mut skills = Vec::new();
        let mut mcp_servers = Vec::new();
        if let Some(ws) = ws {
            for name in ws.skills.iter().filter(|n| builtin(n)) {
                let rule = config.skills.get(name).cloned().unwrap_or_default();
                let refusal = if admits(&rule.allowed_workspaces, workspace) {
                    policy_refusal(workspace, "allowed_skills", &allowed_skills, name)
                } else {
                    Some(format!(
                        "skills.{name}.allowed_workspaces does not admit `{workspace}`: add it there (or `*`)"
                    ))
                };
                skills.push(ToolSource {
                    name: name.clone(),
                    tools: rule.tools,
                    refused: blocked(refusal),
                });
            }
            for name in ws.mcp_servers.iter().filter(|n| builtin(n)) {
                let (tools, refusal) = match config.mcp_servers.get(name) {
                    None => (
                        Vec::new(),
                        Some(format!(
                            "MCP server `{name}` is not defined under mcp_servers"
                        )),
                    ),
                    Some(server) if !admits(&server.allowed_workspaces, workspace) => (
                        server.tools.clone(),
                        Some(format!(
                            "mcp_servers.{name}.allowed_workspaces does not admit `{workspace}`: add it there (or `*`)"
                        )),
                    ),
                    Some(server) => (
                        server.tools.clone(),
                        policy_refusal(workspace, "allowed_mcp_servers", &allowed_servers, name),
                    ),
                };
                mcp_servers.push(ToolSource {
                    name: name.clone(),
                    tools,
                    refused: blocked(refusal),
                });
            }
        }

        let models = match (ws, &unavailable) {
            (Some(ws), None) => model_reach(config, ws),
            _ => ModelReach {
                aliases: Vec::new(),
                from: ModelsFrom::Unavailable,
            },
        };
        let egress = match (policy, ws, &unavailable) {
            (Some(policy), Some(ws), None) => EgressReach::compute(
                workspace,
                &policy.egress,
                &ws.egress,
                &ws.tunnels,
                policy.network.value,
            )
            .asking(ws.egress_ask),
            _ => EgressReach::closed(
                unavailable
                    .clone()
                    .unwrap_or_else(|| format!("workspace `{workspace}` reaches nothing")),
            ),
        };
        WorkspaceReach {
            workspace: workspace.to_owned(),
            unavailable,
            memory,
            schedule,
            skills,
            mcp_servers,
            models,
            egress,
        }
    }

    /// Every source, reachable or not: memory, schedule, the skills, the
    /// MCP servers.
    fn all_sources(&self) -> impl Iterator<Item = (SourceKind, &ToolSource)> {
        [
            (SourceKind::Memory, &self.memory),
            (SourceKind::Schedule, &self.schedule),
        ]
        .into_iter()
        .chain(self.skills.iter().map(|s| (SourceKind::Skill, s)))
        .chain(self.mcp_servers.iter().map(|s| (SourceKind::Server, s)))
    }

    /// Memory and schedule (when reachable), then the reachable skills,
    /// then the reachable MCP servers.
    pub fn reachable_sources(&self) -> impl Iterator<Item = (SourceKind, &ToolSource)> {
        self.all_sources().filter(|(_, s)| s.reachable())
    }

    /// The source named `prefix` if it is reachable, else why not (which
    /// key refuses it and what to change).
    // String: the reason is the sentence the gateway answers and audits.
    pub fn source(&self, prefix: &str) -> Result<(SourceKind, &ToolSource), String> {
        let workspace = &self.workspace;
        let named = self.all_sources().find(|(_, s)| s.name == prefix);
        match named {
            Some((kind, source)) => match &source.refused {
                None => Ok((kind, source)),
                Some(why) => Err(why.clone()),
            },
            None => Err(format!(
                "`{prefix}` is not a skill or MCP server this workspace may use (list it in \
                 workspaces.{workspace}.skills or workspaces.{workspace}.mcp_servers)"
            )),
        }
    }

    /// `Ok` when `alias` is one of the workspace's model aliases, else why
    /// not and what to change.
    // String: the reason is the sentence the gateway answers (403) and audits.
    pub fn model(&self, alias: &str) -> Result<(), String> {
        if self.models.aliases.iter().any(|a| a == alias) {
            return Ok(());
        }
        let workspace = &self.workspace;
        let allowed = if self.models.aliases.is_empty() {
            "none".to_owned()
        } else {
            self.models.aliases.join(", ")
        };
        Err(match (&self.unavailable, self.models.from) {
            (Some(why), _) => format!("model `{alias}` is not available: {why}"),
            (None, ModelsFrom::Explicit) => format!(
                "model `{alias}` is not available to workspace `{workspace}`: \
                 workspaces.{workspace}.models allows {allowed}; add `{alias}` there to allow it"
            ),
            (None, _) => format!(
                "model `{alias}` is not available to workspace `{workspace}`: it may use {allowed} \
                 (workspaces.{workspace}.model and its fallbacks); list the aliases it may use in \
                 workspaces.{workspace}.models to allow others"
            ),
        })
    }
}

/// What kind of source a [`ToolSource`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceKind {
    Memory,
    Schedule,
    Skill,
    Server,
}

fn model_reach(config: &Config, ws: &crate::config::Workspace) -> ModelReach {
    let (aliases, from): (BTreeSet<String>, _) = match (&ws.models, &ws.model) {
        (Some(models), _) => (models.iter().cloned().collect(), ModelsFrom::Explicit),
        (None, Some(model)) => (
            crate::config::with_fallbacks(config, model)
                .into_iter()
                .collect(),
            ModelsFrom::ModelAndFallbacks,
        ),
        (None, None) => (
            config
                .gateway
                .model_list
                .iter()
                .map(|d| d.model_name.clone())
                .collect(),
            ModelsFrom::EveryAlias,
        ),
    };
    ModelReach {
        aliases: aliases.into_iter().collect(),
        from,
    }
}

/// The reach of every configured workspace, computed once per
/// configuration load and shared by everything that enforces it.
#[derive(Debug, Clone, Default)]
pub struct Reaches {
    by_workspace: BTreeMap<String, Arc<WorkspaceReach>>,
}

impl Reaches {
    /// Loads the policy catalog (built-in groups and `containers.policy_dirs`)
    /// and computes each workspace's reach. A catalog that cannot be loaded
    /// or a policy that cannot be applied leaves that workspace reaching
    /// nothing, with the reason.
    pub fn compute(config: &Config) -> Reaches {
        let catalog = PolicyCatalog::load(&config.containers.policy_dirs);
        Self::with_catalog(config, catalog.as_ref())
    }

    /// As [`Reaches::compute`] with a catalog already loaded.
    pub fn with_catalog(config: &Config, catalog: Result<&PolicyCatalog, &PolicyError>) -> Reaches {
        let by_workspace = config
            .workspaces
            .iter()
            .map(|(name, ws)| {
                let policy = match catalog {
                    Ok(catalog) => catalog
                        .effective(name, &ws.policies)
                        .map_err(|e| e.to_string()),
                    Err(e) => Err(e.to_string()),
                };
                let reach =
                    WorkspaceReach::compute(config, name, policy.as_ref().map_err(Clone::clone));
                (name.clone(), Arc::new(reach))
            })
            .collect();
        Reaches { by_workspace }
    }

    /// `None` for a workspace that is not configured.
    pub fn get(&self, workspace: &str) -> Option<&Arc<WorkspaceReach>> {
        self.by_workspace.get(workspace)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&String, &Arc<WorkspaceReach>)> {
        self.by_workspace.iter()
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    const CONFIG: &str = "
gateway:
  model_list:
    - {model_name: a, litellm_params: {model: ollama/a}}
    - {model_name: b, litellm_params: {model: ollama/b}}
    - {model_name: c, litellm_params: {model: ollama/c}}
  fallbacks: [{a: [b]}, {b: [c]}]
workspaces:
  chained: {model: a, skills: [calc], mcp_servers: [files]}
  fixed: {model: c, models: [c]}
  open: {memory: {enabled: false}}
  broken: {policies: [no_such_group], skills: [calc]}
skills:
  calc: {tools: [evaluate]}
mcp_servers:
  files: {command: [srv], tools: [read]}
";

    fn reaches() -> Reaches {
        let config =
            Config::from_str_with_env(CONFIG, Path::new("pincer.yaml"), |_| None).expect("config");
        Reaches::compute(&config)
    }

    #[test]
    fn models_default_to_the_model_and_its_fallbacks_transitively() {
        let all = reaches();
        let chained = &all.get("chained").unwrap().models;
        assert_eq!(chained.aliases, ["a", "b", "c"]);
        assert_eq!(chained.from, ModelsFrom::ModelAndFallbacks);
        let fixed = all.get("fixed").unwrap();
        assert_eq!(fixed.models.aliases, ["c"]);
        assert_eq!(fixed.models.from, ModelsFrom::Explicit);
        let refused = fixed.model("a").unwrap_err();
        assert!(
            refused.contains("workspaces.fixed.models allows c"),
            "{refused}"
        );
        let open = all.get("open").unwrap();
        assert_eq!(open.models.from, ModelsFrom::EveryAlias);
        assert_eq!(open.models.aliases, ["a", "b", "c"]);
    }

    #[test]
    fn sources_carry_their_filters_and_refusals() {
        let all = reaches();
        let chained = all.get("chained").unwrap();
        let names: Vec<&str> = chained
            .reachable_sources()
            .map(|(_, s)| s.name.as_str())
            .collect();
        assert_eq!(names, ["memory", "calc", "files"]);
        assert_eq!(chained.skills[0].tools, ["evaluate"]);
        assert_eq!(chained.mcp_servers[0].tools, ["read"]);
        let open = all.get("open").unwrap();
        assert_eq!(open.reachable_sources().count(), 0);
        assert!(
            open.source(MEMORY)
                .unwrap_err()
                .contains("workspaces.open.memory.enabled is false")
        );
        assert!(
            open.source("calc")
                .unwrap_err()
                .contains("workspaces.open.skills")
        );
        assert!(all.get("nobody").is_none());
    }

    #[test]
    fn a_policy_that_cannot_be_applied_reaches_nothing() {
        let all = reaches();
        let broken = all.get("broken").unwrap();
        let why = broken.unavailable.as_deref().unwrap();
        assert!(why.contains("no_such_group"), "{why}");
        assert_eq!(broken.reachable_sources().count(), 0);
        assert!(broken.models.aliases.is_empty());
        assert!(broken.source("calc").unwrap_err().contains("no_such_group"));
        assert!(broken.model("a").unwrap_err().contains("no_such_group"));
    }
}
