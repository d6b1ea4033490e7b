//! `pincer plugin build` and a skill written in Python: the example
//! `plugins/examples/skill-weather-py`, built with componentize-py (from the
//! test venv, `tests/python/requirements.txt`) against pincer's WIT, then
//! installed, listed and called like a Rust skill against a local
//! OpenWeatherMap (`support::openweathermap`).

use crate::support;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::Value;
use support::openweathermap::{KEY as API_KEY, fake_openweathermap};
use support::{Sandbox, fails, ok};

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../plugins/examples")
        .join(name)
}

/// componentize-py from the test venv (beside its python).
fn componentize_py() -> PathBuf {
    let python = PathBuf::from(support::gateway::python());
    let tool = python.with_file_name("componentize-py");
    assert!(
        tool.is_file(),
        "{} is missing: scripts/test installs tests/python/requirements.txt into the venv",
        tool.display()
    );
    tool
}

fn build_cmd(sandbox: &Sandbox, args: &[&str]) -> std::process::Output {
    build_in(&sandbox.work(), &sandbox.home(), args)
}

fn build_in(work: &Path, home: &Path, args: &[&str]) -> std::process::Output {
    crate::support::pincer_command()
        .arg("plugin")
        .arg("build")
        .args(args)
        .current_dir(work)
        .env("PINCER_HOME", home)
        .env("PINCER_COMPONENTIZE_PY", componentize_py())
        .env_remove("PINCER_CONFIG")
        .output()
        .expect("run pincer plugin build")
}

/// Where the Python skill's package and the home that checked it live for
/// this test run.
fn shared() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("skill-weather-py")
}

/// The Python skill's package, built once per test run (componentize-py
/// takes ~10 s, compiling its 18 MB component ~25 s in a debug build).
fn python_package() -> &'static (PathBuf, String) {
    static BUILT: OnceLock<(PathBuf, String)> = OnceLock::new();
    BUILT.get_or_init(|| {
        let root = shared();
        let _ = std::fs::remove_dir_all(&root);
        let (out, home) = (root.join("package"), root.join("home"));
        std::fs::create_dir_all(&home).unwrap();
        let project = example("skill-weather-py");
        let built = ok(build_in(
            &root,
            &home,
            &[project.to_str().unwrap(), "--out", out.to_str().unwrap()],
        ));
        assert!(built.contains("with componentize-py"), "{built}");
        assert!(
            built.contains("(skill, pincer:plugin/skill-plugin@0.5.0)"),
            "the world and WIT version checked: {built}"
        );
        let sha = built
            .lines()
            .find_map(|l| l.trim().strip_prefix("sha256:"))
            .expect("sha256 line")
            .trim()
            .to_string();
        (out, sha)
    })
}

/// A copy of the package whose allowlist also names loopback, where the
/// test's fake API is (the shipped manifest names only
/// api.openweathermap.org). Its component was compiled by the build's
/// check, into the compile cache every test shares
/// ([`crate::support::pincer_command`]).
fn package_reaching_loopback(sandbox: &Sandbox) -> PathBuf {
    let (package, _) = python_package();
    let dir = sandbox.work().join("weather");
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(package).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
    }
    let manifest = dir.join("plugin.toml");
    let text = std::fs::read_to_string(&manifest).unwrap().replacen(
        "http = [\"api.openweathermap.org\"]",
        "http = [\"api.openweathermap.org\", \"127.0.0.1:*\"]",
        1,
    );
    std::fs::write(&manifest, text).unwrap();
    dir
}

fn configure(sandbox: &Sandbox, name: &str, base: &str, key: &str, city: Option<&str>) {
    let default_city = city.map_or(String::new(), |c| format!(", default_city: \"{c}\""));
    sandbox.write(
        "pincer.yaml",
        &format!(
            "plugins:\n  config:\n    {name}: {{api_key: \"{key}\", base_url: \"{base}\"{default_city}}}\n"
        ),
    );
}

fn invoke(sandbox: &Sandbox, plugin: &str, args: &str) -> std::process::Output {
    sandbox.pincer(&["skill", "invoke", plugin, "get_weather", "--args", args])
}

#[tokio::test(flavor = "multi_thread")]
async fn a_python_skill_is_built_installed_listed_and_called() {
    let (base, seen) = fake_openweathermap().await;
    let sandbox = Sandbox::new();
    let (_, sha) = python_package();
    let dir = package_reaching_loopback(&sandbox);

    let installed = ok(sandbox.pincer(&["plugin", "install", dir.to_str().unwrap()]));
    assert!(installed.contains("api_key (secret)"), "{installed}");
    assert!(
        installed.contains("http to: api.openweathermap.org"),
        "{installed}"
    );
    let listed: Value =
        serde_json::from_str(&ok(sandbox.pincer(&["plugin", "list", "--json"]))).unwrap();
    let entry = listed["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "skill-weather-py")
        .unwrap_or_else(|| panic!("listed: {listed:#}"));
    assert_eq!(entry["kind"], "skill", "{entry:#}");
    assert_eq!(
        entry["sha256"],
        sha.as_str(),
        "the component `build` hashed"
    );

    configure(&sandbox, "skill-weather-py", &base, API_KEY, Some("London"));
    let metric: Value =
        serde_json::from_str(&ok(invoke(&sandbox, "skill-weather-py", "{}"))).unwrap();
    assert_eq!(metric["city"], "London", "{metric:#}");
    assert_eq!(metric["description"], "light rain");
    assert_eq!(metric["temperature"], 12.5);
    assert_eq!(metric["humidity"], 81);
    assert_eq!(metric["units"], "metric");
    let imperial: Value = serde_json::from_str(&ok(invoke(
        &sandbox,
        "skill-weather-py",
        r#"{"city":"Paris,FR","units":"imperial"}"#,
    )))
    .unwrap();
    assert_eq!(imperial["city"], "Paris", "{imperial:#}");
    assert_eq!(imperial["temperature"], 54.5);
    assert_eq!(imperial["wind_speed"], 9.2);

    // The key reached the API as `appid`; the component never held it.
    {
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 2, "{seen:?}");
        for query in seen.iter() {
            assert_eq!(query["appid"], API_KEY, "{query:?}");
            assert_eq!(
                query["q"],
                if query.get("units").map(String::as_str) == Some("imperial") {
                    "Paris,FR"
                } else {
                    "London"
                }
            );
        }
    }

    let unknown = fails(invoke(
        &sandbox,
        "skill-weather-py",
        r#"{"city":"Atlantis"}"#,
    ));
    assert!(
        unknown.contains("knows no city named `Atlantis`"),
        "{unknown}"
    );
    let bad_units = fails(invoke(
        &sandbox,
        "skill-weather-py",
        r#"{"units":"kelvin"}"#,
    ));
    assert!(
        bad_units.contains("units must be metric or imperial"),
        "{bad_units}"
    );
    let bad_args = fails(invoke(&sandbox, "skill-weather-py", r#"{"town":"London"}"#));
    assert!(bad_args.contains("unknown argument `town`"), "{bad_args}");
    let upstream = fails(invoke(
        &sandbox,
        "skill-weather-py",
        r#"{"city":"Crashville"}"#,
    ));
    assert!(
        upstream.contains("the weather service failed: HTTP 502"),
        "{upstream}"
    );

    configure(
        &sandbox,
        "skill-weather-py",
        &base,
        "wrong-key-0000000",
        None,
    );
    let no_city = fails(invoke(&sandbox, "skill-weather-py", "{}"));
    assert!(
        no_city.contains("no city given and no default_city"),
        "{no_city}"
    );
    let bad_key = fails(invoke(&sandbox, "skill-weather-py", r#"{"city":"London"}"#));
    assert!(bad_key.contains("refused the API key"), "{bad_key}");
    assert!(!bad_key.contains("wrong-key-0000000"), "{bad_key}");

    // Nothing listens on the discard port: the API cannot be reached, and
    // the error never shows the key the host put into the URL.
    configure(
        &sandbox,
        "skill-weather-py",
        "http://127.0.0.1:9",
        API_KEY,
        None,
    );
    let down = fails(invoke(&sandbox, "skill-weather-py", r#"{"city":"London"}"#));
    assert!(down.contains("cannot be reached"), "{down}");
    assert!(
        !down.contains(API_KEY),
        "the key never shows in an error: {down}"
    );
}

/// A plugin that needs more memory than `plugins.limits.memory_mb` asks in
/// its manifest; the install shows the ask and the call gets it.
#[test]
fn a_manifest_asks_for_more_memory_and_the_install_shows_it() {
    let sandbox = Sandbox::new();
    let dir = sandbox.work().join("hog");
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(support::staged("memory-hog")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
    }
    let hog = |sandbox: &Sandbox| {
        sandbox.pincer(&[
            "skill",
            "invoke",
            "memory-hog",
            "hog",
            "--args",
            r#"{"mb": 100}"#,
        ])
    };
    let small = ok(sandbox.pincer(&["plugin", "install", dir.to_str().unwrap(), "--replace"]));
    assert!(!small.contains("memory:"), "no ask, nothing shown: {small}");
    let err = fails(hog(&sandbox));
    assert!(err.contains("exceeded its memory limit of 64 MiB"), "{err}");

    let manifest = dir.join("plugin.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(&manifest, format!("{text}\n[limits]\nmemory_mb = 160\n")).unwrap();
    // More memory than the installed version asks for: without a terminal,
    // refused unless `--yes`.
    let refused = fails(sandbox.pincer(&["plugin", "install", dir.to_str().unwrap(), "--replace"]));
    assert!(
        refused.contains("memory: up to 160 MiB per call (the installed version gets 64 MiB)")
            && refused.contains("--yes"),
        "{refused}"
    );
    let err = fails(hog(&sandbox));
    assert!(
        err.contains("exceeded its memory limit of 64 MiB"),
        "unchanged: {err}"
    );
    let asked = ok(sandbox.pincer(&[
        "plugin",
        "install",
        dir.to_str().unwrap(),
        "--replace",
        "--yes",
    ]));
    assert!(
        asked.contains("memory: up to 160 MiB per call (plugins.limits.memory_mb is 64)"),
        "{asked}"
    );
    let done: Value = serde_json::from_str(&ok(hog(&sandbox))).unwrap();
    assert_eq!(done["allocated_mb"], 100);
}

#[test]
fn build_refuses_what_is_not_a_plugin_project_and_keeps_an_unrelated_out_folder() {
    let sandbox = Sandbox::new();
    let empty = sandbox.work().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let err = fails(build_cmd(&sandbox, &[empty.to_str().unwrap()]));
    assert!(err.contains("has no plugin.toml"), "{err}");

    let project = example("skill-weather-py");
    let precious = sandbox.work().join("precious");
    std::fs::create_dir_all(&precious).unwrap();
    std::fs::write(precious.join("notes.txt"), "mine").unwrap();
    let err = fails(build_cmd(
        &sandbox,
        &[
            project.to_str().unwrap(),
            "--out",
            precious.to_str().unwrap(),
        ],
    ));
    assert!(err.contains("is not a package folder"), "{err}");
    assert_eq!(
        std::fs::read_to_string(precious.join("notes.txt")).unwrap(),
        "mine"
    );

    // A manifest that names a WIT version this host does not serve: built,
    // then refused by the check, and nothing is left behind.
    let future = sandbox.work().join("future");
    std::fs::create_dir_all(&future).unwrap();
    for name in ["app.py", "plugin.toml"] {
        std::fs::copy(project.join(name), future.join(name)).unwrap();
    }
    std::os::unix::fs::symlink(
        project.join("wit").canonicalize().unwrap(),
        future.join("wit"),
    )
    .unwrap();
    let manifest = future.join("plugin.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(
        &manifest,
        text.replacen("wit = \"0.5.0\"", "wit = \"0.9.0\"", 1),
    )
    .unwrap();
    let out = sandbox.work().join("future-dist");
    let err = fails(build_cmd(
        &sandbox,
        &[future.to_str().unwrap(), "--out", out.to_str().unwrap()],
    ));
    assert!(
        err.contains("0.1.0, 0.2.0, 0.3.0, 0.4.0, 0.5.0"),
        "names the versions served: {err}"
    );
    assert!(!out.exists(), "no package is left: {err}");
}
