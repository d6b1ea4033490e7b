//! Observer `observer-jsonl`: appends every event as one JSON object per line
//! to `/data/<file>` (the plugin's private data folder). It never panics on
//! I/O trouble: failures are logged and the event is dropped.

mod record;

use pincer_plugin_sdk::observer::Guest;
use pincer_plugin_sdk::types::Event;
use pincer_plugin_sdk::{config, log};
use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Where the host mounts the plugin's data folder.
const DATA_DIR: &str = "/data";

struct JsonlObserver;

impl Guest for JsonlObserver {
    fn on_event(event: Event) {
        let mut line = record::to_line(&event);
        line.push('\n');
        if let Err(err) = append(log_path(), line.as_bytes()) {
            log::error(&format!("cannot append to {}: {err}", log_path().display()));
        }
    }
}

/// The log file, resolved from config once per instance.
fn log_path() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let configured = config::get("file");
        let name = record::file_name(configured.as_deref()).unwrap_or_else(|reason| {
            log::warn(&format!("{reason}; using {}", record::DEFAULT_FILE));
            record::DEFAULT_FILE
        });
        PathBuf::from(DATA_DIR).join(name)
    })
}

fn append(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    // One write per line, so lines from one instance never interleave.
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?
        .write_all(bytes)
}

pincer_plugin_sdk::export_observer!(JsonlObserver);
