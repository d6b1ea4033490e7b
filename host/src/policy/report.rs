//! `pincer policy audit WORKSPACE`: what a workspace's container gets, what
//! it can reach, how each restriction is enforced and the lethal-trifecta
//! verdict (private data + untrusted input + a way out).
//!
//! Nothing secret is shown: MCP server URLs are reduced to scheme and host,
//! stdio servers to their program name, model deployments to their
//! provider-qualified model.

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::compile::{RunnerPolicy, enforcement_notes, list_or_none};
use super::group::{NetworkMode, format_cpus, human_bytes};
use super::merge::{BASELINE, EffectivePolicy, GroupInfo, Setting, SourcedSet};
use super::reach::{ModelsFrom, ToolSource, WorkspaceReach};
use super::seccomp::{ENOSYS, EPERM, THREAD_CLONE_MASK};
use crate::audit::AuditEvent;
use crate::config::{Config, McpServer, Workspace};

/// What [`report`] needs besides the policy.
#[derive(Debug, Clone, Copy)]
pub struct ReportInput<'a> {
    pub config: &'a Config,
    pub workspace: &'a Workspace,
    /// Host folder mounted at `/workspace`.
    pub workspace_dir: &'a Path,
    /// The workspace's `$PINCER_HOME/run/<ws>` (its socket folders).
    pub run_dir: &'a Path,
    /// The agent runner binary mounted into the container.
    pub runner_binary: &'a Path,
    /// Skills whose manifest grants the http capability (a way out).
    pub plugin_http: &'a std::collections::BTreeMap<String, Vec<String>>,
    /// The containers of the MCP servers in their own container that the
    /// workspace lists (from `containers::mcp`, which starts them).
    pub mcp_containers: &'a [McpContainerSummary],
    /// The workspace's "always" rules stored in `pincer.db`.
    pub approval_rules: &'a [crate::approvals::Rule],
}

/// One MCP server's own container, as `pincer policy audit` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct McpContainerSummary {
    pub server: String,
    pub image: String,
    /// The server's groups (the baseline applies first).
    pub groups: Vec<String>,
    /// `None` when the policy cannot be applied (then `error` says why).
    pub container: Option<ContainerSummary>,
    /// Its volumes as written (checked when it starts).
    pub mounts: Vec<MountLine>,
    pub error: Option<String>,
}

/// The audit of one workspace's policy (`pincer policy audit`, `--json`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PolicyReport {
    pub workspace: String,
    /// The listed groups; the baseline applies before them.
    pub groups: Vec<GroupInfo>,
    /// Every effective setting with its value and provenance.
    pub settings: Vec<SettingLine>,
    pub container: ContainerSummary,
    pub mounts: Vec<MountLine>,
    pub reach: Reach,
    pub enforcement: Vec<String>,
    pub trifecta: Trifecta,
    /// Which calls wait for a person (the workspace's own tier, before a
    /// channel or sender tightens it).
    pub approvals: Option<ApprovalsLine>,
    /// The containers of the workspace's MCP servers that run in one.
    pub mcp_containers: Vec<McpContainerSummary>,
    /// Recorded denials, newest first; filled by the caller from the audit log.
    pub denials: Vec<AuditEvent>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SettingLine {
    pub setting: String,
    pub value: String,
    pub from: Vec<String>,
}

/// The compiled container settings, with the seccomp profile summarised.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ContainerSummary {
    pub network_mode: String,
    pub memory_bytes: i64,
    pub memory_swap_bytes: i64,
    pub nano_cpus: i64,
    pub pids_limit: i64,
    pub cap_drop: Vec<String>,
    pub cap_add: Vec<String>,
    pub no_new_privileges: bool,
    pub user: String,
    pub read_only_rootfs: bool,
    pub tmpfs: std::collections::BTreeMap<String, String>,
    pub mounts_read_only: bool,
    /// The inline seccomp profile is shown as `seccomp=<generated profile>`.
    pub security_opt: Vec<String>,
    pub runner: RunnerPolicy,
    pub allowed_skills: Option<Vec<String>>,
    pub allowed_mcp_servers: Option<Vec<String>>,
    pub seccomp: SeccompSummary,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SeccompSummary {
    /// `docker-default` or `generated`.
    pub profile: String,
    /// Names in the generated profile's unconditional allow rule.
    pub allowed_syscalls: usize,
    /// Rules in the generated profile.
    pub rules: usize,
    /// What the groups added to the default.
    pub added: Vec<SeccompRuleSummary>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SeccompRuleSummary {
    pub syscalls: Vec<String>,
    pub action: String,
    pub from: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MountLine {
    pub source: String,
    pub target: String,
    /// `rw`, `ro`, or `ro (forced by read_only_mounts)`.
    pub mode: String,
    /// What pincer mounts it for; `None` for the configured mounts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub purpose: Option<String>,
}

/// What the workspace reaches: printed from the same [`WorkspaceReach`]
/// the gateway enforces (`policy::reach`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reach {
    pub network: String,
    /// Set when the policy cannot be applied and nothing is reachable.
    pub unavailable: Option<String>,
    /// The built-in memory tools.
    pub memory: ReachItem,
    /// The built-in schedule tools (`workspaces.NAME.agent_schedules`).
    pub schedule: ReachItem,
    pub skills: Vec<ReachItem>,
    pub mcp_servers: Vec<ReachItem>,
    pub models: ModelsLine,
    /// Outbound HTTP destinations of each listed skill that has any:
    /// manifest ∩ `workspaces.NAME.plugin_http`, from
    /// `plugins::plugin_http_reach`, the computation the plugin host enforces.
    pub plugin_http: std::collections::BTreeMap<String, Vec<String>>,
    /// Where the container may connect through the egress proxy: the very
    /// value the proxy enforces.
    pub egress: crate::policy::EgressReach,
    /// The tunnel services it reaches as `http://SERVICE.tunnel/`, each
    /// with the plugin configured to serve it.
    pub tunnels: Vec<TunnelReach>,
    /// pincer's own host listeners this container could connect to: with
    /// network `bridge_unfiltered`, each one bound beyond loopback (the host answers on
    /// the bridge's gateway address too); with `none`, none.
    pub host_listeners: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReachItem {
    pub name: String,
    /// False when the configuration or the policy refuses it.
    pub reachable: bool,
    /// The tools let through; empty = every tool the source offers.
    pub tools: Vec<String>,
    pub note: String,
}

/// The model aliases the workspace may call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModelsLine {
    /// Sorted; exactly what the gateway serves on `/v1/models`.
    pub aliases: Vec<String>,
    /// `explicit` (workspaces.NAME.models), `model_and_fallbacks`,
    /// `every_alias` (the defaults) or `unavailable`.
    pub from: ModelsFrom,
    /// Each alias with its deployments and fallbacks.
    pub deployments: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Trifecta {
    pub private_data: Vec<String>,
    pub untrusted_input: Vec<String>,
    /// Ways out a call can take without a person's decision.
    pub exfiltration: Vec<String>,
    /// Ways out every use of which waits for approval (or is refused).
    pub gated: Vec<String>,
    /// `LETHAL: all three present` or `ok: no ...`.
    pub verdict: String,
}

impl Trifecta {
    pub fn is_lethal(&self) -> bool {
        !self.private_data.is_empty()
            && !self.untrusted_input.is_empty()
            && !self.exfiltration.is_empty()
    }
}

/// A workspace's approvals as the audit shows them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ApprovalsLine {
    pub tier: String,
    pub ask: Vec<String>,
    /// Configured rules, then the "always" rules in `pincer.db`.
    pub allow: Vec<String>,
    pub read_commands: bool,
    pub approvers: String,
    pub unattended: String,
    pub timeout_secs: u64,
    /// Sources of the workspace whose read-only claims are believed: their
    /// tools said to only read run unasked.
    pub trusted_claims: Vec<String>,
}

fn approvals_line(
    p: &crate::approvals::Policy,
    stored: &[crate::approvals::Rule],
    input: &ReportInput<'_>,
) -> ApprovalsLine {
    use crate::approvals::{Approvers, Unattended};
    ApprovalsLine {
        tier: p.tier.as_str().to_owned(),
        ask: p.ask.iter().map(ToString::to_string).collect(),
        allow: p
            .allow
            .iter()
            .chain(stored)
            .map(ToString::to_string)
            .collect(),
        read_commands: p.read_commands,
        approvers: match &p.approvers {
            Approvers::Originator => "originator".to_owned(),
            Approvers::Listed(ids) => ids.join(", "),
        },
        unattended: match p.unattended {
            Unattended::Deny => "deny",
            Unattended::Allow => "allow",
        }
        .to_owned(),
        timeout_secs: p.timeout.as_secs(),
        trusted_claims: trusted_sources(input),
    }
}

/// The workspace's skills and MCP servers whose read-only claims the
/// operator believes, as `skill NAME (trust_effects)` / `mcp NAME (…)`.
fn trusted_sources(input: &ReportInput<'_>) -> Vec<String> {
    use crate::approvals::SourceKind;
    let skills = input
        .workspace
        .skills
        .iter()
        .filter(|name| input.config.trusts_read_claims(SourceKind::Skill, name))
        .map(|name| format!("skill {name} (trust_effects)"));
    let servers = input
        .workspace
        .mcp_servers
        .iter()
        .filter(|name| input.config.trusts_read_claims(SourceKind::Mcp, name))
        .map(|name| format!("mcp {name} (trust_annotations)"));
    skills.chain(servers).collect()
}

/// Whether every call through a skill or MCP server (`source`; `None`:
/// `bash`) waits for a person or is refused under `policy`.
fn gated(
    policy: &crate::approvals::Policy,
    stored: &[crate::approvals::Rule],
    workspace: &str,
    source: Option<(crate::approvals::SourceKind, &str)>,
) -> bool {
    use crate::approvals::{Call, Judgement, Rule, ToolClass};
    let (tool, arguments) = match source {
        Some((_, name)) => (format!("{name}__"), serde_json::json!({})),
        None => (
            "bash".to_owned(),
            serde_json::json!({"command": "a-program-no-rule-names"}),
        ),
    };
    let call = Call {
        tool: &tool,
        source,
        arguments: &arguments,
    };
    if matches!(
        policy.judge(workspace, &call, ToolClass::Write, &[], &|_| false),
        Judgement::Run(_)
    ) {
        return false;
    }
    // A rule opens what it covers (for bash, any argv rule opens some
    // program): not gated then.
    !policy
        .allow
        .iter()
        .chain(stored)
        .any(|rule| match (rule, source) {
            (Rule::Argv(_), None) => true,
            (Rule::Tool(t), Some((_, name))) => t.starts_with(&tool) && !name.is_empty(),
            (Rule::Source { kind, name: n }, Some((k, name))) => {
                *kind == k && (n == "*" || n == name)
            }
            _ => false,
        })
}

/// Builds the audit report of `policy` (denials left empty for the caller).
pub fn report(policy: &EffectivePolicy, input: &ReportInput<'_>) -> PolicyReport {
    let computed = WorkspaceReach::compute(input.config, &policy.workspace, Ok(policy));
    let reach = reach(policy, input, &computed);
    let approvals = input.config.approval_policy(&policy.workspace, None, None);
    let trifecta = trifecta(policy, input, &reach, approvals.as_ref());
    PolicyReport {
        workspace: policy.workspace.clone(),
        groups: policy.groups.clone(),
        settings: setting_lines(policy),
        container: container_summary(policy),
        mounts: mounts(policy, input),
        reach,
        enforcement: enforcement_notes(policy),
        trifecta,
        approvals: approvals
            .as_ref()
            .map(|a| approvals_line(a, input.approval_rules, input)),
        mcp_containers: input.mcp_containers.to_vec(),
        denials: Vec::new(),
    }
}

fn line<T>(setting: &str, value: String, from: &Setting<T>) -> SettingLine {
    SettingLine {
        setting: setting.to_owned(),
        value,
        from: from.from.clone(),
    }
}

fn set_line(setting: &str, set: &SourcedSet) -> SettingLine {
    let mut from: Vec<String> = Vec::new();
    for group in set.values().flatten() {
        if !from.contains(group) {
            from.push(group.clone());
        }
    }
    if from.is_empty() {
        from.push(BASELINE.to_owned());
    }
    let items: Vec<String> = set.keys().cloned().collect();
    SettingLine {
        setting: setting.to_owned(),
        value: list_or_none(&items),
        from,
    }
}

fn optional_list(setting: &str, value: &Option<Setting<Vec<String>>>) -> SettingLine {
    match value {
        Some(s) => line(setting, list_or_none(&s.value), s),
        None => SettingLine {
            setting: setting.to_owned(),
            value: "any".to_owned(),
            from: vec![BASELINE.to_owned()],
        },
    }
}

fn setting_lines(p: &EffectivePolicy) -> Vec<SettingLine> {
    let mut lines = vec![
        line("network", p.network.value.to_string(), &p.network),
        line("memory", human_bytes(p.memory_bytes.value), &p.memory_bytes),
        line("cpus", format_cpus(p.nano_cpus.value), &p.nano_cpus),
        line("pids", p.pids.value.to_string(), &p.pids),
        line("user", p.user.value.clone(), &p.user),
        set_line("cap_drop", &p.cap_drop),
        set_line("cap_add", &p.cap_add),
        line(
            "no_new_privileges",
            p.no_new_privileges.value.to_string(),
            &p.no_new_privileges,
        ),
        line(
            "read_only_rootfs",
            p.read_only_rootfs.value.to_string(),
            &p.read_only_rootfs,
        ),
        line(
            "read_only_mounts",
            p.read_only_mounts.value.to_string(),
            &p.read_only_mounts,
        ),
    ];
    for (path, options) in &p.tmpfs {
        lines.push(line(
            &format!("tmpfs {path}"),
            options.value.clone(),
            options,
        ));
    }
    lines.extend([
        set_line("seccomp.deny", &p.seccomp_deny),
        set_line("seccomp.enosys", &p.seccomp_enosys),
        line(
            "seccomp.threads_only_clone",
            p.threads_only_clone.value.to_string(),
            &p.threads_only_clone,
        ),
        line(
            "runner.no_exec_after_start",
            p.no_exec_after_start.value.to_string(),
            &p.no_exec_after_start,
        ),
        optional_list("allowed_executables", &p.allowed_executables),
        optional_list("allowed_skills", &p.allowed_skills),
        optional_list("allowed_mcp_servers", &p.allowed_mcp_servers),
        line(
            "untrusted_input",
            p.untrusted_input.value.to_string(),
            &p.untrusted_input,
        ),
        line(
            "private_data",
            p.private_data.value.to_string(),
            &p.private_data,
        ),
    ]);
    lines
}

/// What a channel's `context` adds to its untrusted input: earlier
/// messages quoted into turns, of anyone in the thread unless `senders:
/// allowed`.
fn quoted_context_note(context: &crate::config::ChannelContext) -> String {
    if context.thread == 0 && context.channel == 0 {
        return String::new();
    }
    let whose = match context.senders {
        crate::config::ContextSenders::All => "anyone's, strangers' marked",
        crate::config::ContextSenders::Allowed => "allowed senders' only",
    };
    format!(
        ", whose earlier messages may be quoted into turns where the plugin reads history (context: thread {}, channel {}; {whose})",
        context.thread, context.channel
    )
}

fn seccomp_summary(p: &EffectivePolicy, rules: usize) -> SeccompSummary {
    let ruled =
        |name: &str| p.seccomp_deny.contains_key(name) || p.seccomp_enosys.contains_key(name);
    let allowed = p.seccomp_base.allow_names().filter(|n| !ruled(n)).count();
    let mut added = Vec::new();
    for (set, errno) in [(&p.seccomp_deny, EPERM), (&p.seccomp_enosys, ENOSYS)] {
        if set.is_empty() {
            continue;
        }
        let line = set_line("", set);
        added.push(SeccompRuleSummary {
            syscalls: set.keys().cloned().collect(),
            action: if errno == EPERM {
                "SCMP_ACT_ERRNO EPERM (1)".to_owned()
            } else {
                "SCMP_ACT_ERRNO ENOSYS (38)".to_owned()
            },
            from: line.from,
        });
    }
    if p.threads_only_clone.value && !ruled("clone") {
        added.push(SeccompRuleSummary {
            syscalls: vec!["clone".to_owned()],
            action: format!(
                "SCMP_ACT_ALLOW only if (flags & {THREAD_CLONE_MASK:#x}) == 0x10000 (threads)"
            ),
            from: p.threads_only_clone.from.clone(),
        });
    }
    SeccompSummary {
        profile: "generated".to_owned(),
        allowed_syscalls: allowed,
        rules,
        added,
    }
}

/// The audit's view of one MCP server's container: its effective policy
/// (or why it cannot be applied) and its volumes as written.
pub fn mcp_container_summary(
    server: &str,
    image: &str,
    groups: Vec<String>,
    policy: Result<&EffectivePolicy, String>,
    volumes: &[(String, String, bool)],
) -> McpContainerSummary {
    let forced = policy.as_ref().is_ok_and(|p| p.read_only_mounts.value);
    let mounts = volumes
        .iter()
        .map(|(source, target, read_only)| MountLine {
            source: source.clone(),
            target: target.clone(),
            mode: match (read_only, forced) {
                (true, _) => "ro".to_owned(),
                (false, true) => "ro (forced by read_only_mounts)".to_owned(),
                (false, false) => "rw".to_owned(),
            },
            purpose: None,
        })
        .collect();
    let (container, error) = match policy {
        Ok(p) => (Some(container_summary(p)), None),
        Err(e) => (None, Some(e)),
    };
    McpContainerSummary {
        server: server.to_owned(),
        image: image.to_owned(),
        groups,
        container,
        mounts,
        error,
    }
}

fn container_summary(p: &EffectivePolicy) -> ContainerSummary {
    let s = p.compile();
    let rules = s
        .seccomp_profile
        .get("syscalls")
        .and_then(|v| v.as_array())
        .map_or(0, Vec::len);
    let security_opt = s
        .security_opt
        .iter()
        .map(|opt| {
            if opt.starts_with("seccomp=") {
                format!(
                    "seccomp=<generated profile, {} bytes>",
                    opt.len() - "seccomp=".len()
                )
            } else {
                opt.clone()
            }
        })
        .collect();
    ContainerSummary {
        network_mode: s.network_mode,
        memory_bytes: s.memory_bytes,
        memory_swap_bytes: s.memory_swap_bytes,
        nano_cpus: s.nano_cpus,
        pids_limit: s.pids_limit,
        cap_drop: s.cap_drop,
        cap_add: s.cap_add,
        no_new_privileges: s.no_new_privileges,
        user: s.user,
        read_only_rootfs: s.read_only_rootfs,
        tmpfs: s.tmpfs,
        mounts_read_only: s.mounts_read_only,
        security_opt,
        runner: s.runner,
        allowed_skills: s.allowed_skills,
        allowed_mcp_servers: s.allowed_mcp_servers,
        seccomp: seccomp_summary(p, rules),
    }
}

/// Every mount of the container: pincer's own (from the same function the
/// container spec uses), then the configured ones.
fn mounts(p: &EffectivePolicy, input: &ReportInput<'_>) -> Vec<MountLine> {
    use pincer_runner_protocol::mounts::{
        GATEWAY_DIR, RUNNER_DIR, RUNNER_PATH, WORKSPACE_DIR, pincer_mounts,
    };
    let own = pincer_mounts(input.workspace_dir, input.runner_binary, input.run_dir);
    let what = |target: &str| match target {
        WORKSPACE_DIR => "the workspace folder",
        RUNNER_PATH => "the agent runner",
        GATEWAY_DIR => "the gateway and egress proxy sockets; host-owned",
        RUNNER_DIR => "the runner socket; the container's own",
        _ => "",
    };
    let mut lines: Vec<MountLine> = own
        .iter()
        .map(|m| MountLine {
            source: m.source.display().to_string(),
            target: m.target.to_owned(),
            mode: if m.read_only { "ro" } else { "rw" }.to_owned(),
            purpose: Some(what(m.target).to_owned()),
        })
        .collect();
    for mount in &input.workspace.mounts {
        let mode = if mount.read_only {
            "ro"
        } else if p.read_only_mounts.value {
            "ro (forced by read_only_mounts)"
        } else {
            "rw"
        };
        lines.push(MountLine {
            source: mount.source.display().to_string(),
            target: mount.target.clone(),
            mode: mode.to_owned(),
            purpose: None,
        });
    }
    lines
}

fn mcp_kind(server: &McpServer) -> String {
    if let Some(url) = &server.url {
        format!("remote at {}", url_origin(url))
    } else if let Some(command) = &server.command {
        let program = command.first().map_or("?", String::as_str);
        let program = Path::new(program)
            .file_name()
            .map_or_else(|| program.to_owned(), |n| n.to_string_lossy().into_owned());
        format!("stdio on the host ({program})")
    } else if let Some(container) = &server.container {
        format!("own container ({})", container.image)
    } else {
        "no transport".to_owned()
    }
}

/// `https://host` of a URL, never its path, query or credentials.
fn url_origin(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(parsed) => match parsed.host_str() {
            Some(host) => format!("{}://{host}", parsed.scheme()),
            None => parsed.scheme().to_owned(),
        },
        Err(_) => "an unparsable URL".to_owned(),
    }
}

fn item(source: &ToolSource, mut notes: Vec<String>) -> ReachItem {
    if let Some(why) = &source.refused {
        notes.insert(0, why.clone());
    }
    if !source.tools.is_empty() {
        notes.push(format!("tools: {}", source.tools.join(", ")));
    }
    ReachItem {
        name: source.name.clone(),
        reachable: source.reachable(),
        tools: source.tools.clone(),
        note: notes.join("; "),
    }
}

fn reach(p: &EffectivePolicy, input: &ReportInput<'_>, computed: &WorkspaceReach) -> Reach {
    let network = match p.network.value {
        NetworkMode::None => "none — the gateway and egress proxy sockets only",
        NetworkMode::BridgeUnfiltered => {
            "bridge_unfiltered — any address, past the egress proxy, unaudited"
        }
    }
    .to_owned();
    let skills = computed
        .skills
        .iter()
        .map(|source| {
            let mut notes = Vec::new();
            if let Some(hosts) = input.plugin_http.get(&source.name) {
                notes.push(format!("http to {}", hosts.join(", ")));
            }
            item(source, notes)
        })
        .collect();
    let mcp_servers = computed
        .mcp_servers
        .iter()
        .map(|source| {
            let notes = input
                .config
                .mcp_servers
                .get(&source.name)
                .map(|server| vec![mcp_kind(server)])
                .unwrap_or_default();
            item(source, notes)
        })
        .collect();
    // The memory tools are fixed; their list is not a filter worth printing.
    let mut memory = item(&computed.memory, Vec::new());
    memory.tools = Vec::new();
    memory.note = computed.memory.refused.clone().unwrap_or_default();
    let mut schedule = item(&computed.schedule, Vec::new());
    schedule.tools = Vec::new();
    schedule.note = match &computed.schedule.refused {
        Some(why) => why.clone(),
        None => {
            let mode = input
                .config
                .workspaces
                .get(&computed.workspace)
                .map_or(crate::config::AgentSchedules::None, |w| w.agent_schedules);
            match mode {
                crate::config::AgentSchedules::Auto => {
                    "agent_schedules: auto — tasks the agent creates run without approval".into()
                }
                _ => "agent_schedules: propose — each task waits for `pincer schedule approve`"
                    .into(),
            }
        }
    };
    Reach {
        network,
        unavailable: computed.unavailable.clone(),
        memory,
        schedule,
        skills,
        mcp_servers,
        models: ModelsLine {
            aliases: computed.models.aliases.clone(),
            from: computed.models.from,
            deployments: deployments(input, &computed.models.aliases),
        },
        plugin_http: input.plugin_http.clone(),
        tunnels: tunnels(&computed.egress, input.config),
        egress: computed.egress.clone(),
        host_listeners: host_listeners(p.network.value, input.config),
    }
}

/// One tunnel a workspace lists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TunnelReach {
    pub service: String,
    /// The plugin whose `plugins.config` entry names the service.
    pub plugin: Option<String>,
}

fn tunnels(egress: &crate::policy::EgressReach, config: &Config) -> Vec<TunnelReach> {
    let configured = config.plugins.configured_services();
    egress
        .tunnels
        .iter()
        .map(|service| TunnelReach {
            service: service.clone(),
            plugin: configured
                .iter()
                .find(|(s, _)| s == service)
                .map(|(_, plugin)| (*plugin).to_owned()),
        })
        .collect()
}

/// The hosts the egress proxy lets through, in a few words.
fn egress_summary(egress: &crate::policy::EgressReach) -> String {
    let mut ways: Vec<String> = egress.entries.iter().map(|e| e.host.clone()).collect();
    if !egress.any_public.is_empty() {
        ways.push("any public address (ports 80, 443)".to_owned());
    }
    ways.extend(egress.tunnels.iter().map(|t| format!("tunnel {t}")));
    if egress.ask {
        ways.push("any host a person approves (egress_ask)".to_owned());
    }
    ways.join(", ")
}

/// The `egress` row: each entry with where it was written.
fn egress_line(egress: &crate::policy::EgressReach) -> String {
    if egress.unfiltered {
        return "bypassed: network bridge_unfiltered reaches any address unaudited".to_owned();
    }
    if let Some(why) = &egress.refused {
        return format!("nothing: {why}");
    }
    let mut parts: Vec<String> = egress
        .entries
        .iter()
        .map(|e| format!("{} (from {})", e.host, e.from.join(", ")))
        .collect();
    if !egress.any_public.is_empty() {
        parts.push(format!(
            "any public address on ports 80, 443 (from policy group {})",
            egress.any_public.join(", ")
        ));
    }
    if egress.ask {
        parts.push(
            "any other host a person approves (egress_ask; \"always\" is a stored rule: pincer approvals rules)"
                .to_owned(),
        );
    }
    if parts.is_empty() {
        return match egress.closed.first() {
            Some(group) => format!("nothing (egress: none, from policy group {group})"),
            None => "nothing: no way out (list hosts in workspaces.NAME.egress)".to_owned(),
        };
    }
    parts.join("; ")
}

/// pincer's listeners on the host that a container on `network` reaches:
/// a bridge-networked container reaches every host address but loopback.
fn host_listeners(network: NetworkMode, config: &Config) -> Vec<String> {
    if network != NetworkMode::BridgeUnfiltered {
        return Vec::new();
    }
    let mut reached = Vec::new();
    let gateway = config.gateway.listen;
    if !crate::config::is_loopback(&gateway) {
        reached.push(format!(
            "gateway on {gateway} (gateway.listen, not loopback): the container can call it on the bridge's gateway address"
        ));
    }
    let webhooks = config.channels.listen;
    if !config.channels.is_empty() && !crate::config::is_loopback(&webhooks) {
        reached.push(format!(
            "channel webhooks on {webhooks} (channels.listen, not loopback): the container can post to them on the bridge's gateway address"
        ));
    }
    reached
}

/// Each alias with its deployments and fallbacks.
fn deployments(input: &ReportInput<'_>, aliases: &[String]) -> Vec<String> {
    let gateway = &input.config.gateway;
    aliases
        .iter()
        .map(|alias| {
            let deployments: Vec<&str> = gateway
                .model_list
                .iter()
                .filter(|d| &d.model_name == alias)
                .map(|d| d.litellm_params.model.as_str())
                .collect();
            let fallbacks: Vec<String> = gateway
                .fallbacks
                .iter()
                .filter_map(|map| map.get(alias))
                .flatten()
                .cloned()
                .collect();
            let mut text = format!("{alias} → {}", list_or_none(&strings(&deployments)));
            if !fallbacks.is_empty() {
                text.push_str(&format!(" (fallbacks: {})", fallbacks.join(", ")));
            }
            text
        })
        .collect()
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

fn declared(setting: &Setting<bool>, what: &str) -> Vec<String> {
    if !setting.value {
        return Vec::new();
    }
    setting
        .from
        .iter()
        .map(|group| format!("policy group {group} declares {what}"))
        .collect()
}

fn trifecta(
    p: &EffectivePolicy,
    input: &ReportInput<'_>,
    reach: &Reach,
    approvals: Option<&crate::approvals::Policy>,
) -> Trifecta {
    use crate::approvals::SourceKind;
    // A source whose read-only claims are believed runs some tools unasked:
    // not gated, whatever its other tools wait for.
    let is_gated = |source: Option<(SourceKind, &str)>| {
        approvals.is_some_and(|a| gated(a, input.approval_rules, &p.workspace, source))
            && source.is_none_or(|(kind, name)| !input.config.trusts_read_claims(kind, name))
    };
    let mut gated_ways = Vec::new();
    let mut private_data: Vec<String> = input
        .workspace
        .mounts
        .iter()
        .map(|m| format!("mount {} → {}", m.source.display(), m.target))
        .collect();
    private_data.extend(declared(&p.private_data, "private_data"));

    let mut channels: Vec<&str> = input
        .workspace
        .channels
        .iter()
        .map(String::as_str)
        .collect();
    for (name, channel) in &input.config.channels {
        if channel.workspace == p.workspace && !channels.contains(&name.as_str()) {
            channels.push(name);
        }
    }
    let mut untrusted_input: Vec<String> = channels
        .iter()
        .map(|name| match input.config.channels.get(*name) {
            Some(channel) => format!(
                "channel {name} ({}){}",
                channel.plugin,
                quoted_context_note(&channel.context)
            ),
            None => format!("channel {name}"),
        })
        .collect();
    untrusted_input.extend(declared(&p.untrusted_input, "untrusted_input"));

    let mut exfiltration = Vec::new();
    // A platform that unfurls (Slack with `unfurl: true`) fetches every URL
    // the model writes into a reply: data in a query string leaves that way.
    for name in &channels {
        if let Some(channel) = input.config.channels.get(*name)
            && channel.config.get("unfurl") == Some(&serde_json::Value::Bool(true))
        {
            exfiltration.push(format!(
                "channel {name} ({}) unfurls links (config.unfurl: true): the platform fetches any URL the model writes",
                channel.plugin
            ));
        }
    }
    let egress = &reach.egress;
    let container_way = if p.network.value == NetworkMode::BridgeUnfiltered {
        Some("network bridge_unfiltered: any address, unaudited (past the egress proxy)".to_owned())
    } else if egress.is_open() {
        Some(format!("egress proxy to {}", egress_summary(egress)))
    } else {
        None
    };
    if let Some(way) = container_way {
        if is_gated(None) {
            gated_ways.push(format!("{way} (every bash call waits for approval)"));
        } else {
            exfiltration.push(way);
        }
    }
    for item in reach.mcp_servers.iter().filter(|i| i.reachable) {
        match input.config.mcp_servers.get(&item.name) {
            Some(server) if server.url.is_some() || server.command.is_some() => {
                let way = if server.url.is_some() {
                    format!("MCP server {} is {}", item.name, mcp_kind(server))
                } else {
                    format!(
                        "MCP server {} runs on the host (stdio); its network is not restricted",
                        item.name
                    )
                };
                if is_gated(Some((SourceKind::Mcp, &item.name))) {
                    gated_ways.push(format!("{way} (each call waits for approval)"));
                } else {
                    exfiltration.push(way);
                }
            }
            _ => {}
        }
        // A server in its own container reaches what its container does.
        if let Some(summary) = input.mcp_containers.iter().find(|c| c.server == item.name) {
            for mount in &summary.mounts {
                private_data.push(format!(
                    "MCP server {} volume {} → {}",
                    item.name, mount.source, mount.target
                ));
            }
            match &summary.container {
                Some(c) if c.network_mode == "bridge" => exfiltration.push(format!(
                    "MCP server {}'s container has network bridge: outbound internet allowed",
                    item.name
                )),
                Some(_) => {}
                None => exfiltration.push(format!(
                    "MCP server {}'s container policy cannot be applied (it will not start)",
                    item.name
                )),
            }
        }
    }
    for item in reach.skills.iter().filter(|i| i.reachable) {
        if let Some(hosts) = input.plugin_http.get(&item.name) {
            let way = format!(
                "skill {} makes HTTP requests to {}",
                item.name,
                hosts.join(", ")
            );
            if is_gated(Some((SourceKind::Skill, &item.name))) {
                gated_ways.push(format!("{way} (each call waits for approval)"));
            } else {
                exfiltration.push(way);
            }
        }
    }

    let missing: Vec<&str> = [
        (private_data.is_empty(), "no private data"),
        (untrusted_input.is_empty(), "no untrusted input"),
        (exfiltration.is_empty(), "no way out"),
    ]
    .into_iter()
    .filter_map(|(absent, text)| absent.then_some(text))
    .collect();
    let verdict = if missing.is_empty() {
        "LETHAL: all three present".to_owned()
    } else if gated_ways.is_empty() || !exfiltration.is_empty() {
        format!("ok: {}", missing.join(", "))
    } else {
        format!(
            "ok: {} (ways out gated by approvals: {})",
            missing.join(", "),
            gated_ways.len()
        )
    };
    Trifecta {
        private_data,
        untrusted_input,
        exfiltration,
        gated: gated_ways,
        verdict,
    }
}

/// Rows with the first column padded to the widest cell.
fn table(out: &mut String, rows: &[(String, String)]) {
    let width = rows
        .iter()
        .map(|(k, _)| k.chars().count())
        .max()
        .unwrap_or(0);
    for (key, value) in rows {
        let pad = width - key.chars().count();
        let _ = writeln!(out, "  {key}{}  {value}", " ".repeat(pad));
    }
}

fn yes_no(value: bool) -> &'static str {
    if value { "yes" } else { "no" }
}

/// The report as aligned text (stable: no colours, no timestamps except the
/// denials' own).
pub fn render_text(report: &PolicyReport) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "policy audit: workspace {}", report.workspace);

    out.push_str("\ngroups (baseline first, then as listed)\n");
    let mut rows = vec![(
        BASELINE.to_owned(),
        "built-in, applies to every workspace".to_owned(),
    )];
    rows.extend(
        report
            .groups
            .iter()
            .map(|g| (g.name.clone(), format!("{} — {}", g.origin, g.description))),
    );
    table(&mut out, &rows);

    out.push_str("\neffective policy (value, then the groups it came from)\n");
    let rows: Vec<(String, String)> = report
        .settings
        .iter()
        .map(|s| {
            (
                s.setting.clone(),
                format!("{}  [{}]", s.value, s.from.join(", ")),
            )
        })
        .collect();
    table(&mut out, &rows);

    let c = &report.container;
    out.push_str("\ncontainer settings\n");
    let tmpfs: Vec<String> = c.tmpfs.iter().map(|(p, o)| format!("{p} ({o})")).collect();
    let mut rows = vec![
        ("network_mode".to_owned(), c.network_mode.clone()),
        (
            "memory".to_owned(),
            format!(
                "{} bytes, swap {} bytes (none)",
                c.memory_bytes, c.memory_swap_bytes
            ),
        ),
        ("nano_cpus".to_owned(), c.nano_cpus.to_string()),
        ("pids_limit".to_owned(), c.pids_limit.to_string()),
        ("user".to_owned(), c.user.clone()),
        ("cap_drop".to_owned(), list_or_none(&c.cap_drop)),
        ("cap_add".to_owned(), list_or_none(&c.cap_add)),
        ("security_opt".to_owned(), list_or_none(&c.security_opt)),
        (
            "read_only_rootfs".to_owned(),
            yes_no(c.read_only_rootfs).to_owned(),
        ),
        (
            "mounts read-only".to_owned(),
            yes_no(c.mounts_read_only).to_owned(),
        ),
        ("tmpfs".to_owned(), list_or_none(&tmpfs)),
        (
            "runner".to_owned(),
            serde_json::to_string(&c.runner).unwrap_or_default(),
        ),
    ];
    let seccomp = &c.seccomp;
    rows.push((
        "seccomp".to_owned(),
        format!(
            "generated: {} syscalls allowed unconditionally (no io_uring), {} rules, default EPERM",
            seccomp.allowed_syscalls, seccomp.rules
        ),
    ));
    for rule in &seccomp.added {
        rows.push((
            "  + rule".to_owned(),
            format!(
                "{} → {}  [{}]",
                rule.syscalls.join(", "),
                rule.action,
                rule.from.join(", ")
            ),
        ));
    }
    table(&mut out, &rows);

    out.push_str("\nmounts\n");
    let rows: Vec<(String, String)> = report
        .mounts
        .iter()
        .map(|m| {
            let purpose = m
                .purpose
                .as_ref()
                .map(|p| format!("  ({p})"))
                .unwrap_or_default();
            (
                m.target.clone(),
                format!("{}  {}{purpose}", m.mode, m.source),
            )
        })
        .collect();
    table(&mut out, &rows);

    out.push_str("\nreach\n");
    let item = |i: &ReachItem| {
        let state = if i.reachable { "" } else { "NOT reachable: " };
        if i.note.is_empty() && i.reachable {
            i.name.clone()
        } else {
            format!("{} ({state}{})", i.name, i.note)
        }
    };
    let reach = &report.reach;
    let skills: Vec<String> = reach.skills.iter().map(item).collect();
    let servers: Vec<String> = reach.mcp_servers.iter().map(item).collect();
    let models = &reach.models;
    let models_from = match models.from {
        ModelsFrom::Explicit => format!("explicit: workspaces.{}.models", report.workspace),
        ModelsFrom::ModelAndFallbacks => format!(
            "default: workspaces.{}.model and its fallbacks; set workspaces.{0}.models to change",
            report.workspace
        ),
        ModelsFrom::EveryAlias => format!(
            "default: every alias, no workspaces.{}.model; set workspaces.{0}.models to restrict",
            report.workspace
        ),
        ModelsFrom::Unavailable => "none: the policy cannot be applied".to_owned(),
    };
    let mut rows = Vec::new();
    if let Some(why) = &reach.unavailable {
        rows.push(("NOTHING reachable".to_owned(), why.clone()));
    }
    rows.extend([
        ("network".to_owned(), reach.network.clone()),
        ("memory".to_owned(), item(&reach.memory)),
        ("schedules".to_owned(), item(&reach.schedule)),
        ("skills".to_owned(), list_or_none(&skills)),
        ("mcp servers".to_owned(), list_or_none(&servers)),
        (
            "models".to_owned(),
            format!("{} ({models_from})", list_or_none(&models.aliases)),
        ),
    ]);
    for line in &models.deployments {
        rows.push(("  model".to_owned(), line.clone()));
    }
    let http: Vec<String> = reach
        .plugin_http
        .iter()
        .map(|(plugin, hosts)| format!("{plugin}: {}", list_or_none(hosts)))
        .collect();
    if !http.is_empty() {
        rows.push(("plugin http".to_owned(), http.join("; ")));
    }
    rows.push(("egress".to_owned(), egress_line(&reach.egress)));
    if !reach.tunnels.is_empty() {
        let lines: Vec<String> = reach
            .tunnels
            .iter()
            .map(|t| match &t.plugin {
                _ if reach.egress.refused.is_some() => {
                    format!("{} (refused, see egress)", t.service)
                }
                Some(plugin) => format!(
                    "http://{}.tunnel/ (served by {plugin}; from workspaces.{}.tunnels)",
                    t.service, report.workspace
                ),
                None => format!("{} (no plugin configured to serve it)", t.service),
            })
            .collect();
        rows.push(("tunnels".to_owned(), lines.join("; ")));
    }
    if reach.network.starts_with("bridge") {
        rows.push((
            // pincer's own listeners on the host (the label no wider than
            // the others: the table's alignment is part of the output).
            "listeners".to_owned(),
            if reach.host_listeners.is_empty() {
                "none: pincer's listeners are on loopback only".to_owned()
            } else {
                reach.host_listeners.join("; ")
            },
        ));
    }
    table(&mut out, &rows);

    for server in &report.mcp_containers {
        let _ = writeln!(
            out,
            "\nmcp server {} (its own container, image {}; stdio over Docker's attach stream, no host network)",
            server.server, server.image
        );
        let mut rows = vec![(
            "groups".to_owned(),
            format!("baseline, {}", server.groups.join(", ")),
        )];
        match (&server.container, &server.error) {
            (Some(c), _) => rows.extend([
                ("network".to_owned(), c.network_mode.clone()),
                ("read-only root".to_owned(), c.read_only_rootfs.to_string()),
                (
                    "capabilities".to_owned(),
                    format!(
                        "drop {}; add {}",
                        list_or_none(&c.cap_drop),
                        list_or_none(&c.cap_add)
                    ),
                ),
                (
                    "no new privileges".to_owned(),
                    c.no_new_privileges.to_string(),
                ),
                ("user".to_owned(), c.user.clone()),
                (
                    "memory".to_owned(),
                    human_bytes(u64::try_from(c.memory_bytes).unwrap_or(0)),
                ),
                ("pids".to_owned(), c.pids_limit.to_string()),
            ]),
            (None, Some(e)) => rows.push(("NOT STARTABLE".to_owned(), e.clone())),
            (None, None) => {}
        }
        for m in &server.mounts {
            rows.push((
                "volume".to_owned(),
                format!("{} {} {}", m.target, m.mode, m.source),
            ));
        }
        table(&mut out, &rows);
    }

    out.push_str("\nenforcement\n");
    for note in &report.enforcement {
        let _ = writeln!(out, "  - {note}");
    }

    if let Some(a) = &report.approvals {
        out.push_str("\napprovals\n");
        table(
            &mut out,
            &[
                ("tier".to_owned(), a.tier.clone()),
                ("ask".to_owned(), list_or_none(&a.ask)),
                ("allow".to_owned(), list_or_none(&a.allow)),
                (
                    "read commands".to_owned(),
                    yes_no(a.read_commands).to_owned(),
                ),
                ("approvers".to_owned(), a.approvers.clone()),
                ("unattended".to_owned(), a.unattended.clone()),
                ("timeout".to_owned(), format!("{} s", a.timeout_secs)),
                (
                    "read-only claims believed".to_owned(),
                    list_or_none(&a.trusted_claims),
                ),
            ],
        );
    }

    let t = &report.trifecta;
    let _ = writeln!(out, "\nlethal trifecta: {}", t.verdict);
    table(
        &mut out,
        &[
            ("private data".to_owned(), list_or_none(&t.private_data)),
            (
                "untrusted input".to_owned(),
                list_or_none(&t.untrusted_input),
            ),
            ("way out".to_owned(), list_or_none(&t.exfiltration)),
            ("gated way out".to_owned(), list_or_none(&t.gated)),
        ],
    );

    out.push_str("\ndenials\n");
    if report.denials.is_empty() {
        out.push_str("  none recorded\n");
    }
    for event in &report.denials {
        let _ = writeln!(
            out,
            "  {}  {}  {}  {}",
            event.timestamp_ms, event.actor, event.kind, event.detail
        );
    }
    out
}
