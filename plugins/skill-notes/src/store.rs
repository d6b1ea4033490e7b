//! Note keys and the lost-update-free append, over any versioned store.

use std::fmt;

pub const MAX_KEY_LEN: usize = 128;
/// How often `append` re-reads and retries when another writer got in between.
pub const MAX_APPEND_ATTEMPTS: u32 = 8;

/// Checks a note key: 1 to 128 characters out of `[A-Za-z0-9_./-]`.
pub fn validate_key(key: &str) -> Result<(), String> {
    validate_chars(key, "key")?;
    // Only ASCII is left, so bytes are characters.
    if key.is_empty() || key.len() > MAX_KEY_LEN {
        return Err(format!(
            "key must be 1 to {MAX_KEY_LEN} characters long, got {}",
            key.len()
        ));
    }
    Ok(())
}

/// Checks a listing prefix: like a key, but may be empty.
pub fn validate_prefix(prefix: &str) -> Result<(), String> {
    validate_chars(prefix, "prefix")?;
    if prefix.len() > MAX_KEY_LEN {
        return Err(format!(
            "prefix must be at most {MAX_KEY_LEN} characters long"
        ));
    }
    Ok(())
}

fn validate_chars(text: &str, field: &str) -> Result<(), String> {
    match text
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '/' | '-')))
    {
        Some(c) => Err(format!(
            "{field} contains {c:?}; only letters, digits and `_ . / -` are allowed"
        )),
        None => Ok(()),
    }
}

/// A store whose entries carry a version usable for compare-and-set.
pub trait VersionedStore {
    type Error;
    /// The value and its version, or `None` when the key does not exist.
    fn get(&self, key: &str) -> Result<Option<(Vec<u8>, u64)>, Self::Error>;
    /// Writes only if the current version is `expected` (`None`: the key must not
    /// exist); returns the new version, or `None` when the expectation failed.
    fn compare_and_set(
        &self,
        key: &str,
        expected: Option<u64>,
        value: &[u8],
    ) -> Result<Option<u64>, Self::Error>;
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Appended {
    pub version: u64,
    /// Length of the whole note after the append, in bytes.
    pub len: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppendError<E> {
    Store(E),
    /// Other writers won every one of the attempts.
    Contended,
}

impl<E: fmt::Display> fmt::Display for AppendError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AppendError::Store(err) => err.fmt(f),
            AppendError::Contended => write!(
                f,
                "the note kept changing under concurrent writers; gave up after {MAX_APPEND_ATTEMPTS} attempts"
            ),
        }
    }
}

/// Appends `text` to the note at `key` (creating it), retrying the
/// read-modify-write when a concurrent writer changed the note in between.
pub fn append<S: VersionedStore>(
    store: &S,
    key: &str,
    text: &str,
) -> Result<Appended, AppendError<S::Error>> {
    for _ in 0..MAX_APPEND_ATTEMPTS {
        let (mut value, expected) = match store.get(key).map_err(AppendError::Store)? {
            Some((value, version)) => (value, Some(version)),
            None => (Vec::new(), None),
        };
        value.extend_from_slice(text.as_bytes());
        let written = store
            .compare_and_set(key, expected, &value)
            .map_err(AppendError::Store)?;
        if let Some(version) = written {
            return Ok(Appended {
                version,
                len: value.len(),
            });
        }
    }
    Err(AppendError::Contended)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::{Cell, RefCell};
    use std::collections::HashMap;

    /// An in-memory store where another "writer" appends `!` before each of
    /// the first `interference` compare-and-sets.
    #[derive(Default)]
    struct FakeStore {
        entries: RefCell<HashMap<String, (Vec<u8>, u64)>>,
        interference: Cell<u32>,
    }

    impl FakeStore {
        fn text(&self, key: &str) -> Option<String> {
            let entries = self.entries.borrow();
            entries
                .get(key)
                .map(|(value, _)| String::from_utf8_lossy(value).into_owned())
        }
    }

    impl VersionedStore for FakeStore {
        type Error = String;

        fn get(&self, key: &str) -> Result<Option<(Vec<u8>, u64)>, String> {
            Ok(self.entries.borrow().get(key).cloned())
        }

        fn compare_and_set(
            &self,
            key: &str,
            expected: Option<u64>,
            value: &[u8],
        ) -> Result<Option<u64>, String> {
            let mut entries = self.entries.borrow_mut();
            if self.interference.get() > 0 {
                self.interference.set(self.interference.get() - 1);
                let entry = entries.entry(key.to_owned()).or_insert((Vec::new(), 0));
                entry.0.push(b'!');
                entry.1 += 1;
            }
            let current = entries.get(key).map(|(_, version)| *version);
            if current != expected {
                return Ok(None);
            }
            let version = current.unwrap_or(0) + 1;
            entries.insert(key.to_owned(), (value.to_vec(), version));
            Ok(Some(version))
        }
    }

    #[test]
    fn keys() {
        assert!(validate_key("todo/2024-01.md").is_ok());
        assert!(validate_key(&"a".repeat(MAX_KEY_LEN)).is_ok());
        assert!(validate_key("").is_err());
        assert!(validate_key(&"a".repeat(MAX_KEY_LEN + 1)).is_err());
        assert!(validate_key("a b").is_err());
        assert!(validate_key("é").is_err());
        assert!(validate_prefix("").is_ok());
        assert!(validate_prefix("todo/").is_ok());
        assert!(validate_prefix("to*").is_err());
    }

    #[test]
    fn append_creates_then_extends() {
        let store = FakeStore::default();
        let first = append(&store, "k", "hello").expect("append");
        assert_eq!(first, Appended { version: 1, len: 5 });
        let second = append(&store, "k", " world").expect("append");
        assert_eq!(
            second,
            Appended {
                version: 2,
                len: 11
            }
        );
        assert_eq!(store.text("k").as_deref(), Some("hello world"));
    }

    #[test]
    fn append_retries_without_losing_concurrent_writes() {
        let store = FakeStore::default();
        append(&store, "k", "a").expect("append");
        store.interference.set(MAX_APPEND_ATTEMPTS - 1);
        append(&store, "k", "b").expect("succeeds on the last attempt");
        let expected = format!("a{}b", "!".repeat(MAX_APPEND_ATTEMPTS as usize - 1));
        assert_eq!(store.text("k"), Some(expected));
    }

    #[test]
    fn append_gives_up_when_always_contended() {
        let store = FakeStore::default();
        store.interference.set(MAX_APPEND_ATTEMPTS);
        assert_eq!(append(&store, "k", "x"), Err(AppendError::Contended));
        assert_eq!(
            store.text("k"),
            Some("!".repeat(MAX_APPEND_ATTEMPTS as usize))
        );
    }
}
