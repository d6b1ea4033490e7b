//! Who an audit event is about and what happened, as types: the stored
//! text (`actor`, `kind` columns) comes from here alone, so a call site
//! cannot misspell a kind and `pincer policy audit` reads what was meant.

use std::fmt;

/// Who acted, or whom the event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Actor<'a> {
    /// The daemon (reloads, pruning, schedule files): `pincer`.
    Pincer,
    /// Host machinery on its own (reconciling containers and MCP servers,
    /// migrating plugin state): `host`.
    Host,
    /// A person at the CLI: `cli`, or `cli:USER` when the command says who.
    Cli(Option<&'a str>),
    /// The scheduler running a task: `scheduler`.
    Scheduler,
    /// A plugin: `plugin:NAME`.
    Plugin(&'a str),
    /// A channel: `channel:NAME`.
    Channel(&'a str),
    /// A workspace (its container, its gateway key): `workspace:NAME`.
    Workspace(&'a str),
    /// A workspace's agent, through its tools: `agent:NAME`.
    Agent(&'a str),
    /// An MCP server: `mcp:NAME`.
    McpServer(&'a str),
    /// A person signed in to the web console: `web`.
    Web,
}

impl fmt::Display for Actor<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Pincer => f.write_str("pincer"),
            Self::Host => f.write_str("host"),
            Self::Cli(None) => f.write_str("cli"),
            Self::Cli(Some(user)) => write!(f, "cli:{user}"),
            Self::Scheduler => f.write_str("scheduler"),
            Self::Plugin(name) => write!(f, "plugin:{name}"),
            Self::Channel(name) => write!(f, "channel:{name}"),
            Self::Workspace(name) => write!(f, "workspace:{name}"),
            Self::Agent(name) => write!(f, "agent:{name}"),
            Self::McpServer(name) => write!(f, "mcp:{name}"),
            Self::Web => f.write_str("web"),
        }
    }
}

macro_rules! actions {
    ($($(#[$doc:meta])* $variant:ident => $text:literal,)*) => {
        /// What happened; stored as its dotted kind.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Action {
            $($(#[$doc])* $variant,)*
        }

        impl Action {
            /// Every action, for checks and listings.
            pub const ALL: &[Action] = &[$(Self::$variant,)*];

            /// The dotted kind stored in `audit_events.kind`.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $text,)*
                }
            }
        }
    };
}

actions! {
    ApprovalDenied => "approval.denied",
    ApprovalExpired => "approval.expired",
    ApprovalGranted => "approval.granted",
    ApprovalRefusedApprover => "approval.refused_approver",
    ApprovalRefusedClick => "approval.refused_click",
    ApprovalRefusedUnapproved => "approval.refused_unapproved",
    ApprovalRequested => "approval.requested",
    ApprovalRuleRevoked => "approval.rule_revoked",
    ApprovalTierSet => "approval.tier_set",
    ChannelDeliveryFailed => "channel.delivery_failed",
    ChannelFileSent => "channel.file_sent",
    ChannelFilesTaken => "channel.files_taken",
    ChannelPairingApproved => "channel.pairing_approved",
    ChannelPairingAsked => "channel.pairing_asked",
    ChannelPairingDenied => "channel.pairing_denied",
    ChannelPairingRemoved => "channel.pairing_removed",
    ChannelRateLimited => "channel.rate_limited",
    ChannelSenderRefused => "channel.sender_refused",
    ConfigReloadRefused => "config.reload_refused",
    ContainerExecRefused => "container.exec_refused",
    ContainerOomKill => "container.oom_kill",
    ContainerOrphanRemoved => "container.orphan_removed",
    ContainerPaused => "container.paused",
    ContainerPidsLimit => "container.pids_limit",
    ContainerReplaced => "container.replaced",
    ContainerStopped => "container.stopped",
    ContainerVerifyFailed => "container.verify_failed",
    ContainerWoken => "container.woken",
    ContainerWorkspaceReowned => "container.workspace_reowned",
    EgressAllowed => "egress.allowed",
    EgressRefused => "egress.refused",
    GatewayCall => "gateway.call",
    GatewayDenied => "gateway.denied",
    GatewayError => "gateway.error",
    GatewayToolCall => "gateway.tool_call",
    McpCallTimeout => "mcp.call_timeout",
    McpOrphanRemoved => "mcp.orphan_removed",
    McpServerFailed => "mcp.server_failed",
    McpServerRestarted => "mcp.server_restarted",
    McpServerStarted => "mcp.server_started",
    McpVerifyFailed => "mcp.verify_failed",
    PluginDenied => "plugin.denied",
    PluginFault => "plugin.fault",
    PluginInstalledFromRegistry => "plugin.installed_from_registry",
    PluginInstallUnsigned => "plugin.install_unsigned",
    PluginInstallUntrusted => "plugin.install_untrusted",
    PluginReplaced => "plugin.replaced",
    PluginStateMigrated => "plugin.state_migrated",
    PluginUpdatedFromRegistry => "plugin.updated_from_registry",
    ScheduleAgentCancelled => "schedule.agent_cancelled",
    ScheduleAgentCreated => "schedule.agent_created",
    ScheduleAgentProposed => "schedule.agent_proposed",
    ScheduleApproved => "schedule.approved",
    ScheduleCancelled => "schedule.cancelled",
    ScheduleFileRefused => "schedule.file_refused",
    ScheduleReloadRefused => "schedule.reload_refused",
    ScheduleRunFailed => "schedule.run_failed",
    StatePruned => "state.pruned",
    TurnRunnerFlood => "turn.runner_flood",
    WebSignedIn => "web.signed_in",
    WebSignedOut => "web.signed_out",
    ScheduleRunRequested => "schedule.run_requested",
    SchedulePaused => "schedule.paused",
    ScheduleResumed => "schedule.resumed",
    MemoryForgotten => "memory.forgotten",
    ChannelDeliveryRetried => "channel.delivery_retried",
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_distinct_dotted_names() {
        let mut seen = std::collections::BTreeSet::new();
        for action in Action::ALL {
            let kind = action.as_str();
            assert!(seen.insert(kind), "{kind} twice");
            let (room, what) = kind.split_once('.').expect("dotted");
            assert!(!room.is_empty() && !what.is_empty(), "{kind}");
        }
    }

    #[test]
    fn actors_print_as_stored() {
        assert_eq!(Actor::Plugin("skill-calc").to_string(), "plugin:skill-calc");
        assert_eq!(Actor::Cli(Some("ada")).to_string(), "cli:ada");
        assert_eq!(Actor::Cli(None).to_string(), "cli");
        assert_eq!(Actor::McpServer("db").to_string(), "mcp:db");
    }
}
