//! The skill world: tools are typed functions. Arguments are a struct that
//! derives `Deserialize` and `schemars::JsonSchema`; its JSON Schema is
//! derived and inlined (no `$ref`), so what agents are offered is exactly
//! what the function accepts.

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::config::ConfigError;
use crate::types::{HttpError, ToolError, ToolOutput, ToolSpec};
use crate::wit::host::pincer::plugin::kv::KvError;

/// A skill: the tools it offers. Export it with
/// [`export_skill!`](crate::export_skill).
pub trait Skill {
    fn tools() -> Tools;
}

type Run = Box<dyn Fn(&str) -> Result<Value, ToolError>>;

struct Tool {
    name: String,
    description: String,
    schema: fn() -> Value,
    run: Run,
}

/// The tools of a skill, in the order they are offered.
#[derive(Default)]
pub struct Tools(Vec<Tool>);

impl Tools {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds tool `name` (`[a-z0-9_-]+`), which parses its arguments as `A`
    /// and answers with `R` as JSON.
    pub fn tool<A, R, F>(mut self, name: &str, description: &str, run: F) -> Self
    where
        A: DeserializeOwned + JsonSchema + 'static,
        R: Serialize,
        F: Fn(A) -> Result<R, ToolError> + 'static,
    {
        self.0.push(Tool {
            name: name.into(),
            description: description.into(),
            schema: schema_for::<A>,
            run: Box::new(move |args_json| {
                let args = crate::args::parse::<A>(args_json).map_err(ToolError::InvalidArgs)?;
                let out = run(args)?;
                serde_json::to_value(out)
                    .map_err(|e| ToolError::Failed(format!("the result is not JSON: {e}")))
            }),
        });
        self
    }

    /// What the skill's `tools` export returns.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.0
            .iter()
            .map(|tool| ToolSpec {
                name: tool.name.clone(),
                description: tool.description.clone(),
                input_schema: (tool.schema)().to_string(),
            })
            .collect()
    }

    /// The derived schema of tool `name`'s arguments.
    pub fn schema(&self, name: &str) -> Option<Value> {
        self.0
            .iter()
            .find(|tool| tool.name == name)
            .map(|tool| (tool.schema)())
    }

    /// What the skill's `invoke` export returns.
    pub fn invoke(&self, name: &str, args_json: &str) -> Result<ToolOutput, ToolError> {
        let tool = self
            .0
            .iter()
            .find(|tool| tool.name == name)
            .ok_or_else(|| ToolError::UnknownTool(name.into()))?;
        let out = (tool.run)(args_json)?;
        Ok(ToolOutput {
            json: out.to_string(),
        })
    }

    /// Every tool's schema is a JSON object schema with nothing left to
    /// resolve (`$ref`, `$defs`); for a skill's unit tests.
    pub fn check_schemas(&self) -> Result<(), String> {
        for tool in &self.0 {
            let schema = (tool.schema)();
            if schema["type"] != "object" {
                return Err(format!("{}: the arguments are not an object", tool.name));
            }
            if let Some(found) = unresolved(&schema) {
                return Err(format!("{}: the schema still has `{found}`", tool.name));
            }
        }
        Ok(())
    }
}

/// `A`'s JSON Schema (draft 2020-12), every subschema inlined. An `Option`
/// field is optional (absent from `required`) and nullable, as serde reads it.
pub fn schema_for<A: JsonSchema>() -> Value {
    let schema = SchemaSettings::draft2020_12()
        .with(|settings| settings.inline_subschemas = true)
        .into_generator()
        .into_root_schema_for::<A>();
    let mut value = schema.to_value();
    if let Some(object) = value.as_object_mut() {
        // The Rust type's name says nothing to an agent.
        object.remove("title");
    }
    value
}

/// The first `$ref`/`$defs`/`definitions` key anywhere in `schema`.
fn unresolved(schema: &Value) -> Option<&'static str> {
    match schema {
        Value::Object(map) => {
            for key in ["$ref", "$defs", "definitions"] {
                if map.contains_key(key) {
                    return Some(key);
                }
            }
            map.values().find_map(unresolved)
        }
        Value::Array(items) => items.iter().find_map(unresolved),
        _ => None,
    }
}

impl From<ConfigError> for ToolError {
    fn from(err: ConfigError) -> Self {
        ToolError::Failed(err.to_string())
    }
}

impl From<KvError> for ToolError {
    fn from(err: KvError) -> Self {
        match err {
            KvError::Denied => ToolError::Denied(crate::kv::describe(&err)),
            other => ToolError::Failed(crate::kv::describe(&other)),
        }
    }
}

impl From<HttpError> for ToolError {
    fn from(err: HttpError) -> Self {
        match err {
            HttpError::Denied(msg) => ToolError::Denied(msg),
            other => ToolError::Failed(crate::http::describe(&other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Deserialize, JsonSchema)]
    #[serde(rename_all = "lowercase")]
    enum Units {
        Metric,
        Imperial,
    }

    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Place {
        /// City name
        city: String,
    }

    #[derive(Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Args {
        /// Where
        place: Option<Place>,
        units: Option<Units>,
        count: u32,
    }

    fn tools() -> Tools {
        Tools::new().tool("count", "Counts", |args: Args| {
            Ok(serde_json::json!({ "count": args.count, "units": args.units.is_some() }))
        })
    }

    #[test]
    fn schemas_are_derived_and_inlined() {
        let tools = tools();
        tools.check_schemas().unwrap();
        let schema = tools.schema("count").unwrap();
        let text = schema.to_string();
        assert!(!text.contains("$ref") && !text.contains("$defs"), "{text}");
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["additionalProperties"], false);
        assert_eq!(schema["required"], serde_json::json!(["count"]));
        assert_eq!(
            schema["properties"]["units"],
            serde_json::json!({"type": ["string", "null"], "enum": ["metric", "imperial", null]})
        );
        assert_eq!(
            schema["properties"]["place"]["type"],
            serde_json::json!(["object", "null"])
        );
        assert!(text.contains(r#""description":"City name""#), "{text}");
        assert!(schema.get("title").is_none());
        let specs = tools.specs();
        assert_eq!(specs[0].name, "count");
        assert_eq!(
            serde_json::from_str::<Value>(&specs[0].input_schema).unwrap(),
            schema
        );
    }

    #[test]
    fn a_recursive_schema_is_reported() {
        #[derive(Deserialize, JsonSchema)]
        #[allow(dead_code)]
        struct Tree {
            children: Vec<Tree>,
        }
        let tools = Tools::new().tool("t", "", |_: Tree| Ok(0));
        let err = tools.check_schemas().unwrap_err();
        assert!(err.contains("$"), "{err}");
    }

    #[test]
    fn calls_are_parsed_and_answered() {
        let tools = tools();
        let out = tools
            .invoke("count", r#"{"count":3,"units":"metric"}"#)
            .unwrap();
        assert_eq!(out.json, r#"{"count":3,"units":true}"#);
        assert!(matches!(
            tools.invoke("count", r#"{"count":"x"}"#),
            Err(ToolError::InvalidArgs(m)) if m.starts_with("count:")
        ));
        assert!(matches!(
            tools.invoke("count", r#"{"count":1,"units":"kelvin"}"#),
            Err(ToolError::InvalidArgs(m)) if m.starts_with("units:")
        ));
        assert!(
            matches!(tools.invoke("nope", "{}"), Err(ToolError::UnknownTool(n)) if n == "nope")
        );
    }
}
