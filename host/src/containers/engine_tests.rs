//! The runtime's rules over an engine that lies: whatever an engine
//! reports it applied short of the policy, the container is removed and
//! its gateway token revoked (fail closed), with no Docker involved.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use super::cgroup::Counters;
use super::engine::{Applied, ContainerEngine, Observed, RunState};
use super::image::Built;
use super::runtime::{ContainerRuntime, GrantError, GrantMinter};
use super::spec::WorkspaceSpec;
use super::verify::{mismatches, mount_lines};
use super::{ContainerError, ContainerStatus};
use crate::audit::AuditLog;
use crate::policy::PolicyCatalog;

fn spec_in(home: &Path) -> WorkspaceSpec {
    let settings = PolicyCatalog::builtin()
        .unwrap()
        .effective("w", &[])
        .unwrap()
        .compile();
    WorkspaceSpec {
        workspace: "w".into(),
        instance: "i".into(),
        container_name: "pincer-i-w".into(),
        image: "pincer-agent:test".into(),
        settings,
        workspace_dir: home.join("workspaces/w"),
        managed_dir: false,
        earlier_users: Vec::new(),
        run_dir: home.join("run/w"),
        runner_binary: home.join("bin/pincer-agent"),
        mounts: Vec::new(),
        stop_after_secs: 0,
    }
}

/// What an engine that applied `spec` exactly would report.
fn faithful(spec: &WorkspaceSpec) -> Applied {
    let s = &spec.settings;
    let sorted = |items: &[String]| {
        let mut items = items.to_vec();
        items.sort();
        items
    };
    Applied {
        image: spec.image.clone(),
        user: s.user.clone(),
        network_mode: s.network_mode.clone(),
        networks: vec![s.network_mode.clone()],
        memory_bytes: s.memory_bytes,
        memory_swap_bytes: s.memory_swap_bytes,
        nano_cpus: s.nano_cpus,
        pids_limit: s.pids_limit,
        ulimits: vec![format!("nofile={0}:{0}", s.nofile)],
        cap_drop: sorted(&s.cap_drop),
        cap_add: sorted(&s.cap_add),
        security_opt: sorted(&s.security_opt),
        read_only_rootfs: s.read_only_rootfs,
        tmpfs: s.tmpfs.clone(),
        mounts: mount_lines(&spec.all_mounts()),
    }
}

fn running(id: &str, digest: Option<String>, applied: Applied) -> Observed {
    Observed {
        id: id.into(),
        state: RunState {
            running: true,
            ..RunState::default()
        },
        spec_digest: digest,
        applied,
    }
}

/// An engine holding at most one container, recording every call.
#[derive(Default)]
struct FakeEngine {
    container: Mutex<Option<Observed>>,
    /// What a container it creates reports it applied.
    creates: Mutex<Option<Applied>>,
    calls: Mutex<Vec<String>>,
}

impl FakeEngine {
    fn called(&self, call: String) {
        self.calls.lock().unwrap().push(call);
    }

    fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }
}

#[async_trait]
impl ContainerEngine for FakeEngine {
    async fn create_and_start(
        &self,
        _spec: &WorkspaceSpec,
        digest: &str,
        env: &[String],
    ) -> Result<String, ContainerError> {
        self.called(format!("create {}", env.join(" ")));
        let applied = self.creates.lock().unwrap().clone().unwrap_or_default();
        *self.container.lock().unwrap() = Some(running("new", Some(digest.into()), applied));
        Ok("new".into())
    }

    async fn inspect(&self, name_or_id: &str) -> Result<Option<Observed>, ContainerError> {
        self.called(format!("inspect {name_or_id}"));
        Ok(self.container.lock().unwrap().clone())
    }

    async fn list(&self, _instance: &str) -> Result<Vec<ContainerStatus>, ContainerError> {
        Ok(Vec::new())
    }

    async fn pause(&self, id: &str) -> Result<(), ContainerError> {
        self.called(format!("pause {id}"));
        Ok(())
    }

    async fn unpause(&self, name_or_id: &str) -> Result<(), ContainerError> {
        self.called(format!("unpause {name_or_id}"));
        if let Some(c) = self.container.lock().unwrap().as_mut() {
            c.state.paused = false;
        }
        Ok(())
    }

    async fn stop(&self, name_or_id: &str, _grace: Duration) -> Result<(), ContainerError> {
        self.called(format!("stop {name_or_id}"));
        Ok(())
    }

    async fn remove(&self, name_or_id: &str) -> Result<(), ContainerError> {
        self.called(format!("remove {name_or_id}"));
        *self.container.lock().unwrap() = None;
        Ok(())
    }

    async fn build_image(
        &self,
        _tag: &str,
        _progress: &mut (dyn for<'a> FnMut(&'a str) + Send),
    ) -> Result<Built, ContainerError> {
        Err(ContainerError::Image("no images here".into()))
    }

    async fn has_image(&self, _tag: &str) -> bool {
        false
    }

    fn counters(&self, _id: &str) -> Counters {
        Counters::default()
    }
}

#[derive(Default)]
struct Grants {
    revoked: Mutex<Vec<String>>,
}

impl GrantMinter for Grants {
    fn mint(&self, workspace: &str) -> Result<String, GrantError> {
        Ok(format!("token-of-{workspace}"))
    }

    fn revoke(&self, workspace: &str) -> Result<(), GrantError> {
        self.revoked.lock().unwrap().push(workspace.into());
        Ok(())
    }
}

struct Fixture {
    home: tempfile::TempDir,
    engine: Arc<FakeEngine>,
    grants: Arc<Grants>,
    audit: Arc<AuditLog>,
    runtime: ContainerRuntime,
}

fn fixture() -> Fixture {
    let home = tempfile::tempdir().unwrap();
    let engine = Arc::new(FakeEngine::default());
    let grants = Arc::new(Grants::default());
    let audit = Arc::new(AuditLog::open(&home.path().join("pincer.db")).unwrap());
    let runtime =
        ContainerRuntime::new(home.path(), engine.clone(), audit.clone(), grants.clone()).unwrap();
    Fixture {
        home,
        engine,
        grants,
        audit,
        runtime,
    }
}

/// One way an engine can apply less than the policy, and the setting the
/// refusal names.
type Tampering = (&'static str, fn(&mut Applied));

fn tamperings() -> Vec<Tampering> {
    vec![
        ("cap_add", |a| a.cap_add.push("CAP_SYS_ADMIN".into())),
        ("cap_drop", |a| a.cap_drop.clear()),
        ("security options", |a| {
            a.security_opt.retain(|o| !o.starts_with("seccomp"))
        }),
        ("user", |a| a.user = "0:0".into()),
        ("network mode", |a| a.network_mode = "bridge".into()),
        ("attached networks", |a| a.networks.push("bridge".into())),
        ("memory", |a| a.memory_bytes = 0),
        ("memory+swap", |a| a.memory_swap_bytes = -1),
        ("pids limit", |a| a.pids_limit = 0),
        ("ulimits", |a| a.ulimits.push("core=-1:-1".into())),
        ("read-only root filesystem", |a| {
            a.read_only_rootfs = !a.read_only_rootfs
        }),
        ("mounts", |a| {
            a.mounts = a.mounts.iter().map(|m| m.replace(":ro", ":rw")).collect()
        }),
        ("mounts", |a| a.mounts.push("/:/host:rw".into())),
        ("image", |a| a.image = "busybox".into()),
    ]
}

#[test]
fn a_faithful_report_passes_and_every_shortfall_is_named() {
    let home = tempfile::tempdir().unwrap();
    let spec = spec_in(home.path());
    let exact = running("c", None, faithful(&spec));
    assert_eq!(mismatches(&spec, &exact), Vec::<String>::new());
    for (setting, tamper) in tamperings() {
        let mut applied = faithful(&spec);
        tamper(&mut applied);
        let problems = mismatches(&spec, &running("c", None, applied));
        assert!(
            problems
                .iter()
                .any(|p| p.starts_with(&format!("{setting}:"))),
            "{setting}: {problems:?}"
        );
    }
    let mut stopped = exact;
    stopped.state.running = false;
    assert!(
        mismatches(&spec, &stopped)
            .iter()
            .any(|p| p.starts_with("running:"))
    );
}

#[tokio::test]
async fn a_new_container_its_engine_applied_less_to_is_removed_and_its_token_revoked() {
    for (setting, tamper) in tamperings() {
        let f = fixture();
        let spec = spec_in(f.home.path());
        let mut applied = faithful(&spec);
        tamper(&mut applied);
        *f.engine.creates.lock().unwrap() = Some(applied);
        let Err(ContainerError::PolicyNotApplied { problems, .. }) = f.runtime.ensure(&spec).await
        else {
            panic!("{setting}: a container short of its policy was used");
        };
        assert!(
            problems
                .iter()
                .any(|p| p.starts_with(&format!("{setting}:"))),
            "{setting}: {problems:?}"
        );
        let calls = f.engine.calls();
        assert!(
            calls[0] == "inspect pincer-i-w"
                && calls[1].starts_with("create ")
                && calls[2] == "inspect new"
                && calls[3] == "remove pincer-i-w",
            "{setting}: {calls:?}"
        );
        assert!(calls[1].contains("PINCER_GATEWAY_URL="), "{calls:?}");
        assert_eq!(*f.grants.revoked.lock().unwrap(), ["w"], "{setting}");
        let events = f.audit.for_workspace("w", 10).unwrap();
        assert_eq!(events[0].kind, "container.verify_failed", "{setting}");
    }
}

#[tokio::test]
async fn a_frozen_container_is_thawed_before_it_is_checked_and_a_dead_one_replaced_with_why() {
    let f = fixture();
    let spec = spec_in(f.home.path());
    let mut frozen = running("old", Some(spec.digest()), Applied::default());
    frozen.state.paused = true;
    *f.engine.container.lock().unwrap() = Some(frozen);
    assert!(f.runtime.ensure(&spec).await.is_err());
    assert_eq!(
        f.engine.calls()[..4],
        [
            "inspect pincer-i-w",
            "unpause old",
            "inspect old",
            "remove pincer-i-w"
        ]
    );

    let f = fixture();
    let spec = spec_in(f.home.path());
    let mut dead = running("old", Some(spec.digest()), faithful(&spec));
    dead.state = RunState {
        running: false,
        exit_code: 137,
        oom_killed: true,
        ..RunState::default()
    };
    *f.engine.container.lock().unwrap() = Some(dead);
    assert!(f.runtime.ensure(&spec).await.is_err());
    let calls = f.engine.calls();
    assert_eq!(calls[..2], ["inspect pincer-i-w", "remove pincer-i-w"]);
    assert!(calls[2].starts_with("create "), "{calls:?}");
    let replaced = f
        .audit
        .for_workspace("w", 10)
        .unwrap()
        .into_iter()
        .find(|e| e.kind == "container.replaced")
        .expect("the replacement is audited");
    assert_eq!(
        replaced.detail,
        "the previous container had stopped (exit code 137, killed by the OOM killer)"
    );
}
