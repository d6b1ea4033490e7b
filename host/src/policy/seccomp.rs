//! The seccomp profile generated when a workspace's groups add rules.
//!
//! The profile is in Docker's format (it goes inline into
//! `security_opt: ["seccomp=<json>"]`; the daemon does not read a path). It
//! matches Docker's default profile for everything the groups do not touch:
//! default action `SCMP_ACT_ERRNO` with EPERM, the allow-list in
//! `policies/seccomp/default-allow.json` (Docker's unconditional list without
//! io_uring), `clone` without namespace flags, `clone3` failing with ENOSYS,
//! `socket` except `AF_VSOCK`, `personality` for the values Docker allows.
//! Then the groups' rules apply:
//! - `deny` names leave every allow rule and get `SCMP_ACT_ERRNO` EPERM (1);
//! - `enosys` names leave every allow rule and get `SCMP_ACT_ERRNO` ENOSYS (38);
//! - `threads_only_clone` narrows the `clone` rule to thread creation.
//!
//! Each syscall ends up in exactly one action, so libseccomp never sees
//! two actions for the same syscall.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// Embedded allow-list (see the file's `about`).
const DEFAULT_ALLOW_JSON: &str = include_str!("../../../policies/seccomp/default-allow.json");

pub(crate) const EPERM: u32 = 1;
pub(crate) const ENOSYS: u32 = 38;

// clone(2) flags, from include/uapi/linux/sched.h.
const CLONE_THREAD: u64 = 0x0001_0000;
const CLONE_NEWNS: u64 = 0x0002_0000;
const CLONE_NEWCGROUP: u64 = 0x0200_0000;
const CLONE_NEWUTS: u64 = 0x0400_0000;
const CLONE_NEWIPC: u64 = 0x0800_0000;
const CLONE_NEWUSER: u64 = 0x1000_0000;
const CLONE_NEWPID: u64 = 0x2000_0000;
const CLONE_NEWNET: u64 = 0x4000_0000;
/// Every namespace flag `clone` accepts: 0x7e020000 (2114060288), the mask
/// of Docker's own clone rule. (CLONE_NEWTIME, 0x80, exists only for
/// `clone3` and `unshare`: in `clone`'s flags that bit is the exit signal.)
pub(crate) const NAMESPACE_FLAGS: u64 = CLONE_NEWNS
    | CLONE_NEWCGROUP
    | CLONE_NEWUTS
    | CLONE_NEWIPC
    | CLONE_NEWUSER
    | CLONE_NEWPID
    | CLONE_NEWNET;
/// `threads_only_clone` allows `clone` only when
/// `(flags & THREAD_CLONE_MASK) == CLONE_THREAD`, i.e. when CLONE_THREAD is
/// set AND no namespace flag is: 0x7e030000 masked must equal 0x10000.
///
/// That is the conjunction of `(flags & CLONE_THREAD) == CLONE_THREAD` and
/// `(flags & 0x7e020000) == 0`, written as ONE masked comparison: libseccomp
/// has historically refused two comparisons of the same argument in one rule,
/// and a single comparison cannot be split by it into an OR.
/// The kernel only accepts CLONE_THREAD together with CLONE_SIGHAND, which
/// needs CLONE_VM, so an allowed clone always makes a thread of the caller's
/// thread group, never a process. glibc's fork/posix_spawn use clone without
/// CLONE_THREAD: no rule matches, so they get the default action (EPERM).
pub(crate) const THREAD_CLONE_MASK: u64 = NAMESPACE_FLAGS | CLONE_THREAD;
/// `AF_VSOCK`: the only socket family Docker's profile refuses.
const AF_VSOCK: u64 = 40;
/// The `personality` values Docker allows: PER_LINUX, PER_LINUX32,
/// UNAME26, PER_LINUX32|UNAME26, and 0xffffffff (query).
const PERSONALITIES: [u64; 5] = [0x0, 0x8, 0x20000, 0x20008, 0xffff_ffff];

/// Syscalls that have argument rules generated here rather than a place in
/// the allow-list.
const RULED_IN_CODE: [&str; 4] = ["clone", "clone3", "personality", "socket"];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct AllowFile {
    #[allow(dead_code)]
    about: Vec<String>,
    arch_map: Vec<ArchMap>,
    allow: BTreeMap<String, Vec<String>>,
    allow_if_arch: Vec<ArchRule>,
    blocked: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ArchMap {
    architecture: String,
    sub_architectures: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct ArchRule {
    arches: Vec<String>,
    names: Vec<String>,
}

/// The parsed allow-list, shared by every effective policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SeccompBase {
    arch_map: Vec<ArchMap>,
    allow: BTreeSet<String>,
    allow_if_arch: Vec<ArchRule>,
    blocked: BTreeSet<String>,
}

impl SeccompBase {
    // String: fails only on a broken embedded profile (a test loads it),
    // reported as `PolicyError::Builtin`.
    pub(crate) fn builtin() -> Result<SeccompBase, String> {
        let file: AllowFile = serde_json::from_str(DEFAULT_ALLOW_JSON)
            .map_err(|e| format!("policies/seccomp/default-allow.json: {e}"))?;
        let allow: BTreeSet<String> = file.allow.into_values().flatten().collect();
        let blocked: BTreeSet<String> = file.blocked.into_iter().collect();
        if let Some(name) = allow.intersection(&blocked).next() {
            return Err(format!(
                "policies/seccomp/default-allow.json: `{name}` is both allowed and blocked"
            ));
        }
        if let Some(name) = RULED_IN_CODE
            .iter()
            .find(|n| allow.contains(**n) || blocked.contains(**n))
        {
            return Err(format!(
                "policies/seccomp/default-allow.json: `{name}` has a generated rule; do not list it"
            ));
        }
        if !allow.contains("execve") {
            return Err("policies/seccomp/default-allow.json must allow execve".into());
        }
        Ok(SeccompBase {
            arch_map: file.arch_map,
            allow,
            allow_if_arch: file.allow_if_arch,
            blocked,
        })
    }

    /// Every syscall name a group may mention.
    pub(crate) fn known(&self) -> BTreeSet<String> {
        let mut known: BTreeSet<String> = self.allow.union(&self.blocked).cloned().collect();
        known.extend(
            self.allow_if_arch
                .iter()
                .flat_map(|rule| rule.names.iter().cloned()),
        );
        known.extend(RULED_IN_CODE.iter().map(|n| (*n).to_owned()));
        known
    }

    /// The unconditional allow-list.
    pub(crate) fn allow_names(&self) -> impl Iterator<Item = &String> {
        self.allow.iter()
    }
}

/// A Docker seccomp profile.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Profile {
    default_action: String,
    default_errno_ret: u32,
    arch_map: Vec<ArchMap>,
    pub(crate) syscalls: Vec<Rule>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Rule {
    pub(crate) names: Vec<String>,
    pub(crate) action: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) errno_ret: Option<u32>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) args: Vec<Arg>,
    #[serde(skip_serializing_if = "Option::is_none")]
    includes: Option<Includes>,
    #[serde(skip_serializing_if = "Option::is_none")]
    comment: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Arg {
    pub(crate) index: u32,
    pub(crate) value: u64,
    pub(crate) value_two: u64,
    pub(crate) op: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
struct Includes {
    arches: Vec<String>,
}

impl Rule {
    fn new(names: Vec<String>, action: &str) -> Rule {
        Rule {
            names,
            action: action.to_owned(),
            errno_ret: None,
            args: Vec::new(),
            includes: None,
            comment: None,
        }
    }

    fn allow(names: Vec<String>) -> Rule {
        Rule::new(names, "SCMP_ACT_ALLOW")
    }

    fn errno(names: Vec<String>, errno: u32, comment: String) -> Rule {
        Rule {
            errno_ret: Some(errno),
            comment: Some(comment),
            ..Rule::new(names, "SCMP_ACT_ERRNO")
        }
    }

    fn with_arg(mut self, index: u32, op: &str, value: u64, value_two: u64) -> Rule {
        self.args.push(Arg {
            index,
            value,
            value_two,
            op: op.to_owned(),
        });
        self
    }

    fn with_comment(mut self, comment: &str) -> Rule {
        self.comment = Some(comment.to_owned());
        self
    }
}

/// What the groups ask of seccomp: syscall → the groups that ask.
pub(crate) struct Requests<'a> {
    pub deny: &'a BTreeMap<String, Vec<String>>,
    pub enosys: &'a BTreeMap<String, Vec<String>>,
    pub threads_only_clone: bool,
}

/// Builds the profile: the base with the groups' rules applied.
pub(crate) fn profile(base: &SeccompBase, req: &Requests<'_>) -> Profile {
    let ruled = |name: &str| req.deny.contains_key(name) || req.enosys.contains_key(name);
    let keep = |names: &mut dyn Iterator<Item = &String>| -> Vec<String> {
        names.filter(|n| !ruled(n)).cloned().collect()
    };
    let mut rules = vec![Rule::allow(keep(&mut base.allow.iter()))];
    for arch_rule in &base.allow_if_arch {
        let names = keep(&mut arch_rule.names.iter());
        if !names.is_empty() {
            rules.push(Rule {
                includes: Some(Includes {
                    arches: arch_rule.arches.clone(),
                }),
                ..Rule::allow(names)
            });
        }
    }
    if !ruled("socket") {
        rules.push(
            Rule::allow(vec!["socket".into()])
                .with_arg(0, "SCMP_CMP_NE", AF_VSOCK, 0)
                .with_comment("every address family but AF_VSOCK"),
        );
    }
    if !ruled("personality") {
        for value in PERSONALITIES {
            rules.push(Rule::allow(vec!["personality".into()]).with_arg(
                0,
                "SCMP_CMP_EQ",
                value,
                0,
            ));
        }
    }
    if !ruled("clone") {
        let rule = if req.threads_only_clone {
            Rule::allow(vec!["clone".into()])
                .with_arg(0, "SCMP_CMP_MASKED_EQ", THREAD_CLONE_MASK, CLONE_THREAD)
                .with_comment(
                    "threads only: CLONE_THREAD set and no namespace flag, \
                     (flags & 0x7e030000) == 0x10000",
                )
        } else {
            Rule::allow(vec!["clone".into()])
                .with_arg(0, "SCMP_CMP_MASKED_EQ", NAMESPACE_FLAGS, 0)
                .with_comment("no namespace flags, (flags & 0x7e020000) == 0")
        };
        rules.push(rule);
    }
    if !ruled("clone3") {
        // As Docker: its flags live in memory seccomp cannot read; ENOSYS
        // makes glibc fall back to clone, which the rule above checks.
        rules.push(Rule::errno(
            vec!["clone3".into()],
            ENOSYS,
            "clone3 flags cannot be inspected; libc falls back to clone".into(),
        ));
    }
    for (list, errno) in [(req.deny, EPERM), (req.enosys, ENOSYS)] {
        if list.is_empty() {
            continue;
        }
        let mut groups: Vec<&str> = Vec::new();
        for from in list.values().flatten() {
            if !groups.contains(&from.as_str()) {
                groups.push(from);
            }
        }
        let comment = format!("policy groups: {}", groups.join(", "));
        rules.push(Rule::errno(list.keys().cloned().collect(), errno, comment));
    }
    Profile {
        default_action: "SCMP_ACT_ERRNO".into(),
        default_errno_ret: EPERM,
        arch_map: base.arch_map.clone(),
        syscalls: rules,
    }
}
