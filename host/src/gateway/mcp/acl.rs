//! Who may call what: the pure part of the MCP gateway, from configuration
//! alone. A tool is exposed as `<source>__<tool>` where the source is a skill
//! or an MCP server the workspace lists and is allowed to use.

use crate::config::{Config, McpServer, Skill};

/// Separates the source (skill or server) from the tool in exposed names.
pub const SEPARATOR: &str = "__";

/// Where a namespaced tool comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    Skill { name: String, tools: Vec<String> },
    Server { name: String, server: McpServer },
}

impl Source {
    pub fn name(&self) -> &str {
        match self {
            Source::Skill { name, .. } | Source::Server { name, .. } => name,
        }
    }

    /// The configured `tools` filter lets `tool` through.
    pub fn allows_tool(&self, tool: &str) -> bool {
        let filter = match self {
            Source::Skill { tools, .. } => tools,
            Source::Server { server, .. } => &server.tools,
        };
        filter.is_empty() || filter.iter().any(|t| t == tool)
    }
}

fn admits(allowed: &[String], workspace: &str) -> bool {
    allowed.iter().any(|w| w == "*" || w == workspace)
}

/// Every skill and MCP server `workspace` both lists and is allowed to use.
pub fn sources(config: &Config, workspace: &str) -> Vec<Source> {
    let Some(ws) = config.workspaces.get(workspace) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for name in &ws.skills {
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
    for name in &ws.mcp_servers {
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
        assert_eq!(names, ["skill-calc", "files"]);
        assert!(sources(&config, "other").is_empty());
        assert!(sources(&config, "nobody").is_empty());
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
