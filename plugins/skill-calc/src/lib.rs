//! Skill `skill-calc`: evaluates arithmetic expressions with a hand-written
//! recursive-descent parser (no `eval`, no dependencies on a math crate) and
//! converts length, mass and temperature units.

mod eval;
mod units;

wit_bindgen::generate!({
    path: "../../wit/v0.1.0",
    world: "skill-plugin",
});

use exports::pincer::plugin::skill::Guest;
use pincer::plugin::types::{ToolError, ToolOutput, ToolSpec};
use serde::Deserialize;
use serde_json::json;

struct Calc;

impl Guest for Calc {
    fn tools() -> Vec<ToolSpec> {
        vec![
            ToolSpec {
                name: "evaluate".into(),
                description: "Evaluates an arithmetic expression: + - * / % ^ (right-associative \
                              power), parentheses, unary minus, decimal numbers, constants pi and e, \
                              functions sqrt abs ln log10 sin cos tan round floor ceil min(a,b) max(a,b)."
                    .into(),
                input_schema: json!({
                    "type": "object",
                    "properties": {
                        "expression": {
                            "type": "string",
                            "maxLength": eval::MAX_LEN,
                            "description": "For example `2 * (3 + 4) ^ 2 / sqrt(16)`",
                        },
                    },
                    "required": ["expression"],
                    "additionalProperties": false,
                })
                .to_string(),
            },
            ToolSpec {
                name: "convert".into(),
                description: "Converts a value between units of length (m km cm mm mi ft in), \
                              mass (kg g lb oz) or temperature (c f k)."
                    .into(),
                input_schema: json!({
                    "type": "object",
                    "properties": {
                        "value": { "type": "number" },
                        "from": { "type": "string", "enum": unit_symbols() },
                        "to": { "type": "string", "enum": unit_symbols() },
                    },
                    "required": ["value", "from", "to"],
                    "additionalProperties": false,
                })
                .to_string(),
            },
        ]
    }

    fn invoke(tool: String, args_json: String) -> Result<ToolOutput, ToolError> {
        match tool.as_str() {
            "evaluate" => evaluate(&args_json),
            "convert" => convert(&args_json),
            _ => Err(ToolError::UnknownTool(tool)),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EvaluateArgs {
    expression: String,
}

fn evaluate(args_json: &str) -> Result<ToolOutput, ToolError> {
    let args: EvaluateArgs = tool_args::parse(args_json).map_err(ToolError::InvalidArgs)?;
    match eval::evaluate(&args.expression) {
        Ok(result) => Ok(output(
            json!({ "expression": args.expression, "result": result }),
        )),
        Err(err) if err.is_invalid_input() => Err(ToolError::InvalidArgs(err.to_string())),
        Err(err) => Err(ToolError::Failed(err.to_string())),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConvertArgs {
    value: f64,
    from: String,
    to: String,
}

fn convert(args_json: &str) -> Result<ToolOutput, ToolError> {
    let args: ConvertArgs = tool_args::parse(args_json).map_err(ToolError::InvalidArgs)?;
    let converted = units::find(&args.from, "from")
        .and_then(|from| Ok((from, units::find(&args.to, "to")?)))
        .and_then(|(from, to)| Ok((from, to, units::convert(args.value, from, to)?)));
    match converted {
        Ok((from, to, result)) => Ok(output(json!({
            "value": args.value,
            "from": from.symbol,
            "to": to.symbol,
            "result": result,
        }))),
        Err(err) if err.is_invalid_input() => Err(ToolError::InvalidArgs(err.to_string())),
        Err(err) => Err(ToolError::Failed(err.to_string())),
    }
}

fn unit_symbols() -> Vec<&'static str> {
    units::UNITS.iter().map(|unit| unit.symbol).collect()
}

fn output(value: serde_json::Value) -> ToolOutput {
    ToolOutput {
        json: value.to_string(),
    }
}

export!(Calc);

#[cfg(test)]
mod tests {
    use super::*;

    fn result_of(output: Result<ToolOutput, ToolError>) -> serde_json::Value {
        let output = output.unwrap_or_else(|err| panic!("{err:?}"));
        serde_json::from_str(&output.json).expect("tool output is JSON")
    }

    #[test]
    fn schemas_are_json_objects() {
        for tool in Calc::tools() {
            let schema: serde_json::Value =
                serde_json::from_str(&tool.input_schema).expect("schema is JSON");
            assert_eq!(schema["type"], "object", "{}", tool.name);
        }
    }

    #[test]
    fn evaluate_tool() {
        let value = result_of(Calc::invoke(
            "evaluate".into(),
            r#"{"expression":"2 * (3 + 4)"}"#.into(),
        ));
        assert_eq!(
            value,
            json!({ "expression": "2 * (3 + 4)", "result": 14.0 })
        );
        assert!(matches!(
            Calc::invoke("evaluate".into(), r#"{"expression":"1/0"}"#.into()),
            Err(ToolError::Failed(msg)) if msg == "division by zero"
        ));
        assert!(matches!(
            Calc::invoke("evaluate".into(), r#"{"expression":"1 +"}"#.into()),
            Err(ToolError::InvalidArgs(msg)) if msg.contains("position 4")
        ));
    }

    #[test]
    fn convert_tool() {
        let value = result_of(Calc::invoke(
            "convert".into(),
            r#"{"value":100,"from":"C","to":"f"}"#.into(),
        ));
        assert_eq!(value["result"], 212.0);
        assert_eq!(value["from"], "c");
        assert!(matches!(
            Calc::invoke("convert".into(), r#"{"value":1,"from":"m","to":"kg"}"#.into()),
            Err(ToolError::InvalidArgs(msg)) if msg == "cannot convert length to mass"
        ));
    }

    #[test]
    fn argument_errors_name_the_field() {
        assert!(matches!(
            Calc::invoke("evaluate".into(), "{}".into()),
            Err(ToolError::InvalidArgs(msg)) if msg.contains("`expression`")
        ));
        assert!(matches!(
            Calc::invoke("convert".into(), r#"{"value":"x","from":"m","to":"km"}"#.into()),
            Err(ToolError::InvalidArgs(msg)) if msg.starts_with("value:")
        ));
        assert!(matches!(
            Calc::invoke("evaluate".into(), "nope".into()),
            Err(ToolError::InvalidArgs(_))
        ));
        assert!(matches!(
            Calc::invoke("nope".into(), "{}".into()),
            Err(ToolError::UnknownTool(name)) if name == "nope"
        ));
    }
}
