//! Example skill `skill-weather`, on `pincer-plugin-sdk`: tool `get_weather`
//! asks an OpenWeatherMap-style API (`GET /data/2.5/weather?q=&units=`) for
//! a city's current weather. The API key is the secret config key
//! `api_key`: the host puts it into the request as the `appid` query
//! parameter, so the skill never sees it.

mod upstream;

use pincer_plugin_sdk::http::Request;
use pincer_plugin_sdk::skill::{Skill, Tools};
use pincer_plugin_sdk::types::ToolError;
use schemars::JsonSchema;
use serde::Deserialize;
use upstream::{Units, Weather};

/// The secret config key holding the API key.
const API_KEY: &str = "api_key";
const DEFAULT_BASE_URL: &str = "https://api.openweathermap.org";
const TIMEOUT_MS: u32 = 10_000;

/// The arguments of `get_weather`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct GetWeatherArgs {
    /// City name, optionally with a country code (`London`, `Paris,FR`);
    /// the configured `default_city` when omitted.
    #[serde(default)]
    city: Option<String>,
    /// `metric` (°C, m/s) or `imperial` (°F, mph); the configured `units`
    /// (else metric) when omitted.
    #[serde(default)]
    units: Option<Units>,
}

/// `plugins.config.skill-weather` without the secret `api_key`.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Config {
    #[serde(default)]
    default_city: Option<String>,
    #[serde(default)]
    units: Option<Units>,
    #[serde(default)]
    base_url: Option<String>,
}

struct WeatherSkill;

impl Skill for WeatherSkill {
    fn tools() -> Tools {
        Tools::new().tool(
            "get_weather",
            "Current weather for a city: description, temperature, feels-like, humidity and wind.",
            get_weather,
        )
    }
}

fn get_weather(args: GetWeatherArgs) -> Result<Weather, ToolError> {
    let config: Config = pincer_plugin_sdk::config::load()?;
    let city = args
        .city
        .or(config.default_city)
        .map(|c| c.trim().to_string())
        .filter(|c| !c.is_empty())
        .ok_or_else(|| {
            ToolError::InvalidArgs(
                "no `city` given and no `default_city` configured: name a city, e.g. \"London\""
                    .into(),
            )
        })?;
    let units = args.units.or(config.units).unwrap_or(Units::Metric);
    let base = base_url(config.base_url.as_deref())?;
    if !pincer_plugin_sdk::secrets::is_set(API_KEY) {
        return Err(ToolError::Failed(
            "no API key: set plugins.config.skill-weather.api_key to an OpenWeatherMap key".into(),
        ));
    }
    let response = Request::get(&format!("{base}/data/2.5/weather"))
        .query("q", &city)
        .query("units", units.as_str())
        .secret_query(API_KEY, "appid")
        .header("accept", "application/json")
        .timeout_ms(TIMEOUT_MS)
        .send()
        .map_err(|err| upstream::unreachable(&err))?;
    upstream::answer(&city, units, response.status(), response.body())
}

/// The configured base URL without a trailing `/`, checked.
fn base_url(configured: Option<&str>) -> Result<String, ToolError> {
    let base = configured.unwrap_or(DEFAULT_BASE_URL).trim_end_matches('/');
    if base.starts_with("https://") || base.starts_with("http://") {
        Ok(base.to_string())
    } else {
        Err(ToolError::Failed(format!(
            "config key `base_url` must be an http:// or https:// URL, got {base:?}"
        )))
    }
}

pincer_plugin_sdk::export_skill!(WeatherSkill);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_schema_is_derived_and_inlined() {
        let tools = WeatherSkill::tools();
        tools.check_schemas().unwrap();
        let schema = tools.schema("get_weather").unwrap();
        assert_eq!(schema["additionalProperties"], false);
        assert!(
            schema.get("required").is_none_or(|r| r == &json!([])),
            "{schema}"
        );
        let text = schema.to_string();
        assert!(text.contains(r#""enum":["metric","imperial""#), "{text}");
        assert!(text.contains("default_city"), "{text}");
    }

    #[test]
    fn bad_arguments_are_refused_before_any_request() {
        let tools = WeatherSkill::tools();
        assert!(matches!(
            tools.invoke("get_weather", r#"{"units":"kelvin"}"#),
            Err(ToolError::InvalidArgs(m)) if m.starts_with("units:")
        ));
        assert!(matches!(
            tools.invoke("get_weather", r#"{"town":"x"}"#),
            Err(ToolError::InvalidArgs(m)) if m.contains("unknown field `town`")
        ));
    }

    #[test]
    fn base_urls_are_checked() {
        assert_eq!(base_url(None).unwrap(), DEFAULT_BASE_URL);
        assert_eq!(
            base_url(Some("http://127.0.0.1:8080/")).unwrap(),
            "http://127.0.0.1:8080"
        );
        assert!(base_url(Some("ftp://x")).is_err());
    }
}
