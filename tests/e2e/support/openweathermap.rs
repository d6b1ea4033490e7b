//! A local OpenWeatherMap "current weather" endpoint for the weather
//! skills' tests: `GET /data/2.5/weather` with `q`, `units` and `appid`, its
//! documented JSON, and its documented errors (401 with `{"cod":401,...}` for
//! a bad key, 404 with `{"cod":"404","message":"city not found"}`).
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

pub const KEY: &str = "owm-test-key-5f1c0e9a7b";

pub type Seen = Arc<Mutex<Vec<HashMap<String, String>>>>;

/// OpenWeatherMap's `/data/2.5/weather` as documented: `q`, `units`,
/// `appid`; 401 with `{"cod":401,...}` for a bad key, 404 with
/// `{"cod":"404","message":"city not found"}`; `Crashville` answers 502.
async fn current_weather(
    State(seen): State<Seen>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    seen.lock().unwrap().push(query.clone());
    if query.get("appid").map(String::as_str) != Some(KEY) {
        let body = json!({"cod": 401, "message": "Invalid API key. Please see https://openweathermap.org/faq#error401 for more info."});
        return (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response();
    }
    let city = query.get("q").cloned().unwrap_or_default();
    match city.as_str() {
        "Atlantis" => (
            StatusCode::NOT_FOUND,
            axum::Json(json!({"cod": "404", "message": "city not found"})),
        )
            .into_response(),
        "Crashville" => (StatusCode::BAD_GATEWAY, "<html>502 Bad Gateway</html>").into_response(),
        _ => {
            let imperial = query.get("units").map(String::as_str) == Some("imperial");
            let (temp, feels, wind) = if imperial {
                (54.5, 53.2, 9.2)
            } else {
                (12.5, 11.8, 4.1)
            };
            let name = city.split(',').next().unwrap_or_default().to_string();
            axum::Json(json!({
                "coord": {"lon": -0.1257, "lat": 51.5085},
                "weather": [{"id": 500, "main": "Rain", "description": "light rain", "icon": "10d"}],
                "base": "stations",
                "main": {"temp": temp, "feels_like": feels, "temp_min": temp - 1.0, "temp_max": temp + 1.0, "pressure": 1012, "humidity": 81},
                "visibility": 10000,
                "wind": {"speed": wind, "deg": 240},
                "clouds": {"all": 75},
                "dt": 1_700_000_000,
                "sys": {"country": "GB", "sunrise": 1_699_946_000, "sunset": 1_699_978_000},
                "timezone": 0,
                "id": 2_643_743,
                "name": name,
                "cod": 200
            }))
            .into_response()
        }
    }
}

/// Serves the fake on a loopback port: its base URL and the queries it saw.
pub async fn fake_openweathermap() -> (String, Seen) {
    let seen = Seen::default();
    let router = Router::new()
        .route("/data/2.5/weather", get(current_weather))
        .with_state(seen.clone());
    let addr = super::serve(router).await;
    (format!("http://127.0.0.1:{}", addr.port()), seen)
}
