//! Who may call what: the pure part of the MCP gateway. A tool is exposed
//! as `<source>__<tool>` where the source is the built-in `memory` or
//! `schedule`, a skill
//! or an MCP server, exactly as the workspace's [`WorkspaceReach`] (computed
//! once per configuration load, `crate::policy::reach`) says it may use.

use super::McpError;
use crate::config::{Config, McpServer, ToolName};
use crate::policy::{SourceKind, WorkspaceReach};

/// The source name of the built-in memory tools. Configuration refuses a
/// skill or MCP server of this name; the reach skips one all the same.
pub const MEMORY: &str = crate::policy::MEMORY;

/// The built-in memory tools, without the `memory__` prefix.
pub const MEMORY_TOOLS: [&str; 3] = crate::policy::MEMORY_TOOLS;

/// The source name of the built-in schedule tools.
pub const SCHEDULE: &str = crate::policy::SCHEDULE;

/// The built-in schedule tools, without the `schedule__` prefix.
pub const SCHEDULE_TOOLS: [&str; 3] = crate::policy::SCHEDULE_TOOLS;

/// Where a namespaced tool comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    Skill {
        name: String,
        tools: Vec<String>,
    },
    Server {
        name: String,
        server: Box<McpServer>,
    },
    /// The workspace's long-term memory.
    Memory,
    /// Tasks the agent schedules for itself.
    Schedule,
}

impl Source {
    pub fn name(&self) -> &str {
        match self {
            Source::Skill { name, .. } | Source::Server { name, .. } => name,
            Source::Memory => MEMORY,
            Source::Schedule => SCHEDULE,
        }
    }

    /// The configured `tools` filter lets `tool` through.
    pub fn allows_tool(&self, tool: &str) -> bool {
        let filter = match self {
            Source::Skill { tools, .. } => tools,
            Source::Server { server, .. } => &server.tools,
            Source::Memory => return MEMORY_TOOLS.contains(&tool),
            Source::Schedule => return SCHEDULE_TOOLS.contains(&tool),
        };
        filter.is_empty() || filter.iter().any(|t| t == tool)
    }
}

fn source(config: &Config, kind: SourceKind, name: &str, tools: &[String]) -> Option<Source> {
    match kind {
        SourceKind::Memory => Some(Source::Memory),
        SourceKind::Schedule => Some(Source::Schedule),
        SourceKind::Skill => Some(Source::Skill {
            name: name.to_owned(),
            tools: tools.to_vec(),
        }),
        SourceKind::Server => config.mcp_servers.get(name).map(|server| Source::Server {
            name: name.to_owned(),
            server: Box::new(McpServer {
                tools: tools.to_vec(),
                ..server.clone()
            }),
        }),
    }
}

/// Every source `reach` marks reachable: memory (when reachable), then the
/// skills, then the MCP servers, each with the reach's tool filter.
pub fn sources(config: &Config, reach: &WorkspaceReach) -> Vec<Source> {
    reach
        .reachable_sources()
        .filter_map(|(kind, s)| source(config, kind, &s.name, &s.tools))
        .collect()
}

/// Resolves an exposed tool name under `reach`, or says why it is refused
/// (which configuration or policy key refuses it, and what to change).
pub fn resolve(
    config: &Config,
    reach: &WorkspaceReach,
    exposed: &str,
) -> Result<(Source, String), McpError> {
    let workspace = &reach.workspace;
    let Some(ToolName {
        plugin: prefix,
        tool,
    }) = ToolName::parse(exposed)
    else {
        return Err(McpError::Refused(format!(
            "unknown tool `{exposed}`: tools are named `<server or skill>{}<tool>`",
            ToolName::SEPARATOR
        )));
    };
    let (kind, reachable) = reach.source(&prefix).map_err(|why| {
        McpError::Refused(format!(
            "tool `{exposed}` is not available to workspace `{workspace}`: {why}"
        ))
    })?;
    let Some(source) = source(config, kind, &reachable.name, &reachable.tools) else {
        return Err(McpError::Refused(format!(
            "tool `{exposed}` is not available to workspace `{workspace}`: MCP server `{prefix}` is not defined under mcp_servers"
        )));
    };
    let builtin = match source {
        Source::Memory => Some((MEMORY, MEMORY_TOOLS)),
        Source::Schedule => Some((SCHEDULE, SCHEDULE_TOOLS)),
        _ => None,
    };
    if let Some((name, tools)) = builtin
        && !source.allows_tool(&tool)
    {
        return Err(McpError::Refused(format!(
            "unknown tool `{exposed}`: {name} offers {}",
            tools.map(|t| ToolName::new(name, t).to_string()).join(", ")
        )));
    }
    if !source.allows_tool(&tool) {
        return Err(McpError::Refused(format!(
            "tool `{exposed}` is not available to workspace `{workspace}`: `{tool}` is filtered out by the `tools` list of `{prefix}`"
        )));
    }
    Ok((source, tool))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Skill;

    fn reach(config: &Config, workspace: &str) -> WorkspaceReach {
        let policy = crate::policy::PolicyCatalog::builtin()
            .unwrap()
            .effective(workspace, &[])
            .map_err(|e| e.to_string());
        WorkspaceReach::compute(config, workspace, policy.as_ref().map_err(Clone::clone))
    }

    fn config() -> Config {
        let mut config = Config::default();
        let main = crate::config::Workspace {
            skills: vec!["skill-calc".into(), "skill-notes".into()],
            mcp_servers: vec!["files".into(), "locked".into()],
            ..Default::default()
        };
        config.workspaces.insert("main".into(), main);
        config
            .workspaces
            .insert("other".into(), crate::config::Workspace::default());
        config.skills.insert(
            "skill-notes".into(),
            Skill {
                allowed_workspaces: vec!["other".into()],
                ..Skill::default()
            },
        );
        config.mcp_servers.insert(
            "files".into(),
            McpServer {
                command: Some(vec!["srv".into()]),
                tools: vec!["read".into()],
                ..McpServer::default()
            },
        );
        config.mcp_servers.insert(
            "locked".into(),
            McpServer {
                command: Some(vec!["srv".into()]),
                allowed_workspaces: vec!["other".into()],
                ..McpServer::default()
            },
        );
        config
    }

    #[test]
    fn a_workspace_sees_only_what_it_lists_and_is_allowed() {
        let config = config();
        let names: Vec<String> = sources(&config, &reach(&config, "main"))
            .iter()
            .map(|s| s.name().to_string())
            .collect();
        assert_eq!(names, ["memory", "skill-calc", "files"]);
        assert_eq!(sources(&config, &reach(&config, "other")), [Source::Memory]);
        assert!(sources(&config, &reach(&config, "nobody")).is_empty());
    }

    #[test]
    fn schedule_tools_exist_only_where_agent_schedules_allows() {
        let mut config = config();
        let refused = resolve(&config, &reach(&config, "main"), "schedule__create").unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("workspaces.main.agent_schedules is none"),
            "{refused}"
        );
        assert!(!sources(&config, &reach(&config, "main")).contains(&Source::Schedule));
        if let Some(main) = config.workspaces.get_mut("main") {
            main.agent_schedules = crate::config::AgentSchedules::Propose;
        }
        let (source, tool) = resolve(&config, &reach(&config, "main"), "schedule__create").unwrap();
        assert_eq!((source, tool.as_str()), (Source::Schedule, "create"));
        let unknown = resolve(&config, &reach(&config, "main"), "schedule__drop").unwrap_err();
        assert!(
            unknown
                .to_string()
                .contains("schedule__create, schedule__list, schedule__cancel"),
            "{unknown}"
        );
        assert!(
            resolve(&config, &reach(&config, "other"), "schedule__create").is_err(),
            "another workspace's setting is its own"
        );
    }

    #[test]
    fn memory_tools_exist_only_while_memory_is_enabled() {
        let mut config = config();
        let (source, tool) = resolve(&config, &reach(&config, "main"), "memory__recall").unwrap();
        assert_eq!((source, tool.as_str()), (Source::Memory, "recall"));
        let unknown = resolve(&config, &reach(&config, "main"), "memory__drop_all").unwrap_err();
        assert!(
            unknown
                .to_string()
                .contains("memory__memorize, memory__recall, memory__forget"),
            "{unknown}"
        );

        if let Some(main) = config.workspaces.get_mut("main") {
            main.memory.enabled = false;
        }
        assert!(!sources(&config, &reach(&config, "main")).contains(&Source::Memory));
        let refused = resolve(&config, &reach(&config, "main"), "memory__recall").unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("not available to workspace `main`"),
            "{refused}"
        );
        assert!(resolve(&config, &reach(&config, "other"), "memory__recall").is_ok());
    }

    #[test]
    fn a_skill_or_server_named_memory_never_shadows_the_built_in_tools() {
        let mut config = config();
        config.mcp_servers.insert(
            MEMORY.into(),
            McpServer {
                command: Some(vec!["srv".into()]),
                allowed_workspaces: vec!["*".into()],
                ..McpServer::default()
            },
        );
        for ws in config.workspaces.values_mut() {
            ws.skills.push(MEMORY.into());
            ws.mcp_servers.push(MEMORY.into());
        }
        assert_eq!(
            sources(&config, &reach(&config, "other")),
            [Source::Memory],
            "only the built-in memory answers to `memory`"
        );
        assert_eq!(
            resolve(&config, &reach(&config, "other"), "memory__recall")
                .unwrap()
                .0,
            Source::Memory
        );
        if let Some(other) = config.workspaces.get_mut("other") {
            other.memory.enabled = false;
        }
        assert!(sources(&config, &reach(&config, "other")).is_empty());
        assert!(resolve(&config, &reach(&config, "other"), "memory__recall").is_err());
    }

    #[test]
    fn resolve_applies_lists_and_filters() {
        let config = config();
        let (source, tool) = resolve(&config, &reach(&config, "main"), "files__read").unwrap();
        assert_eq!((source.name(), tool.as_str()), ("files", "read"));
        assert!(resolve(&config, &reach(&config, "main"), "skill-calc__evaluate").is_ok());
        assert!(
            resolve(&config, &reach(&config, "main"), "files__write")
                .unwrap_err()
                .to_string()
                .contains("filtered")
        );
        assert!(resolve(&config, &reach(&config, "main"), "locked__x").is_err());
        assert!(resolve(&config, &reach(&config, "main"), "skill-notes__add").is_err());
        assert!(resolve(&config, &reach(&config, "other"), "files__read").is_err());
        assert!(resolve(&config, &reach(&config, "main"), "plain").is_err());
    }
}
