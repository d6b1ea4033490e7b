//! Watching files the daemon reloads (`pincer.yaml`, each workspace's
//! `schedules.yaml`). The folders are watched, since editors replace a file
//! rather than write it; a burst of events is collapsed for a moment; a
//! write that leaves the bytes as they were (a `touch`) is no change. A file
//! that does not exist yet is watched too, when its folder exists: creating
//! it is a change.
//!
//! Everything stops when the [`FileWatch`] is dropped: its worker thread
//! ends with the watcher, so reloads leave nothing behind.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use notify::Watcher as _;
use notify::event::{AccessKind, AccessMode, EventKind};
use sha2::Digest as _;
use tokio::sync::mpsc::UnboundedSender;

/// How long a burst of events is collapsed.
const SETTLE: Duration = Duration::from_millis(300);

type Digest = Option<[u8; 32]>;

fn digest(path: &Path) -> Digest {
    std::fs::read(path)
        .ok()
        .map(|b| sha2::Sha256::digest(&b).into())
}

struct Watched<K> {
    files: HashMap<PathBuf, (K, Digest)>,
    folders: HashSet<PathBuf>,
    /// Times a watched file was read to see whether it changed.
    reads: u64,
}

/// Sends a file's key on a channel each time its content changes.
pub struct FileWatch<K> {
    watcher: notify::RecommendedWatcher,
    watched: Arc<Mutex<Watched<K>>>,
}

impl<K: Clone + Send + 'static> FileWatch<K> {
    /// A watch sending on `tx`; add files with [`FileWatch::add`].
    ///
    /// # Errors
    /// If the system's watcher cannot be created.
    pub fn new(tx: UnboundedSender<K>) -> notify::Result<Self> {
        let watched = Arc::new(Mutex::new(Watched::<K> {
            files: HashMap::new(),
            folders: HashSet::new(),
            reads: 0,
        }));
        let (events_tx, events) = std::sync::mpsc::channel::<notify::Result<notify::Event>>();
        let watcher = notify::recommended_watcher(events_tx)?;
        let shared = watched.clone();
        std::thread::spawn(move || {
            // Ends when the watcher (the only sender) is dropped.
            while let Ok(first) = events.recv() {
                std::thread::sleep(SETTLE);
                let mut touched: HashSet<PathBuf> = HashSet::new();
                for event in std::iter::once(first).chain(events.try_iter()).flatten() {
                    // An open or a read changes nothing, and reading the
                    // file below is one: counted, it fed itself forever.
                    let read_only = matches!(event.kind, EventKind::Access(kind)
                        if kind != AccessKind::Close(AccessMode::Write));
                    if !read_only {
                        touched.extend(event.paths);
                    }
                }
                let mut watched = shared.lock().unwrap_or_else(PoisonError::into_inner);
                let Watched { files, reads, .. } = &mut *watched;
                for (path, (key, last)) in files {
                    if !touched.contains(path) {
                        continue;
                    }
                    *reads += 1;
                    let now = digest(path);
                    if now != *last {
                        *last = now;
                        if tx.send(key.clone()).is_err() {
                            return;
                        }
                    }
                }
            }
        });
        Ok(FileWatch { watcher, watched })
    }

    /// Watches `path` (which need not exist yet) under `key`.
    ///
    /// # Errors
    /// If its folder cannot be watched (e.g. it does not exist).
    pub fn add(&mut self, path: &Path, key: K) -> notify::Result<()> {
        let path = std::path::absolute(path)?;
        let folder = path.parent().unwrap_or(Path::new("/")).to_path_buf();
        let mut watched = self.watched.lock().unwrap_or_else(PoisonError::into_inner);
        if !watched.folders.contains(&folder) {
            self.watcher
                .watch(&folder, notify::RecursiveMode::NonRecursive)?;
            watched.folders.insert(folder);
        }
        let now = digest(&path);
        watched.files.insert(path, (key, now));
        Ok(())
    }

    /// Times a watched file was read to see whether it changed.
    #[cfg(test)]
    fn reads(&self) -> u64 {
        self.watched
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .reads
    }

    /// Whether `path` is watched.
    pub fn watches(&self, path: &Path) -> bool {
        let Ok(path) = std::path::absolute(path) else {
            return false;
        };
        self.watched
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .files
            .contains_key(&path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The watcher reads a file to see whether it changed; that read (an
    /// open) must not count as a change to look at again.
    #[tokio::test]
    async fn reading_a_watched_file_is_no_event_to_read_it_again() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("schedules.yaml");
        std::fs::write(&path, "tasks: []\n").expect("write");
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let mut watch = FileWatch::new(tx).expect("watch");
        watch.add(&path, "ws").expect("add");
        std::fs::read(&path).expect("someone reads it");
        tokio::time::sleep(SETTLE * 2).await;
        let settled = watch.reads();
        tokio::time::sleep(SETTLE * 5).await;
        assert_eq!(
            watch.reads(),
            settled,
            "the watcher keeps reading a file nobody changed"
        );
    }

    #[tokio::test]
    async fn creating_changing_and_touching_a_file() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("schedules.yaml");
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut watch = FileWatch::new(tx).expect("watch");
        watch.add(&path, "ws").expect("add");
        assert!(watch.watches(&path));
        let wait = Duration::from_secs(5);

        std::fs::write(&path, "tasks: []\n").expect("create");
        let got = tokio::time::timeout(wait, rx.recv()).await;
        assert_eq!(got.expect("created"), Some("ws"));
        std::fs::write(&path, "tasks: [] # edited\n").expect("edit");
        let got = tokio::time::timeout(wait, rx.recv()).await;
        assert_eq!(got.expect("edited"), Some("ws"));
        // the same bytes again: no change
        std::fs::write(&path, "tasks: [] # edited\n").expect("touch");
        std::fs::write(dir.path().join("other.yaml"), "x").expect("other file");
        assert!(
            tokio::time::timeout(SETTLE * 3, rx.recv()).await.is_err(),
            "a touch and another file are no change"
        );
        drop(watch);
        let got = tokio::time::timeout(wait, rx.recv()).await;
        assert_eq!(
            got.expect("closed"),
            None,
            "dropped: the worker thread ends, closing the channel"
        );
    }
}
