//! Who may call what: the pure part of the MCP gateway, from configuration
//! alone. A tool is exposed as `<source>__<tool>` where the source is a skill
//! or an MCP server the workspace lists and is allowed to use, or the
//! built-in `memory` when the workspace's memory is enabled.

use crate::config::{Config, McpServer, Skill};

/// Separates the source (skill or server) from the tool in exposed names.
pub const SEPARATOR: &str = "__";

/// The source name of the built-in memory tools. Configuration refuses a
/// skill or MCP server of this name; [`sources`] skips one all the same.
pub const MEMORY: &str = crate::memory::TOOL_NAMESPACE;

/// The built-in memory tools, without the `memory__` prefix.
pub const MEMORY_TOOLS: [&str; 3] = ["memorize", "recall", "forget"];

/// Where a namespaced tool comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    Skill {
        name: String,
        tools: Vec<String>,
    },
    Server {
        name: String,
        server: McpServer,
    },
    /// The workspace's long-term memory.
    Memory,
}

impl Source {
    pub fn name(&self) -> &str {
        match self {
            Source::Skill { name, .. } | Source::Server { name, .. } => name,
            Source::Memory => MEMORY,
        }
    }

    /// The configured `tools` filter lets `tool` through.
    pub fn allows_tool(&self, tool: &str) -> bool {
        let filter = match self {
            Source::Skill { tools, .. } => tools,
            Source::Server { server, .. } => &server.tools,
            Source::Memory => return MEMORY_TOOLS.contains(&tool),
        };
        filter.is_empty() || filter.iter().any(|t| t == tool)
    }
}

fn admits(allowed: &[String], workspace: &str) -> bool {
    allowed.iter().any(|w| w == "*" || w == workspace)
}

/// Memory (when enabled), then every skill and MCP server `workspace` both
/// lists and is allowed to use.
pub fn sources(config: &Config, workspace: &str) -> Vec<Source> {
    let Some(ws) = config.workspaces.get(workspace) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if ws.memory.enabled {
        out.push(Source::Memory);
    }
    for name in ws.skills.iter().filter(|n| *n != MEMORY) {
        let rule = config
            .skills
            .get(name)
            .cloned()
            .unwrap_or_else(Skill::default);
        if admits(&rule.allowed_workspaces, workspace) {
            out.push(Source::Skill {
                name: name.clone(),
                tools: rule.tools,
            });
        }
    }
    for name in ws.mcp_servers.iter().filter(|n| *n != MEMORY) {
        if let Some(server) = config.mcp_servers.get(name)
            && admits(&server.allowed_workspaces, workspace)
        {
            out.push(Source::Server {
                name: name.clone(),
                server: server.clone(),
            });
        }
    }
    out
}

/// Resolves an exposed tool name for `workspace`, or says why it is refused.
pub fn resolve(
    config: &Config,
    workspace: &str,
    exposed: &str,
) -> Result<(Source, String), String> {
    let Some((prefix, tool)) = exposed.split_once(SEPARATOR) else {
        return Err(format!(
            "unknown tool `{exposed}`: tools are named `<server or skill>{SEPARATOR}<tool>`"
        ));
    };
    let Some(source) = sources(config, workspace)
        .into_iter()
        .find(|s| s.name() == prefix)
    else {
        return Err(format!(
            "tool `{exposed}` is not available to workspace `{workspace}`: `{prefix}` is not a skill or MCP server this workspace may use"
        ));
    };
    if source == Source::Memory && !source.allows_tool(tool) {
        return Err(format!(
            "unknown tool `{exposed}`: memory offers {}",
            MEMORY_TOOLS
                .map(|t| format!("{MEMORY}{SEPARATOR}{t}"))
                .join(", ")
        ));
    }
    if !source.allows_tool(tool) {
        return Err(format!(
            "tool `{exposed}` is not available to workspace `{workspace}`: `{tool}` is filtered out by the `tools` list of `{prefix}`"
        ));
    }
    Ok((source, tool.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

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
                tools: vec![],
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
        let names: Vec<String> = sources(&config, "main")
            .iter()
            .map(|s| s.name().to_string())
            .collect();
        assert_eq!(names, ["memory", "skill-calc", "files"]);
        assert_eq!(sources(&config, "other"), [Source::Memory]);
        assert!(sources(&config, "nobody").is_empty());
    }

    #[test]
    fn memory_tools_exist_only_while_memory_is_enabled() {
        let mut config = config();
        let (source, tool) = resolve(&config, "main", "memory__recall").unwrap();
        assert_eq!((source, tool.as_str()), (Source::Memory, "recall"));
        let unknown = resolve(&config, "main", "memory__drop_all").unwrap_err();
        assert!(
            unknown.contains("memory__memorize, memory__recall, memory__forget"),
            "{unknown}"
        );

        if let Some(main) = config.workspaces.get_mut("main") {
            main.memory.enabled = false;
        }
        assert!(!sources(&config, "main").contains(&Source::Memory));
        let refused = resolve(&config, "main", "memory__recall").unwrap_err();
        assert!(
            refused.contains("not available to workspace `main`"),
            "{refused}"
        );
        assert!(resolve(&config, "other", "memory__recall").is_ok());
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
            sources(&config, "other"),
            [Source::Memory],
            "only the built-in memory answers to `memory`"
        );
        assert_eq!(
            resolve(&config, "other", "memory__recall").unwrap().0,
            Source::Memory
        );
        if let Some(other) = config.workspaces.get_mut("other") {
            other.memory.enabled = false;
        }
        assert!(sources(&config, "other").is_empty());
        assert!(resolve(&config, "other", "memory__recall").is_err());
    }

    #[test]
    fn resolve_applies_lists_and_filters() {
        let config = config();
        let (source, tool) = resolve(&config, "main", "files__read").unwrap();
        assert_eq!((source.name(), tool.as_str()), ("files", "read"));
        assert!(resolve(&config, "main", "skill-calc__evaluate").is_ok());
        assert!(
            resolve(&config, "main", "files__write")
                .unwrap_err()
                .contains("filtered")
        );
        assert!(resolve(&config, "main", "locked__x").is_err());
        assert!(resolve(&config, "main", "skill-notes__add").is_err());
        assert!(resolve(&config, "other", "files__read").is_err());
        assert!(resolve(&config, "main", "plain").is_err());
    }
}
