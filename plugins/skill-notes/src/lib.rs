//! Skill `skill-notes`: short text notes kept in the plugin's private
//! key-value store. `append` is a compare-and-set retry loop, so concurrent
//! appends to the same note are not lost.

mod store;

wit_bindgen::generate!({
    path: "../../wit/v0.1.0",
    world: "skill-plugin",
});

use exports::pincer::plugin::skill::Guest;
use pincer::plugin::kv::{self, KvError};
use pincer::plugin::types::{ToolError, ToolOutput, ToolSpec};
use serde::Deserialize;
use serde_json::{Value, json};
use store::VersionedStore;

/// Most keys `list` returns.
const LIST_LIMIT: u32 = 1000;

struct Notes;

impl Guest for Notes {
    fn tools() -> Vec<ToolSpec> {
        let key = json!({
            "type": "string",
            "minLength": 1,
            "maxLength": store::MAX_KEY_LEN,
            "pattern": "^[A-Za-z0-9_./-]+$",
            "description": "Note name, e.g. `todo/today`",
        });
        let text = json!({ "type": "string" });
        vec![
            tool(
                "put",
                "Creates or replaces the note `key` with `text`.",
                json!({ "key": key, "text": text }),
                &["key", "text"],
            ),
            tool(
                "get",
                "Returns the text of the note `key`.",
                json!({ "key": key }),
                &["key"],
            ),
            tool(
                "list",
                "Lists note keys starting with `prefix` (all notes when omitted), in order.",
                json!({ "prefix": {
                    "type": "string",
                    "maxLength": store::MAX_KEY_LEN,
                    "pattern": "^[A-Za-z0-9_./-]*$",
                }}),
                &[],
            ),
            tool(
                "delete",
                "Deletes the note `key`; says whether it existed.",
                json!({ "key": key }),
                &["key"],
            ),
            tool(
                "append",
                "Appends `text` verbatim (add your own newline) to the note `key`, creating it \
                 if needed. Safe against concurrent appends.",
                json!({ "key": key, "text": text }),
                &["key", "text"],
            ),
        ]
    }

    fn invoke(tool: String, args_json: String) -> Result<ToolOutput, ToolError> {
        let result = match tool.as_str() {
            "put" => put(parse(&args_json)?),
            "get" => get(parse(&args_json)?),
            "list" => list(parse(&args_json)?),
            "delete" => delete(parse(&args_json)?),
            "append" => append(parse(&args_json)?),
            _ => return Err(ToolError::UnknownTool(tool)),
        }?;
        Ok(ToolOutput {
            json: result.to_string(),
        })
    }
}

fn tool(name: &str, description: &str, properties: Value, required: &[&str]) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: description.into(),
        input_schema: json!({
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": false,
        })
        .to_string(),
    }
}

fn parse<T: serde::de::DeserializeOwned>(args_json: &str) -> Result<T, ToolError> {
    tool_args::parse(args_json).map_err(ToolError::InvalidArgs)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyArgs {
    key: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyTextArgs {
    key: String,
    text: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListArgs {
    #[serde(default)]
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

export!(Notes);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemas_are_json_objects() {
        let tools = Notes::tools();
        assert_eq!(tools.len(), 5);
        for tool in tools {
            let schema: Value = serde_json::from_str(&tool.input_schema).expect("schema is JSON");
            assert_eq!(schema["type"], "object", "{}", tool.name);
        }
    }

    // Only paths that fail before reaching the host's kv import can run natively.
    #[test]
    fn rejects_bad_arguments_before_touching_the_store() {
        assert!(matches!(
            Notes::invoke("put".into(), r#"{"key":"a"}"#.into()),
            Err(ToolError::InvalidArgs(msg)) if msg.contains("`text`")
        ));
        assert!(matches!(
            Notes::invoke("get".into(), r#"{"key":"a b"}"#.into()),
            Err(ToolError::InvalidArgs(msg)) if msg.starts_with("key contains")
        ));
        assert!(matches!(
            Notes::invoke("list".into(), r#"{"prefix":7}"#.into()),
            Err(ToolError::InvalidArgs(msg)) if msg.starts_with("prefix:")
        ));
        assert!(matches!(
            Notes::invoke("rename".into(), "{}".into()),
            Err(ToolError::UnknownTool(_))
        ));
    }
}
