//! JSON arguments parsed into a typed struct, with errors that name the field.

use serde::de::DeserializeOwned;

/// Deserializes `json` into `T`. On failure the message names the field
/// (`"key: invalid type: ..."`, or serde's own "missing field `key`").
pub fn parse<T: DeserializeOwned>(json: &str) -> Result<T, String> {
    let mut de = serde_json::Deserializer::from_str(json);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|err| {
        let path = err.path().to_string();
        if path == "." {
            err.inner().to_string()
        } else {
            format!("{path}: {}", err.inner())
        }
    })?;
    de.end().map_err(|err| err.to_string())?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::parse;
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Args {
        key: String,
        #[serde(default)]
        limit: Option<u32>,
    }

    #[test]
    fn parses_valid_args() {
        let args: Args = parse(r#"{"key":"a","limit":3}"#).expect("valid");
        assert_eq!(args.key, "a");
        assert_eq!(args.limit, Some(3));
    }

    #[test]
    fn names_missing_field() {
        let err = parse::<Args>("{}").expect_err("missing key");
        assert!(err.contains("`key`"), "{err}");
    }

    #[test]
    fn names_mistyped_field() {
        let err = parse::<Args>(r#"{"key":"a","limit":"x"}"#).expect_err("bad limit");
        assert!(err.starts_with("limit:"), "{err}");
    }

    #[test]
    fn rejects_unknown_fields_and_trailing_text() {
        assert!(parse::<Args>(r#"{"key":"a","other":1}"#).is_err());
        assert!(parse::<Args>(r#"{"key":"a"} x"#).is_err());
        assert!(parse::<Args>("not json").is_err());
    }
}
