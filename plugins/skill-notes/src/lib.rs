//! Skill `skill-notes`: short text notes kept in the plugin's private
//! key-value store. `append` is a compare-and-set retry loop, so concurrent
//! appends to the same note are not lost.

mod store;

use pincer_plugin_sdk::kv::{self, KvError};
use pincer_plugin_sdk::skill::{Skill, Tools};
use pincer_plugin_sdk::types::ToolError;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use store::VersionedStore;

/// Most keys `list` returns.
const LIST_LIMIT: u32 = 1000;

struct Notes;

impl Skill for Notes {
    fn tools() -> Tools {
        Tools::new()
            .tool(
                "put",
                "Creates or replaces the note `key` with `text`.",
                put,
            )
            .tool("get", "Returns the text of the note `key`.", get)
            .tool(
                "list",
                "Lists note keys starting with `prefix` (all notes when omitted), in order.",
                list,
            )
            .tool(
                "delete",
                "Deletes the note `key`; says whether it existed.",
                delete,
            )
            .tool(
                "append",
                "Appends `text` verbatim (add your own newline) to the note `key`, creating it \
                 if needed. Safe against concurrent appends.",
                append,
            )
    }
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct KeyArgs {
    /// Note name, e.g. `todo/today`
    #[schemars(length(min = 1, max = store::MAX_KEY_LEN), regex(pattern = r"^[A-Za-z0-9_./-]+$"))]
    key: String,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct KeyTextArgs {
    /// Note name, e.g. `todo/today`
    #[schemars(length(min = 1, max = store::MAX_KEY_LEN), regex(pattern = r"^[A-Za-z0-9_./-]+$"))]
    key: String,
    text: String,
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ListArgs {
    #[serde(default)]
    #[schemars(length(max = store::MAX_KEY_LEN), regex(pattern = r"^[A-Za-z0-9_./-]*$"))]
    prefix: Option<String>,
}

fn checked_key(key: &str) -> Result<&str, ToolError> {
    store::validate_key(key).map_err(ToolError::InvalidArgs)?;
    Ok(key)
}

fn put(args: KeyTextArgs) -> Result<Value, ToolError> {
    let key = checked_key(&args.key)?;
    let version = kv::set(key, args.text.as_bytes(), None).map_err(kv_error)?;
    Ok(json!({ "key": key, "version": version }))
}

fn get(args: KeyArgs) -> Result<Value, ToolError> {
    let key = checked_key(&args.key)?;
    match kv::get(key).map_err(kv_error)? {
        Some(entry) => Ok(json!({
            "key": key,
            "text": String::from_utf8_lossy(&entry.value),
            "version": entry.version,
        })),
        None => Err(ToolError::Failed(format!("no note named `{key}`"))),
    }
}

fn list(args: ListArgs) -> Result<Value, ToolError> {
    let prefix = args.prefix.unwrap_or_default();
    store::validate_prefix(&prefix).map_err(ToolError::InvalidArgs)?;
    let keys = kv::list_keys(&prefix, LIST_LIMIT).map_err(kv_error)?;
    let truncated = keys.len() >= LIST_LIMIT as usize;
    Ok(json!({ "keys": keys, "truncated": truncated }))
}

fn delete(args: KeyArgs) -> Result<Value, ToolError> {
    let key = checked_key(&args.key)?;
    let existed = kv::delete(key).map_err(kv_error)?;
    Ok(json!({ "key": key, "deleted": existed }))
}

fn append(args: KeyTextArgs) -> Result<Value, ToolError> {
    let key = checked_key(&args.key)?;
    match store::append(&HostKv, key, &args.text) {
        Ok(appended) => Ok(json!({
            "key": key,
            "version": appended.version,
            "length": appended.len,
        })),
        Err(store::AppendError::Store(err)) => Err(kv_error(err)),
        Err(err @ store::AppendError::Contended) => Err(ToolError::Failed(err.to_string())),
    }
}

/// The host's `kv` import as a [`VersionedStore`].
struct HostKv;

impl VersionedStore for HostKv {
    type Error = KvError;

    fn get(&self, key: &str) -> Result<Option<(Vec<u8>, u64)>, KvError> {
        Ok(kv::get(key)?.map(|entry| (entry.value, entry.version)))
    }

    fn compare_and_set(
        &self,
        key: &str,
        expected: Option<u64>,
        value: &[u8],
    ) -> Result<Option<u64>, KvError> {
        kv::compare_and_set(key, expected, value, None)
    }
}

fn kv_error(err: KvError) -> ToolError {
    match err {
        KvError::Denied => ToolError::Denied("the kv capability is not granted".into()),
        KvError::QuotaExceeded(msg) => {
            ToolError::Failed(format!("note storage quota exceeded: {msg}"))
        }
        KvError::InvalidKey(msg) => ToolError::InvalidArgs(format!("key: {msg}")),
        KvError::Storage(msg) => ToolError::Failed(format!("note storage failed: {msg}")),
    }
}

pincer_plugin_sdk::export_skill!(Notes);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemas_are_derived_and_inlined() {
        let tools = Notes::tools();
        assert_eq!(tools.specs().len(), 5);
        tools.check_schemas().unwrap();
        let put = tools.schema("put").unwrap();
        assert_eq!(put["required"], json!(["key", "text"]));
        assert_eq!(put["properties"]["key"]["maxLength"], store::MAX_KEY_LEN);
        assert_eq!(put["properties"]["key"]["pattern"], "^[A-Za-z0-9_./-]+$");
        assert_eq!(
            put["properties"]["key"]["description"],
            "Note name, e.g. `todo/today`"
        );
        assert_eq!(tools.schema("list").unwrap().get("required"), None);
    }

    // Only paths that fail before reaching the host's kv import can run natively.
    #[test]
    fn rejects_bad_arguments_before_touching_the_store() {
        let tools = Notes::tools();
        assert!(matches!(
            tools.invoke("put", r#"{"key":"a"}"#),
            Err(ToolError::InvalidArgs(msg)) if msg.contains("`text`")
        ));
        assert!(matches!(
            tools.invoke("get", r#"{"key":"a b"}"#),
            Err(ToolError::InvalidArgs(msg)) if msg.starts_with("key contains")
        ));
        assert!(matches!(
            tools.invoke("list", r#"{"prefix":7}"#),
            Err(ToolError::InvalidArgs(msg)) if msg.starts_with("prefix:")
        ));
        assert!(matches!(
            tools.invoke("rename", "{}"),
            Err(ToolError::UnknownTool(_))
        ));
    }
}
