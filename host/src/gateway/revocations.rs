//! Which revocations of gateway keys every process has seen, so a verified
//! key can be remembered without a database read per request and still be
//! refused on the first request after any process revoked it.
//!
//! Two counters in a file beside the database (`pincer.db-revocations`),
//! mapped shared into every process that opens the key store: `started`
//! and `finished`. A revocation holds the file's lock, increments
//! `started`, commits, then sets `finished` to `started`. A verifier may
//! use what it remembered only while the two are equal and the same as
//! when it remembered it, and remembers only what it read from the
//! database while they stayed equal. A revoker killed between its two
//! steps leaves them unequal: verifiers then read the database on every
//! request until one of them takes the free lock (no revoker at work) and
//! settles them again. Reading the counters costs two atomic loads, no
//! system call.

use std::fs::{File, TryLockError};
use std::io;
use std::os::fd::AsRawFd as _;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

const LEN: usize = 2 * std::mem::size_of::<u64>();

/// The mapped counters.
pub struct Revocations {
    file: File,
    map: NonNull<AtomicU64>,
}

// The mapping is only ever read and written through atomics.
unsafe impl Send for Revocations {}
unsafe impl Sync for Revocations {}

impl Revocations {
    /// The counters' file for the database at `db`.
    pub fn path_for(db: &Path) -> PathBuf {
        let mut name = db.as_os_str().to_owned();
        name.push("-revocations");
        PathBuf::from(name)
    }

    /// Opens (creating) and maps the counters of the database at `db`.
    pub fn open(db: &Path) -> io::Result<Self> {
        let path = Self::path_for(db);
        let file = crate::private_file::open(&path)?;
        if file.metadata()?.len() < LEN as u64 {
            file.set_len(LEN as u64)?;
        }
        // SAFETY: a fresh shared mapping of LEN bytes of a file at least LEN
        // long; checked for failure below and unmapped in Drop.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                LEN,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let map = NonNull::new(map.cast::<AtomicU64>())
            .ok_or_else(|| io::Error::other(format!("mapping {} gave null", path.display())))?;
        Ok(Self { file, map })
    }

    fn counter(&self, index: usize) -> &AtomicU64 {
        // SAFETY: index < 2 within a page-aligned mapping of two u64s,
        // alive as long as self.
        unsafe { &*self.map.as_ptr().add(index) }
    }

    fn started(&self) -> &AtomicU64 {
        self.counter(0)
    }

    fn finished(&self) -> &AtomicU64 {
        self.counter(1)
    }

    /// The generation every process has settled on, or `None` while a
    /// revocation is under way (or was cut short).
    pub fn settled(&self) -> Option<u64> {
        let started = self.started().load(Ordering::SeqCst);
        (self.finished().load(Ordering::SeqCst) == started).then_some(started)
    }

    /// Runs `revoke` (a committed revocation) as a new generation.
    ///
    /// # Errors
    /// The file's lock cannot be taken.
    pub fn revoking<T>(&self, revoke: impl FnOnce() -> T) -> io::Result<T> {
        self.file.lock()?;
        let started = self.started().fetch_add(1, Ordering::SeqCst) + 1;
        let out = revoke();
        self.finished().store(started, Ordering::SeqCst);
        self.file.unlock()?;
        Ok(out)
    }

    /// [`Self::settled`], first settling the counters a revoker killed
    /// half-way left unequal, unless a revoker is at work now.
    pub fn settle(&self) -> Option<u64> {
        if let Some(generation) = self.settled() {
            return Some(generation);
        }
        match self.file.try_lock() {
            Ok(()) => {
                let started = self.started().load(Ordering::SeqCst);
                self.finished().store(started, Ordering::SeqCst);
                let _ = self.file.unlock();
                Some(started)
            }
            Err(TryLockError::WouldBlock) => None,
            Err(TryLockError::Error(e)) => {
                tracing::warn!("cannot lock the key revocations file: {e}");
                None
            }
        }
    }
}

impl Drop for Revocations {
    fn drop(&mut self) {
        // SAFETY: the mapping made in open, of LEN bytes, unmapped once.
        unsafe {
            libc::munmap(self.map.as_ptr().cast(), LEN);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_revocation_in_one_handle_is_a_new_generation_in_another() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("pincer.db");
        let (a, b) = (
            Revocations::open(&db).unwrap(),
            Revocations::open(&db).unwrap(),
        );
        assert_eq!(a.settled(), Some(0));
        a.revoking(|| assert_eq!(b.settled(), None, "under way"))
            .unwrap();
        assert_eq!(b.settled(), Some(1));
        assert_eq!(Revocations::open(&db).unwrap().settled(), Some(1), "kept");
    }

    #[test]
    fn a_revoker_cut_short_leaves_no_generation_until_one_settles_it() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("pincer.db");
        let (a, b) = (
            Revocations::open(&db).unwrap(),
            Revocations::open(&db).unwrap(),
        );
        // What a revoker killed after its commit leaves behind.
        a.started().fetch_add(1, Ordering::SeqCst);
        assert_eq!(b.settled(), None);
        // A revoker at work holds the lock: not settled under it.
        a.file.lock().unwrap();
        assert_eq!(b.settle(), None);
        assert_eq!(b.settled(), None);
        a.file.unlock().unwrap();
        assert_eq!(b.settle(), Some(1));
        assert_eq!(a.settled(), Some(1));
    }
}
