//! The example skill `plugins/examples/skill-weather` (on the plugin SDK)
//! against a local fake of OpenWeatherMap's current-weather endpoint
//! (`GET /data/2.5/weather`, its documented JSON and error bodies), through
//! `pincer skill invoke` and through the gateway's MCP endpoint with the
//! official `mcp` client. The API key is a secret config key the host puts
//! into each request as the `appid` query parameter: the fake sees it, the
//! skill never does (checked in the plugin trace). Loopback only.

use crate::support;

use serde_json::{Value, json};
use support::fake_llm::{Behaviour, FakeUpstream};
use support::gateway::{Served, python_client};
use support::openweathermap::{KEY, fake_openweathermap};
use support::{DockerCleanup, Sandbox, fails, ok, staged, unique};

/// A folder holding a copy of the staged skill-weather whose allowlist also
/// names loopback, where the fake is (the shipped manifest names only
/// api.openweathermap.org).
fn loopback_root() -> &'static std::path::Path {
    static ROOT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    ROOT.get_or_init(|| {
        let root = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("weather-loopback");
        let dir = root.join("skill-weather");
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&dir).unwrap();
        for entry in std::fs::read_dir(staged("skill-weather")).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
        }
        let manifest = dir.join("plugin.toml");
        let text = std::fs::read_to_string(&manifest).unwrap();
        let widened = text.replacen(
            "http = [\"api.openweathermap.org\"]",
            "http = [\"api.openweathermap.org\", \"127.0.0.1:*\"]",
            1,
        );
        assert_ne!(text, widened, "{text}");
        std::fs::write(&manifest, widened).unwrap();
        root
    })
}

/// A pincer.yaml loading skill-weather from [`loopback_root`], configured.
fn config(base_url: &str, key: &str, extra: &str) -> String {
    let staged_root = loopback_root();
    format!(
        "plugins:
  dirs: [{}]
  config:
    skill-weather:
      api_key: \"{key}\"
      base_url: \"{base_url}\"
      default_city: London
{extra}",
        staged_root.display()
    )
}

fn invoke(sandbox: &Sandbox, config: &std::path::Path, args: &str) -> std::process::Output {
    crate::support::pincer_command()
        .arg("--config")
        .arg(config)
        .args([
            "skill",
            "invoke",
            "skill-weather",
            "get_weather",
            "--args",
            args,
        ])
        .current_dir(sandbox.work())
        .env("PINCER_HOME", sandbox.home())
        .env(
            "PINCER_PLUGIN_TRACE",
            sandbox.dir.path().join("trace.jsonl"),
        )
        .env_remove("PINCER_CONFIG")
        .output()
        .expect("run pincer")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skill_invoke_answers_with_the_weather_and_friendly_errors() {
    let (base, seen) = fake_openweathermap().await;
    let sandbox = Sandbox::new();
    let good = sandbox.write("pincer.yaml", &config(&base, KEY, ""));

    // The default city, metric by default.
    let out: Value = serde_json::from_str(&ok(invoke(&sandbox, &good, "{}"))).unwrap();
    assert_eq!(
        out,
        json!({
            "city": "London", "description": "light rain", "temperature": 12.5,
            "feels_like": 11.8, "humidity": 81, "wind_speed": 4.1, "units": "metric"
        })
    );
    let first = seen.lock().unwrap()[0].clone();
    assert_eq!(
        (
            first["q"].as_str(),
            first["units"].as_str(),
            first["appid"].as_str()
        ),
        ("London", "metric", KEY)
    );

    // A named city (with a country code and a space), imperial.
    let out: Value = serde_json::from_str(&ok(invoke(
        &sandbox,
        &good,
        r#"{"city": "San Francisco,US", "units": "imperial"}"#,
    )))
    .unwrap();
    assert_eq!(
        (
            &out["city"],
            &out["temperature"],
            &out["wind_speed"],
            &out["units"]
        ),
        (
            &json!("San Francisco"),
            &json!(54.5),
            &json!(9.2),
            &json!("imperial")
        )
    );
    assert_eq!(seen.lock().unwrap()[1]["q"], "San Francisco,US");

    let err = fails(invoke(&sandbox, &good, r#"{"city": "Atlantis"}"#));
    assert!(
        err.contains(r#"the weather service knows no city named "Atlantis" (city not found); check the spelling"#),
        "{err}"
    );
    let err = fails(invoke(&sandbox, &good, r#"{"city": "Crashville"}"#));
    assert!(
        err.contains("the weather service failed (HTTP 502); try again later"),
        "{err}"
    );
    let err = fails(invoke(&sandbox, &good, r#"{"units": "kelvin"}"#));
    assert!(err.contains("units: unknown variant `kelvin`"), "{err}");

    let bad_key = sandbox.write("bad-key.yaml", &config(&base, "not-the-key", ""));
    let err = fails(invoke(&sandbox, &bad_key, "{}"));
    assert!(
        err.contains("the weather service refused the API key (Invalid API key.")
            && err.contains("plugins.config.skill-weather.api_key"),
        "{err}"
    );

    // Nothing listens on this port any more.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let down = sandbox.write(
        "down.yaml",
        &config(&format!("http://127.0.0.1:{closed}"), KEY, ""),
    );
    let err = fails(invoke(&sandbox, &down, "{}"));
    assert!(
        err.contains("the weather service could not be reached (transport error")
            && err.contains("try again later"),
        "{err}"
    );

    // A config value the manifest's types allow but the skill's typed
    // config refuses is named.
    let kelvin = sandbox.write(
        "kelvin.yaml",
        &config(&base, KEY, "").replace(
            "default_city: London",
            "default_city: London\n      units: kelvin",
        ),
    );
    let err = fails(invoke(&sandbox, &kelvin, "{}"));
    assert!(
        err.contains("config key `units`: unknown variant `kelvin`"),
        "{err}"
    );

    // The key reached the fake in every request, and never the skill.
    assert!(seen.lock().unwrap().len() >= 5);
    let trace = std::fs::read_to_string(sandbox.dir.path().join("trace.jsonl")).unwrap();
    assert!(trace.contains("get_weather"), "the trace is empty");
    assert!(!trace.contains(KEY), "the API key reached the skill");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mcp_endpoint_offers_the_derived_schema_and_calls_the_skill() {
    let (base, seen) = fake_openweathermap().await;
    let served = Served::start(
        &config(
            &base,
            KEY,
            "skills:
  skill-weather:
    allowed_workspaces: [main]
workspaces:
  main:
    skills: [skill-weather]
",
        ),
        &[],
    );
    let key = served.key("main");
    let out = tokio::task::spawn_blocking(move || {
        python_client(
            "mcp_tools.py",
            &[
                &format!("{}/mcp", served.base),
                &key,
                "skill-weather__get_weather",
                r#"{"city": "Paris,FR"}"#,
                r#"{"city": "Atlantis"}"#,
            ],
        )
    })
    .await
    .unwrap();
    let tools = out["tools"].as_array().unwrap();
    let weather = tools
        .iter()
        .find(|t| t["name"] == "skill-weather__get_weather")
        .unwrap_or_else(|| panic!("{out}"));
    let schema = &weather["input_schema"];
    // What skill tools returns: the schema derived from the skill's argument
    // struct, inlined.
    let text = schema.to_string();
    assert!(!text.contains("$ref") && !text.contains("$defs"), "{text}");
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["additionalProperties"], false);
    assert!(text.contains(r#""enum":["metric","imperial""#), "{text}");
    assert!(
        schema["properties"]["city"]["description"]
            .as_str()
            .is_some_and(|d| d.contains("default_city")),
        "{schema}"
    );
    let sandbox = Sandbox::new();
    let config = sandbox.write("pincer.yaml", &config(&base, KEY, ""));
    let listed: Value = serde_json::from_str(&ok(sandbox.pincer(&[
        "--config",
        config.to_str().unwrap(),
        "skill",
        "tools",
        "skill-weather",
        "--json",
    ])))
    .unwrap();
    assert_eq!(&listed[0]["input_schema"], schema);

    let call = &out["calls"][0];
    assert_eq!(call["ok"], true, "{out}");
    let answer: Value = serde_json::from_str(call["text"].as_str().unwrap()).unwrap();
    assert_eq!(
        (&answer["city"], &answer["description"]),
        (&json!("Paris"), &json!("light rain"))
    );
    let unknown = &out["calls"][1];
    assert_eq!(unknown["ok"], false, "{out}");
    assert!(
        unknown["error"]
            .as_str()
            .unwrap()
            .contains("knows no city named \"Atlantis\""),
        "{out}"
    );
    assert!(seen.lock().unwrap().iter().all(|q| q["appid"] == KEY));
}

/// The Rust skill and the Python one (`plugins/examples/skill-weather-py`,
/// built here with `pincer plugin build` and componentize-py from the test
/// venv) answer the same call the same way through `pincer skill invoke`,
/// and through an agent turn: a scripted model calls both tools in a real
/// workspace container, through the gateway's MCP endpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_and_the_python_skill_answer_the_same_call_the_same_way() {
    let (base, seen) = fake_openweathermap().await;
    let sandbox = Sandbox::new();
    let componentize_py =
        std::path::PathBuf::from(support::gateway::python()).with_file_name("componentize-py");
    assert!(
        componentize_py.is_file(),
        "{} is missing",
        componentize_py.display()
    );
    let package = sandbox.dir.path().join("python/skill-weather-py");
    let project = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../plugins/examples/skill-weather-py");
    let built = crate::support::pincer_command()
        .args(["plugin", "build"])
        .arg(&project)
        .arg("--out")
        .arg(&package)
        .current_dir(sandbox.work())
        .env("PINCER_HOME", sandbox.home())
        .env("PINCER_COMPONENTIZE_PY", &componentize_py)
        .env_remove("PINCER_CONFIG")
        .output()
        .expect("run pincer plugin build");
    ok(built);
    // The shipped manifest names only api.openweathermap.org.
    let manifest = package.join("plugin.toml");
    let text = std::fs::read_to_string(&manifest).unwrap().replacen(
        "http = [\"api.openweathermap.org\"]",
        "http = [\"api.openweathermap.org\", \"127.0.0.1:*\"]",
        1,
    );
    std::fs::write(&manifest, text).unwrap();
    let staged_root = loopback_root();
    let config = sandbox.write(
        "pincer.yaml",
        &format!(
            "plugins:
  dirs: [{}, {}]
  config:
    skill-weather: {{api_key: \"{KEY}\", base_url: \"{base}\", default_city: London}}
    skill-weather-py: {{api_key: \"{KEY}\", base_url: \"{base}\", default_city: London}}
",
            staged_root.display(),
            package.parent().unwrap().display()
        ),
    );
    let call = |plugin: &str, args: &str| -> Value {
        let out = ok(sandbox.pincer(&[
            "--config",
            config.to_str().unwrap(),
            "skill",
            "invoke",
            plugin,
            "get_weather",
            "--args",
            args,
        ]));
        serde_json::from_str(&out).unwrap()
    };
    let paris = r#"{"city": "Paris,FR", "units": "imperial"}"#;
    for args in ["{}", paris] {
        let rust = call("skill-weather", args);
        let python = call("skill-weather-py", args);
        assert_eq!(rust, python, "{args}");
        assert!(rust["temperature"].is_number(), "{rust}");
    }
    assert_eq!(seen.lock().unwrap().len(), 4);

    // The same call in an agent turn, once per skill.
    let model = FakeUpstream::spawn(Behaviour::Script(vec![
        Behaviour::tool("skill-weather__get_weather", paris),
        Behaviour::tool("skill-weather-py__get_weather", paris),
        Behaviour::answer("Both say light rain."),
    ]))
    .await;
    let _cleanup = DockerCleanup {
        home: sandbox.home(),
        label: unique(),
    };
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        format!(
            "{text}gateway:\n  num_retries: 0\n  model_list:\n    - model_name: default\n      litellm_params: {{model: openai/fake-model, api_base: \"{}\", api_key: \"sk-weather-test\"}}\ncontainers:\n  workspace_base_path: {}\nworkspaces:\n  w: {{skills: [skill-weather, skill-weather-py]}}\n",
            model.base_url,
            sandbox.dir.path().join("ws").display()
        ),
    )
    .unwrap();
    let with_config = |args: &[&str]| {
        let mut all = vec!["--config", config.to_str().unwrap()];
        all.extend_from_slice(args);
        sandbox.pincer(&all)
    };
    ok(with_config(&["image", "build"]));
    let out = ok(with_config(&[
        "message",
        "-w",
        "w",
        "--json",
        "--text",
        "weather in Paris?",
    ]));
    let results: Vec<Value> = out
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["event"] == "message" && e["message"]["role"] == "tool")
        .map(|e| {
            let content = e["message"]["content"].as_str().unwrap_or_default();
            serde_json::from_str(content).unwrap_or_else(|_| panic!("tool result: {content}"))
        })
        .collect();
    assert_eq!(results.len(), 2, "{out}");
    assert_eq!(results[0], results[1], "{out}");
    assert_eq!(results[0], call("skill-weather", paris), "as skill invoke");
}
