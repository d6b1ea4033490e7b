//! This daemon as a member of its cluster: its heartbeat, the workspace
//! leases it holds, and what it is told to do about them.
//!
//! Every [`Node::step`] (a third of the lease time apart, and at once when
//! another daemon hands a lease back) beats the heartbeat, renews the
//! leases held and takes every configured workspace that is free. A daemon
//! alone on its state (SQLite, or the only one on PostgreSQL) so holds all
//! its workspaces from its first step on, as before there were clusters.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{broadcast, mpsc, watch};

use super::leases::{Fence, Lease, LeaseError, Leases};
use super::members::Members;
use super::wakeups::Wakeups;
use crate::db::{Conn, Location, now_ms};

const TOPIC_LEASE: &str = "lease";
const TOPIC_INBOUND: &str = "inbound";

/// A daemon's id in the cluster: its home's instance id and its process id.
pub fn daemon_id(instance: &str) -> String {
    format!("{instance}:{}", std::process::id())
}

fn lease_name(workspace: &str) -> String {
    format!("workspace:{workspace}")
}

/// What the daemon has to act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// This daemon now runs `workspace`: recover its unfinished messages.
    /// `from`: the daemon that ran it before, when it was another.
    Gained {
        workspace: String,
        from: Option<String>,
    },
    /// Another daemon took `workspace` (this one was paused or cut off
    /// past the lease time): what still runs here cannot write any more.
    Lost(String),
    /// This daemon took `workspace` back after its own lease ran out (the
    /// database was out of reach past the lease time: a lock held
    /// elsewhere, a slow server) and no other daemon held it meanwhile: what
    /// runs here goes on; what ended meanwhile without an answer gets its
    /// notice.
    Regained(String),
    /// Messages for `workspace`, held here, were stored by another daemon.
    Inbound(String),
}

/// The cluster as the rest of the daemon sees it.
pub trait Membership: Send + Sync {
    /// This daemon's id (the owner of its claims).
    fn id(&self) -> &str;
    /// Whether this daemon runs `workspace` now.
    fn holds(&self, workspace: &str) -> bool;
    /// The daemons alive at the last heartbeat, this one included: claims
    /// of any other owner are abandoned.
    fn alive(&self) -> Vec<String>;
    /// Checks, inside the transaction `tx`, that this daemon still holds
    /// `workspace`: a write that ends or starts a turn makes it.
    fn fence(&self, workspace: &str, tx: &mut dyn Conn) -> Result<(), LeaseError>;
    /// Tells the daemon holding `workspace` that a message for it is stored.
    fn wake_holder(&self, workspace: &str);
}

/// One process, no cluster (the CLI, unit tests): holds every workspace.
pub struct Solo(pub String);

impl Membership for Solo {
    fn id(&self) -> &str {
        &self.0
    }
    fn holds(&self, _: &str) -> bool {
        true
    }
    fn alive(&self) -> Vec<String> {
        vec![self.0.clone()]
    }
    fn fence(&self, _: &str, _: &mut dyn Conn) -> Result<(), LeaseError> {
        Ok(())
    }
    fn wake_holder(&self, _: &str) {}
}

pub struct Node {
    id: String,
    host: String,
    ttl_ms: i64,
    workspaces: Vec<String>,
    leases: Leases,
    members: Members,
    wakeups: Wakeups,
    held: Mutex<BTreeMap<String, Lease>>,
    /// Workspaces whose lease this daemon lost: taking one back with no
    /// other holder in between is [`Change::Regained`].
    lapsed: Mutex<std::collections::BTreeSet<String>>,
    alive: Mutex<Vec<String>>,
    detail: Mutex<serde_json::Value>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Node {
    /// Joins the cluster on `at` as daemon `id`, to run `workspaces`. Holds
    /// nothing until the first [`Node::step`].
    pub fn join(
        at: &Location,
        id: String,
        lease: Duration,
        workspaces: Vec<String>,
    ) -> Result<Arc<Self>, LeaseError> {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .unwrap_or_default();
        let node = Arc::new(Self {
            alive: Mutex::new(vec![id.clone()]),
            id,
            host,
            ttl_ms: i64::try_from(lease.as_millis()).unwrap_or(i64::MAX),
            workspaces,
            leases: Leases::open(at)?,
            members: Members::open(at)?,
            wakeups: Wakeups::open(at)?,
            held: Mutex::default(),
            lapsed: Mutex::default(),
            detail: Mutex::new(serde_json::Value::Null),
        });
        node.beat()?;
        Ok(node)
    }

    /// What `pincer status` shows of this daemon (listen addresses,
    /// channel connections); sent with the next heartbeat.
    pub fn describe(&self, detail: serde_json::Value) {
        *lock(&self.detail) = detail;
    }

    fn beat(&self) -> Result<(), LeaseError> {
        let detail = lock(&self.detail).clone();
        self.members
            .heartbeat(&self.id, &self.host, self.ttl_ms, &detail)?;
        let mut alive = self.members.alive()?;
        if !alive.contains(&self.id) {
            alive.push(self.id.clone());
        }
        *lock(&self.alive) = alive;
        Ok(())
    }

    /// Beats, renews what is held, takes what is free; what changed.
    pub fn step(&self) -> Vec<Change> {
        if let Err(e) = self.beat() {
            tracing::warn!("cluster: heartbeat failed: {e}");
        }
        let mut changes = Vec::new();
        for workspace in &self.workspaces {
            let held = lock(&self.held).get(workspace).cloned();
            match held {
                Some(mut lease) => match self.leases.renew(&mut lease, self.ttl_ms) {
                    Ok(true) => {
                        lock(&self.held).insert(workspace.clone(), lease);
                    }
                    Ok(false) => {
                        self.lose(workspace);
                        tracing::warn!(%workspace, "cluster: the workspace's lease ran out or passed to another daemon");
                        changes.push(Change::Lost(workspace.clone()));
                    }
                    // The database is out of reach: the lease stands until
                    // its deadline, then this daemon lets go of it.
                    Err(e) => {
                        tracing::warn!(%workspace, "cluster: cannot renew the lease: {e}");
                        if lease.expires_ms <= now_ms() {
                            self.lose(workspace);
                            changes.push(Change::Lost(workspace.clone()));
                        }
                    }
                },
                None => match self
                    .leases
                    .acquire(&lease_name(workspace), &self.id, self.ttl_ms)
                {
                    Ok(Some(lease)) => {
                        let lapsed = lock(&self.lapsed).remove(workspace);
                        if lapsed && lease.taken_from.is_none() {
                            tracing::info!(%workspace, token = lease.token, "cluster: this daemon took the workspace back; no other daemon held it meanwhile");
                            changes.push(Change::Regained(workspace.clone()));
                        } else {
                            tracing::info!(%workspace, token = lease.token, from = ?lease.taken_from, "cluster: this daemon runs the workspace");
                            changes.push(Change::Gained {
                                workspace: workspace.clone(),
                                from: lease.taken_from.clone(),
                            });
                        }
                        lock(&self.held).insert(workspace.clone(), lease);
                    }
                    Ok(None) => {}
                    Err(e) => tracing::warn!(%workspace, "cluster: cannot take the lease: {e}"),
                },
            }
        }
        changes
    }

    /// Steps every third of the lease time, and when another daemon hands a
    /// lease back or stores a message for a workspace held here, until
    /// `stop`; sends what changed to `changes`.
    pub async fn run(
        self: Arc<Self>,
        mut stop: watch::Receiver<bool>,
        changes: mpsc::UnboundedSender<Change>,
    ) {
        let mut heard = self.wakeups.subscribe();
        let period = Duration::from_millis(u64::try_from(self.ttl_ms / 3).unwrap_or(1).max(1));
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // A step waits on the database (a busy SQLite file, a slow server):
        // never on one of the runtime's few worker threads.
        let step = |node: &Arc<Self>| {
            let node = node.clone();
            async move {
                tokio::task::spawn_blocking(move || node.step())
                    .await
                    .unwrap_or_default()
            }
        };
        enum Next {
            Stop,
            Step,
            Heard(Result<super::Wake, broadcast::error::RecvError>),
        }
        loop {
            let next = tokio::select! {
                _ = stop.wait_for(|s| *s) => Next::Stop,
                _ = tick.tick() => Next::Step,
                wake = heard.recv() => Next::Heard(wake),
            };
            let mut found = match next {
                Next::Stop => return,
                Next::Step => step(&self).await,
                Next::Heard(Ok(wake)) if wake.topic == TOPIC_LEASE => step(&self).await,
                Next::Heard(Ok(wake)) if wake.topic == TOPIC_INBOUND => {
                    if self.holds(&wake.payload) {
                        vec![Change::Inbound(wake.payload)]
                    } else {
                        Vec::new()
                    }
                }
                Next::Heard(Ok(wake)) if wake.topic != "*" => Vec::new(),
                // Reconnected, or fell behind: look at everything.
                Next::Heard(Ok(_) | Err(broadcast::error::RecvError::Lagged(_))) => {
                    let mut found = step(&self).await;
                    found.extend(self.held_now().into_iter().map(Change::Inbound));
                    found
                }
                Next::Heard(Err(broadcast::error::RecvError::Closed)) => return,
            };
            for change in found.drain(..) {
                if changes.send(change).is_err() {
                    return;
                }
            }
        }
    }

    fn lose(&self, workspace: &str) {
        lock(&self.held).remove(workspace);
        lock(&self.lapsed).insert(workspace.to_owned());
    }

    fn held_now(&self) -> Vec<String> {
        lock(&self.held).keys().cloned().collect()
    }

    /// A clean stop: hands every lease back at once and leaves the cluster,
    /// waking the other daemons to take over.
    pub fn leave(&self) {
        let held = std::mem::take(&mut *lock(&self.held));
        for lease in held.values() {
            if let Err(e) = self.leases.release(lease) {
                tracing::warn!(what = %lease.what, "cluster: cannot hand the lease back: {e}");
            }
        }
        if let Err(e) = self.members.leave(&self.id) {
            tracing::warn!("cluster: cannot leave: {e}");
        }
        if !held.is_empty()
            && let Err(e) = self.wakeups.wake(TOPIC_LEASE, "")
        {
            tracing::warn!("cluster: cannot tell the others the leases are free: {e}");
        }
    }
}

impl Membership for Node {
    fn id(&self) -> &str {
        &self.id
    }

    fn holds(&self, workspace: &str) -> bool {
        lock(&self.held)
            .get(workspace)
            .is_some_and(|lease| lease.expires_ms > now_ms())
    }

    fn alive(&self) -> Vec<String> {
        lock(&self.alive).clone()
    }

    fn fence(&self, workspace: &str, tx: &mut dyn Conn) -> Result<(), LeaseError> {
        let lease = lock(&self.held).get(workspace).cloned();
        match lease {
            Some(lease) => Fence(&lease).check(tx),
            None => Err(LeaseError::NotHeld(workspace.to_owned())),
        }
    }

    fn wake_holder(&self, workspace: &str) {
        if let Err(e) = self.wakeups.wake(TOPIC_INBOUND, workspace) {
            tracing::warn!(%workspace, "cluster: cannot wake the workspace's daemon ({e}); it finds the message at its next lease change or restart");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::testing::database;

    fn ws() -> Vec<String> {
        vec!["main".into(), "research".into()]
    }

    fn gained(workspace: &str, from: Option<&str>) -> Change {
        Change::Gained {
            workspace: workspace.into(),
            from: from.map(str::to_owned),
        }
    }

    fn gained_from(workspace: &str, from: &str) -> Change {
        gained(workspace, Some(from))
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn two_daemons_share_the_workspaces_and_a_clean_stop_hands_them_over() {
        let at = database();
        let a = Node::join(&at, "aaaa0001:1".into(), Duration::from_secs(60), ws()).unwrap();
        let b = Node::join(&at, "bbbb0002:2".into(), Duration::from_secs(60), ws()).unwrap();
        assert_eq!(a.step(), [gained("main", None), gained("research", None)]);
        assert_eq!(b.step(), [], "held by a");
        assert!(a.holds("main") && !b.holds("main"));
        assert_eq!(a.step(), [], "renewed");
        let mut alive = b.alive();
        alive.sort();
        assert_eq!(alive, ["aaaa0001:1", "bbbb0002:2"]);

        // b runs, a leaves: b hears it and takes both at once.
        let (stop_tx, stop) = watch::channel(false);
        let (tx, mut rx) = mpsc::unbounded_channel();
        tokio::spawn(b.clone().run(stop, tx));
        a.leave();
        let mut taken = Vec::new();
        while taken.len() < 2 {
            let change = tokio::time::timeout(Duration::from_secs(10), rx.recv())
                .await
                .expect("b takes over within 10 s, long before the 60 s lease")
                .unwrap();
            taken.push(change);
        }
        taken.sort_by_key(|c| format!("{c:?}"));
        // Handed back: taken from a, which is named.
        assert_eq!(
            taken,
            [
                gained_from("main", "aaaa0001:1"),
                gained_from("research", "aaaa0001:1")
            ]
        );
        // a message stored by a for main reaches b
        a.wake_holder("main");
        let change = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(change, Change::Inbound("main".into()));
        assert_eq!(b.alive(), ["bbbb0002:2"]);
        let _ = stop_tx.send(true);
    }

    #[test]
    fn a_daemon_that_lost_its_lease_fails_the_fence() {
        let at = database();
        let a = Node::join(&at, "aaaa0001:1".into(), Duration::from_millis(300), ws()).unwrap();
        let b = Node::join(&at, "bbbb0002:2".into(), Duration::from_secs(60), ws()).unwrap();
        a.step();
        let db = crate::db::Db::open(&at).unwrap();
        db.transaction(|tx| a.fence("main", tx)).unwrap();
        // a is paused past its lease; b takes over.
        std::thread::sleep(Duration::from_millis(400));
        assert!(b.step().contains(&gained_from("main", "aaaa0001:1")));
        let refused = db.transaction(|tx| a.fence("main", tx)).unwrap_err();
        assert!(
            matches!(refused, LeaseError::Fenced { ref holder, .. } if holder == "bbbb0002:2"),
            "{refused}"
        );
        assert!(a.step().contains(&Change::Lost("main".into())));
        let refused = db.transaction(|tx| a.fence("main", tx)).unwrap_err();
        assert!(matches!(refused, LeaseError::NotHeld(_)), "{refused}");
    }

    /// A lease that ran out while nobody else took it is taken back as
    /// `Regained`, not `Gained`: nothing of the workspace ran elsewhere, so
    /// its turns running here must not be told they were cut short. Once
    /// another daemon held it in between, it is `Gained` from that daemon.
    #[test]
    fn a_lease_taken_back_before_anyone_else_held_it_is_regained() {
        let at = database();
        let a = Node::join(&at, "aaaa0001:1".into(), Duration::from_millis(300), ws()).unwrap();
        assert_eq!(a.step(), [gained("main", None), gained("research", None)]);
        // Paused (or its database out of reach) past the lease.
        std::thread::sleep(Duration::from_millis(400));
        assert_eq!(
            a.step(),
            [Change::Lost("main".into()), Change::Lost("research".into())]
        );
        assert_eq!(
            a.step(),
            [
                Change::Regained("main".into()),
                Change::Regained("research".into())
            ]
        );
        let db = crate::db::Db::open(&at).unwrap();
        db.transaction(|tx| a.fence("main", tx)).unwrap();
        assert_eq!(a.step(), [], "renewed");

        // Lapsed again, and this time b held it in between.
        let b = Node::join(&at, "bbbb0002:2".into(), Duration::from_millis(300), ws()).unwrap();
        std::thread::sleep(Duration::from_millis(400));
        assert_eq!(
            b.step(),
            [
                gained_from("main", "aaaa0001:1"),
                gained_from("research", "aaaa0001:1")
            ]
        );
        b.leave();
        assert_eq!(
            a.step(),
            [Change::Lost("main".into()), Change::Lost("research".into())]
        );
        assert_eq!(
            a.step(),
            [
                gained_from("main", "bbbb0002:2"),
                gained_from("research", "bbbb0002:2")
            ]
        );
    }
}
