//! What pincer remembers of a container it froze: which container, since
//! when, and how long it had been unused before. Kept in
//! `$PINCER_HOME/run/<ws>/frozen.json` (the host's folder, never mounted),
//! so a daemon started after `kill -9` still knows how long a frozen
//! container has been unused; Docker itself does not say when a container
//! was paused.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const FILE: &str = "frozen.json";
/// A record is a few dozen bytes; anything larger is not one.
const MAX_BYTES: u64 = 4096;

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Frozen {
    /// The container's id.
    pub container: String,
    /// When it was frozen, milliseconds since the Unix epoch.
    pub since_unix_ms: u64,
    /// How long it had been unused when it was frozen.
    pub idle_ms: u64,
}

fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Frozen {
    /// Container `container`, frozen now after `idle` unused.
    pub fn now(container: String, idle: Duration) -> Self {
        Frozen {
            container,
            since_unix_ms: unix_ms(SystemTime::now()),
            idle_ms: u64::try_from(idle.as_millis()).unwrap_or(u64::MAX),
        }
    }

    pub fn since(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.since_unix_ms)
    }

    /// How long the container has been unused at `now`: before it was
    /// frozen, and since.
    pub fn unused_at(&self, now: SystemTime) -> Duration {
        let frozen_for = now.duration_since(self.since()).unwrap_or_default();
        Duration::from_millis(self.idle_ms) + frozen_for
    }

    /// Writes the record into `run_dir` (replacing it whole; a failure is
    /// logged: without a record the container counts as frozen from the
    /// moment a daemon finds it, which errs towards keeping it).
    pub fn record(&self, run_dir: &Path) {
        let path = run_dir.join(FILE);
        let staged = run_dir.join(format!(".{FILE}.tmp"));
        let text = serde_json::to_vec(self).unwrap_or_default();
        let written = std::fs::write(&staged, text).and_then(|()| std::fs::rename(&staged, &path));
        if let Err(e) = written {
            tracing::warn!("cannot record {}: {e}", path.display());
        }
    }

    /// The record in `run_dir`, if one is there and readable.
    pub fn read(run_dir: &Path) -> Option<Frozen> {
        use std::io::Read;
        let file = std::fs::File::open(run_dir.join(FILE)).ok()?;
        let mut text = Vec::new();
        file.take(MAX_BYTES).read_to_end(&mut text).ok()?;
        serde_json::from_slice(&text).ok()
    }

    pub fn clear(run_dir: &Path) {
        let _ = std::fs::remove_file(run_dir.join(FILE));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_survives_a_new_process_and_counts_time_before_and_after_freezing() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Frozen::read(dir.path()), None);
        let frozen = Frozen::now("abc".into(), Duration::from_secs(120));
        frozen.record(dir.path());
        let read = Frozen::read(dir.path()).unwrap();
        assert_eq!(read, frozen);
        let later = read.since() + Duration::from_secs(60);
        assert_eq!(read.unused_at(later), Duration::from_secs(180));
        Frozen::clear(dir.path());
        assert_eq!(Frozen::read(dir.path()), None);
    }

    #[test]
    fn a_garbled_record_is_no_record() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE), b"{not json").unwrap();
        assert_eq!(Frozen::read(dir.path()), None);
    }
}
