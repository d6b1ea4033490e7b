//! `user: per-workspace` in a policy group: each workspace's container runs
//! as a uid/gid of its own, allocated once from [`FIRST_UID`] up and kept in
//! `container_users` (`pincer.db`), so it never changes between starts and
//! is never given to another workspace, even after one is removed from the
//! configuration. Two workspaces then cannot read each other's files on a
//! shared mount, and neither is a host account.

use std::path::Path;

use rusqlite::OptionalExtension;

use super::ContainerError;

/// The policy value asking for a uid per workspace.
pub use crate::policy::PER_WORKSPACE_USER as PER_WORKSPACE;
/// The first uid handed out; the baseline's own is the one below it.
pub const FIRST_UID: u32 = 100_001;

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS container_users (
    workspace TEXT PRIMARY KEY,
    uid INTEGER NOT NULL UNIQUE,
    created_ms INTEGER NOT NULL
)";

fn store_error(e: rusqlite::Error) -> ContainerError {
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
/// `pincer.db`; a write only the first time.
pub fn resolve(
    home: &Path,
    workspace: &str,
    policy_user: &str,
) -> Result<Resolved, ContainerError> {
    let mut earlier = vec![PREVIOUS_USER, BASELINE_USER];
    let conn = crate::db::open(&home.join(crate::db::FILE_NAME));
    let own = conn.as_ref().ok().and_then(|conn| own_uid(conn, workspace));
    if policy_user != PER_WORKSPACE {
        earlier.extend(own.map(|uid| (uid, uid)));
        return Ok(Resolved {
            user: policy_user.to_string(),
            earlier,
        });
    }
    let uid = match own {
        Some(uid) => uid,
        None => allocate(&mut conn.map_err(store_error)?, workspace)?,
    };
    earlier.push((uid, uid));
    Ok(Resolved {
        user: format!("{uid}:{uid}"),
        earlier,
    })
}

fn allocate(conn: &mut rusqlite::Connection, workspace: &str) -> Result<u32, ContainerError> {
    conn.execute_batch(SCHEMA).map_err(store_error)?;
    // One write transaction: two processes starting two workspaces at once
    // get different uids.
    let tx = conn
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .map_err(store_error)?;
    tx.execute(
        "INSERT INTO container_users (workspace, uid, created_ms)
         SELECT ?1, (SELECT COALESCE(MAX(uid) + 1, ?2) FROM container_users), ?3
         WHERE NOT EXISTS (SELECT 1 FROM container_users WHERE workspace = ?1)",
        rusqlite::params![workspace, FIRST_UID, crate::db::now_ms()],
    )
    .map_err(store_error)?;
    let uid = own_uid(&tx, workspace)
        .ok_or_else(|| ContainerError::Host(format!("no uid was allocated to `{workspace}`")))?;
    tx.commit().map_err(store_error)?;
    Ok(uid)
}

/// The uid allocated to `workspace`, if any (none before the table exists).
fn own_uid(conn: &rusqlite::Connection, workspace: &str) -> Option<u32> {
    conn.query_row(
        "SELECT uid FROM container_users WHERE workspace = ?1",
        [workspace],
        |row| row.get(0),
    )
    .optional()
    .ok()
    .flatten()
}

/// `uid:gid` already allocated to `workspace`, without allocating.
pub fn allocated(home: &Path, workspace: &str) -> Option<String> {
    let conn = crate::db::open(&home.join(crate::db::FILE_NAME)).ok()?;
    own_uid(&conn, workspace).map(|uid| format!("{uid}:{uid}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allocate(home: &Path, workspace: &str) -> Result<String, ContainerError> {
        resolve(home, workspace, PER_WORKSPACE).map(|r| r.user)
    }

    #[test]
    fn each_workspace_keeps_its_own_uid_and_none_is_reused() {
        let home = tempfile::tempdir().unwrap();
        assert_eq!(allocated(home.path(), "a"), None);
        let a = allocate(home.path(), "a").unwrap();
        let b = allocate(home.path(), "b").unwrap();
        assert_eq!(a, format!("{FIRST_UID}:{FIRST_UID}"));
        assert_eq!(b, format!("{0}:{0}", FIRST_UID + 1));
        assert_eq!(allocate(home.path(), "a").unwrap(), a, "stable");
        assert_eq!(allocated(home.path(), "b"), Some(b));
        let conn = crate::db::open(&home.path().join(crate::db::FILE_NAME)).unwrap();
        conn.execute("DELETE FROM container_users WHERE workspace = 'a'", [])
            .unwrap();
        // b's uid is the highest: a new workspace gets the next one.
        assert_eq!(
            allocate(home.path(), "c").unwrap(),
            format!("{0}:{0}", FIRST_UID + 2)
        );
    }

    #[test]
    fn two_processes_allocating_at_once_get_different_uids() {
        let home = tempfile::tempdir().unwrap();
        let path = home.path().to_path_buf();
        let threads: Vec<_> = (0..8)
            .map(|n| {
                let path = path.clone();
                std::thread::spawn(move || allocate(&path, &format!("w{n}")).unwrap())
            })
            .collect();
        let mut uids: Vec<String> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        uids.sort();
        uids.dedup();
        assert_eq!(uids.len(), 8);
    }
}
