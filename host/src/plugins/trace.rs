//! `PINCER_PLUGIN_TRACE=FILE`: every value the host hands a component (the
//! arguments of each call, what each import returns) and what each call
//! returns, one line each, appended to FILE. For plugin authors debugging a
//! plugin, and for the tests that search it for secrets. Bytes are written
//! as (lossy) text, so a token inside a body is visible as itself.

use std::fmt::Debug;
use std::io::Write;
use std::sync::{Arc, Mutex};

pub const ENV: &str = "PINCER_PLUGIN_TRACE";

#[derive(Clone)]
pub struct Trace {
    file: Arc<Mutex<std::fs::File>>,
}

impl Trace {
    /// The trace `PINCER_PLUGIN_TRACE` names, if it is set and can be opened.
    pub fn from_env() -> Option<Self> {
        let path = std::env::var_os(ENV)?;
        match std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
        {
            Ok(file) => Some(Self {
                file: Arc::new(Mutex::new(file)),
            }),
            Err(e) => {
                tracing::warn!("{ENV}: cannot open {}: {e}", path.to_string_lossy());
                None
            }
        }
    }

    /// Records `value` handed over by `plugin` in `what` (`→` into the
    /// component, `←` out of it).
    pub fn record(&self, plugin: &str, what: &str, value: &dyn Debug) {
        let line = format!("{plugin} {what} {}\n", bytes_as_text(&format!("{value:?}")));
        if let Ok(mut file) = self.file.lock() {
            let _ = file.write_all(line.as_bytes());
        }
    }
}

/// Debug output with every `[n, n, …]` list of byte values replaced by the
/// text those bytes spell (lossy), so a value inside a body is searchable.
fn bytes_as_text(debug: &str) -> String {
    let mut out = String::with_capacity(debug.len());
    let mut rest = debug;
    while let Some(start) = rest.find('[') {
        out.push_str(&rest[..start]);
        let after = &rest[start + 1..];
        let run = after
            .find(|c: char| !(c.is_ascii_digit() || c == ',' || c == ' '))
            .unwrap_or(after.len());
        let bytes: Option<Vec<u8>> = (after[run..].starts_with(']') && run > 0)
            .then(|| {
                after[..run]
                    .split(',')
                    .map(|n| n.trim().parse::<u8>().ok())
                    .collect()
            })
            .flatten();
        match bytes {
            Some(bytes) => {
                out.push_str(&format!("b{:?}", String::from_utf8_lossy(&bytes)));
                rest = &after[run + 1..];
            }
            None => {
                out.push('[');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_lists_read_as_text() {
        assert_eq!(
            bytes_as_text("Response { body: [120, 111, 120, 98], headers: [] }"),
            "Response { body: b\"xoxb\", headers: [] }"
        );
        assert_eq!(bytes_as_text("list [\"a\", \"b\"]"), "list [\"a\", \"b\"]");
        assert_eq!(
            bytes_as_text("replies: [Binary([104, 105]), Text(\"x\")], n: [300]"),
            "replies: [Binary(b\"hi\"), Text(\"x\")], n: [300]"
        );
    }
}
