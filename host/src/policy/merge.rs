//! The effective policy of a workspace: the baseline merged with the listed
//! groups (rules in the module documentation of [`crate::policy`]), every
//! value with its provenance.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Display;
use std::sync::Arc;

use serde::Serialize;

use super::error::PolicyError;
use super::group::{GroupEgress, GroupSpec, NetworkMode};
use super::seccomp::SeccompBase;

/// The name under which the baseline appears in provenance.
pub const BASELINE: &str = "baseline";

/// A value and the groups it came from, in listed order (`baseline` first
/// when it contributed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Setting<T> {
    pub value: T,
    pub from: Vec<String>,
}

impl<T> Setting<T> {
    fn baseline(value: T) -> Setting<T> {
        Setting {
            value,
            from: vec![BASELINE.to_owned()],
        }
    }
}

/// The items of a list setting, each with the groups that listed it.
pub type SourcedSet = BTreeMap<String, Vec<String>>;

/// Where the groups let a workspace's egress proxy connect (the
/// workspace's own `egress:` list joins it in [`super::EgressReach`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct GroupsEgress {
    /// The groups saying `egress: none`.
    pub none: Vec<String>,
    /// The groups saying `egress: any_public`.
    pub any_public: Vec<String>,
    /// Host patterns, each with the groups that list it.
    pub hosts: SourcedSet,
}

/// A group as listed by a workspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GroupInfo {
    pub name: String,
    pub description: String,
    /// `built-in`, `parametric`, `policies entry` or the user file's path.
    pub origin: String,
}

/// A workspace's effective policy. Build it with
/// [`super::PolicyCatalog::effective`], turn it into container settings with
/// [`EffectivePolicy::compile`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EffectivePolicy {
    pub workspace: String,
    /// The listed groups in order (the baseline is implied, not listed).
    pub groups: Vec<GroupInfo>,
    pub network: Setting<NetworkMode>,
    pub egress: GroupsEgress,
    pub memory_bytes: Setting<u64>,
    pub nano_cpus: Setting<u64>,
    pub pids: Setting<u32>,
    /// `uid:gid`.
    pub user: Setting<String>,
    /// `ALL` or `CAP_NAME`.
    pub cap_drop: SourcedSet,
    /// `CAP_NAME`.
    pub cap_add: SourcedSet,
    pub no_new_privileges: Setting<bool>,
    pub read_only_rootfs: Setting<bool>,
    pub read_only_mounts: Setting<bool>,
    /// Container path → mount options.
    pub tmpfs: BTreeMap<String, Setting<String>>,
    /// Syscalls failing with EPERM.
    pub seccomp_deny: SourcedSet,
    /// Syscalls failing with ENOSYS.
    pub seccomp_enosys: SourcedSet,
    pub threads_only_clone: Setting<bool>,
    /// The runner denies `execve` to itself once started.
    pub no_exec_after_start: Setting<bool>,
    /// `None` = no restriction.
    pub allowed_executables: Option<Setting<Vec<String>>>,
    pub allowed_skills: Option<Setting<Vec<String>>>,
    pub allowed_mcp_servers: Option<Setting<Vec<String>>>,
    /// Trifecta hints (not enforced).
    pub untrusted_input: Setting<bool>,
    pub private_data: Setting<bool>,
    #[serde(skip)]
    pub(crate) seccomp_base: Arc<SeccompBase>,
}

impl EffectivePolicy {
    /// Whether any group adds seccomp rules (else Docker's default applies).
    pub fn has_seccomp_rules(&self) -> bool {
        !self.seccomp_deny.is_empty()
            || !self.seccomp_enosys.is_empty()
            || self.threads_only_clone.value
    }
}

/// The baseline with every setting present.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Baseline {
    spec: GroupSpec,
    network: NetworkMode,
    memory: u64,
    nano_cpus: u64,
    pids: u32,
    user: String,
    no_new_privileges: bool,
    read_only_rootfs: bool,
    read_only_mounts: bool,
    threads_only_clone: bool,
    no_exec_after_start: bool,
    untrusted_input: bool,
    private_data: bool,
}

impl Baseline {
    pub(crate) fn new(spec: GroupSpec) -> Result<Baseline, PolicyError> {
        fn need<T>(value: Option<T>, field: &str) -> Result<T, PolicyError> {
            value.ok_or_else(|| {
                PolicyError::Builtin(format!("policies/baseline.yaml must set `{field}`"))
            })
        }
        if spec.allowed_executables.is_some()
            || spec.allowed_skills.is_some()
            || spec.allowed_mcp_servers.is_some()
            || !spec.cap_add.is_empty()
        {
            return Err(PolicyError::Builtin(
                "policies/baseline.yaml must not restrict executables, skills or MCP servers, \
                 nor add capabilities"
                    .into(),
            ));
        }
        Ok(Baseline {
            network: need(spec.network, "network")?,
            memory: need(spec.memory, "memory")?.0,
            nano_cpus: need(spec.cpus, "cpus")?.0,
            pids: need(spec.pids, "pids")?.0,
            user: need(spec.user.clone(), "user")?.0,
            no_new_privileges: need(spec.no_new_privileges, "no_new_privileges")?,
            read_only_rootfs: need(spec.read_only_rootfs, "read_only_rootfs")?,
            read_only_mounts: need(spec.read_only_mounts, "read_only_mounts")?,
            threads_only_clone: need(
                spec.seccomp.threads_only_clone,
                "seccomp.threads_only_clone",
            )?,
            no_exec_after_start: need(
                spec.runner.no_exec_after_start,
                "runner.no_exec_after_start",
            )?,
            untrusted_input: need(spec.untrusted_input, "untrusted_input")?,
            private_data: need(spec.private_data, "private_data")?,
            spec,
        })
    }

    pub(crate) fn description(&self) -> &str {
        &self.spec.description
    }
}

/// A listed group, resolved.
pub(crate) struct Listed {
    pub info: GroupInfo,
    pub spec: Arc<GroupSpec>,
}

struct Merger<'a> {
    workspace: &'a str,
    listed: &'a [Listed],
}

impl Merger<'_> {
    fn contradiction(
        &self,
        first: &str,
        second: &str,
        setting: &str,
        detail: String,
    ) -> PolicyError {
        PolicyError::Contradiction {
            workspace: self.workspace.to_owned(),
            first: first.to_owned(),
            second: second.to_owned(),
            setting: setting.to_owned(),
            detail,
        }
    }

    /// `(group name, value)` of every listed group that sets the field.
    fn values<'s, T>(
        &'s self,
        field: impl Fn(&'s GroupSpec) -> Option<T> + 's,
    ) -> impl Iterator<Item = (&'s str, T)> + 's {
        self.listed
            .iter()
            .filter_map(move |g| field(&g.spec).map(|v| (g.info.name.as_str(), v)))
    }

    /// Limits: the tightest listed value wins; the baseline is the default
    /// when no listed group sets one.
    fn tightest<'s, T: Ord + Copy>(
        &'s self,
        baseline: T,
        field: impl Fn(&'s GroupSpec) -> Option<T> + 's,
    ) -> Setting<T> {
        let values: Vec<(&str, T)> = self.values(field).collect();
        match values.iter().map(|(_, v)| *v).min() {
            Some(min) => Setting {
                value: min,
                from: values
                    .iter()
                    .filter(|(_, v)| *v == min)
                    .map(|(n, _)| (*n).to_owned())
                    .collect(),
            },
            None => Setting::baseline(baseline),
        }
    }

    /// Restricting booleans: true anywhere (baseline included) wins.
    fn any_true<'s>(
        &'s self,
        baseline: bool,
        field: impl Fn(&'s GroupSpec) -> Option<bool> + 's,
    ) -> Setting<bool> {
        let mut from: Vec<String> = Vec::new();
        if baseline {
            from.push(BASELINE.to_owned());
        }
        from.extend(
            self.values(field)
                .filter(|(_, v)| *v)
                .map(|(n, _)| n.to_owned()),
        );
        if from.is_empty() {
            Setting::baseline(false)
        } else {
            Setting { value: true, from }
        }
    }

    /// Settings without an order (network, user): listed groups must agree;
    /// their value replaces the baseline's.
    fn agreed<'s, T: PartialEq + Clone + Display>(
        &'s self,
        setting: &str,
        baseline: T,
        field: impl Fn(&'s GroupSpec) -> Option<T> + 's,
    ) -> Result<Setting<T>, PolicyError> {
        let mut chosen: Option<Setting<T>> = None;
        for (name, value) in self.values(field) {
            match &mut chosen {
                None => {
                    chosen = Some(Setting {
                        value,
                        from: vec![name.to_owned()],
                    })
                }
                Some(first) if first.value == value => first.from.push(name.to_owned()),
                Some(first) => {
                    return Err(self.contradiction(
                        &first.from[0],
                        name,
                        setting,
                        format!("{} vs {value}", first.value),
                    ));
                }
            }
        }
        Ok(chosen.unwrap_or_else(|| Setting::baseline(baseline)))
    }

    /// Union of a list over the baseline and the listed groups.
    fn union<'s>(
        &'s self,
        baseline: &'s GroupSpec,
        field: impl Fn(&'s GroupSpec) -> Vec<String> + 's,
    ) -> SourcedSet {
        let mut set = SourcedSet::new();
        let all = std::iter::once((BASELINE, baseline))
            .chain(self.listed.iter().map(|g| (g.info.name.as_str(), &*g.spec)));
        for (name, spec) in all {
            for item in field(spec) {
                let from = set.entry(item).or_default();
                if !from.iter().any(|f| f == name) {
                    from.push(name.to_owned());
                }
            }
        }
        set
    }

    /// `egress`: host lists are joined; `any_public` opens every public
    /// address; `none` closes the way out and contradicts either.
    fn egress(&self, baseline: &GroupSpec) -> Result<GroupsEgress, PolicyError> {
        let mut egress = GroupsEgress::default();
        let all = std::iter::once((BASELINE, baseline))
            .chain(self.listed.iter().map(|g| (g.info.name.as_str(), &*g.spec)));
        for (name, spec) in all {
            match &spec.egress {
                None => {}
                Some(GroupEgress::None) => egress.none.push(name.to_owned()),
                Some(GroupEgress::AnyPublic) => egress.any_public.push(name.to_owned()),
                Some(GroupEgress::Hosts(hosts)) => {
                    for host in hosts {
                        let from = egress.hosts.entry(host.clone()).or_default();
                        if !from.iter().any(|f| f == name) {
                            from.push(name.to_owned());
                        }
                    }
                }
            }
        }
        let opener = egress
            .any_public
            .first()
            .cloned()
            .or_else(|| egress.hosts.values().flatten().next().cloned());
        if let (Some(closed), Some(opener)) = (egress.none.first(), opener) {
            let (first, second) = in_listed_order(self.listed, closed, &opener);
            return Err(self.contradiction(
                first,
                second,
                "egress",
                format!("{closed} says `egress: none`, {opener} opens a way out"),
            ));
        }
        Ok(egress)
    }

    /// Allow-lists: the intersection of every listed one; `None` when no
    /// group restricts. Returns the groups that emptied it, if it is empty.
    #[allow(clippy::type_complexity)]
    fn intersection<'s>(
        &'s self,
        field: impl Fn(&'s GroupSpec) -> Option<Vec<String>> + 's,
    ) -> (Option<Setting<Vec<String>>>, Option<(String, String)>) {
        let mut result: Option<(BTreeSet<String>, Vec<String>)> = None;
        let mut emptied = None;
        for (name, list) in self.values(field) {
            let list: BTreeSet<String> = list.into_iter().collect();
            result = Some(match result {
                None => (list, vec![name.to_owned()]),
                Some((acc, mut from)) => {
                    let next: BTreeSet<String> = acc.intersection(&list).cloned().collect();
                    if next.is_empty() && !acc.is_empty() && emptied.is_none() {
                        emptied = Some((from[0].clone(), name.to_owned()));
                    }
                    from.push(name.to_owned());
                    (next, from)
                }
            });
        }
        let setting = result.map(|(set, from)| Setting {
            value: set.into_iter().collect(),
            from,
        });
        (setting, emptied)
    }
}

fn strings<T>(items: &[T], get: impl Fn(&T) -> &String) -> Vec<String> {
    items.iter().map(|i| get(i).clone()).collect()
}

/// Merges `listed` over `baseline` for `workspace`.
pub(crate) fn merge(
    workspace: &str,
    baseline: &Baseline,
    listed: &[Listed],
    seccomp_base: Arc<SeccompBase>,
) -> Result<EffectivePolicy, PolicyError> {
    let m = Merger { workspace, listed };
    let b = &baseline.spec;

    let network = m.agreed("network", baseline.network, |g| g.network)?;
    let egress = m.egress(b)?;
    if network.value == NetworkMode::BridgeUnfiltered
        && let Some(closed) = egress.none.first()
    {
        let (first, second) = in_listed_order(listed, &network.from[0], closed);
        return Err(m.contradiction(
            first,
            second,
            "network",
            format!(
                "{} bypasses the egress proxy, {closed} says `egress: none`",
                network.from[0]
            ),
        ));
    }
    let user = m.agreed("user", baseline.user.clone(), |g| {
        g.user.as_ref().map(|u| u.0.clone())
    })?;

    let cap_drop = m.union(b, |g| strings(&g.cap_drop, |c| &c.0));
    let cap_add = m.union(b, |g| strings(&g.cap_add, |c| &c.0));
    for (cap, adders) in &cap_add {
        let droppers: Vec<&String> = cap_drop
            .get(cap)
            .map(|from| from.iter().filter(|f| *f != BASELINE).collect())
            .unwrap_or_default();
        if let (Some(adder), Some(dropper)) = (adders.first(), droppers.first()) {
            let (first, second) = in_listed_order(listed, adder, dropper);
            return Err(m.contradiction(
                first,
                second,
                "capabilities",
                format!("{adder} adds {cap}, {dropper} drops it"),
            ));
        }
    }

    let mut tmpfs: BTreeMap<String, Setting<String>> = b
        .tmpfs
        .iter()
        .map(|(path, options)| (path.0.clone(), Setting::baseline(options.0.clone())))
        .collect();
    let mut tmpfs_set_by: BTreeMap<String, Setting<String>> = BTreeMap::new();
    for group in listed {
        let name = &group.info.name;
        for (path, options) in &group.spec.tmpfs {
            match tmpfs_set_by.get_mut(&path.0) {
                None => {
                    tmpfs_set_by.insert(
                        path.0.clone(),
                        Setting {
                            value: options.0.clone(),
                            from: vec![name.clone()],
                        },
                    );
                }
                Some(first) if first.value == options.0 => first.from.push(name.clone()),
                Some(first) => {
                    return Err(m.contradiction(
                        &first.from[0],
                        name,
                        &format!("tmpfs {}", path.0),
                        format!("`{}` vs `{}`", first.value, options.0),
                    ));
                }
            }
        }
    }
    tmpfs.extend(tmpfs_set_by);

    let seccomp_deny = m.union(b, |g| strings(&g.seccomp.deny, |s| &s.0));
    let seccomp_enosys = m.union(b, |g| strings(&g.seccomp.enosys, |s| &s.0));
    for (syscall, deniers) in &seccomp_deny {
        if let (Some(denier), Some(other)) = (
            deniers.first(),
            seccomp_enosys.get(syscall).and_then(|f| f.first()),
        ) {
            let (first, second) = in_listed_order(listed, denier, other);
            return Err(m.contradiction(
                first,
                second,
                "seccomp",
                format!("`{syscall}`: {denier} denies it (EPERM), {other} makes it ENOSYS"),
            ));
        }
    }

    let (allowed_executables, emptied) =
        m.intersection(|g| g.allowed_executables.as_ref().map(|l| strings(l, |p| &p.0)));
    if let Some((first, second)) = emptied {
        return Err(m.contradiction(
            &first,
            &second,
            "allowed_executables",
            "no executable is allowed by both".into(),
        ));
    }
    let (allowed_skills, _) =
        m.intersection(|g| g.allowed_skills.as_ref().map(|l| strings(l, |n| &n.0)));
    let (allowed_mcp_servers, _) =
        m.intersection(|g| g.allowed_mcp_servers.as_ref().map(|l| strings(l, |n| &n.0)));

    Ok(EffectivePolicy {
        workspace: workspace.to_owned(),
        groups: listed.iter().map(|g| g.info.clone()).collect(),
        network,
        egress,
        memory_bytes: m.tightest(baseline.memory, |g| g.memory.map(|v| v.0)),
        nano_cpus: m.tightest(baseline.nano_cpus, |g| g.cpus.map(|v| v.0)),
        pids: m.tightest(baseline.pids, |g| g.pids.map(|v| v.0)),
        user,
        cap_drop,
        cap_add,
        no_new_privileges: m.any_true(baseline.no_new_privileges, |g| g.no_new_privileges),
        read_only_rootfs: m.any_true(baseline.read_only_rootfs, |g| g.read_only_rootfs),
        read_only_mounts: m.any_true(baseline.read_only_mounts, |g| g.read_only_mounts),
        tmpfs,
        seccomp_deny,
        seccomp_enosys,
        threads_only_clone: m.any_true(baseline.threads_only_clone, |g| {
            g.seccomp.threads_only_clone
        }),
        no_exec_after_start: m.any_true(baseline.no_exec_after_start, |g| {
            g.runner.no_exec_after_start
        }),
        allowed_executables,
        allowed_skills,
        allowed_mcp_servers,
        untrusted_input: m.any_true(baseline.untrusted_input, |g| g.untrusted_input),
        private_data: m.any_true(baseline.private_data, |g| g.private_data),
        seccomp_base,
    })
}

/// The two names ordered as the workspace lists them.
fn in_listed_order<'a>(listed: &[Listed], a: &'a str, b: &'a str) -> (&'a str, &'a str) {
    let index = |name: &str| listed.iter().position(|g| g.info.name == name);
    if index(b) < index(a) { (b, a) } else { (a, b) }
}
