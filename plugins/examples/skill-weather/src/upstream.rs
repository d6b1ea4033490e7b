//! OpenWeatherMap's current-weather answers, turned into the tool's result
//! or a friendly error. Pure functions, unit-tested natively.

use pincer_plugin_sdk::http;
use pincer_plugin_sdk::types::{HttpError, ToolError};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Number;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Units {
    Metric,
    Imperial,
}

impl Units {
    pub fn as_str(self) -> &'static str {
        match self {
            Units::Metric => "metric",
            Units::Imperial => "imperial",
        }
    }
}

/// What `get_weather` answers (the same members as the Python example
/// `skill-weather-py`). Numbers are passed on as the service wrote them; their
/// units are those of `units`: °C and m/s (metric) or °F and mph (imperial).
#[derive(Debug, Serialize, PartialEq)]
pub struct Weather {
    pub city: String,
    pub description: String,
    pub temperature: Number,
    pub feels_like: Number,
    pub humidity: Number,
    pub wind_speed: Number,
    pub units: Units,
}

/// The documented members of a `200` answer this skill uses.
#[derive(Deserialize)]
struct Current {
    name: String,
    main: Main,
    weather: Vec<Condition>,
    wind: Wind,
}

#[derive(Deserialize)]
struct Main {
    temp: Number,
    feels_like: Number,
    humidity: Number,
}

#[derive(Deserialize)]
struct Condition {
    description: String,
}

#[derive(Deserialize)]
struct Wind {
    speed: Number,
}

/// An error answer: `{"cod": "404" or 401, "message": "..."}`.
#[derive(Deserialize)]
struct Failure {
    message: String,
}

/// The tool's answer to the upstream's `status` and `body`.
pub fn answer(city: &str, units: Units, status: u16, body: &[u8]) -> Result<Weather, ToolError> {
    let message = || {
        serde_json::from_slice::<Failure>(body)
            .map(|f| f.message)
            .unwrap_or_else(|_| snippet(body))
    };
    match status {
        200 => {
            let current: Current = serde_json::from_slice(body).map_err(|e| {
                ToolError::Failed(format!(
                    "the weather service answered with an unexpected body ({e}): {}",
                    snippet(body)
                ))
            })?;
            Ok(Weather {
                city: current.name,
                description: current
                    .weather
                    .into_iter()
                    .next()
                    .map(|c| c.description)
                    .unwrap_or_default(),
                temperature: current.main.temp,
                feels_like: current.main.feels_like,
                humidity: current.main.humidity,
                wind_speed: current.wind.speed,
                units,
            })
        }
        404 => Err(ToolError::Failed(format!(
            "the weather service knows no city named {city:?} ({}); check the spelling or add a country code, e.g. \"Paris,FR\"",
            message()
        ))),
        401 | 403 => Err(ToolError::Failed(format!(
            "the weather service refused the API key ({}); set plugins.config.skill-weather.api_key to a valid OpenWeatherMap key",
            message()
        ))),
        429 => Err(ToolError::Failed(format!(
            "the weather service's rate limit was reached ({}); try again in a minute",
            message()
        ))),
        500.. => Err(ToolError::Failed(format!(
            "the weather service failed (HTTP {status}); try again later"
        ))),
        _ => Err(ToolError::Failed(format!(
            "the weather service answered HTTP {status}: {}",
            message()
        ))),
    }
}

/// The tool's error when the request did not get an answer.
pub fn unreachable(err: &HttpError) -> ToolError {
    match err {
        HttpError::Denied(msg) => ToolError::Denied(format!(
            "the weather service's address is not allowed ({msg})"
        )),
        other => ToolError::Failed(format!(
            "the weather service could not be reached ({}); try again later",
            http::describe(other)
        )),
    }
}

/// The start of a body, for messages.
fn snippet(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    match text.char_indices().nth(200) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONDON: &str = r#"{"coord":{"lon":-0.13,"lat":51.51},"weather":[{"id":500,"main":"Rain","description":"light rain","icon":"10d"}],"main":{"temp":12.5,"feels_like":11.8,"temp_min":11.0,"temp_max":13.9,"pressure":1012,"humidity":81},"wind":{"speed":4.1,"deg":240},"name":"London","cod":200}"#;

    fn failed(result: Result<Weather, ToolError>) -> String {
        match result {
            Err(ToolError::Failed(m)) => m,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_current_weather_answer() {
        let weather = answer("london", Units::Metric, 200, LONDON.as_bytes()).unwrap();
        assert_eq!(
            serde_json::to_value(&weather).unwrap(),
            serde_json::json!({
                "city": "London", "description": "light rain", "temperature": 12.5,
                "feels_like": 11.8, "humidity": 81, "wind_speed": 4.1, "units": "metric"
            })
        );
        let imperial = answer("london", Units::Imperial, 200, LONDON.as_bytes()).unwrap();
        assert_eq!(imperial.units, Units::Imperial);
    }

    #[test]
    fn errors_are_friendly() {
        let unknown = failed(answer(
            "Atlantis",
            Units::Metric,
            404,
            br#"{"cod":"404","message":"city not found"}"#,
        ));
        assert!(
            unknown.contains(r#"no city named "Atlantis" (city not found)"#),
            "{unknown}"
        );
        let key = failed(answer("x", Units::Metric, 401, br#"{"cod":401,"message":"Invalid API key. Please see https://openweathermap.org/faq#error401 for more info."}"#));
        assert!(
            key.contains("refused the API key (Invalid API key."),
            "{key}"
        );
        let down = failed(answer("x", Units::Metric, 503, b"<html>down</html>"));
        assert_eq!(
            down,
            "the weather service failed (HTTP 503); try again later"
        );
        let odd = failed(answer("x", Units::Metric, 200, b"{}"));
        assert!(odd.contains("unexpected body"), "{odd}");
        let gone = unreachable(&HttpError::Transport("connection refused".into()));
        assert!(
            matches!(gone, ToolError::Failed(m) if m.contains("could not be reached (transport error: connection refused)"))
        );
    }
}
