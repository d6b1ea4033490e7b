//! One policy group: its YAML schema, value types that check themselves
//! while parsing (so a bad value is reported at its line and column), and
//! the parametric groups recognised by name.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

sentence_error! {
    /// Why a policy setting or group is not valid, said for a person (the
    /// catalog adds where it was written).
    pub(crate) struct InvalidSetting;
}

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};
use serde_saphyr::{MessageFormatter, UserMessageFormatter};

/// Smallest memory limit Docker accepts (6 MiB).
pub(crate) const MIN_MEMORY_BYTES: u64 = 6 << 20;
/// CPU limits are between 0.01 and 1024 CPUs (in nano-CPUs).
const MIN_NANO_CPUS: u64 = 10_000_000;
const MAX_NANO_CPUS: u64 = 1024 * 1_000_000_000;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// Syscalls that a group may not deny: runc starts the container's first
/// program with `execve` after installing the filter, so denying it means
/// the container cannot start (moby#36830). "No exec after start" is the
/// runner's job (`runner.no_exec_after_start`).
const UNDENIABLE: &[&str] = &["execve"];

/// Denied (EPERM) for every group that sets `allowed_executables`: a memfd
/// is executable without a path, so path rules (Landlock) cannot cover it.
pub(crate) const IMPLIED_BY_ALLOWED_EXECUTABLES: &[&str] = &["memfd_create"];

/// The linux capabilities (without `CAP_`), for checking names.
const CAPABILITIES: &[&str] = &[
    "AUDIT_CONTROL",
    "AUDIT_READ",
    "AUDIT_WRITE",
    "BLOCK_SUSPEND",
    "BPF",
    "CHECKPOINT_RESTORE",
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "IPC_LOCK",
    "IPC_OWNER",
    "KILL",
    "LEASE",
    "LINUX_IMMUTABLE",
    "MAC_ADMIN",
    "MAC_OVERRIDE",
    "MKNOD",
    "NET_ADMIN",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_RAW",
    "PERFMON",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYSLOG",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_CHROOT",
    "SYS_MODULE",
    "SYS_NICE",
    "SYS_PACCT",
    "SYS_PTRACE",
    "SYS_RAWIO",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "WAKE_ALARM",
];

/// The container's network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NetworkMode {
    /// Loopback only: the gateway and the egress proxy are reached over
    /// their unix sockets, and the proxy is the only way out.
    None,
    /// Docker's default bridge, past the egress proxy: any address the host
    /// can reach, unaudited. Only where a group asks for it by this name.
    BridgeUnfiltered,
}

impl NetworkMode {
    /// As written in a group.
    pub fn as_str(self) -> &'static str {
        match self {
            NetworkMode::None => "none",
            NetworkMode::BridgeUnfiltered => "bridge_unfiltered",
        }
    }

    /// Docker's name for it (`HostConfig.NetworkMode`).
    pub fn docker_mode(self) -> &'static str {
        match self {
            NetworkMode::None => "none",
            NetworkMode::BridgeUnfiltered => "bridge",
        }
    }
}

impl<'de> Deserialize<'de> for NetworkMode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let written = String::deserialize(d)?;
        match written.as_str() {
            "none" => Ok(NetworkMode::None),
            "bridge_unfiltered" => Ok(NetworkMode::BridgeUnfiltered),
            "bridge" => Err(serde::de::Error::custom(
                "`network: bridge` is no longer a setting: containers have no network, and \
                 their way out is the audited egress proxy. List the hosts the workspace may \
                 reach in `workspaces.NAME.egress` (or `egress:` in a group), or, to bypass the \
                 proxy unaudited, write `network: bridge_unfiltered`",
            )),
            other => Err(serde::de::Error::custom(format!(
                "unknown network `{other}`: write `none` or `bridge_unfiltered`"
            ))),
        }
    }
}

/// A group's `egress:` setting: `none` (no way out at all), `any_public`
/// (any public address, never a private, loopback or link-local one unless
/// a list names it literally), or a list of host patterns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GroupEgress {
    None,
    AnyPublic,
    Hosts(Vec<String>),
}

impl<'de> Deserialize<'de> for GroupEgress {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct EgressVisitor;
        impl<'de> serde::de::Visitor<'de> for EgressVisitor {
            type Value = GroupEgress;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("`none`, `any_public` or a list of hosts")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<GroupEgress, E> {
                match v {
                    "none" => Ok(GroupEgress::None),
                    "any_public" => Ok(GroupEgress::AnyPublic),
                    other => Err(E::custom(format!(
                        "egress `{other}`: write `none`, `any_public` or a list of hosts"
                    ))),
                }
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<GroupEgress, A::Error> {
                let mut hosts = Vec::new();
                while let Some(host) = seq.next_element::<String>()? {
                    if let Err(why) = crate::hosts::HostPattern::parse(&host) {
                        return Err(serde::de::Error::custom(format!(
                            "egress entry `{host}`: {why}"
                        )));
                    }
                    hosts.push(host);
                }
                Ok(GroupEgress::Hosts(hosts))
            }
        }
        d.deserialize_any(EgressVisitor)
    }
}

impl fmt::Display for NetworkMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A group file (`policies/*.yaml` or a user policy folder).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GroupSpec {
    pub description: String,
    pub network: Option<NetworkMode>,
    pub egress: Option<GroupEgress>,
    pub memory: Option<Bytes>,
    pub cpus: Option<Cpus>,
    pub pids: Option<Pids>,
    #[serde(default)]
    pub cap_drop: Vec<Capability>,
    #[serde(default)]
    pub cap_add: Vec<Capability>,
    pub no_new_privileges: Option<bool>,
    pub user: Option<User>,
    pub read_only_rootfs: Option<bool>,
    pub read_only_mounts: Option<bool>,
    #[serde(default)]
    pub tmpfs: BTreeMap<AbsPath, TmpfsOptions>,
    #[serde(default)]
    pub seccomp: SeccompSpec,
    #[serde(default)]
    pub runner: RunnerSpec,
    pub allowed_executables: Option<Vec<AbsPath>>,
    pub allowed_skills: Option<Vec<Name>>,
    pub allowed_mcp_servers: Option<Vec<Name>>,
    pub untrusted_input: Option<bool>,
    pub private_data: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SeccompSpec {
    /// Fail with EPERM.
    #[serde(default)]
    pub deny: Vec<Syscall>,
    /// Fail with ENOSYS (callers fall back, e.g. glibc from clone3 to clone).
    #[serde(default)]
    pub enosys: Vec<Syscall>,
    /// `clone` only for threads.
    pub threads_only_clone: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RunnerSpec {
    /// The runner denies `execve` to itself (and so to every tool it runs)
    /// once it has started.
    pub no_exec_after_start: Option<bool>,
}

impl GroupSpec {
    /// Parses a group file. `file` is only used in messages.
    pub(crate) fn parse(text: &str, file: &str) -> Result<GroupSpec, (String, String)> {
        let mut budget = serde_saphyr::Budget::default();
        budget.max_depth = 16;
        let mut options = serde_saphyr::Options::default();
        options.budget = Some(budget);
        options.strict_booleans = true;
        options.with_snippet = false;
        serde_saphyr::from_str_with_options::<GroupSpec>(text, options).map_err(|err| {
            let location = match err.location() {
                Some(at) => format!("{file}:{}:{}", at.line(), at.column()),
                None => file.to_owned(),
            };
            (
                location,
                UserMessageFormatter.format_message(&err).into_owned(),
            )
        })
    }

    /// Checks what a single field cannot: consistency inside the group and
    /// syscall names against those pincer knows (`known_syscalls`).
    pub(crate) fn check(&self, known_syscalls: &BTreeSet<String>) -> Result<(), InvalidSetting> {
        if self.description.trim().is_empty() {
            return Err(InvalidSetting("`description` must not be empty".into()));
        }
        if let Some(both) = self
            .cap_add
            .iter()
            .find(|cap| self.cap_drop.iter().any(|d| d.0 == cap.0))
        {
            return Err(InvalidSetting(format!(
                "capability {} is both in cap_add and cap_drop",
                both.0
            )));
        }
        if self.cap_add.iter().any(|cap| cap.0 == "ALL") {
            return Err(InvalidSetting(
                "cap_add: ALL is not allowed; name the capabilities".into(),
            ));
        }
        let seccomp = &self.seccomp;
        for name in seccomp.deny.iter().chain(&seccomp.enosys) {
            if UNDENIABLE.contains(&name.0.as_str()) {
                return Err(InvalidSetting(format!(
                    "seccomp cannot deny `{}`: runc starts the container with it after installing \
                     the filter; use `runner: {{no_exec_after_start: true}}`",
                    name.0
                )));
            }
            if !known_syscalls.contains(&name.0) {
                return Err(InvalidSetting(format!(
                    "seccomp: unknown syscall `{}`",
                    name.0
                )));
            }
        }
        if let Some(both) = seccomp.deny.iter().find(|d| seccomp.enosys.contains(d)) {
            return Err(InvalidSetting(format!(
                "seccomp: `{}` is both in deny and enosys",
                both.0
            )));
        }
        if self.allowed_executables.as_ref().is_some_and(Vec::is_empty) {
            return Err(InvalidSetting(
                "allowed_executables must not be empty (use no_process_creation to forbid \
                 starting programs)"
                    .into(),
            ));
        }
        for path in self.tmpfs.keys() {
            if path.0 == "/" || path.0 == "/workspace" {
                return Err(InvalidSetting(format!(
                    "tmpfs cannot be mounted at {}",
                    path.0
                )));
            }
        }
        Ok(())
    }

    /// Adds what the group's settings imply: `allowed_executables` denies
    /// `memfd_create` (see [`IMPLIED_BY_ALLOWED_EXECUTABLES`]).
    pub(crate) fn with_implied(mut self) -> GroupSpec {
        if self.allowed_executables.is_some() {
            for name in IMPLIED_BY_ALLOWED_EXECUTABLES {
                let listed = |list: &[Syscall]| list.iter().any(|s| s.0 == *name);
                if !listed(&self.seccomp.deny) && !listed(&self.seccomp.enosys) {
                    self.seccomp.deny.push(Syscall((*name).to_owned()));
                }
            }
        }
        self
    }
}

/// The group a `{allowed_executables: [...]}` policy entry stands for.
pub(crate) fn allowed_executables_group(paths: &[String]) -> Result<GroupSpec, InvalidSetting> {
    let paths = paths
        .iter()
        .map(|p| AbsPath::try_from(p.clone()))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(GroupSpec {
        description: "Only the listed programs may be started in the container.".into(),
        allowed_executables: Some(paths),
        ..GroupSpec::default()
    })
}

/// A parametric group recognised by its name: `max_memory_<N>mb`,
/// `max_memory_<N>gb`, `max_cpus_<N>` (N may be decimal), `max_pids_<N>`.
/// `None` when the name has none of these shapes; `Some(Err)` when it has
/// but the value is out of range.
pub(crate) fn parametric(name: &str) -> Option<Result<GroupSpec, InvalidSetting>> {
    if let Some(rest) = name.strip_prefix("max_memory_") {
        let (digits, unit) = if let Some(d) = rest.strip_suffix("mb") {
            (d, MIB)
        } else {
            (rest.strip_suffix("gb")?, GIB)
        };
        let n = canonical_integer(digits)?;
        let spec = n
            .checked_mul(unit)
            .filter(|b| i64::try_from(*b).is_ok())
            .ok_or_else(|| InvalidSetting("memory limit too large".into()))
            .and_then(Bytes::checked)
            .map(|bytes| GroupSpec {
                description: format!("At most {} of memory, no swap.", human_bytes(bytes.0)),
                memory: Some(bytes),
                ..GroupSpec::default()
            });
        return Some(spec);
    }
    if let Some(rest) = name.strip_prefix("max_cpus_") {
        let nano = parse_decimal_nano(rest)?;
        let spec = Cpus::checked(nano).map(|cpus| GroupSpec {
            description: format!("At most {} CPUs.", format_cpus(cpus.0)),
            cpus: Some(cpus),
            ..GroupSpec::default()
        });
        return Some(spec);
    }
    if let Some(rest) = name.strip_prefix("max_pids_") {
        let n = canonical_integer(rest)?;
        let spec = u32::try_from(n)
            .map_err(|_| InvalidSetting("pids limit too large".into()))
            .and_then(Pids::checked)
            .map(|pids| GroupSpec {
                description: format!("At most {} processes and threads.", pids.0),
                pids: Some(pids),
                ..GroupSpec::default()
            });
        return Some(spec);
    }
    None
}

/// Digits without a leading zero (so each limit has one name).
fn canonical_integer(digits: &str) -> Option<u64> {
    let ok = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && !(digits.len() > 1 && digits.starts_with('0'));
    if ok { digits.parse().ok() } else { None }
}

/// `2`, `0.5`, `1.25` → nano units, exactly (at most 9 decimals).
fn parse_decimal_nano(text: &str) -> Option<u64> {
    let (int, frac) = match text.split_once('.') {
        Some((int, frac)) => (int, frac),
        None => (text, ""),
    };
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if int.is_empty() || !digits(int) || !digits(frac) || frac.len() > 9 {
        return None;
    }
    if text.contains('.') && frac.is_empty() {
        return None;
    }
    let int: u64 = int.parse().ok()?;
    let frac_nano: u64 = if frac.is_empty() {
        0
    } else {
        format!("{frac:0<9}").parse().ok()?
    };
    int.checked_mul(1_000_000_000)?.checked_add(frac_nano)
}

/// `512 MiB`, `2 GiB`, `1536 MiB`, `100000 bytes`.
pub(crate) fn human_bytes(bytes: u64) -> String {
    if bytes >= GIB && bytes.is_multiple_of(GIB) {
        format!("{} GiB", bytes / GIB)
    } else if bytes >= MIB && bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else {
        format!("{bytes} bytes")
    }
}

/// Nano-CPUs as a decimal without trailing zeros: `1`, `0.5`.
pub(crate) fn format_cpus(nano: u64) -> String {
    let int = nano / 1_000_000_000;
    let frac = nano % 1_000_000_000;
    if frac == 0 {
        return int.to_string();
    }
    let frac = format!("{frac:09}");
    format!("{int}.{}", frac.trim_end_matches('0'))
}

// ---- self-checking values ----

/// A memory size in bytes: an integer, or `512mb`, `1gb`, `64k`, ... (binary
/// units: `k`/`kb`/`kib` = 1024, `m`/`mb`/`mib`, `g`/`gb`/`gib`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Bytes(pub u64);

impl Bytes {
    fn checked(bytes: u64) -> Result<Bytes, InvalidSetting> {
        if bytes < MIN_MEMORY_BYTES {
            return Err(InvalidSetting(format!(
                "memory limit {} is below Docker's minimum of 6 MiB",
                human_bytes(bytes)
            )));
        }
        if i64::try_from(bytes).is_err() {
            return Err(InvalidSetting("memory limit too large".into()));
        }
        Ok(Bytes(bytes))
    }

    fn parse(text: &str) -> Result<Bytes, InvalidSetting> {
        let lower = text.trim().to_ascii_lowercase();
        let split = lower
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(lower.len());
        let (digits, unit) = lower.split_at(split);
        let unit_bytes = match unit.trim() {
            "" | "b" => 1,
            "k" | "kb" | "kib" => 1 << 10,
            "m" | "mb" | "mib" => MIB,
            "g" | "gb" | "gib" => GIB,
            _ => {
                return Err(InvalidSetting(format!(
                    "invalid memory size `{text}` (write e.g. 512mb or 1gb)"
                )));
            }
        };
        let n: u64 = digits.parse().map_err(|_| {
            InvalidSetting(format!(
                "invalid memory size `{text}` (write e.g. 512mb or 1gb)"
            ))
        })?;
        let bytes = n
            .checked_mul(unit_bytes)
            .ok_or_else(|| InvalidSetting("memory limit too large".into()))?;
        Bytes::checked(bytes)
    }
}

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Bytes;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a memory size such as 512mb, 1gb or a number of bytes")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Bytes, E> {
                Bytes::checked(v).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Bytes, E> {
                let v = u64::try_from(v).map_err(|_| E::custom("memory limit must be positive"))?;
                self.visit_u64(v)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Bytes, E> {
                Bytes::parse(v).map_err(E::custom)
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// A CPU limit in nano-CPUs (`cpus: 0.5` → 500 000 000).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Cpus(pub u64);

impl Cpus {
    fn checked(nano: u64) -> Result<Cpus, InvalidSetting> {
        if (MIN_NANO_CPUS..=MAX_NANO_CPUS).contains(&nano) {
            Ok(Cpus(nano))
        } else {
            Err(InvalidSetting(format!(
                "cpus must be between 0.01 and 1024, not {}",
                format_cpus(nano)
            )))
        }
    }
}

impl<'de> Deserialize<'de> for Cpus {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Cpus;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number of CPUs such as 0.5 or 2")
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Cpus, E> {
                if !v.is_finite() || v <= 0.0 || v > 1024.0 {
                    return Err(E::custom(format!(
                        "cpus must be between 0.01 and 1024, not {v}"
                    )));
                }
                // in range, so the cast is exact enough and cannot overflow
                Cpus::checked((v * 1e9).round() as u64).map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Cpus, E> {
                let nano = v
                    .checked_mul(1_000_000_000)
                    .ok_or_else(|| E::custom("cpus must be between 0.01 and 1024"))?;
                Cpus::checked(nano).map_err(E::custom)
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Cpus, E> {
                let v = u64::try_from(v).map_err(|_| E::custom("cpus must be positive"))?;
                self.visit_u64(v)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Cpus, E> {
                let nano = parse_decimal_nano(v.trim())
                    .ok_or_else(|| E::custom(format!("invalid number of CPUs `{v}`")))?;
                Cpus::checked(nano).map_err(E::custom)
            }
        }
        deserializer.deserialize_any(V)
    }
}

/// A pids limit (processes and threads), at least 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(try_from = "u32")]
pub(crate) struct Pids(pub u32);

impl Pids {
    fn checked(n: u32) -> Result<Pids, InvalidSetting> {
        if n == 0 {
            Err(InvalidSetting("pids must be at least 1".into()))
        } else {
            Ok(Pids(n))
        }
    }
}

impl TryFrom<u32> for Pids {
    type Error = InvalidSetting;
    fn try_from(n: u32) -> Result<Pids, InvalidSetting> {
        Pids::checked(n)
    }
}

/// A capability, normalised to Docker's `CAP_NAME` form, or `ALL`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(try_from = "String")]
pub(crate) struct Capability(pub String);

impl TryFrom<String> for Capability {
    type Error = InvalidSetting;
    fn try_from(name: String) -> Result<Capability, InvalidSetting> {
        let upper = name.trim().to_ascii_uppercase();
        if upper == "ALL" {
            return Ok(Capability(upper));
        }
        let bare = upper.strip_prefix("CAP_").unwrap_or(&upper);
        if CAPABILITIES.contains(&bare) {
            Ok(Capability(format!("CAP_{bare}")))
        } else {
            Err(InvalidSetting(format!("unknown capability `{name}`")))
        }
    }
}

/// The `user` asking for a uid of its own for each workspace.
pub const PER_WORKSPACE_USER: &str = "per-workspace";

/// `uid:gid`, both numeric, or `per-workspace` (a uid of its own for each
/// workspace, allocated by `containers`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub(crate) struct User(pub String);

impl TryFrom<String> for User {
    type Error = InvalidSetting;
    fn try_from(text: String) -> Result<User, InvalidSetting> {
        let numeric = |s: &str| !s.is_empty() && s.len() <= 10 && s.parse::<u32>().is_ok();
        if text == PER_WORKSPACE_USER {
            return Ok(User(text));
        }
        match text.split_once(':') {
            Some((uid, gid)) if numeric(uid) && numeric(gid) => Ok(User(text)),
            _ => Err(InvalidSetting(format!(
                "user must be numeric `uid:gid` or `{}`, not `{text}`",
                PER_WORKSPACE_USER
            ))),
        }
    }
}

/// An absolute path inside the container, without `..`, commas or colons
/// (they would change the meaning of Docker's tmpfs and mount options).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(try_from = "String")]
pub(crate) struct AbsPath(pub String);

impl TryFrom<String> for AbsPath {
    type Error = InvalidSetting;
    fn try_from(path: String) -> Result<AbsPath, InvalidSetting> {
        let bad = !path.starts_with('/')
            || path.split('/').any(|part| part == "..")
            || path.chars().any(|c| c == ',' || c == ':' || c.is_control());
        if bad {
            Err(InvalidSetting(format!(
                "`{path}` must be an absolute container path without `..`, `,` or `:`"
            )))
        } else {
            Ok(AbsPath(path))
        }
    }
}

/// tmpfs mount options (`size=64m,noexec,nosuid,nodev`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub(crate) struct TmpfsOptions(pub String);

impl TryFrom<String> for TmpfsOptions {
    type Error = InvalidSetting;
    fn try_from(options: String) -> Result<TmpfsOptions, InvalidSetting> {
        let ok = options
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "=,_.-".contains(c));
        if ok {
            Ok(TmpfsOptions(options))
        } else {
            Err(InvalidSetting(format!("invalid tmpfs options `{options}`")))
        }
    }
}

/// A skill or MCP server name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(try_from = "String")]
pub(crate) struct Name(pub String);

impl TryFrom<String> for Name {
    type Error = InvalidSetting;
    fn try_from(name: String) -> Result<Name, InvalidSetting> {
        let ok = !name.is_empty()
            && name.len() <= 128
            && !name.chars().any(|c| c.is_whitespace() || c.is_control());
        if ok {
            Ok(Name(name))
        } else {
            Err(InvalidSetting(format!("invalid name `{name}`")))
        }
    }
}

/// A syscall name (`[a-z0-9_]+`); checked against the known names later.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(try_from = "String")]
pub(crate) struct Syscall(pub String);

impl TryFrom<String> for Syscall {
    type Error = InvalidSetting;
    fn try_from(name: String) -> Result<Syscall, InvalidSetting> {
        let ok = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if ok {
            Ok(Syscall(name))
        } else {
            Err(InvalidSetting(format!("invalid syscall name `{name}`")))
        }
    }
}
