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

/// `uid:gid` of `workspace`'s container, allocated on first use.
pub fn allocate(home: &Path, workspace: &str) -> Result<String, ContainerError> {
    let mut conn = crate::db::open(&home.join(crate::db::FILE_NAME)).map_err(store_error)?;
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
    let uid: u32 = tx
        .query_row(
            "SELECT uid FROM container_users WHERE workspace = ?1",
            [workspace],
            |row| row.get(0),
        )
        .map_err(store_error)?;
    tx.commit().map_err(store_error)?;
    Ok(format!("{uid}:{uid}"))
}

/// pincer's container user before its uid became one no host account has.
const PREVIOUS_USER: (u32, u32) = (1000, 1000);
/// The baseline policy's user.
const BASELINE_USER: (u32, u32) = (FIRST_UID - 1, FIRST_UID - 1);

/// Every user `workspace`'s container may have run as before.
pub fn earlier(home: &Path, workspace: &str) -> Vec<(u32, u32)> {
    let mut users = vec![PREVIOUS_USER, BASELINE_USER];
    if let Some(own) = allocated(home, workspace).and_then(|u| super::parse_user(&u)) {
        users.push(own);
    }
    users
}

/// `uid:gid` already allocated to `workspace`, without allocating.
pub fn allocated(home: &Path, workspace: &str) -> Option<String> {
    let conn = crate::db::open(&home.join(crate::db::FILE_NAME)).ok()?;
    conn.query_row(
        "SELECT uid FROM container_users WHERE workspace = ?1",
        [workspace],
        |row| row.get::<_, u32>(0),
    )
    .optional()
    .ok()
    .flatten()
    .map(|uid| format!("{uid}:{uid}"))
}

#[cfg(test)]
mod tests {
    use super::*;

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
