//! `pincer policy audit` over the example workspaces in `workspaces/`:
//! content, not just exit codes.

use crate::support;

use serde_json::Value;
use support::{Sandbox, fails, ok};

const EXAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../workspaces/pincer.yaml");

fn audit(workspace: &str) -> (String, Value) {
    let sandbox = Sandbox::new();
    let text = ok(sandbox.pincer(&["--config", EXAMPLES, "policy", "audit", workspace]));
    let json = ok(sandbox.pincer(&["--config", EXAMPLES, "policy", "audit", workspace, "--json"]));
    (text, serde_json::from_str(&json).expect("audit JSON"))
}

fn setting<'a>(report: &'a Value, name: &str) -> (&'a str, Vec<&'a str>) {
    let line = report["settings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["setting"] == name)
        .unwrap_or_else(|| panic!("no setting {name}"));
    let from = line["from"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    (line["value"].as_str().unwrap(), from)
}

#[test]
fn researcher_is_flagged_as_the_lethal_trifecta() {
    let (text, report) = audit("researcher");
    let trifecta = &report["trifecta"];
    assert!(
        trifecta["verdict"].as_str().unwrap().starts_with("LETHAL"),
        "{trifecta}"
    );
    assert_eq!(trifecta["private_data"][0], "mount ~/notes → /notes");
    assert_eq!(
        trifecta["untrusted_input"][0],
        "channel team-chat (channel-webhook), whose earlier messages may be quoted into turns \
         where the plugin reads history (context: thread 30, channel 0; anyone's, strangers' marked)"
    );
    assert_eq!(
        trifecta["exfiltration"][0],
        "egress proxy to en.wikipedia.org, api.semanticscholar.org"
    );
    assert_eq!(
        setting(&report, "memory"),
        ("1 GiB", vec!["max_memory_1gb"])
    );
    assert_eq!(setting(&report, "network"), ("none", vec!["baseline"]));
    assert!(
        text.contains("lethal trifecta: LETHAL: all three present"),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.split_whitespace().eq(["/notes", "ro", "~/notes"])),
        "{text}"
    );
    // pincer's own mounts are listed too: the socket folders and the runner.
    for (target, mode, purpose) in [
        (
            "/run/pincer/gateway",
            "ro",
            "(the gateway and egress proxy sockets; host-owned)",
        ),
        (
            "/run/pincer/runner",
            "rw",
            "(the runner socket; the container's own)",
        ),
        ("/opt/pincer/pincer-agent", "ro", "(the agent runner)"),
    ] {
        assert!(
            text.lines().any(|l| {
                let l = l.trim_start();
                l.starts_with(target) && l.contains(&format!("  {mode}  ")) && l.ends_with(purpose)
            }),
            "{target} missing from\n{text}"
        );
    }
    assert!(
        text.contains("network      none — the gateway and egress proxy sockets only"),
        "{text}"
    );
    assert!(
        text.contains(
            "egress       en.wikipedia.org (from workspaces.researcher.egress); api.semanticscholar.org (from workspaces.researcher.egress)"
        ),
        "{text}"
    );
}

#[test]
fn analyst_breaks_the_trifecta_and_forces_mounts_read_only() {
    let (text, report) = audit("analyst");
    let trifecta = &report["trifecta"];
    assert_eq!(trifecta["verdict"], "ok: no way out");
    assert!(trifecta["exfiltration"].as_array().unwrap().is_empty());
    let notes = report["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["target"] == "/notes")
        .unwrap();
    assert_eq!(
        notes["mode"], "ro",
        "read_only_mounts must force the mount read-only"
    );
    assert_eq!(
        setting(&report, "read_only_mounts"),
        ("true", vec!["read_only_mounts"])
    );
    assert_eq!(
        report["reach"]["network"],
        "none — the gateway and egress proxy sockets only"
    );
    assert!(
        text.contains("network      none — the gateway and egress proxy sockets only"),
        "{text}"
    );
    assert!(
        text.contains("egress       nothing (egress: none, from policy group no_internet_access)"),
        "{text}"
    );
}

#[test]
fn sandbox_shows_tight_limits_and_where_each_came_from() {
    let (text, report) = audit("sandbox");
    assert_eq!(
        setting(&report, "network"),
        ("none", vec!["no_internet_access"])
    );
    assert_eq!(
        setting(&report, "memory"),
        ("512 MiB", vec!["max_memory_512mb"])
    );
    assert_eq!(setting(&report, "pids"), ("128", vec!["max_pids_128"]));
    assert_eq!(
        setting(&report, "read_only_rootfs"),
        ("true", vec!["read_only_rootfs"])
    );
    assert_eq!(report["container"]["memory_bytes"], 536_870_912);
    assert!(text.contains("read_only_rootfs  yes"), "{text}");
    assert!(text.contains("lethal trifecta: ok"), "{text}");
}

#[test]
fn locked_explains_how_each_restriction_is_enforced() {
    let (text, report) = audit("locked");
    assert_eq!(
        setting(&report, "allowed_executables"),
        ("/bin/busybox", vec!["allowed_executables"])
    );
    assert_eq!(
        setting(&report, "runner.no_exec_after_start"),
        ("true", vec!["no_process_creation"])
    );
    for line in [
        "clone3 → SCMP_ACT_ERRNO ENOSYS (38)",
        "clone → SCMP_ACT_ALLOW only if (flags & 0x7e030000) == 0x10000 (threads)",
        "fork, memfd_create, vfork → SCMP_ACT_ERRNO EPERM (1)",
        "enforced by Landlock execute rules applied by the agent runner",
        "the agent runner installs its own seccomp filter denying execve",
    ] {
        assert!(text.contains(line), "missing {line:?}:\n{text}");
    }
    let security = report["container"]["security_opt"].to_string();
    assert!(security.contains("no-new-privileges"), "{security}");
}

#[test]
fn unknown_workspaces_and_groups_are_refused() {
    let sandbox = Sandbox::new();
    let err = fails(sandbox.pincer(&["--config", EXAMPLES, "policy", "audit", "nobody"]));
    assert!(err.contains("no workspace named `nobody`"), "{err}");
    let config = sandbox.write(
        "pincer.yaml",
        "workspaces:\n  a: {policies: [no_internet_acess]}\n  b: {policies: [max_memory_12xb]}\n",
    );
    let err =
        fails(sandbox.pincer(&["--config", config.to_str().unwrap(), "policy", "audit", "a"]));
    assert!(
        err.contains("unknown policy group `no_internet_acess`")
            && err.contains("did you mean `no_internet_access`"),
        "{err}"
    );
    let err =
        fails(sandbox.pincer(&["--config", config.to_str().unwrap(), "policy", "audit", "b"]));
    assert!(err.contains("max_memory_12xb"), "{err}");
}

#[test]
fn contradictory_user_groups_are_refused() {
    let sandbox = Sandbox::new();
    sandbox.write(
        "groups/open_web.yaml",
        "description: Reach the web.\nnetwork: bridge_unfiltered\n",
    );
    let groups = sandbox.work().join("groups");
    let config = sandbox.write(
        "pincer.yaml",
        &format!(
            "containers:\n  policy_dirs: [{}]\nworkspaces:\n  torn: {{policies: [no_internet_access, open_web]}}\n",
            groups.display()
        ),
    );
    let err = fails(sandbox.pincer(&[
        "--config",
        config.to_str().unwrap(),
        "policy",
        "audit",
        "torn",
    ]));
    assert!(
        err.contains("contradict")
            && err.contains("no_internet_access")
            && err.contains("open_web"),
        "{err}"
    );
}

#[test]
fn the_audit_prints_each_workspaces_models_and_where_the_list_comes_from() {
    let (text, report) = audit("analyst");
    assert_eq!(
        report["reach"]["models"]["aliases"],
        serde_json::json!(["local"])
    );
    assert_eq!(report["reach"]["models"]["from"], "explicit");
    assert!(
        text.contains("local (explicit: workspaces.analyst.models)"),
        "{text}"
    );
    let (text, report) = audit("sandbox");
    assert_eq!(report["reach"]["models"]["from"], "model_and_fallbacks");
    assert!(
        text.contains("local (default: workspaces.sandbox.model and its fallbacks"),
        "{text}"
    );
    assert!(text.contains("skill-calc (tools: evaluate)"), "{text}");
    let (text, report) = audit("researcher");
    assert_eq!(
        report["reach"]["models"]["aliases"],
        serde_json::json!(["cloud", "local"])
    );
    assert!(
        text.contains("cloud, local (default: every alias"),
        "{text}"
    );
}
