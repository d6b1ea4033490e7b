//! Names and limits that several rooms agree on: how a tool is named across
//! the gateway and schedules, the built-in tool sources, the default model
//! alias and its fallbacks, the largest message. They live here, on the
//! floor every room already stands on, so that no room climbs to another's
//! for a constant.

use std::fmt;

use super::Config;

/// Largest inbound message accepted, and the largest prompt a schedule or
/// a tool may hand to a turn.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024;

/// The model alias a workspace uses when it names none.
pub const DEFAULT_MODEL_ALIAS: &str = "default";

/// The source name of the built-in memory tools (`memory__recall`, …), also
/// its name in `allowed_skills`; no skill or MCP server may take it.
pub const MEMORY_SOURCE: &str = "memory";

/// The source name of the built-in schedule tools (`schedule__create`, …),
/// also its name in `allowed_skills`; no skill or MCP server may take it.
pub const SCHEDULE_SOURCE: &str = "schedule";

/// A tool as the MCP gateway exposes it: `<source>__<tool>`, where the
/// source is a skill (plugin), an MCP server or a built-in source.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ToolName {
    pub plugin: String,
    pub tool: String,
}

impl ToolName {
    /// Separates the source from the tool.
    pub const SEPARATOR: &'static str = "__";

    pub fn new(plugin: impl Into<String>, tool: impl Into<String>) -> Self {
        Self {
            plugin: plugin.into(),
            tool: tool.into(),
        }
    }

    /// Splits `<source>__<tool>` at the first separator; `None` without one.
    pub fn parse(exposed: &str) -> Option<Self> {
        exposed
            .split_once(Self::SEPARATOR)
            .map(|(plugin, tool)| Self::new(plugin, tool))
    }
}

impl fmt::Display for ToolName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}{}", self.plugin, Self::SEPARATOR, self.tool)
    }
}

/// How a schedule or a command names a skill: `plugin` (its only tool, or
/// one named beside it) or `plugin__tool`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SkillReference<'a> {
    pub plugin: &'a str,
    pub tool: Option<&'a str>,
}

impl<'a> SkillReference<'a> {
    pub fn parse(reference: &'a str) -> Self {
        match reference.split_once(ToolName::SEPARATOR) {
            Some((plugin, tool)) => Self {
                plugin,
                tool: Some(tool),
            },
            None => Self {
                plugin: reference,
                tool: None,
            },
        }
    }

    /// The plugin `reference` names.
    pub fn plugin_of(reference: &'a str) -> &'a str {
        Self::parse(reference).plugin
    }
}

/// `alias` and every alias the model router may fall back to from it,
/// depth first, each once.
pub fn with_fallbacks(config: &Config, alias: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut queue = vec![alias.to_owned()];
    while let Some(next) = queue.pop() {
        if out.contains(&next) {
            continue;
        }
        let fallbacks: Vec<String> = config
            .gateway
            .fallbacks
            .iter()
            .filter_map(|map| map.get(&next))
            .flatten()
            .cloned()
            .collect();
        out.push(next);
        queue.extend(fallbacks.into_iter().rev());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_split_at_the_first_separator_and_print_back() {
        let name = ToolName::parse("skill-calc__add__twice").expect("has a separator");
        assert_eq!(name, ToolName::new("skill-calc", "add__twice"));
        assert_eq!(name.to_string(), "skill-calc__add__twice");
        assert_eq!(ToolName::parse("skill-calc"), None);
    }

    #[test]
    fn skill_references_name_a_plugin_and_maybe_a_tool() {
        assert_eq!(
            SkillReference::parse("skill-notes__add"),
            SkillReference {
                plugin: "skill-notes",
                tool: Some("add")
            }
        );
        assert_eq!(SkillReference::parse("skill-notes").tool, None);
        assert_eq!(SkillReference::plugin_of("skill-notes__add"), "skill-notes");
    }
}
