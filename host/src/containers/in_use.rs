//! Who is using a workspace's container, across processes. Every user of
//! its runner (a turn, `pincer workspace exec`, `pincer workspace up`)
//! holds a shared lock on `$PINCER_HOME/run/<ws>/in-use.lock` from before
//! it looks at the container (and thaws it) until its request has ended —
//! a turn waiting on a person's approval included. The idle supervisor
//! freezes or stops a container only while it holds that lock exclusively,
//! taken without waiting: a container someone uses is never frozen, and no
//! request ever meets a runner frozen under it. The folder is the host's
//! (never mounted), so a container cannot take or break the lock.

use std::fs::{File, TryLockError};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::ContainerError;

const LOCK_FILE: &str = "in-use.lock";

/// A use of a workspace's container; the container stays as it is
/// (thawed) while any clone lives.
#[derive(Debug, Clone)]
pub struct InUse {
    _lock: Arc<File>,
}

/// The supervisor's hold on an unused container: nobody starts using it
/// before this is dropped.
#[derive(Debug)]
pub struct Unused {
    workspace: String,
    _lock: File,
}

impl Unused {
    pub fn workspace(&self) -> &str {
        &self.workspace
    }
}

fn open(run_dir: &Path) -> Result<File, ContainerError> {
    super::beneath::ensure_dir(run_dir, 0o755, None)
        .map_err(|e| ContainerError::Host(e.to_string()))?;
    let path: PathBuf = run_dir.join(LOCK_FILE);
    crate::private_file::open(&path)
        .map_err(|e| ContainerError::Host(format!("opening {}: {e}", path.display())))
}

/// Marks the container of the workspace whose run folder is `run_dir` in
/// use; waits while the supervisor is freezing or stopping it (tens of
/// milliseconds).
pub async fn hold(run_dir: &Path) -> Result<InUse, ContainerError> {
    let run_dir = run_dir.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let file = open(&run_dir)?;
        file.lock_shared().map_err(|e| {
            ContainerError::Host(format!(
                "locking {}: {e}",
                run_dir.join(LOCK_FILE).display()
            ))
        })?;
        Ok(InUse {
            _lock: Arc::new(file),
        })
    })
    .await
    .map_err(|e| ContainerError::Host(format!("locking a workspace's container: {e}")))?
}

/// `workspace`'s container (run folder `run_dir`) is unused right now and
/// stays so while the answer lives; `None` when someone uses it.
pub fn try_unused(run_dir: &Path, workspace: &str) -> Result<Option<Unused>, ContainerError> {
    let file = open(run_dir)?;
    match file.try_lock() {
        Ok(()) => Ok(Some(Unused {
            workspace: workspace.to_string(),
            _lock: file,
        })),
        Err(TryLockError::WouldBlock) => Ok(None),
        Err(TryLockError::Error(e)) => Err(ContainerError::Host(format!(
            "locking {}: {e}",
            run_dir.join(LOCK_FILE).display()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_use_keeps_the_supervisor_out_until_it_ends_in_any_clone() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run");
        let using = hold(&run).await.unwrap();
        let also = using.clone();
        let second = hold(&run).await.unwrap();
        assert!(try_unused(&run, "w").unwrap().is_none());
        drop(using);
        drop(second);
        assert!(
            try_unused(&run, "w").unwrap().is_none(),
            "a clone still uses it"
        );
        drop(also);
        let unused = try_unused(&run, "w")
            .unwrap()
            .expect("unused once every use ended");
        let waiting = tokio::spawn({
            let run = run.clone();
            async move { hold(&run).await.map(|_| ()) }
        });
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        assert!(!waiting.is_finished(), "a use waits for the supervisor");
        drop(unused);
        waiting.await.unwrap().unwrap();
    }

    #[test]
    fn a_symlink_in_place_of_the_lock_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join(LOCK_FILE)).unwrap();
        let err = try_unused(dir.path(), "w").unwrap_err();
        assert!(err.to_string().contains("in-use.lock"), "{err}");
    }
}
