//! Policy groups and the effective policy of a workspace.
//!
//! A **policy group** is data (YAML) naming the container settings it
//! implies. Built-in groups live in `policies/` and are embedded in the
//! binary; users add groups as `NAME.yaml` files in the folders named by
//! `containers.policy_dirs` (a user group may not reuse a built-in or
//! parametric name). Parametric groups are recognised by name:
//! `max_memory_<N>mb`, `max_memory_<N>gb` (binary units: 512mb = 512 MiB),
//! `max_cpus_<N>` (N may be decimal: `max_cpus_0.5`), `max_pids_<N>`; and
//! the policies entry `{allowed_executables: [/bin/busybox, ...]}` is a group
//! named `allowed_executables`.
//!
//! A workspace's **effective policy** is `policies/baseline.yaml` (applied to
//! every workspace, never listed) merged with the listed groups. Unknown
//! groups, malformed groups and contradictions are errors: the workspace
//! must not start (fail closed).
//!
//! # Merge rules
//!
//! The baseline comes first, then the groups in the listed order. The
//! result does not depend on that order except for which group an error
//! names first; provenance lists follow it.
//!
//! | setting | rule |
//! | --- | --- |
//! | `memory`, `cpus`, `pids` | the tightest (smallest) value among the listed groups wins, never a contradiction; the baseline's value is the default when no listed group sets one (so `max_memory_2gb` raises the 1 GiB default) |
//! | `no_new_privileges`, `read_only_rootfs`, `read_only_mounts`, `seccomp.threads_only_clone`, `runner.no_exec_after_start` | `true` anywhere (baseline included) wins; a group cannot turn them off (`false` is a no-op) |
//! | `untrusted_input`, `private_data` | `true` anywhere wins (trifecta hints) |
//! | `network` | a listed group's value replaces the baseline's (`none` beats the baseline's `bridge`); two listed groups saying `none` and `bridge` contradict |
//! | `user` | `uid:gid`, or `per-workspace` (a uid of its own per workspace from 100001, kept in `container_users`); a listed group's value replaces the baseline's; two listed groups with different users contradict |
//! | `cap_drop` | union of the baseline and the groups |
//! | `cap_add` | union of the groups; kept although the baseline drops `ALL` (Docker adds after dropping); a capability one group adds and another group drops by name is a contradiction (dropping `ALL` in a group is not) |
//! | `tmpfs` | by path: a listed group's options replace the baseline's; two listed groups with different options for one path contradict |
//! | `seccomp.deny` (EPERM), `seccomp.enosys` (ENOSYS) | union; a syscall denied by one group and ENOSYS in another is a contradiction; `execve` cannot be listed (runc needs it to start the container) |
//! | `allowed_executables` | intersection of the groups that set it; an empty intersection is a contradiction; a group setting it also denies `memfd_create` (EPERM), closing the exec-from-memory loophole of path rules |
//! | `allowed_skills`, `allowed_mcp_servers` | intersection of the groups that set it (empty = none allowed); unset = no restriction; in `allowed_skills`, `memory` names the built-in memory tools |
//!
//! Listing a group twice or listing `baseline` is an error.
//!
//! Every value of the [`EffectivePolicy`] records the groups it came from
//! ([`Setting::from`], [`SourcedSet`]). [`EffectivePolicy::compile`] turns it
//! into [`ContainerSettings`]; when no group adds seccomp rules the profile is
//! `None` (Docker's default applies), otherwise a full profile is generated
//! (see `seccomp.rs`). [`WorkspaceReach`] (`reach.rs`) is what a workspace
//! may reach through the gateway, computed once per configuration load from
//! the configuration and the effective policy; the gateway enforces it and
//! [`report`] (the audit of `pincer policy audit`) prints it.

mod compile;
mod egress;
mod error;
mod group;
mod merge;
mod reach;
mod report;
mod seccomp;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use compile::{ContainerSettings, RunnerPolicy, enforcement_notes};
pub use egress::{EgressEntry, EgressReach, EgressRule};
pub use error::PolicyError;
pub use group::{NetworkMode, PER_WORKSPACE_USER};
pub use merge::{BASELINE, EffectivePolicy, GroupInfo, GroupsEgress, Setting, SourcedSet};
pub use reach::{
    MEMORY, MEMORY_TOOLS, ModelReach, ModelsFrom, Reaches, SCHEDULE, SCHEDULE_TOOLS, SourceKind,
    ToolSource, WorkspaceReach,
};
pub use report::{
    ContainerSummary, McpContainerSummary, ModelsLine, MountLine, PolicyReport, Reach, ReachItem,
    ReportInput, SeccompRuleSummary, SeccompSummary, SettingLine, Trifecta, mcp_container_summary,
    render_text, report,
};

use crate::config::PolicyEntry;
use group::GroupSpec;
use merge::{Baseline, Listed};
use seccomp::SeccompBase;

/// The built-in group files, embedded.
const BUILTIN: &[(&str, &str)] = &[
    (BASELINE, include_str!("../../../policies/baseline.yaml")),
    (
        "egress_any_public",
        include_str!("../../../policies/egress_any_public.yaml"),
    ),
    (
        "egress_none",
        include_str!("../../../policies/egress_none.yaml"),
    ),
    (
        "no_internet_access",
        include_str!("../../../policies/no_internet_access.yaml"),
    ),
    (
        "no_process_creation",
        include_str!("../../../policies/no_process_creation.yaml"),
    ),
    (
        "read_only_mounts",
        include_str!("../../../policies/read_only_mounts.yaml"),
    ),
    (
        "read_only_rootfs",
        include_str!("../../../policies/read_only_rootfs.yaml"),
    ),
];

/// How parametric groups are written, for messages.
const PARAMETRIC_FORMS: &str = "max_memory_<N>mb, max_memory_<N>gb, max_cpus_<N>, max_pids_<N>, \
                                {allowed_executables: [paths]}";

const ORIGIN_BUILTIN: &str = "built-in";
const ORIGIN_PARAMETRIC: &str = "parametric";
const ORIGIN_ENTRY: &str = "policies entry";

#[derive(Debug, Clone)]
struct CatalogGroup {
    spec: Arc<GroupSpec>,
    /// `built-in` or the user file's path.
    origin: String,
}

/// The groups a host knows: the built-in ones plus those of the user's
/// policy folders.
#[derive(Debug, Clone)]
pub struct PolicyCatalog {
    baseline: Baseline,
    groups: BTreeMap<String, CatalogGroup>,
    seccomp: Arc<SeccompBase>,
    known_syscalls: BTreeSet<String>,
}

impl PolicyCatalog {
    /// The built-in groups only.
    ///
    /// # Errors
    /// Only if the embedded data is broken, which the tests rule out.
    pub fn builtin() -> Result<PolicyCatalog, PolicyError> {
        Self::load(&[])
    }

    /// The built-in groups plus every `*.yaml`/`*.yml` file of `user_dirs`
    /// (not recursive; `~` is expanded). The file name without extension is
    /// the group name.
    ///
    /// # Errors
    /// A folder or file that cannot be read, a malformed group (with file,
    /// line and column), a file named like a built-in or parametric group,
    /// or a group defined in two folders.
    pub fn load(user_dirs: &[PathBuf]) -> Result<PolicyCatalog, PolicyError> {
        let seccomp = SeccompBase::builtin().map_err(PolicyError::Builtin)?;
        let known_syscalls = seccomp.known();
        let mut groups = BTreeMap::new();
        let mut baseline = None;
        for (name, text) in BUILTIN {
            let file = format!("<built-in>/policies/{name}.yaml");
            let spec = GroupSpec::parse(text, &file)
                .map_err(|(at, message)| PolicyError::Builtin(format!("{at}: {message}")))?;
            spec.check(&known_syscalls)
                .map_err(|message| PolicyError::Builtin(format!("{file}: {message}")))?;
            let spec = spec.with_implied();
            if *name == BASELINE {
                baseline = Some(Baseline::new(spec)?);
            } else {
                groups.insert(
                    (*name).to_owned(),
                    CatalogGroup {
                        spec: Arc::new(spec),
                        origin: ORIGIN_BUILTIN.to_owned(),
                    },
                );
            }
        }
        let baseline =
            baseline.ok_or_else(|| PolicyError::Builtin("no baseline.yaml".to_owned()))?;
        let mut catalog = PolicyCatalog {
            baseline,
            groups,
            seccomp: Arc::new(seccomp),
            known_syscalls,
        };
        for dir in user_dirs {
            catalog.load_dir(&crate::config::expand_tilde(dir))?;
        }
        Ok(catalog)
    }

    fn load_dir(&mut self, dir: &Path) -> Result<(), PolicyError> {
        let read_dir = |source| PolicyError::ReadDir {
            dir: dir.to_owned(),
            source,
        };
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(read_dir)? {
            let path = entry.map_err(read_dir)?.path();
            let is_yaml = path
                .extension()
                .is_some_and(|ext| ext == "yaml" || ext == "yml");
            if is_yaml && path.is_file() {
                files.push(path);
            }
        }
        files.sort();
        for file in files {
            self.load_file(&file)?;
        }
        Ok(())
    }

    fn load_file(&mut self, file: &Path) -> Result<(), PolicyError> {
        let shown = file.display().to_string();
        let name = file
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_owned();
        if !is_group_name(&name) {
            return Err(PolicyError::GroupFile {
                location: shown,
                message: format!(
                    "`{name}` is not a valid group name (lowercase letters, digits, `_` and `-`, \
                     starting with a letter or digit)"
                ),
            });
        }
        let builtin = BUILTIN.iter().any(|(n, _)| *n == name)
            || group::parametric(&name).is_some()
            || name == "allowed_executables";
        if builtin {
            return Err(PolicyError::Shadows {
                name,
                file: file.to_owned(),
            });
        }
        if let Some(existing) = self.groups.get(&name) {
            return Err(PolicyError::DefinedTwice {
                name,
                first: PathBuf::from(&existing.origin),
                second: file.to_owned(),
            });
        }
        let text = std::fs::read_to_string(file).map_err(|source| PolicyError::ReadFile {
            file: file.to_owned(),
            source,
        })?;
        let spec = GroupSpec::parse(&text, &shown)
            .map_err(|(location, message)| PolicyError::GroupFile { location, message })?;
        spec.check(&self.known_syscalls)
            .map_err(|message| PolicyError::GroupFile {
                location: shown.clone(),
                message: format!("group `{name}`: {message}"),
            })?;
        self.groups.insert(
            name,
            CatalogGroup {
                spec: Arc::new(spec.with_implied()),
                origin: shown,
            },
        );
        Ok(())
    }

    /// Every group that can be listed by name (parametric ones excepted),
    /// sorted by name; the baseline first.
    pub fn groups(&self) -> Vec<GroupInfo> {
        let mut all = vec![GroupInfo {
            name: BASELINE.to_owned(),
            description: self.baseline.description().to_owned(),
            origin: ORIGIN_BUILTIN.to_owned(),
        }];
        all.extend(self.groups.iter().map(|(name, g)| GroupInfo {
            name: name.clone(),
            description: g.spec.description.clone(),
            origin: g.origin.clone(),
        }));
        all
    }

    /// The effective policy of `workspace` listing `entries`.
    ///
    /// # Errors
    /// An unknown group (with a did-you-mean), an invalid parametric value or
    /// `allowed_executables` entry, a group listed twice or `baseline`
    /// listed, or a contradiction between two groups.
    pub fn effective(
        &self,
        workspace: &str,
        entries: &[PolicyEntry],
    ) -> Result<EffectivePolicy, PolicyError> {
        let invalid = |group: &str, message: String| PolicyError::InvalidEntry {
            workspace: workspace.to_owned(),
            group: group.to_owned(),
            message,
        };
        let mut listed: Vec<Listed> = Vec::new();
        for entry in entries {
            let name = entry.name();
            if listed.iter().any(|g| g.info.name == name) {
                return Err(invalid(name, "listed more than once".to_owned()));
            }
            let (spec, origin) = match entry {
                PolicyEntry::AllowedExecutables(paths) => {
                    let spec = group::allowed_executables_group(paths)
                        .and_then(|spec| spec.check(&self.known_syscalls).map(|()| spec))
                        .map_err(|e| invalid(name, e.0))?;
                    (Arc::new(spec.with_implied()), ORIGIN_ENTRY.to_owned())
                }
                PolicyEntry::Group(name) => self.resolve(workspace, name)?,
            };
            listed.push(Listed {
                info: GroupInfo {
                    name: name.to_owned(),
                    description: spec.description.clone(),
                    origin,
                },
                spec,
            });
        }
        merge::merge(
            workspace,
            &self.baseline,
            &listed,
            Arc::clone(&self.seccomp),
        )
    }

    fn resolve(
        &self,
        workspace: &str,
        name: &str,
    ) -> Result<(Arc<GroupSpec>, String), PolicyError> {
        let invalid = |message: String| PolicyError::InvalidEntry {
            workspace: workspace.to_owned(),
            group: name.to_owned(),
            message,
        };
        if name == BASELINE {
            return Err(invalid(
                "the baseline applies to every workspace; do not list it".to_owned(),
            ));
        }
        if name == "allowed_executables" {
            return Err(invalid(
                "write it as a mapping: {allowed_executables: [/bin/sh, ...]}".to_owned(),
            ));
        }
        if let Some(group) = self.groups.get(name) {
            return Ok((Arc::clone(&group.spec), group.origin.clone()));
        }
        if let Some(spec) = group::parametric(name) {
            let spec = spec.map_err(|e| invalid(e.0))?;
            return Ok((Arc::new(spec), ORIGIN_PARAMETRIC.to_owned()));
        }
        Err(self.unknown(workspace, name))
    }

    fn unknown(&self, workspace: &str, name: &str) -> PolicyError {
        let hint = if let Some(prefix) = ["max_memory_", "max_cpus_", "max_pids_"]
            .iter()
            .find(|p| name.starts_with(**p))
        {
            let form = match *prefix {
                "max_memory_" => "max_memory_<N>mb or max_memory_<N>gb, N a whole number",
                "max_cpus_" => "max_cpus_<N>, N a number such as 2 or 0.5",
                _ => "max_pids_<N>, N a whole number",
            };
            format!(", expected {form}")
        } else {
            let names: Vec<&str> = self.groups.keys().map(String::as_str).collect();
            did_you_mean(name, &names)
                .map(|best| format!(", did you mean `{best}`?"))
                .unwrap_or_default()
        };
        let mut known: Vec<&str> = self.groups.keys().map(String::as_str).collect();
        known.push(PARAMETRIC_FORMS);
        PolicyError::UnknownGroup {
            workspace: workspace.to_owned(),
            group: name.to_owned(),
            hint,
            known: known.join(", "),
        }
    }
}

/// `[a-z0-9][a-z0-9_-]{0,62}`, like workspace names.
fn is_group_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    let first_ok = bytes
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    first_ok
        && name.len() <= 63
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// The known name closest to `name`, if it looks like a typo or a
/// shortening: a small edit distance, or a long shared prefix.
fn did_you_mean<'a>(name: &str, known: &[&'a str]) -> Option<&'a str> {
    let len = name.chars().count();
    known
        .iter()
        .map(|candidate| {
            let prefix = name
                .chars()
                .zip(candidate.chars())
                .take_while(|(a, b)| a == b)
                .count();
            (
                crate::suggest::edit_distance(name, candidate),
                prefix,
                *candidate,
            )
        })
        .filter(|(distance, prefix, _)| {
            *distance <= len.div_ceil(3) || (*prefix >= 4 && *prefix * 4 >= len * 3)
        })
        .min_by_key(|(distance, prefix, candidate)| (*distance, usize::MAX - prefix, *candidate))
        .map(|(_, _, candidate)| candidate)
}
