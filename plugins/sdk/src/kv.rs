//! The plugin's private key-value store (needs `kv = true` in the manifest).
//! Every write returns the entry's new version, the token for
//! [`compare_and_set`].

pub use crate::wit::host::pincer::plugin::kv::{
    Entry, KvError, compare_and_set, delete, get, list_keys, set,
};

/// What went wrong, in words (also `KvError`'s `Display`).
pub fn describe(err: &KvError) -> String {
    match err {
        KvError::Denied => {
            "the kv capability is not granted (add `kv = true` to plugin.toml)".into()
        }
        KvError::QuotaExceeded(msg) => format!("storage quota exceeded: {msg}"),
        KvError::InvalidKey(msg) => format!("invalid key: {msg}"),
        KvError::Storage(msg) => format!("storage failed: {msg}"),
    }
}
