//! The process's approvals: the store, a wake-up for turns waiting on a
//! decision, and the permits the gateway checks before a skill or MCP
//! call runs.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use super::store::{ApprovalError, ApprovalStore, Approvers, Decider, Decision, Request, State};

/// How often a waiting turn looks at the store as well (a decision taken
/// by another process, `pincer approvals approve`, wakes nothing here).
const POLL: Duration = Duration::from_millis(250);

/// Permits held at once per process; past it the oldest are dropped.
const MAX_PERMITS: usize = 10_000;

pub struct Approvals {
    store: ApprovalStore,
    decided: Notify,
    /// (workspace, fingerprint) → when the permit lapses. One use each.
    permits: Mutex<HashMap<(String, String), Instant>>,
}

impl Approvals {
    pub fn new(store: ApprovalStore) -> Self {
        Approvals {
            store,
            decided: Notify::new(),
            permits: Mutex::new(HashMap::new()),
        }
    }

    pub fn store(&self) -> &ApprovalStore {
        &self.store
    }

    /// Decides request `id` (see [`ApprovalStore::decide`]) and wakes the
    /// turn waiting on it.
    pub fn decide(
        &self,
        id: &str,
        decider: Decider<'_>,
        approvers: &Approvers,
        decision: &Decision,
        now_ms: i64,
    ) -> Result<Request, ApprovalError> {
        let decided = self.store.decide(id, decider, approvers, decision, now_ms);
        self.decided.notify_waiters();
        decided
    }

    /// Waits until request `id` is decided or expires (marking it expired
    /// then), and returns it as it ended.
    pub async fn settled(&self, id: &str) -> Result<Request, ApprovalError> {
        loop {
            let woken = self.decided.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let request = self
                .store
                .get(id)?
                .ok_or_else(|| ApprovalError::Unknown(id.to_owned()))?;
            if request.state != State::Pending {
                return Ok(request);
            }
            let now = crate::db::now_ms();
            if request.expires_ms <= now {
                self.store.expire_due(now)?;
                continue;
            }
            let left = Duration::from_millis(u64::try_from(request.expires_ms - now).unwrap_or(0));
            tokio::select! {
                () = woken => {}
                () = tokio::time::sleep(left.min(POLL)) => {}
            }
        }
    }

    /// Lets the gateway run one call of `fingerprint` for `workspace`
    /// within `ttl`.
    pub fn permit(&self, workspace: &str, fingerprint: &str, ttl: Duration) {
        let Ok(mut permits) = self.permits.lock() else {
            return;
        };
        let now = Instant::now();
        permits.retain(|_, until| *until > now);
        if permits.len() >= MAX_PERMITS
            && let Some(oldest) = permits
                .iter()
                .min_by_key(|(_, until)| **until)
                .map(|(k, _)| k.clone())
        {
            permits.remove(&oldest);
        }
        permits.insert((workspace.to_owned(), fingerprint.to_owned()), now + ttl);
    }

    /// Uses up the permit for `fingerprint` in `workspace`, if one is held.
    pub fn take_permit(&self, workspace: &str, fingerprint: &str) -> bool {
        let Ok(mut permits) = self.permits.lock() else {
            return false;
        };
        permits
            .remove(&(workspace.to_owned(), fingerprint.to_owned()))
            .is_some_and(|until| until > Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A permit covers exactly one call of one fingerprint in one workspace:
    /// a runner that was let through for A and sends B is refused, and A
    /// cannot be replayed.
    #[test]
    fn a_permit_is_one_use_of_exactly_its_call() {
        let dir = tempfile::tempdir().expect("dir");
        let approvals =
            Approvals::new(ApprovalStore::open(&dir.path().join("pincer.db")).expect("store"));
        approvals.permit("team", "fingerprint-a", Duration::from_secs(60));
        assert!(!approvals.take_permit("team", "fingerprint-b"));
        assert!(!approvals.take_permit("other", "fingerprint-a"));
        assert!(approvals.take_permit("team", "fingerprint-a"));
        assert!(!approvals.take_permit("team", "fingerprint-a"), "one use");
        approvals.permit("team", "fingerprint-c", Duration::ZERO);
        assert!(!approvals.take_permit("team", "fingerprint-c"), "lapsed");
    }
}
