use std::path::{Path, PathBuf};

use serde_json::Value;

use super::*;
use crate::config::Config;

fn catalog() -> PolicyCatalog {
    PolicyCatalog::builtin().expect("built-in policy data is valid")
}

fn entries(names: &[&str]) -> Vec<PolicyEntry> {
    names.iter().map(|n| PolicyEntry::from(*n)).collect()
}

fn effective(names: &[&str]) -> EffectivePolicy {
    catalog()
        .effective("main", &entries(names))
        .unwrap_or_else(|e| panic!("{names:?}: {e}"))
}

fn error(catalog: &PolicyCatalog, names: &[&str]) -> String {
    match catalog.effective("main", &entries(names)) {
        Ok(_) => panic!("{names:?} should fail"),
        Err(e) => e.to_string(),
    }
}

/// A catalog with user groups `(name, yaml)` in a temporary folder.
fn with_user_groups(groups: &[(&str, &str)]) -> (tempfile::TempDir, PolicyCatalog) {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in groups {
        std::fs::write(dir.path().join(format!("{name}.yaml")), text).unwrap();
    }
    let catalog = PolicyCatalog::load(&[dir.path().to_owned()]).unwrap();
    (dir, catalog)
}

fn load_error(groups: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    for (file, text) in groups {
        std::fs::write(dir.path().join(file), text).unwrap();
    }
    match PolicyCatalog::load(&[dir.path().to_owned()]) {
        Ok(_) => panic!("{groups:?} should not load"),
        Err(e) => e.to_string(),
    }
}

// ---- built-in groups ----

#[test]
fn builtin_catalog_lists_every_group() {
    let names: Vec<String> = catalog().groups().into_iter().map(|g| g.name).collect();
    assert_eq!(
        names,
        [
            "baseline",
            "egress_any_public",
            "egress_none",
            "no_internet_access",
            "no_process_creation",
            "read_only_mounts",
            "read_only_rootfs"
        ]
    );
    assert!(catalog().groups().iter().all(|g| !g.description.is_empty()));
}

#[test]
fn baseline_alone_compiles_to_the_defaults() {
    let s = effective(&[]).compile();
    assert_eq!(
        s.network_mode, "none",
        "no network: the egress proxy is the way out"
    );
    assert_eq!(s.memory_bytes, 1 << 30);
    assert_eq!(s.memory_swap_bytes, 1 << 30);
    assert_eq!(s.nano_cpus, 1_000_000_000);
    assert_eq!(s.pids_limit, 256);
    assert_eq!(s.cap_drop, ["ALL"]);
    assert!(s.cap_add.is_empty());
    assert!(s.no_new_privileges);
    assert_eq!(s.user, "100000:100000");
    assert!(!s.read_only_rootfs);
    assert!(!s.mounts_read_only);
    assert_eq!(s.tmpfs.len(), 1);
    assert_eq!(s.tmpfs["/tmp"], "size=64m,noexec,nosuid,nodev");
    // Always pincer's own profile: Docker 20.10's default allows io_uring.
    check(&s.seccomp_profile, "io_uring_setup", 0, EPERM);
    check(&s.seccomp_profile, "io_uring_enter", 0, EPERM);
    check(&s.seccomp_profile, "io_uring_register", 0, EPERM);
    check(&s.seccomp_profile, "read", 0, ALLOW);
    assert_eq!(s.security_opt.len(), 2);
    assert_eq!(s.security_opt[0], "no-new-privileges");
    assert!(s.security_opt[1].starts_with("seccomp={"));
    assert_eq!(
        s.runner,
        RunnerPolicy {
            egress: Some(pincer_runner_protocol::EgressRelay {
                listen: "127.0.0.1:3128".into(),
                socket: "/run/pincer/gateway/egress.sock".into(),
            }),
            ..RunnerPolicy::default()
        },
        "the runner relays to the egress proxy"
    );
    assert_eq!(s.allowed_skills, None);
    assert_eq!(s.allowed_mcp_servers, None);
}

#[test]
fn no_internet_access_compiles_to_network_none() {
    let s = effective(&["no_internet_access"]).compile();
    assert_eq!(s.network_mode, "none");
    assert_eq!(
        s.seccomp_profile,
        effective(&[]).compile().seccomp_profile,
        "no seccomp rules of its own: the baseline's profile"
    );
    assert_eq!(s.memory_bytes, 1 << 30, "everything else from the baseline");
}

#[test]
fn no_process_creation_compiles_to_seccomp_and_runner_filter() {
    let s = effective(&["no_process_creation"]).compile();
    assert!(s.runner.no_process_creation);
    assert_eq!(s.runner.allowed_executables, None);
    let profile = &s.seccomp_profile;
    assert_eq!(s.security_opt.len(), 2);
    assert_eq!(s.security_opt[0], "no-new-privileges");
    let inline = s.security_opt[1].strip_prefix("seccomp=").unwrap();
    let parsed: Value = serde_json::from_str(inline).unwrap();
    assert_eq!(&parsed, profile, "security_opt carries the profile inline");
    assert_eq!(s.network_mode, "none");
}

#[test]
fn read_only_groups_compile() {
    let s = effective(&["read_only_mounts"]).compile();
    assert!(s.mounts_read_only);
    assert!(!s.read_only_rootfs);
    let s = effective(&["read_only_rootfs"]).compile();
    assert!(s.read_only_rootfs);
    assert!(!s.mounts_read_only);
}

#[test]
fn runner_policy_serialises_like_the_runner_expects() {
    let s = effective(&["no_process_creation"]).compile();
    assert_eq!(
        serde_json::to_string(&s.runner).unwrap(),
        r#"{"no_process_creation":true,"allowed_executables":null,"egress":{"listen":"127.0.0.1:3128","socket":"/run/pincer/gateway/egress.sock"}}"#
    );
    // The runner refuses fields it does not know: it must read this.
    let read = pincer_runner_protocol::RunnerPolicy::from_env_value(
        &serde_json::to_string(&s.runner).unwrap(),
    )
    .unwrap();
    assert!(read.no_process_creation);
    assert_eq!(read.egress, s.runner.egress);
}

// ---- parametric groups ----

#[test]
fn parametric_groups_set_limits() {
    let s = effective(&["max_memory_512mb"]).compile();
    assert_eq!(
        (s.memory_bytes, s.memory_swap_bytes),
        (536_870_912, 536_870_912)
    );
    assert_eq!(
        effective(&["max_memory_2gb"]).compile().memory_bytes,
        2_147_483_648
    );
    assert_eq!(
        effective(&["max_cpus_0.5"]).compile().nano_cpus,
        500_000_000
    );
    assert_eq!(
        effective(&["max_cpus_2"]).compile().nano_cpus,
        2_000_000_000
    );
    assert_eq!(
        effective(&["max_cpus_1.25"]).compile().nano_cpus,
        1_250_000_000
    );
    assert_eq!(effective(&["max_pids_64"]).compile().pids_limit, 64);
}

#[test]
fn malformed_parametric_names_are_unknown_groups() {
    let c = catalog();
    for name in [
        "max_memory_12xb",
        "max_memory_mb",
        "max_memory_0512mb",
        "max_memory_1.5gb",
        "max_cpus_",
        "max_cpus_one",
        "max_cpus_.5",
        "max_cpus_1.",
        "max_pids_-1",
        "max_pids_6four",
    ] {
        let message = error(&c, &[name]);
        assert!(
            message.starts_with(&format!("workspace main: unknown policy group `{name}`")),
            "{message}"
        );
        assert!(message.contains(", expected max_"), "{message}");
    }
}

#[test]
fn out_of_range_parametric_values_are_invalid() {
    let c = catalog();
    let message = error(&c, &["max_memory_1mb"]);
    assert!(
        message.contains("policy group `max_memory_1mb`"),
        "{message}"
    );
    assert!(
        message.contains("below Docker's minimum of 6 MiB"),
        "{message}"
    );
    let message = error(&c, &["max_cpus_0.001"]);
    assert!(
        message.contains("cpus must be between 0.01 and 1024"),
        "{message}"
    );
    let message = error(&c, &["max_pids_0"]);
    assert!(message.contains("pids must be at least 1"), "{message}");
}

// ---- merge ----

#[test]
fn merge_is_deterministic_and_the_tightest_limit_wins() {
    let a = effective(&[
        "max_memory_2gb",
        "no_internet_access",
        "max_memory_512mb",
        "max_pids_64",
    ]);
    let b = effective(&[
        "max_pids_64",
        "max_memory_512mb",
        "no_internet_access",
        "max_memory_2gb",
    ]);
    assert_eq!(a.compile(), b.compile());
    assert_eq!(a.memory_bytes.value, 512 << 20);
    assert_eq!(a.memory_bytes.from, ["max_memory_512mb"]);
    assert_eq!(
        a,
        effective(&[
            "max_memory_2gb",
            "no_internet_access",
            "max_memory_512mb",
            "max_pids_64"
        ]),
        "same list, same result"
    );
    // a listed limit replaces the baseline default, also upwards
    assert_eq!(
        effective(&["max_memory_2gb"]).memory_bytes.from,
        ["max_memory_2gb"]
    );
    // equal values name every group that set them
    let (_dir, c) = with_user_groups(&[("small", "description: s\nmemory: 512mb\ncpus: 0.5\n")]);
    let p = c
        .effective(
            "main",
            &entries(&["max_memory_512mb", "small", "max_cpus_2"]),
        )
        .unwrap();
    assert_eq!(p.memory_bytes.from, ["max_memory_512mb", "small"]);
    assert_eq!(
        (p.nano_cpus.value, p.nano_cpus.from.as_slice()),
        (500_000_000, &["small".to_owned()][..])
    );
}

#[test]
fn restricting_booleans_cannot_be_turned_off() {
    let (_dir, c) = with_user_groups(&[(
        "loose",
        "description: tries to loosen\nno_new_privileges: false\nread_only_rootfs: false\n",
    )]);
    let p = c
        .effective("main", &entries(&["read_only_rootfs", "loose"]))
        .unwrap();
    assert!(p.no_new_privileges.value);
    assert_eq!(p.no_new_privileges.from, ["baseline"]);
    assert!(p.read_only_rootfs.value);
    assert_eq!(p.read_only_rootfs.from, ["read_only_rootfs"]);
}

#[test]
fn provenance_is_recorded() {
    let p = effective(&[
        "no_internet_access",
        "max_memory_512mb",
        "no_process_creation",
    ]);
    assert_eq!(p.network.from, ["no_internet_access"]);
    assert_eq!(p.memory_bytes.from, ["max_memory_512mb"]);
    assert_eq!(p.pids.from, ["baseline"]);
    assert_eq!(p.user.from, ["baseline"]);
    assert_eq!(p.cap_drop["ALL"], ["baseline"]);
    assert_eq!(p.seccomp_deny["fork"], ["no_process_creation"]);
    assert_eq!(p.seccomp_enosys["clone3"], ["no_process_creation"]);
    assert_eq!(p.threads_only_clone.from, ["no_process_creation"]);
    assert_eq!(p.no_exec_after_start.from, ["no_process_creation"]);
    assert_eq!(p.tmpfs["/tmp"].from, ["baseline"]);
    let names: Vec<&str> = p.groups.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "no_internet_access",
            "max_memory_512mb",
            "no_process_creation"
        ]
    );
    assert_eq!(p.groups[1].origin, "parametric");
}

#[test]
fn network_contradiction_names_both_groups() {
    let (_dir, c) = with_user_groups(&[
        (
            "open",
            "description: internet\nnetwork: bridge_unfiltered\n",
        ),
        ("closed", "description: no internet\nnetwork: none\n"),
    ]);
    assert_eq!(
        error(&c, &["open", "closed"]),
        "workspace main: policy groups `open` and `closed` contradict on network (bridge_unfiltered vs none)"
    );
    // a group agreeing with another is fine; `none` beats the baseline
    let p = c
        .effective("main", &entries(&["closed", "no_internet_access"]))
        .unwrap();
    assert_eq!(p.network.from, ["closed", "no_internet_access"]);
    assert_eq!(
        error(&c, &["no_internet_access", "open"]),
        "workspace main: policy groups `no_internet_access` and `open` contradict on network (none vs bridge_unfiltered)"
    );
}

#[test]
fn the_old_bridge_network_is_refused_saying_what_to_write_instead() {
    let e = load_error(&[("open.yaml", "description: internet\nnetwork: bridge\n")]);
    assert!(
        e.contains("open.yaml:2:10")
            && e.contains("workspaces.NAME.egress")
            && e.contains("network: bridge_unfiltered"),
        "{e}"
    );
}

#[test]
fn egress_lists_join_and_none_contradicts_a_way_out() {
    let (_dir, c) = with_user_groups(&[
        (
            "pypi",
            "description: python\negress: [pypi.org, files.pythonhosted.org]\n",
        ),
        (
            "gh",
            "description: github\negress: [\"*.github.com:443\", pypi.org]\n",
        ),
        (
            "open",
            "description: internet\nnetwork: bridge_unfiltered\n",
        ),
    ]);
    let p = c.effective("main", &entries(&["pypi", "gh"])).unwrap();
    assert_eq!(p.egress.hosts["pypi.org"], ["pypi", "gh"]);
    assert_eq!(p.egress.hosts["*.github.com:443"], ["gh"]);
    assert_eq!(
        error(&c, &["pypi", "egress_none"]),
        "workspace main: policy groups `pypi` and `egress_none` contradict on egress (egress_none says `egress: none`, pypi opens a way out)"
    );
    assert_eq!(
        error(&c, &["egress_any_public", "no_internet_access"]),
        "workspace main: policy groups `egress_any_public` and `no_internet_access` contradict on egress (no_internet_access says `egress: none`, egress_any_public opens a way out)"
    );
    assert_eq!(
        error(&c, &["egress_none", "open"]),
        "workspace main: policy groups `egress_none` and `open` contradict on network (open bypasses the egress proxy, egress_none says `egress: none`)"
    );
    let e = load_error(&[(
        "badhost.yaml",
        "description: x\negress: [\"https://x.io/\"]\n",
    )]);
    assert!(
        e.contains("egress entry `https://x.io/`: give a host"),
        "{e}"
    );
}

#[test]
fn deny_versus_enosys_is_a_contradiction() {
    let (_dir, c) = with_user_groups(&[("eperm3", "description: x\nseccomp: {deny: [clone3]}\n")]);
    let message = error(&c, &["no_process_creation", "eperm3"]);
    assert_eq!(
        message,
        "workspace main: policy groups `no_process_creation` and `eperm3` contradict on seccomp \
         (`clone3`: eperm3 denies it (EPERM), no_process_creation makes it ENOSYS)"
    );
}

#[test]
fn other_contradictions() {
    let (_dir, c) = with_user_groups(&[
        ("admin", "description: x\ncap_add: [net_admin]\n"),
        ("no_admin", "description: x\ncap_drop: [CAP_NET_ADMIN]\n"),
        ("drop_all", "description: x\ncap_drop: [ALL]\n"),
        ("root", "description: x\nuser: \"0:0\"\n"),
        ("nobody", "description: x\nuser: \"65534:65534\"\n"),
        ("sh", "description: x\nallowed_executables: [/bin/sh]\n"),
        ("tmp_exec", "description: x\ntmpfs: {/tmp: \"size=64m\"}\n"),
        (
            "tmp_big",
            "description: x\ntmpfs: {/tmp: \"size=1g,noexec\"}\n",
        ),
    ]);
    let message = error(&c, &["no_admin", "admin"]);
    assert!(
        message.contains("policy groups `no_admin` and `admin` contradict on capabilities"),
        "{message}"
    );
    // dropping ALL in a group does not undo another group's cap_add
    let p = c
        .effective("main", &entries(&["admin", "drop_all"]))
        .unwrap();
    assert_eq!(p.compile().cap_add, ["CAP_NET_ADMIN"]);
    assert_eq!(p.compile().cap_drop, ["ALL"]);
    let message = error(&c, &["root", "nobody"]);
    assert!(
        message.contains("contradict on user (0:0 vs 65534:65534)"),
        "{message}"
    );
    let sh_only = vec![
        PolicyEntry::from("sh"),
        PolicyEntry::AllowedExecutables(vec!["/bin/busybox".into()]),
    ];
    let message = c.effective("main", &sh_only).unwrap_err().to_string();
    assert_eq!(
        message,
        "workspace main: policy groups `sh` and `allowed_executables` contradict on \
         allowed_executables (no executable is allowed by both)"
    );
    let message = error(&c, &["tmp_exec", "tmp_big"]);
    assert!(message.contains("contradict on tmpfs /tmp"), "{message}");
    // one group replacing the baseline's options is fine
    let p = c.effective("main", &entries(&["tmp_exec"])).unwrap();
    assert_eq!(p.tmpfs["/tmp"].value, "size=64m");
    assert_eq!(p.tmpfs["/tmp"].from, ["tmp_exec"]);
}

#[test]
fn allow_lists_intersect() {
    let (_dir, c) = with_user_groups(&[
        (
            "tools_a",
            "description: x\nallowed_executables: [/bin/sh, /bin/busybox, /usr/bin/git]\nallowed_skills: [web-search, memory]\n",
        ),
        (
            "tools_b",
            "description: x\nallowed_skills: [memory, calendar]\nallowed_mcp_servers: []\n",
        ),
    ]);
    let list = vec![
        PolicyEntry::from("tools_a"),
        PolicyEntry::AllowedExecutables(vec!["/bin/busybox".into(), "/bin/sh".into()]),
        PolicyEntry::from("tools_b"),
    ];
    let p = c.effective("main", &list).unwrap();
    let exec = p.allowed_executables.as_ref().unwrap();
    assert_eq!(exec.value, ["/bin/busybox", "/bin/sh"]);
    assert_eq!(exec.from, ["tools_a", "allowed_executables"]);
    let s = p.compile();
    assert_eq!(
        s.allowed_skills.as_deref(),
        Some(&["memory".to_owned()][..])
    );
    assert_eq!(s.allowed_mcp_servers.as_deref(), Some(&[][..]));
    assert_eq!(
        s.runner.allowed_executables.as_deref(),
        Some(&["/bin/busybox".to_owned(), "/bin/sh".to_owned()][..])
    );
    // allowed_executables closes the memfd loophole
    assert_eq!(
        p.seccomp_deny["memfd_create"],
        ["tools_a", "allowed_executables"]
    );
    check(&s.seccomp_profile, "memfd_create", 0, EPERM);
}

#[test]
fn listing_errors() {
    let c = catalog();
    let message = error(&c, &["no_internet_access", "no_internet_access"]);
    assert_eq!(
        message,
        "workspace main: policy group `no_internet_access`: listed more than once"
    );
    assert!(error(&c, &["baseline"]).contains("applies to every workspace"));
    assert!(error(&c, &["allowed_executables"]).contains("write it as a mapping"));
    let empty = [PolicyEntry::AllowedExecutables(vec![])];
    let message = c.effective("main", &empty).unwrap_err().to_string();
    assert!(
        message.contains("allowed_executables must not be empty"),
        "{message}"
    );
    let relative = [PolicyEntry::AllowedExecutables(vec!["busybox".into()])];
    let message = c.effective("main", &relative).unwrap_err().to_string();
    assert!(
        message.contains("must be an absolute container path"),
        "{message}"
    );
}

#[test]
fn unknown_group_suggests_the_closest_name() {
    let c = catalog();
    let message = error(&c, &["no_internets"]);
    assert!(
        message.starts_with(
            "workspace main: unknown policy group `no_internets`, did you mean `no_internet_access`? \
             (known: egress_any_public, egress_none, no_internet_access, no_process_creation, \
             read_only_mounts, read_only_rootfs, \
             max_memory_<N>mb"
        ),
        "{message}"
    );
    let message = error(&c, &["read_only_rootf"]);
    assert!(
        message.contains("did you mean `read_only_rootfs`?"),
        "{message}"
    );
    let message = error(&c, &["something_else"]);
    assert!(!message.contains("did you mean"), "{message}");
}

// ---- user group files ----

#[test]
fn malformed_user_group_files_are_located() {
    let message = load_error(&[("bad.yaml", "description: x\nnetwork: nowhere\n")]);
    assert!(message.contains("bad.yaml:2:"), "{message}");
    assert!(message.contains("nowhere"), "{message}");
    let message = load_error(&[("typo.yaml", "description: x\nnetwrok: none\n")]);
    assert!(message.contains("typo.yaml:2:"), "{message}");
    assert!(message.contains("netwrok"), "{message}");
    let message = load_error(&[("mem.yaml", "description: x\n\nmemory: 12xb\n")]);
    assert!(message.contains("mem.yaml:3:"), "{message}");
    assert!(message.contains("invalid memory size `12xb`"), "{message}");
    let message = load_error(&[("cap.yaml", "description: x\ncap_add: [SYS_ADMN]\n")]);
    assert!(message.contains("cap.yaml:2:"), "{message}");
    assert!(
        message.contains("unknown capability `SYS_ADMN`"),
        "{message}"
    );
    let message = load_error(&[("syn.yaml", "description: [x\n")]);
    assert!(message.contains("syn.yaml:"), "{message}");
    let message = load_error(&[("nodesc.yaml", "network: none\n")]);
    assert!(message.contains("description"), "{message}");
}

#[test]
fn user_groups_are_checked() {
    let message = load_error(&[("exec.yaml", "description: x\nseccomp: {deny: [execve]}\n")]);
    assert!(
        message.contains("exec.yaml: group `exec`: seccomp cannot deny `execve`"),
        "{message}"
    );
    let message = load_error(&[("typo.yaml", "description: x\nseccomp: {deny: [frok]}\n")]);
    assert!(message.contains("unknown syscall `frok`"), "{message}");
    let message = load_error(&[(
        "both.yaml",
        "description: x\nseccomp: {deny: [fork], enosys: [fork]}\n",
    )]);
    assert!(message.contains("both in deny and enosys"), "{message}");
    let message = load_error(&[("no_internet_access.yaml", "description: x\n")]);
    assert!(message.contains("shadows the built-in group"), "{message}");
    let message = load_error(&[("max_pids_10.yaml", "description: x\n")]);
    assert!(message.contains("shadows the built-in group"), "{message}");
    let message = load_error(&[("Bad Name.yaml", "description: x\n")]);
    assert!(message.contains("not a valid group name"), "{message}");
    let missing = PolicyCatalog::load(&[PathBuf::from("/nonexistent/pincer-policies")]);
    assert!(matches!(missing, Err(PolicyError::ReadDir { .. })));
}

#[test]
fn a_group_defined_in_two_folders_is_an_error() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    for dir in [&a, &b] {
        std::fs::write(dir.path().join("team.yaml"), "description: x\n").unwrap();
    }
    std::fs::write(a.path().join("README.md"), "not a group").unwrap();
    let err = PolicyCatalog::load(&[a.path().to_owned(), b.path().to_owned()]).unwrap_err();
    assert!(
        err.to_string()
            .contains("policy group `team` is defined twice"),
        "{err}"
    );
}

// ---- seccomp ----

fn profile(names: &[&str]) -> Value {
    effective(names).compile().seccomp_profile
}

fn rules_for<'a>(profile: &'a Value, syscall: &str) -> Vec<&'a Value> {
    profile["syscalls"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["names"].as_array().unwrap().iter().any(|n| n == syscall))
        .collect()
}

/// What the profile does with `syscall(arg0, ...)` on x86_64: the action
/// and errno of the first matching rule (rules never overlap in action).
fn evaluate(profile: &Value, syscall: &str, arg0: u64) -> (String, u64) {
    for rule in rules_for(profile, syscall) {
        if rule
            .get("includes")
            .is_some_and(|i| !i["arches"].as_array().unwrap().iter().any(|a| a == "amd64"))
        {
            continue;
        }
        let matches = rule
            .get("args")
            .and_then(Value::as_array)
            .is_none_or(|args| {
                args.iter().all(|a| {
                    assert_eq!(a["index"], 0);
                    let value = a["value"].as_u64().unwrap();
                    let two = a["valueTwo"].as_u64().unwrap();
                    match a["op"].as_str().unwrap() {
                        "SCMP_CMP_MASKED_EQ" => arg0 & value == two,
                        "SCMP_CMP_EQ" => arg0 == value,
                        "SCMP_CMP_NE" => arg0 != value,
                        op => panic!("unexpected op {op}"),
                    }
                })
            });
        if matches {
            let action = rule["action"].as_str().unwrap().to_owned();
            let errno = rule.get("errnoRet").and_then(Value::as_u64).unwrap_or(0);
            return (action, errno);
        }
    }
    let errno = profile["defaultErrnoRet"].as_u64().unwrap();
    (profile["defaultAction"].as_str().unwrap().to_owned(), errno)
}

const ALLOW: (&str, u64) = ("SCMP_ACT_ALLOW", 0);
const EPERM: (&str, u64) = ("SCMP_ACT_ERRNO", 1);
const ENOSYS: (&str, u64) = ("SCMP_ACT_ERRNO", 38);

fn check(profile: &Value, syscall: &str, arg0: u64, want: (&str, u64)) {
    let (action, errno) = evaluate(profile, syscall, arg0);
    assert_eq!((action.as_str(), errno), want, "{syscall}({arg0:#x})");
}

// clone flags as libc passes them
const THREAD_FLAGS: u64 = 0x003d_0f00; // VM|FS|FILES|SIGHAND|THREAD|SYSVSEM|SETTLS|PARENT_SETTID|CHILD_CLEARTID
const FORK_FLAGS: u64 = 0x0120_0011; // CHILD_SETTID|CHILD_CLEARTID|SIGCHLD (glibc fork)
const SPAWN_FLAGS: u64 = 0x0000_4111; // VM|VFORK|SIGCHLD (posix_spawn)
const CLONE_NEWUSER: u64 = 0x1000_0000;
const CLONE_NEWNS: u64 = 0x0002_0000;

#[test]
fn generated_profile_denies_process_creation() {
    let p = profile(&["no_process_creation"]);
    let text = serde_json::to_string(&p).unwrap();
    let reparsed: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(reparsed, p);
    assert_eq!(p["defaultAction"], "SCMP_ACT_ERRNO");
    assert_eq!(p["defaultErrnoRet"], 1);
    assert_eq!(p["archMap"][0]["architecture"], "SCMP_ARCH_X86_64");
    assert_eq!(
        p["archMap"][0]["subArchitectures"],
        serde_json::json!(["SCMP_ARCH_X86", "SCMP_ARCH_X32"])
    );
    assert_eq!(p["archMap"][1]["architecture"], "SCMP_ARCH_AARCH64");

    check(&p, "execve", 0, ALLOW);
    check(&p, "read", 0, ALLOW);
    check(&p, "arch_prctl", 0, ALLOW);
    check(&p, "landlock_restrict_self", 0, ALLOW);
    check(&p, "seccomp", 0, ALLOW);
    check(&p, "fork", 0, EPERM);
    check(&p, "vfork", 0, EPERM);
    check(&p, "clone3", 0, ENOSYS);
    check(&p, "clone", THREAD_FLAGS, ALLOW);
    check(&p, "clone", FORK_FLAGS, EPERM);
    check(&p, "clone", SPAWN_FLAGS, EPERM);
    check(&p, "clone", THREAD_FLAGS | CLONE_NEWUSER, EPERM);
    check(&p, "clone", THREAD_FLAGS | CLONE_NEWNS, EPERM);
    check(&p, "io_uring_setup", 0, EPERM);
    check(&p, "ptrace", 0, EPERM);
    check(&p, "mount", 0, EPERM);
    check(&p, "socket", 2, ALLOW);
    check(&p, "socket", 40, EPERM);
    check(&p, "personality", 0xffff_ffff, ALLOW);
    check(&p, "personality", 0x0040_0000, EPERM);

    let clone = rules_for(&p, "clone");
    assert_eq!(clone.len(), 1);
    assert_eq!(
        clone[0]["args"],
        serde_json::json!([{"index": 0, "value": 0x7e03_0000u64, "valueTwo": 0x10000, "op": "SCMP_CMP_MASKED_EQ"}])
    );
    assert_eq!(0x7e03_0000u64, 2_114_125_824);
}

#[test]
fn generated_profile_keeps_docker_defaults_elsewhere() {
    // rules that do not touch clone: clone keeps Docker's namespace rule
    let list = vec![PolicyEntry::AllowedExecutables(vec!["/bin/sh".into()])];
    let p = catalog()
        .effective("main", &list)
        .unwrap()
        .compile()
        .seccomp_profile;
    check(&p, "memfd_create", 0, EPERM);
    check(&p, "execveat", 0, ALLOW);
    check(&p, "fork", 0, ALLOW);
    check(&p, "clone", FORK_FLAGS, ALLOW);
    check(&p, "clone", THREAD_FLAGS, ALLOW);
    check(&p, "clone", FORK_FLAGS | CLONE_NEWUSER, EPERM);
    check(&p, "clone3", 0, ENOSYS);
    let clone = rules_for(&p, "clone");
    assert_eq!(clone[0]["args"][0]["value"], 0x7e02_0000u64);
    assert_eq!(clone[0]["args"][0]["valueTwo"], 0);
}

#[test]
fn every_syscall_has_one_action() {
    let p = profile(&["no_process_creation"]);
    let mut seen = std::collections::BTreeMap::<String, String>::new();
    for rule in p["syscalls"].as_array().unwrap() {
        let action = format!(
            "{}/{}",
            rule["action"],
            rule.get("errnoRet").unwrap_or(&Value::Null)
        );
        for name in rule["names"].as_array().unwrap() {
            let name = name.as_str().unwrap().to_owned();
            if let Some(previous) = seen.insert(name.clone(), action.clone()) {
                assert_eq!(previous, action, "{name} has two actions");
            }
        }
    }
    assert!(seen.len() > 300, "{}", seen.len());
    assert!(!seen.contains_key("io_uring_enter"));
}

// ---- report ----

const CONFIG: &str = r#"
gateway:
  model_list:
    - model_name: default
      litellm_params: {model: "openai/gpt-4o-mini", api_key: "sk-secret-key"}
    - model_name: backup
      litellm_params: {model: "anthropic/claude-3-5-haiku-latest"}
  fallbacks: [{default: [backup]}]
workspaces:
  lethal:
    model: default
    mounts: [{source: "~/notes", target: /notes}]
    channels: [webhook]
    skills: [web-search]
    egress: [pypi.org]
    approvals: {tier: yolo}
  gated:
    mounts: [{source: "~/notes", target: /notes}]
    skills: [web-search]
    egress: [pypi.org]
  isolated:
    approvals: {tier: yolo}
    policies: [no_internet_access, read_only_mounts, {allowed_executables: [/bin/busybox]}]
    mounts: [{source: "~/code", target: /code, read_only: false}]
    skills: [web-search, notes]
    mcp_servers: [files]
  scratch:
    policies: [no_process_creation, max_memory_512mb]
    mcp_servers: [docs]
channels:
  webhook: {plugin: channel-webhook, workspace: lethal}
  isolated-hook: {plugin: channel-webhook, workspace: isolated}
  gated-hook: {plugin: channel-webhook, workspace: gated}
mcp_servers:
  files: {command: [/usr/local/bin/mcp-files, --token, "t0ps3cret"]}
  docs: {url: "https://user:pw@docs.example.com/mcp?key=abc"}
"#;

fn config() -> Config {
    Config::from_str_with_env(CONFIG, Path::new("pincer.yaml"), |_| None).unwrap()
}

fn audit(cfg: &Config, workspace: &str, catalog: &PolicyCatalog) -> PolicyReport {
    let ws = &cfg.workspaces[workspace];
    let policy = catalog.effective(workspace, &ws.policies).unwrap();
    let egress = std::collections::BTreeMap::from([(
        "web-search".to_owned(),
        vec!["api.search.example".to_owned()],
    )]);
    let dir = PathBuf::from(format!("/home/u/pincer_workspaces/{workspace}"));
    report(
        &policy,
        &ReportInput {
            config: cfg,
            workspace: ws,
            workspace_dir: &dir,
            run_dir: Path::new("/home/u/.pincer/run/x"),
            runner_binary: Path::new("/home/u/.pincer/bin/pincer-agent-0"),
            plugin_http: &egress,
            mcp_containers: &[],
            approval_rules: &[],
        },
    )
}

#[test]
fn config_accepts_the_allowed_executables_mapping() {
    let cfg = config();
    let policies = &cfg.workspaces["isolated"].policies;
    assert_eq!(policies[0], "no_internet_access");
    assert_eq!(
        policies[2],
        PolicyEntry::AllowedExecutables(vec!["/bin/busybox".into()])
    );
    assert_eq!(
        policies
            .iter()
            .map(|p| p.name())
            .collect::<Vec<_>>()
            .join(","),
        "no_internet_access,read_only_mounts,allowed_executables"
    );
    let bad = "workspaces:\n  w:\n    policies: [{allowed_executable: [/bin/sh]}]\n";
    let err = Config::from_str_with_env(bad, Path::new("p.yaml"), |_| None).unwrap_err();
    assert!(err.to_string().contains("p.yaml:3:"), "{err}");
    assert!(
        err.to_string()
            .contains("did you mean `allowed_executables`"),
        "{err}"
    );
    let bad = "workspaces:\n  w:\n    policies: [{allowed_executables: [/bin/sh], x: 1}]\n";
    let err = Config::from_str_with_env(bad, Path::new("p.yaml"), |_| None).unwrap_err();
    assert!(err.to_string().contains("exactly one key"), "{err}");
}

#[test]
fn trifecta_verdicts() {
    let cfg = config();
    let c = catalog();

    // The same three, each way out waiting for a person (tier approval,
    // the default of a workspace a channel serves): gated, not open.
    let gated = audit(&cfg, "gated", &c);
    assert_eq!(gated.trifecta.exfiltration, Vec::<String>::new());
    assert_eq!(
        gated.trifecta.gated,
        [
            "egress proxy to pypi.org (every bash call waits for approval)",
            "skill web-search makes HTTP requests to api.search.example (each call waits for approval)"
        ]
    );
    assert_eq!(
        gated.trifecta.verdict,
        "ok: no way out (ways out gated by approvals: 2)"
    );
    assert_eq!(
        gated.approvals.as_ref().map(|a| a.tier.as_str()),
        Some("approval")
    );
    // Believing the skill's read-only claims lets some of its tools run
    // unasked: its way out is open again, and the audit names the trust.
    let mut trusting = cfg.clone();
    trusting
        .skills
        .entry("web-search".into())
        .or_default()
        .trust_effects = true;
    let trusted = audit(&trusting, "gated", &c);
    assert_eq!(
        trusted.trifecta.exfiltration,
        ["skill web-search makes HTTP requests to api.search.example"]
    );
    assert_eq!(
        trusted.approvals.as_ref().map(|a| a.trusted_claims.clone()),
        Some(vec!["skill web-search (trust_effects)".to_owned()])
    );
    // An argv rule opens bash to some program: the network is open again.
    let mut opened = cfg.clone();
    if let Some(ws) = opened.workspaces.get_mut("gated") {
        ws.approvals.allow = vec![crate::approvals::Rule::parse("bash: curl").unwrap()];
    }
    let opened = audit(&opened, "gated", &c).trifecta;
    assert_eq!(opened.exfiltration, ["egress proxy to pypi.org"]);

    let lethal = audit(&cfg, "lethal", &c).trifecta;
    assert_eq!(lethal.verdict, "LETHAL: all three present");
    assert!(lethal.is_lethal());
    assert_eq!(lethal.private_data, ["mount ~/notes → /notes"]);
    assert_eq!(
        lethal.untrusted_input,
        [
            "channel webhook (channel-webhook), whose earlier messages may be quoted into turns \
             where the plugin reads history (context: thread 30, channel 0; anyone's, strangers' marked)"
        ]
    );
    assert_eq!(
        lethal.exfiltration,
        [
            "egress proxy to pypi.org",
            "skill web-search makes HTTP requests to api.search.example"
        ]
    );

    // no network, but a stdio MCP server on the host is a way out
    let isolated = audit(&cfg, "isolated", &c).trifecta;
    assert_eq!(isolated.verdict, "LETHAL: all three present");
    assert_eq!(
        isolated.untrusted_input,
        [
            "channel isolated-hook (channel-webhook), whose earlier messages may be quoted into \
             turns where the plugin reads history (context: thread 30, channel 0; anyone's, \
             strangers' marked)"
        ]
    );
    assert_eq!(
        isolated.exfiltration,
        [
            "MCP server files runs on the host (stdio); its network is not restricted",
            "skill web-search makes HTTP requests to api.search.example"
        ]
    );
    // ...which a group restricting skills and MCP servers removes
    let (_dir, strict) = with_user_groups(&[(
        "offline_tools",
        "description: x\nallowed_skills: [memory]\nallowed_mcp_servers: []\n",
    )]);
    let mut cfg2 = cfg.clone();
    if let Some(ws) = cfg2.workspaces.get_mut("isolated") {
        ws.policies.push(PolicyEntry::from("offline_tools"));
    }
    let report = audit(&cfg2, "isolated", &strict);
    assert_eq!(report.trifecta.verdict, "ok: no way out");
    // ...unless its channel unfurls links: the platform fetches them.
    let mut cfg_unfurl = cfg2.clone();
    if let Some(hook) = cfg_unfurl.channels.get_mut("isolated-hook") {
        hook.config
            .insert("unfurl".into(), serde_json::Value::Bool(true));
    }
    let unfurling = audit(&cfg_unfurl, "isolated", &strict).trifecta;
    assert_eq!(unfurling.verdict, "LETHAL: all three present");
    assert_eq!(
        unfurling.exfiltration,
        [
            "channel isolated-hook (channel-webhook) unfurls links (config.unfurl: true): the platform fetches any URL the model writes"
        ]
    );
    assert!(!report.reach.skills[0].reachable);
    let note = &report.reach.skills[0].note;
    assert!(
        note.contains(
            "allowed_skills (memory; from policy group offline_tools) does not list `web-search`"
        ),
        "{note}"
    );
    assert!(report.reach.memory.reachable, "allowed_skills lists memory");

    let scratch = audit(&cfg, "scratch", &c).trifecta;
    assert_eq!(scratch.verdict, "ok: no private data, no untrusted input");
    assert_eq!(
        scratch.exfiltration,
        ["MCP server docs is remote at https://docs.example.com"]
    );

    let (_dir, hinted) = with_user_groups(&[(
        "inbox",
        "description: reads mail\nuntrusted_input: true\nprivate_data: true\n",
    )]);
    let mut cfg3 = cfg.clone();
    if let Some(ws) = cfg3.workspaces.get_mut("scratch") {
        ws.policies.push(PolicyEntry::from("inbox"));
    }
    let t = audit(&cfg3, "scratch", &hinted).trifecta;
    assert_eq!(t.verdict, "LETHAL: all three present");
    assert_eq!(t.private_data, ["policy group inbox declares private_data"]);
}

#[test]
fn report_shows_mounts_reach_and_settings() {
    let cfg = config();
    let r = audit(&cfg, "isolated", &catalog());
    assert_eq!(r.groups.len(), 3);
    let line = |source: &str, target: &str, mode: &str| {
        let (mode, purpose) = match mode.split_once(" (") {
            Some((m, p)) if !p.starts_with("forced") => {
                (m.to_owned(), Some(p.trim_end_matches(')').to_owned()))
            }
            _ => (mode.to_owned(), None),
        };
        MountLine {
            source: source.into(),
            target: target.into(),
            mode,
            purpose,
        }
    };
    assert_eq!(
        r.mounts,
        [
            line(
                "/home/u/pincer_workspaces/isolated",
                "/workspace",
                "rw (the workspace folder)"
            ),
            line(
                "/home/u/.pincer/bin/pincer-agent-0",
                "/opt/pincer/pincer-agent",
                "ro (the agent runner)"
            ),
            line(
                "/home/u/.pincer/run/x/gateway",
                "/run/pincer/gateway",
                "ro (the gateway and egress proxy sockets; host-owned)"
            ),
            line(
                "/home/u/.pincer/run/x/runner",
                "/run/pincer/runner",
                "rw (the runner socket; the container's own)"
            ),
            line("~/code", "/code", "ro (forced by read_only_mounts)"),
        ]
    );
    // The audit lists exactly the container spec's mounts.
    let ws = &cfg.workspaces["isolated"];
    let spec = crate::containers::WorkspaceSpec {
        workspace: "isolated".into(),
        instance: "0".into(),
        container_name: "c".into(),
        image: "i".into(),
        settings: catalog()
            .effective("isolated", &ws.policies)
            .unwrap()
            .compile(),
        workspace_dir: "/home/u/pincer_workspaces/isolated".into(),
        managed_dir: true,
        earlier_users: Vec::new(),
        run_dir: "/home/u/.pincer/run/x".into(),
        runner_binary: "/home/u/.pincer/bin/pincer-agent-0".into(),
        mounts: ws
            .mounts
            .iter()
            .map(|m| crate::containers::BindMount {
                source: m.source.clone(),
                target: m.target.clone(),
                read_only: m.read_only,
            })
            .collect(),
        stop_after_secs: 0,
    };
    let from_spec: Vec<(String, String, bool)> = spec
        .all_mounts()
        .into_iter()
        .map(|m| (m.source.display().to_string(), m.target, m.read_only))
        .collect();
    let from_audit: Vec<(String, String, bool)> = r
        .mounts
        .iter()
        .map(|m| (m.source.clone(), m.target.clone(), m.mode.starts_with("ro")))
        .collect();
    assert_eq!(from_audit, from_spec);
    assert_eq!(
        r.reach.network,
        "none — the gateway and egress proxy sockets only"
    );
    assert!(!r.reach.egress.is_open());
    assert_eq!(r.reach.egress.closed, ["no_internet_access"]);
    // No `model`: every alias, by default.
    assert_eq!(r.reach.models.aliases, ["backup", "default"]);
    assert_eq!(r.reach.models.from, ModelsFrom::EveryAlias);
    let network = r.settings.iter().find(|s| s.setting == "network").unwrap();
    assert_eq!(
        (network.value.as_str(), network.from.as_slice()),
        ("none", &["no_internet_access".to_owned()][..])
    );
    assert_eq!(r.container.seccomp.profile, "generated");
    assert_eq!(r.container.seccomp.added.len(), 1);
    assert_eq!(r.container.seccomp.added[0].syscalls, ["memfd_create"]);
    assert!(
        r.container
            .security_opt
            .iter()
            .any(|o| o.starts_with("seccomp=<generated profile, "))
    );
    assert!(
        r.enforcement
            .iter()
            .any(|n| n.starts_with("allowed_executables (/bin/busybox): enforced by Landlock"))
    );

    let lethal = audit(&cfg, "lethal", &catalog());
    assert_eq!(
        lethal.reach.models.deployments,
        [
            "backup → anthropic/claude-3-5-haiku-latest",
            "default → openai/gpt-4o-mini (fallbacks: backup)"
        ]
    );
    // `model: default`: it and its fallbacks, by default.
    assert_eq!(lethal.reach.models.aliases, ["backup", "default"]);
    assert_eq!(lethal.reach.models.from, ModelsFrom::ModelAndFallbacks);
    assert_eq!(lethal.container.seccomp.profile, "generated");
    assert!(
        lethal.container.seccomp.added.is_empty(),
        "no rules of its own"
    );
}

#[test]
fn report_never_shows_secrets() {
    let cfg = config();
    for ws in ["lethal", "isolated", "scratch"] {
        let r = audit(&cfg, ws, &catalog());
        let text = render_text(&r);
        let json = serde_json::to_string(&r).unwrap();
        for secret in ["sk-secret-key", "t0ps3cret", "pw@", "key=abc", "/mcp"] {
            assert!(!text.contains(secret), "{ws}: {secret} in\n{text}");
            assert!(!json.contains(secret), "{ws}: {secret} in {json}");
        }
    }
}

#[test]
fn render_text_has_the_key_lines() {
    let cfg = config();
    let mut r = audit(&cfg, "scratch", &catalog());
    r.denials.push(crate::audit::AuditEvent {
        timestamp_ms: 1_700_000_000_000,
        actor: "workspace:scratch".into(),
        workspace: Some("scratch".into()),
        kind: "mcp.denied".into(),
        detail: "files".into(),
    });
    let text = render_text(&r);
    for want in [
        "policy audit: workspace scratch\n",
        "\ngroups (baseline first, then as listed)\n  baseline             built-in, applies to every workspace\n",
        "  no_process_creation  built-in — No new processes",
        "  max_memory_512mb     parametric — At most 512 MiB of memory, no swap.\n",
        "  network                     none  [baseline]\n",
        "  memory                      512 MiB  [max_memory_512mb]\n",
        "  pids                        256  [baseline]\n",
        "  seccomp.deny                fork, vfork  [no_process_creation]\n",
        "  seccomp.enosys              clone3  [no_process_creation]\n",
        "  memory            536870912 bytes, swap 536870912 bytes (none)\n",
        "  runner            {\"no_process_creation\":true,\"allowed_executables\":null,\"egress\":{\"listen\":\"127.0.0.1:3128\",\"socket\":\"/run/pincer/gateway/egress.sock\"}}\n",
        "  seccomp           generated: ",
        "    + rule          fork, vfork → SCMP_ACT_ERRNO EPERM (1)  [no_process_creation]\n",
        "    + rule          clone → SCMP_ACT_ALLOW only if (flags & 0x7e030000) == 0x10000 (threads)  [no_process_creation]\n",
        "\nmounts\n  /workspace                rw  /home/u/pincer_workspaces/scratch  (the workspace folder)\n",
        "  /run/pincer/gateway       ro  /home/u/.pincer/run/x/gateway  (the gateway and egress proxy sockets; host-owned)\n",
        "  /run/pincer/runner        rw  /home/u/.pincer/run/x/runner  (the runner socket; the container's own)\n",
        "  network      none — the gateway and egress proxy sockets only\n",
        "  egress       nothing: no way out (list hosts in workspaces.NAME.egress)\n",
        "  mcp servers  docs (remote at https://docs.example.com)\n",
        "\nlethal trifecta: ok: no private data, no untrusted input\n",
        "  way out          MCP server docs is remote at https://docs.example.com\n",
        "  - no_process_creation: seccomp denies fork, vfork (EPERM); allows clone only for threads",
        "\ndenials\n  1700000000000  workspace:scratch  mcp.denied  files\n",
    ] {
        assert!(text.contains(want), "missing {want:?} in\n{text}");
    }
    assert_eq!(text, render_text(&r), "stable");
}

#[test]
fn enforcement_notes_explain_each_restriction() {
    let notes = enforcement_notes(&effective(&["no_internet_access", "no_process_creation"]));
    let all = notes.join("\n");
    assert!(all.contains("network none: Docker gives the container only a loopback interface"));
    assert!(all.contains("no_process_creation: seccomp denies fork, vfork (EPERM)"));
    assert!(all.contains(
        "no_process_creation: the agent runner installs its own seccomp filter denying execve"
    ));
    assert!(all.contains("cgroup limits"));
    let notes = enforcement_notes(&effective(&[])).join("\n");
    assert!(notes.contains("seccomp: pincer's generated profile"));
    assert!(notes.contains("without io_uring"));
    assert!(notes.contains("through the egress proxy's socket"));
    let (_dir, c) = with_user_groups(&[(
        "open",
        "description: internet\nnetwork: bridge_unfiltered\n",
    )]);
    let open = c.effective("main", &entries(&["open"])).unwrap();
    let notes = enforcement_notes(&open).join("\n");
    assert!(notes.contains("network bridge_unfiltered: outbound connections are NOT restricted"));
    assert_eq!(open.compile().network_mode, "bridge");
    assert_eq!(
        open.compile().runner.egress,
        None,
        "no relay past the proxy"
    );
}

#[test]
fn the_audit_names_the_host_listeners_a_bridge_container_reaches() {
    let mut cfg = config();
    let (_dir, catalog) = with_user_groups(&[(
        "open",
        "description: internet\nnetwork: bridge_unfiltered\n",
    )]);
    if let Some(ws) = cfg.workspaces.get_mut("lethal") {
        ws.policies.push(PolicyEntry::from("open"));
    }
    let catalog = || catalog.clone();
    // Loopback (the defaults): a bridge container reaches none of them.
    let lethal = audit(&cfg, "lethal", &catalog());
    assert_eq!(
        lethal.trifecta.exfiltration[0],
        "network bridge_unfiltered: any address, unaudited (past the egress proxy)"
    );
    assert!(lethal.reach.host_listeners.is_empty());
    assert!(
        render_text(&lethal).contains("none: pincer's listeners are on loopback only"),
        "{}",
        render_text(&lethal)
    );
    cfg.gateway.listen = "0.0.0.0:4000".parse().unwrap();
    cfg.channels.listen = "0.0.0.0:4100".parse().unwrap();
    let lethal = audit(&cfg, "lethal", &catalog());
    assert_eq!(lethal.reach.host_listeners.len(), 2, "{:?}", lethal.reach);
    assert!(lethal.reach.host_listeners[0].contains("gateway on 0.0.0.0:4000"));
    assert!(lethal.reach.host_listeners[1].contains("channel webhooks on 0.0.0.0:4100"));
    let text = render_text(&lethal);
    assert!(
        text.contains("\n  listeners    gateway on 0.0.0.0:4000") && text.contains("0.0.0.0:4100"),
        "{text}"
    );
    // With network none, nothing on the host but its socket.
    let isolated = audit(&cfg, "isolated", &catalog());
    assert!(isolated.reach.host_listeners.is_empty());
    assert!(!render_text(&isolated).contains("\n  listeners "));
}
