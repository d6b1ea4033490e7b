//! Skill `skill-calc`: evaluates arithmetic expressions with a hand-written
//! recursive-descent parser (no `eval`, no dependencies on a math crate) and
//! converts length, mass and temperature units.

mod eval;
mod units;

use pincer_plugin_sdk::skill::{Skill, Tools};
use pincer_plugin_sdk::types::ToolError;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::Deserialize;
use serde_json::{Value, json};

struct Calc;

impl Skill for Calc {
    fn tools() -> Tools {
        Tools::new()
            .tool(
                "evaluate",
                "Evaluates an arithmetic expression: + - * / % ^ (right-associative \
                 power), parentheses, unary minus, decimal numbers, constants pi and e, \
                 functions sqrt abs ln log10 sin cos tan round floor ceil min(a,b) max(a,b).",
                evaluate,
            )
            .tool(
                "convert",
                "Converts a value between units of length (m km cm mm mi ft in), \
                 mass (kg g lb oz) or temperature (c f k).",
                convert,
            )
    }
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct EvaluateArgs {
    /// For example `2 * (3 + 4) ^ 2 / sqrt(16)`
    #[schemars(length(max = eval::MAX_LEN))]
    expression: String,
}

fn evaluate(args: EvaluateArgs) -> Result<Value, ToolError> {
    match eval::evaluate(&args.expression) {
        Ok(result) => Ok(json!({ "expression": args.expression, "result": result })),
        Err(err) if err.is_invalid_input() => Err(ToolError::InvalidArgs(err.to_string())),
        Err(err) => Err(ToolError::Failed(err.to_string())),
    }
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ConvertArgs {
    value: f64,
    #[schemars(schema_with = "unit_schema")]
    from: String,
    #[schemars(schema_with = "unit_schema")]
    to: String,
}

fn convert(args: ConvertArgs) -> Result<Value, ToolError> {
    let converted = units::find(&args.from, "from")
        .and_then(|from| Ok((from, units::find(&args.to, "to")?)))
        .and_then(|(from, to)| Ok((from, to, units::convert(args.value, from, to)?)));
    match converted {
        Ok((from, to, result)) => Ok(json!({
            "value": args.value,
            "from": from.symbol,
            "to": to.symbol,
            "result": result,
        })),
        Err(err) if err.is_invalid_input() => Err(ToolError::InvalidArgs(err.to_string())),
        Err(err) => Err(ToolError::Failed(err.to_string())),
    }
}

/// The unit symbols, as an `enum` of strings.
fn unit_schema(_: &mut SchemaGenerator) -> Schema {
    let symbols: Vec<&str> = units::UNITS.iter().map(|unit| unit.symbol).collect();
    json_schema!({ "type": "string", "enum": symbols })
}

pincer_plugin_sdk::export_skill!(Calc);

#[cfg(test)]
mod tests {
    use super::*;

    use pincer_plugin_sdk::types::ToolOutput;

    fn invoke(tool: &str, args: &str) -> Result<ToolOutput, ToolError> {
        Calc::tools().invoke(tool, args)
    }

    fn result_of(output: Result<ToolOutput, ToolError>) -> Value {
        let output = output.unwrap_or_else(|err| panic!("{err:?}"));
        serde_json::from_str(&output.json).expect("tool output is JSON")
    }

    #[test]
    fn schemas_are_derived_and_inlined() {
        let tools = Calc::tools();
        tools.check_schemas().unwrap();
        let evaluate = tools.schema("evaluate").unwrap();
        assert_eq!(
            evaluate["properties"]["expression"]["maxLength"],
            eval::MAX_LEN
        );
        assert_eq!(evaluate["required"], json!(["expression"]));
        assert_eq!(evaluate["additionalProperties"], false);
        let convert = tools.schema("convert").unwrap();
        assert_eq!(convert["properties"]["from"]["enum"][0], "m");
        assert_eq!(convert["required"], json!(["value", "from", "to"]));
    }

    #[test]
    fn evaluate_tool() {
        let value = result_of(invoke("evaluate", r#"{"expression":"2 * (3 + 4)"}"#));
        assert_eq!(
            value,
            json!({ "expression": "2 * (3 + 4)", "result": 14.0 })
        );
        assert!(matches!(
            invoke("evaluate", r#"{"expression":"1/0"}"#),
            Err(ToolError::Failed(msg)) if msg == "division by zero"
        ));
        assert!(matches!(
            invoke("evaluate", r#"{"expression":"1 +"}"#),
            Err(ToolError::InvalidArgs(msg)) if msg.contains("position 4")
        ));
    }

    #[test]
    fn convert_tool() {
        let value = result_of(invoke("convert", r#"{"value":100,"from":"C","to":"f"}"#));
        assert_eq!(value["result"], 212.0);
        assert_eq!(value["from"], "c");
        assert!(matches!(
            invoke("convert", r#"{"value":1,"from":"m","to":"kg"}"#),
            Err(ToolError::InvalidArgs(msg)) if msg == "cannot convert length to mass"
        ));
    }

    #[test]
    fn argument_errors_name_the_field() {
        assert!(matches!(
            invoke("evaluate", "{}"),
            Err(ToolError::InvalidArgs(msg)) if msg.contains("`expression`")
        ));
        assert!(matches!(
            invoke("convert", r#"{"value":"x","from":"m","to":"km"}"#),
            Err(ToolError::InvalidArgs(msg)) if msg.starts_with("value:")
        ));
        assert!(matches!(
            invoke("evaluate", "nope"),
            Err(ToolError::InvalidArgs(_))
        ));
        assert!(matches!(
            invoke("nope", "{}"),
            Err(ToolError::UnknownTool(name)) if name == "nope"
        ));
    }
}
