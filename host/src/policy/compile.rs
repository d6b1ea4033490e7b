//! An effective policy turned into plain container settings (which the
//! container runtime turns into Docker's `HostConfig`) and the notes that say
//! how each restriction is enforced.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::group::{IMPLIED_BY_ALLOWED_EXECUTABLES, NetworkMode, format_cpus, human_bytes};
use super::merge::EffectivePolicy;
use super::seccomp::{self, Requests};

/// What the agent runner enforces inside the container. Serialises to the
/// runner's JSON policy: `{"no_process_creation":..,"allowed_executables":..}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RunnerPolicy {
    /// Deny `execve` to the runner and its tools once it has started.
    pub no_process_creation: bool,
    /// Only these programs may be executed (Landlock execute rules);
    /// `None` = no restriction.
    pub allowed_executables: Option<Vec<String>>,
    /// Relay `127.0.0.1:3128` to the egress proxy's socket; `None` where
    /// the container bypasses the proxy (`network: bridge_unfiltered`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<pincer_runner_protocol::EgressRelay>,
}

/// Container settings of one workspace, as plain data.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ContainerSettings {
    /// `none` or `bridge`.
    pub network_mode: String,
    pub memory_bytes: i64,
    /// Equal to `memory_bytes`: no swap.
    pub memory_swap_bytes: i64,
    pub nano_cpus: i64,
    pub pids_limit: i64,
    /// RLIMIT_NOFILE, soft and hard: `containers.nofile`, set by the
    /// container plans (the policy itself does not set it).
    pub nofile: i64,
    /// `ALL` and/or `CAP_NAME`, sorted.
    pub cap_drop: Vec<String>,
    /// `CAP_NAME`, sorted.
    pub cap_add: Vec<String>,
    pub no_new_privileges: bool,
    /// `uid:gid`.
    pub user: String,
    pub read_only_rootfs: bool,
    /// Container path → options (`size=64m,noexec,nosuid,nodev`).
    pub tmpfs: BTreeMap<String, String>,
    /// Every configured extra mount is read-only, whatever the config says.
    pub mounts_read_only: bool,
    /// The full Docker seccomp profile, always pincer's own: Docker's default
    /// changes with the engine's version (20.10's allows io_uring).
    pub seccomp_profile: serde_json::Value,
    /// `no-new-privileges`, `seccomp=<inline json>`.
    pub security_opt: Vec<String>,
    pub runner: RunnerPolicy,
    /// For the gateway; `None` = every configured skill.
    pub allowed_skills: Option<Vec<String>>,
    /// For the gateway; `None` = every configured MCP server.
    pub allowed_mcp_servers: Option<Vec<String>>,
}

fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl EffectivePolicy {
    /// The container settings this policy implies.
    pub fn compile(&self) -> ContainerSettings {
        let memory = to_i64(self.memory_bytes.value);
        let cap_add: Vec<String> = self.cap_add.keys().cloned().collect();
        // an added capability is not also dropped by name (only the
        // baseline could do that: groups that do are a contradiction)
        let cap_drop: Vec<String> = self
            .cap_drop
            .keys()
            .filter(|cap| !self.cap_add.contains_key(*cap))
            .cloned()
            .collect();
        let seccomp_profile = self.seccomp_profile();
        let mut security_opt = Vec::new();
        if self.no_new_privileges.value {
            security_opt.push("no-new-privileges".to_owned());
        }
        security_opt.push(format!("seccomp={seccomp_profile}"));
        ContainerSettings {
            network_mode: self.network.value.docker_mode().to_owned(),
            memory_bytes: memory,
            memory_swap_bytes: memory,
            nano_cpus: to_i64(self.nano_cpus.value),
            pids_limit: i64::from(self.pids.value),
            nofile: to_i64(crate::config::Containers::DEFAULT_NOFILE),
            cap_drop,
            cap_add,
            no_new_privileges: self.no_new_privileges.value,
            user: self.user.value.clone(),
            read_only_rootfs: self.read_only_rootfs.value,
            tmpfs: self
                .tmpfs
                .iter()
                .map(|(path, options)| (path.clone(), options.value.clone()))
                .collect(),
            mounts_read_only: self.read_only_mounts.value,
            seccomp_profile,
            security_opt,
            runner: RunnerPolicy {
                no_process_creation: self.no_exec_after_start.value,
                allowed_executables: self.allowed_executables.as_ref().map(|s| s.value.clone()),
                egress: (self.network.value == NetworkMode::None).then(|| {
                    pincer_runner_protocol::EgressRelay {
                        listen: pincer_runner_protocol::PROXY_LISTEN.to_owned(),
                        socket: pincer_runner_protocol::EGRESS_SOCKET_PATH.to_owned(),
                    }
                }),
            },
            allowed_skills: self.allowed_skills.as_ref().map(|s| s.value.clone()),
            allowed_mcp_servers: self.allowed_mcp_servers.as_ref().map(|s| s.value.clone()),
        }
    }

    /// The generated seccomp profile: Docker's allow-list without io_uring,
    /// plus the groups' rules.
    fn seccomp_profile(&self) -> serde_json::Value {
        let profile = seccomp::profile(&self.seccomp_base, &self.requests());
        // plain strings and integers: serialising cannot fail
        serde_json::to_value(profile).unwrap_or_default()
    }

    pub(crate) fn requests(&self) -> Requests<'_> {
        Requests {
            deny: &self.seccomp_deny,
            enosys: &self.seccomp_enosys,
            threads_only_clone: self.threads_only_clone.value,
        }
    }
}

/// How each restriction of `policy` is enforced, one line each.
pub fn enforcement_notes(policy: &EffectivePolicy) -> Vec<String> {
    let mut notes = Vec::new();
    notes.push(match policy.network.value {
        super::NetworkMode::None => "network none: Docker gives the container only a loopback \
            interface; models, skills and MCP servers are reached through the gateway's unix \
            socket, which authenticates the container by its token, and every other connection \
            through the egress proxy's socket (the runner relays 127.0.0.1:3128 to it), which \
            lets through only what `egress:` lists, resolving names on the host and refusing \
            non-public addresses not named literally; no DNS resolver is reachable"
            .to_owned(),
        super::NetworkMode::BridgeUnfiltered => "network bridge_unfiltered: outbound \
            connections are NOT restricted and NOT audited (the egress proxy is bypassed); only \
            gateway traffic is checked"
            .to_owned(),
    });
    notes.push(format!(
        "memory {} (swap disabled), cpus {}, pids {}: cgroup limits set by Docker; the kernel \
         kills a process at the memory limit and fails fork/clone at the pids limit",
        human_bytes(policy.memory_bytes.value),
        format_cpus(policy.nano_cpus.value),
        policy.pids.value,
    ));
    let drops: Vec<&str> = policy.cap_drop.keys().map(String::as_str).collect();
    let adds: Vec<&str> = policy.cap_add.keys().map(String::as_str).collect();
    notes.push(format!(
        "capabilities: Docker drops {}{}; user {} runs every process",
        drops.join(", "),
        if adds.is_empty() {
            String::new()
        } else {
            format!(" and adds back {}", adds.join(", "))
        },
        policy.user.value,
    ));
    if policy.no_new_privileges.value {
        notes.push(
            "no_new_privileges: set on the container's processes (security_opt), so setuid \
             binaries and file capabilities cannot raise privileges"
                .to_owned(),
        );
    }
    if policy.read_only_rootfs.value {
        notes.push(
            "read_only_rootfs: Docker mounts the image's root filesystem read-only".to_owned(),
        );
    }
    if policy.read_only_mounts.value {
        notes.push(
            "read_only_mounts: every configured extra mount is bind-mounted read-only \
             regardless of its read_only setting; /workspace stays writable"
                .to_owned(),
        );
    }
    for (path, options) in &policy.tmpfs {
        notes.push(format!(
            "tmpfs {path}: an in-memory filesystem mounted with `{}`",
            options.value
        ));
    }
    notes.push(
        "seccomp: pincer's generated profile (Docker's default allow-list without io_uring, \
         whatever the engine's version, plus the groups' rules) is passed inline in \
         security_opt; runc installs it before the container's first execve, and it also \
         applies to `docker exec`; the agent runner checks at start that io_uring is refused"
            .to_owned(),
    );
    if policy.has_seccomp_rules() {
        let mut parts = Vec::new();
        let mut from: Vec<String> = Vec::new();
        let mut note_from = |groups: &[String]| {
            for g in groups {
                if !from.contains(g) {
                    from.push(g.clone());
                }
            }
        };
        if !policy.seccomp_deny.is_empty() {
            let names: Vec<&str> = policy.seccomp_deny.keys().map(String::as_str).collect();
            policy.seccomp_deny.values().for_each(|g| note_from(g));
            parts.push(format!("denies {} (EPERM)", names.join(", ")));
        }
        if policy.threads_only_clone.value {
            note_from(&policy.threads_only_clone.from);
            parts.push("allows clone only for threads (any other clone gets EPERM)".to_owned());
        }
        if !policy.seccomp_enosys.is_empty() {
            let names: Vec<&str> = policy.seccomp_enosys.keys().map(String::as_str).collect();
            policy.seccomp_enosys.values().for_each(|g| note_from(g));
            parts.push(format!(
                "makes {} return ENOSYS (libc falls back, e.g. clone3 to clone)",
                names.join(", ")
            ));
        }
        notes.push(format!(
            "{}: seccomp {}, for every process in the container, docker exec included",
            from.join(", "),
            parts.join("; ")
        ));
    }
    if policy.no_exec_after_start.value {
        notes.push(format!(
            "{}: the agent runner installs its own seccomp filter denying execve once it has \
             started, so no tool it runs can start a program; the container is refused if the \
             runner reports the filter missing",
            policy.no_exec_after_start.from.join(", ")
        ));
    }
    if let Some(allowed) = &policy.allowed_executables {
        notes.push(format!(
            "allowed_executables ({}): enforced by Landlock execute rules applied by the agent \
             runner to every command it starts (kernel ABI checked at start; refuses to start \
             without Landlock); seccomp denies {} so no program runs from memory without a path",
            allowed.value.join(", "),
            IMPLIED_BY_ALLOWED_EXECUTABLES.join(", "),
        ));
    }
    if let Some(skills) = &policy.allowed_skills {
        notes.push(format!(
            "allowed_skills ({}): enforced by the gateway, which refuses and records calls to \
             any other skill",
            list_or_none(&skills.value)
        ));
    }
    if let Some(servers) = &policy.allowed_mcp_servers {
        notes.push(format!(
            "allowed_mcp_servers ({}): enforced by the gateway, which refuses and records calls \
             to any other MCP server",
            list_or_none(&servers.value)
        ));
    }
    if policy.untrusted_input.value || policy.private_data.value {
        notes.push(
            "untrusted_input / private_data: hints for the lethal-trifecta verdict, not \
             enforced"
                .to_owned(),
        );
    }
    notes
}

pub(crate) fn list_or_none(items: &[String]) -> String {
    if items.is_empty() {
        "none".to_owned()
    } else {
        items.join(", ")
    }
}
