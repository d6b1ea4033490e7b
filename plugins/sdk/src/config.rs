//! The plugin's own configuration (`plugins.config.NAME` in pincer.yaml) as a
//! typed struct. Keys the manifest marks `secret = true` are never in it:
//! name them in a request instead ([`crate::http::Request::secret_header`]).

use std::fmt;

use serde::de::DeserializeOwned;

use crate::wit::host::pincer::plugin::config as host;

/// The configuration could not be read as the plugin's config type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The key at fault (`units`, `limits.max`), when there is one.
    pub key: Option<String>,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.key {
            Some(key) => write!(f, "config key `{key}`: {}", self.message),
            None => write!(f, "plugin config: {}", self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

/// The configuration as `T`, checked now: the error names the key at fault.
/// Use `#[serde(default)]` for optional keys and `deny_unknown_fields` to
/// refuse keys the plugin does not know.
pub fn load<T: DeserializeOwned>() -> Result<T, ConfigError> {
    parse(&host::get_json())
}

/// [`load`] on a given JSON text (what the host's `config.get-json` returns).
pub fn parse<T: DeserializeOwned>(json: &str) -> Result<T, ConfigError> {
    let mut de = serde_json::Deserializer::from_str(json);
    serde_path_to_error::deserialize(&mut de).map_err(|err| {
        let path = err.path().to_string();
        ConfigError {
            key: (path != ".").then_some(path),
            message: err.inner().to_string(),
        }
    })
}

/// One top-level key: strings as they are, other values as JSON text.
pub fn get(key: &str) -> Option<String> {
    host::get(key)
}

/// The whole configuration as JSON text (`{}` when none is set).
pub fn json() -> String {
    host::get_json()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "lowercase")]
    enum Units {
        Metric,
        Imperial,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Config {
        #[serde(default)]
        city: Option<String>,
        units: Units,
    }

    #[test]
    fn errors_name_the_key() {
        let err = parse::<Config>(r#"{"units":"kelvin"}"#).unwrap_err();
        assert_eq!(err.key.as_deref(), Some("units"));
        assert!(
            err.to_string()
                .starts_with("config key `units`: unknown variant `kelvin`"),
            "{err}"
        );
        let err = parse::<Config>(r#"{"units":"metric","city":3}"#).unwrap_err();
        assert_eq!(err.key.as_deref(), Some("city"));
        let err = parse::<Config>("{}").unwrap_err();
        assert!(err.to_string().contains("missing field `units`"), "{err}");
        let err = parse::<Config>(r#"{"units":"metric","town":"x"}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field `town`"), "{err}");
        let ok = parse::<Config>(r#"{"units":"imperial"}"#).unwrap();
        assert_eq!((ok.city, ok.units), (None, Units::Imperial));
    }
}
