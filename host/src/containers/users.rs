//! `user: per-workspace` in a policy group: each workspace's container runs
//! as a uid/gid of its own, allocated once from [`FIRST_UID`] up and kept in
//! `container_users` (`pincer.db`), so it never changes between starts and
//! is never given to another workspace, even after one is removed from the
//! configuration. Two workspaces then cannot read each other's files on a
//! shared mount, and neither is a host account.

use super::ContainerError;
use crate::args;
use crate::db::{Db, DbError, Location};

/// The policy value asking for a uid per workspace.
pub use crate::policy::PER_WORKSPACE_USER as PER_WORKSPACE;
/// The first uid handed out; the baseline's own is the one below it.
pub const FIRST_UID: u32 = 100_001;

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS container_users (
    workspace TEXT PRIMARY KEY,
    uid INTEGER NOT NULL UNIQUE,
    created_ms INTEGER NOT NULL
)";

fn store_error(e: DbError) -> ContainerError {
    ContainerError::Host(format!("the per-workspace user table: {e}"))
}

/// pincer's container user before its uid became one no host account has.
const PREVIOUS_USER: (u32, u32) = (1000, 1000);
/// The baseline policy's user.
const BASELINE_USER: (u32, u32) = (FIRST_UID - 1, FIRST_UID - 1);

/// The user `workspace`'s container runs as, and every user it may have run
/// as before (whose files it takes over).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub user: String,
    pub earlier: Vec<(u32, u32)>,
}

/// `policy_user` as `workspace`'s container runs it: [`PER_WORKSPACE`]
/// becomes the workspace's own uid, allocated on first use. One read of
/// the state; a write only the first time.
pub fn resolve_at(
    at: &Location,
    workspace: &str,
    policy_user: &str,
) -> Result<Resolved, ContainerError> {
    let mut earlier = vec![PREVIOUS_USER, BASELINE_USER];
    let db = Db::open(at);
    let own = db.as_ref().ok().and_then(|db| own_uid(db, workspace));
    if policy_user != PER_WORKSPACE {
        earlier.extend(own.map(|uid| (uid, uid)));
        return Ok(Resolved {
            user: policy_user.to_string(),
            earlier,
        });
    }
    let uid = match own {
        Some(uid) => uid,
        None => allocate(&db.map_err(store_error)?, workspace)?,
    };
    earlier.push((uid, uid));
    Ok(Resolved {
        user: format!("{uid}:{uid}"),
        earlier,
    })
}

/// Creates the table of per-workspace uids at `at` if it is not there.
pub fn create_table(at: &Location) -> Result<(), ContainerError> {
    Db::open(at)
        .and_then(|db| db.transaction(|tx| tx.schema(SCHEMA)))
        .map_err(store_error)
}

fn allocate(db: &Db, workspace: &str) -> Result<u32, ContainerError> {
    // The table in a transaction of its own, so the allocation's first
    // statement is its write: SQLite then waits for another process's
    // allocation (busy timeout) instead of failing on a stale read.
    db.transaction(|tx| tx.schema(SCHEMA))
        .map_err(store_error)?;
    let now = crate::db::now_ms();
    // One transaction: two daemons starting two workspaces at once get
    // different uids.
    let uid = db
        .transaction(|tx| {
            tx.execute(
                "INSERT INTO container_users (workspace, uid, created_ms)
                 SELECT ?1, (SELECT COALESCE(MAX(uid) + 1, ?2) FROM container_users), ?3
                 WHERE NOT EXISTS (SELECT 1 FROM container_users WHERE workspace = ?1)",
                args![workspace, FIRST_UID, now],
            )?;
            tx.query_opt(
                "SELECT uid FROM container_users WHERE workspace = ?1",
                args![workspace],
            )?
            .map(|row| row.get::<u32>(0))
            .transpose()
        })
        .map_err(store_error)?;
    uid.ok_or_else(|| ContainerError::Host(format!("no uid was allocated to `{workspace}`")))
}

/// The uid allocated to `workspace`, if any (none before the table exists).
fn own_uid(db: &Db, workspace: &str) -> Option<u32> {
    db.run(|conn| {
        conn.query_opt(
            "SELECT uid FROM container_users WHERE workspace = ?1",
            args![workspace],
        )?
        .map(|row| row.get(0))
        .transpose()
    })
    .ok()
    .flatten()
}

/// `uid:gid` already allocated to `workspace`, without allocating.
pub fn allocated_at(at: &Location, workspace: &str) -> Option<String> {
    let db = Db::open(at).ok()?;
    own_uid(&db, workspace).map(|uid| format!("{uid}:{uid}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::testing::{database, each_backend};

    fn allocate(at: &Location, workspace: &str) -> Result<String, ContainerError> {
        resolve_at(at, workspace, PER_WORKSPACE).map(|r| r.user)
    }

    #[test]
    fn each_workspace_keeps_its_own_uid_and_none_is_reused() {
        each_backend(|at| {
            assert_eq!(allocated_at(at, "a"), None);
            let a = allocate(at, "a").unwrap();
            let b = allocate(at, "b").unwrap();
            assert_eq!(a, format!("{FIRST_UID}:{FIRST_UID}"));
            assert_eq!(b, format!("{0}:{0}", FIRST_UID + 1));
            assert_eq!(allocate(at, "a").unwrap(), a, "stable");
            assert_eq!(allocated_at(at, "b"), Some(b));
            Db::open(at)
                .unwrap()
                .run(|conn| {
                    conn.execute("DELETE FROM container_users WHERE workspace = 'a'", args![])
                })
                .unwrap();
            // b's uid is the highest: a new workspace gets the next one.
            assert_eq!(
                allocate(at, "c").unwrap(),
                format!("{0}:{0}", FIRST_UID + 2)
            );
        });
    }

    #[test]
    fn two_processes_allocating_at_once_get_different_uids() {
        each_backend(|at| {
            let uids: Vec<String> = std::thread::scope(|s| {
                let threads: Vec<_> = (0..8)
                    .map(|n| s.spawn(move || allocate(at, &format!("w{n}")).unwrap()))
                    .collect();
                threads.into_iter().map(|t| t.join().unwrap()).collect()
            });
            let mut unique = uids.clone();
            unique.sort();
            unique.dedup();
            assert_eq!(unique.len(), 8);
        });
    }

    /// Two daemons starting the same workspaces at once: each workspace
    /// gets one uid, whoever allocated it, and no two share one.
    #[test]
    fn two_daemons_starting_one_workspace_at_once_agree_on_its_uid() {
        let at = database();
        let seen = std::sync::Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for _ in 0..4 {
                let (at, seen) = (&at, &seen);
                s.spawn(move || {
                    for n in 0..10 {
                        let user = allocate(at, &format!("w{n}")).unwrap();
                        seen.lock().unwrap().push((n, user));
                    }
                });
            }
        });
        let mut seen = seen.into_inner().unwrap();
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 10, "one uid per workspace: {seen:?}");
        let mut uids: Vec<&String> = seen.iter().map(|(_, u)| u).collect();
        uids.sort();
        uids.dedup();
        assert_eq!(uids.len(), 10);
    }
}
