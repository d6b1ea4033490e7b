//! The process's approvals: the store, a wake-up for turns waiting on a
//! decision, and the permits the gateway checks before a skill or MCP
//! call runs.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use super::store::{ApprovalError, ApprovalStore, Approvers, Decider, Decision, Request, State};

/// How often a waiting turn looks at the store as well (a decision taken
/// by another process, `pincer approvals approve`, wakes nothing here).
const POLL: Duration = Duration::from_millis(250);

/// Permits held at once per process; past it the oldest are dropped.
const MAX_PERMITS: usize = 10_000;

/// Requests one workspace may ask per [`REQUEST_WINDOW`]: each session
/// waits on its one request, but many sessions (or a looping agent in
/// each) could otherwise flood a channel with requests.
pub const MAX_REQUESTS_PER_WINDOW: usize = 20;
pub const REQUEST_WINDOW: Duration = Duration::from_secs(60);

/// Largest preview a person is asked to approve (the whole arguments of
/// the call); a call beyond it is refused without asking, since nobody
/// reviews a megabyte of shell.
pub const MAX_PREVIEW_BYTES: usize = 64 * 1024;

pub struct Approvals {
    store: ApprovalStore,
    decided: Notify,
    /// (workspace, fingerprint) → when the permit lapses. One use each.
    permits: Mutex<HashMap<(String, String), Instant>>,
    /// workspace → when its recent requests were asked.
    asked: Mutex<HashMap<String, VecDeque<Instant>>>,
}

impl Approvals {
    pub fn new(store: ApprovalStore) -> Self {
        Approvals {
            store,
            decided: Notify::new(),
            permits: Mutex::new(HashMap::new()),
            asked: Mutex::new(HashMap::new()),
        }
    }

    /// Counts a request about to be asked in `workspace` at `now`; `Err`
    /// says why it may not be (over [`MAX_REQUESTS_PER_WINDOW`] in the last
    /// [`REQUEST_WINDOW`]), and then it is not counted.
    pub fn admit_request(&self, workspace: &str, now: Instant) -> Result<(), String> {
        let Ok(mut asked) = self.asked.lock() else {
            return Err("the approvals' request counter is broken (a panicked thread)".into());
        };
        let recent = asked.entry(workspace.to_owned()).or_default();
        while recent
            .front()
            .is_some_and(|at| now.saturating_duration_since(*at) >= REQUEST_WINDOW)
        {
            recent.pop_front();
        }
        if recent.len() >= MAX_REQUESTS_PER_WINDOW {
            return Err(format!(
                "workspace `{workspace}` asked for {MAX_REQUESTS_PER_WINDOW} approvals in the last {} s, as many as it may",
                REQUEST_WINDOW.as_secs()
            ));
        }
        recent.push_back(now);
        Ok(())
    }

    pub fn store(&self) -> &ApprovalStore {
        &self.store
    }

    /// Wakes the turns waiting on a decision, to look at their requests.
    pub fn wake(&self) {
        self.decided.notify_waiters();
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
        self.wake();
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

    /// A workspace asks at most MAX_REQUESTS_PER_WINDOW a window; others
    /// are not held back, and the window slides.
    #[test]
    fn requests_are_rate_limited_per_workspace() {
        let dir = tempfile::tempdir().expect("dir");
        let approvals =
            Approvals::new(ApprovalStore::open(&dir.path().join("pincer.db")).expect("store"));
        let start = Instant::now();
        for _ in 0..MAX_REQUESTS_PER_WINDOW {
            approvals
                .admit_request("team", start)
                .expect("within the rate");
        }
        let refused = approvals.admit_request("team", start).unwrap_err();
        assert!(
            refused.contains("asked for 20 approvals in the last 60 s"),
            "{refused}"
        );
        approvals
            .admit_request("other", start)
            .expect("another workspace");
        approvals
            .admit_request("team", start + REQUEST_WINDOW)
            .expect("the window slid");
    }
}
