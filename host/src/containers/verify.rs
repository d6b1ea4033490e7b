//! The fail-closed check: what an engine reports it applied
//! ([`Applied`](super::Applied)) against what the policy asked for, one line
//! per difference. The same code for every engine.

use super::engine::Observed;
use super::mounts::BindMount;
use super::spec::{WorkspaceSpec, sorted};
use crate::policy::ContainerSettings;

/// Differences between `spec` and its started container, one line each;
/// empty when every setting took effect.
pub fn mismatches(spec: &WorkspaceSpec, actual: &Observed) -> Vec<String> {
    let s = &spec.settings;
    let mut diffs = settings_mismatches(s, &spec.image, &spec.all_mounts(), actual);
    // Runtimes have been seen attaching a network to a `none` container.
    differ(
        &mut diffs,
        "attached networks",
        s.network_mode.clone(),
        actual.applied.networks.join(","),
    );
    diffs
}

/// Adds a line to `diffs` when `want` and `got` differ.
pub(super) fn differ(diffs: &mut Vec<String>, what: &str, want: String, got: String) {
    if want != got {
        diffs.push(format!("{what}: wanted {want}, found {got}"));
    }
}

/// What the policy asked for that the started container `actual` does
/// not have (running, image, user, every limit and option, the mounts), one
/// line each. The attached networks are the caller's to check: how a
/// `none` container shows them differs by how it was created.
pub fn settings_mismatches(
    s: &ContainerSettings,
    image: &str,
    mounts: &[BindMount],
    actual: &Observed,
) -> Vec<String> {
    let mut diffs = Vec::new();
    let a = &actual.applied;
    let mut check = |what: &str, want: String, got: String| differ(&mut diffs, what, want, got);
    check("running", "true".into(), actual.state.running.to_string());
    check("image", image.to_owned(), a.image.clone());
    check("user", s.user.clone(), a.user.clone());
    check(
        "network mode",
        s.network_mode.clone(),
        a.network_mode.clone(),
    );
    check(
        "memory",
        s.memory_bytes.to_string(),
        a.memory_bytes.to_string(),
    );
    check(
        "memory+swap",
        s.memory_swap_bytes.to_string(),
        a.memory_swap_bytes.to_string(),
    );
    check(
        "cpus (nano)",
        s.nano_cpus.to_string(),
        a.nano_cpus.to_string(),
    );
    check(
        "pids limit",
        s.pids_limit.to_string(),
        a.pids_limit.to_string(),
    );
    // Every ulimit the container has, so one added behind pincer's back
    // (or a daemon default in place of ours) is a difference too.
    check(
        "ulimits",
        format!("nofile={0}:{0}", s.nofile),
        a.ulimits.join(","),
    );
    check("cap_drop", sorted(&s.cap_drop), a.cap_drop.join(","));
    check("cap_add", sorted(&s.cap_add), a.cap_add.join(","));
    check(
        "security options",
        sorted(&s.security_opt),
        a.security_opt.join(","),
    );
    check(
        "read-only root filesystem",
        s.read_only_rootfs.to_string(),
        a.read_only_rootfs.to_string(),
    );
    check("tmpfs", format!("{:?}", s.tmpfs), format!("{:?}", a.tmpfs));
    check(
        "mounts",
        mount_lines(mounts).join(", "),
        a.mounts.join(", "),
    );
    diffs
}

/// `mounts` as [`Applied::mounts`](super::Applied) reports them:
/// `source:target:ro|rw`, sorted.
pub(super) fn mount_lines(mounts: &[BindMount]) -> Vec<String> {
    let mut lines: Vec<String> = mounts
        .iter()
        .map(|m| {
            format!(
                "{}:{}:{}",
                m.source.display(),
                m.target,
                if m.read_only { "ro" } else { "rw" }
            )
        })
        .collect();
    lines.sort();
    lines
}
