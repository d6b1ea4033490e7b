//! The real `pincer` binary, each test in its own PINCER_HOME.

use crate::support;

use std::path::{Path, PathBuf};

use serde_json::Value;
use support::{Sandbox, fails, ok, staged, stderr};

/// A config whose plugin folder holds every staged plugin, fixtures included.
fn with_fixtures(sandbox: &Sandbox, extra: &str) -> PathBuf {
    let staged_root = staged("skill-calc").parent().unwrap().to_path_buf();
    sandbox.write(
        "pincer.yaml",
        &format!("plugins:\n  dirs: [{}]\n{extra}", staged_root.display()),
    )
}

#[test]
fn demo_drives_all_four_worlds() {
    let sandbox = Sandbox::new();
    let out = ok(sandbox.pincer(&["demo"]));
    for line in [
        "loaded 7 built-in plugins",
        "skill-calc.evaluate",
        "\"result\":1028.0",
        "channel-webhook.handle-webhook",
        "HTTP 200 and message \"hello pincer\"",
        "observer-jsonl.on-event",
        "tunnel-http.forward",
        "demo-service: HTTP 200 \"hello from a host-side service\"",
    ] {
        assert!(out.contains(line), "missing {line:?} in:\n{out}");
    }
    let events = std::fs::read_to_string(
        sandbox
            .home()
            .join("plugin-data/workspace.default/observer-jsonl/events.jsonl"),
    )
    .unwrap();
    assert!(events.contains("hello pincer"));
    // The second run loads from the compile cache.
    let again = ok(sandbox.pincer(&["demo"]));
    assert!(again.contains("(7 from the compile cache)"), "{again}");
}

/// `PINCER_COMPILE_CACHE`: a second home loads every plugin the first one
/// compiled; a folder other users can write is not used (its native code
/// would run in pincer), and pincer says why.
#[test]
fn homes_share_a_private_compile_cache_and_refuse_one_others_can_write() {
    use std::os::unix::fs::PermissionsExt;
    let (first, second) = (Sandbox::new(), Sandbox::new());
    let shared = first.dir.path().join("shared-cache");
    let demo = |sandbox: &Sandbox, cache: &Path| {
        sandbox
            .command()
            .arg("demo")
            .env("PINCER_COMPILE_CACHE", cache)
            .output()
            .expect("run pincer")
    };
    let compiled = ok(demo(&first, &shared));
    assert!(
        compiled.contains("(0 from the compile cache)"),
        "{compiled}"
    );
    let loaded = ok(demo(&second, &shared));
    assert!(loaded.contains("(7 from the compile cache)"), "{loaded}");
    assert!(!second.home().join("cache/components").exists());

    let open = first.dir.path().join("open-cache");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    for entry in std::fs::read_dir(&shared).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), open.join(entry.file_name())).unwrap();
    }
    let third = Sandbox::new();
    let refused = demo(&third, &open);
    let err = stderr(&refused);
    let out = ok(refused);
    assert!(out.contains("(0 from the compile cache)"), "{out}");
    assert!(
        err.contains(&format!(
            "PINCER_COMPILE_CACHE={}: other users can write it (mode 777); compiled plugins are kept in {}",
            open.display(),
            third.home().join("cache/components").display()
        )),
        "{err}"
    );
}

#[test]
fn plugin_list_shows_built_in_plugins() {
    let sandbox = Sandbox::new();
    let out = ok(sandbox.pincer(&["plugin", "list", "--json"]));
    let listed: Value = serde_json::from_str(&out).unwrap();
    let rows: Vec<(String, String, String)> = listed["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().into(),
                p["kind"].as_str().unwrap().into(),
                p["source"].as_str().unwrap().into(),
            )
        })
        .collect();
    for (name, kind) in [
        ("channel-webhook", "channel"),
        ("observer-jsonl", "observer"),
        ("skill-calc", "skill"),
        ("skill-notes", "skill"),
        ("tunnel-http", "tunnel"),
    ] {
        assert!(
            rows.contains(&(name.into(), kind.into(), "built-in".into())),
            "{name}: {rows:?}"
        );
    }
    let text = ok(sandbox.pincer(&["plugin", "list"]));
    assert!(text.lines().next().unwrap().starts_with("NAME"), "{text}");
}

/// A fixture per served WIT release (raw wit-bindgen against the frozen
/// folder) is listed with its release and called by the real binary; one
/// built against a release no host serves is listed, and refused when used.
#[test]
fn each_served_wit_release_is_listed_and_called() {
    let sandbox = Sandbox::new();
    let config = with_fixtures(&sandbox, "");
    let config = config.to_str().unwrap();
    let out = ok(sandbox.pincer(&["--config", config, "plugin", "list", "--json"]));
    let listed: Value = serde_json::from_str(&out).unwrap();
    let wit_of = |name: &str| {
        listed["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .map(|p| p["wit"].clone())
    };
    for (name, wit) in [
        ("wit-v0-1-0", "0.1.0"),
        ("wit-v0-2-0", "0.2.0"),
        ("wit-v0-3-0", "0.3.0"),
        ("wit-v0-4-0", "0.4.0"),
    ] {
        assert_eq!(wit_of(name), Some(Value::from(wit)), "{out}");
        let out = ok(sandbox.pincer(&[
            "--config",
            config,
            "skill",
            "invoke",
            name,
            "echo",
            "--args",
            r#"{"text": "hi"}"#,
        ]));
        let value: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            (value["text"].as_str(), value["wit"].as_str()),
            (Some("hi"), Some(wit))
        );
    }
    assert_eq!(wit_of("wit-future"), Some(Value::from("0.9.0")), "{out}");
    let err =
        fails(sandbox.pincer(&["--config", config, "skill", "invoke", "wit-future", "tools"]));
    assert!(
        err.contains(
            "built against pincer:plugin@0.9.0, but this host serves 0.1.0, 0.2.0, 0.3.0, 0.4.0, 0.5.0"
        ),
        "{err}"
    );
}

#[test]
fn skill_invoke_round_trips_json() {
    let sandbox = Sandbox::new();
    let out = ok(sandbox.pincer(&[
        "skill",
        "invoke",
        "skill-calc",
        "evaluate",
        "--args",
        r#"{"expression": "6*7"}"#,
    ]));
    let value: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(value["result"], 42.0);
    assert_eq!(value["expression"], "6*7");

    let err = fails(sandbox.pincer(&[
        "skill",
        "invoke",
        "skill-calc",
        "evaluate",
        "--args",
        "{oops",
    ]));
    assert!(err.contains("--args is not valid JSON"), "{err}");
    let err =
        fails(sandbox.pincer(&["skill", "invoke", "skill-calc", "evaluate", "--args", "[1]"]));
    assert!(err.contains("--args must be a JSON object"), "{err}");
    let err = fails(sandbox.pincer(&[
        "skill",
        "invoke",
        "skill-calc",
        "evaluate",
        "--args",
        r#"{"expression": "2*"}"#,
    ]));
    assert!(
        err.contains("skill-calc.evaluate: invalid arguments: syntax error"),
        "{err}"
    );
    let err = fails(sandbox.pincer(&["skill", "invoke", "no-such-skill", "x"]));
    assert!(err.contains("no plugin named `no-such-skill`"), "{err}");
    let err = fails(sandbox.pincer(&["skill", "invoke", "observer-jsonl", "x"]));
    assert!(
        err.contains("plugin observer-jsonl is a observer, not a skill")
            || err.contains("not a skill"),
        "{err}"
    );
}

#[test]
fn hostile_fixtures_fail_with_clear_errors_through_the_cli() {
    let sandbox = Sandbox::new();
    let config = with_fixtures(
        &sandbox,
        "  limits: {memory_mb: 16, call_timeout_ms: 300}\n",
    );
    let config = config.to_str().unwrap();
    let run = |plugin: &str, tool: &str| {
        fails(sandbox.pincer(&["--config", config, "skill", "invoke", plugin, tool]))
    };
    let err = run("spin-forever", "spin");
    assert!(
        err.contains("plugin spin-forever: call exceeded its deadline of 300 ms"),
        "{err}"
    );
    let err = run("memory-hog", "hog");
    assert!(
        err.contains("plugin memory-hog: call exceeded its memory limit of 16 MiB"),
        "{err}"
    );
    let err = run("trap-on-call", "trap");
    assert!(err.contains("plugin trap-on-call: trapped"), "{err}");
    let err = run("undeclared-http", "fetch");
    assert!(err.contains("invalid arguments"), "{err}");
    let out = fails(sandbox.pincer(&[
        "--config",
        config,
        "skill",
        "invoke",
        "undeclared-http",
        "fetch",
        "--args",
        r#"{"url": "http://127.0.0.1:9/"}"#,
    ]));
    assert!(
        out.contains("denied: 127.0.0.1:9 is not in this plugin's http allowlist"),
        "{out}"
    );
}

#[test]
fn inspect_and_install_validate_and_pin() {
    let sandbox = Sandbox::new();
    let calc = staged("skill-calc");
    let out = ok(sandbox.pincer(&["plugin", "inspect", calc.to_str().unwrap(), "--json"]));
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["kind"], "skill");
    assert_eq!(report["world"], "pincer:plugin/skill-plugin@0.5.0");
    assert_eq!(report["sha256"].as_str().unwrap().len(), 64);
    assert_eq!(report["tools"][0]["name"], "evaluate");

    let notes = staged("skill-notes");
    let out = ok(sandbox.pincer(&["plugin", "install", notes.to_str().unwrap()]));
    assert!(out.contains("installed skill-notes 0.1.0 (skill)"), "{out}");
    assert!(
        out.contains("sha256 pinned:") && out.contains("kv: a private key-value store"),
        "{out}"
    );
    let list = ok(sandbox.pincer(&["plugin", "list"]));
    assert!(
        list.lines()
            .any(|l| l.starts_with("skill-notes") && l.contains("installed")),
        "{list}"
    );

    // A component changed after installation no longer matches its pin.
    let installed = sandbox.home().join("plugins/skill-notes/plugin.wasm");
    let mut bytes = std::fs::read(&installed).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&installed, bytes).unwrap();
    let err = fails(sandbox.pincer(&["plugin", "inspect", "skill-notes"]));
    assert!(err.contains("does not match the pinned"), "{err}");
}

#[test]
fn refusals_name_the_plugin_and_the_reason() {
    let sandbox = Sandbox::new();
    let src = staged("skill-calc");
    let case =
        |name: &str, manifest: &dyn Fn(String) -> String, wasm: &dyn Fn(Vec<u8>) -> Vec<u8>| {
            let dir = sandbox.work().join(name);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(
                dir.join("plugin.toml"),
                manifest(std::fs::read_to_string(src.join("plugin.toml")).unwrap()),
            )
            .unwrap();
            std::fs::write(
                dir.join("plugin.wasm"),
                wasm(std::fs::read(src.join("plugin.wasm")).unwrap()),
            )
            .unwrap();
            fails(sandbox.pincer(&["plugin", "install", dir.to_str().unwrap()]))
        };
    let same = |s: String| s;
    let keep = |w: Vec<u8>| w;
    let err = case("truncated", &same, &|w| w[..w.len() / 3].to_vec());
    assert!(
        err.contains("error: plugin skill-calc: not a valid component"),
        "{err}"
    );
    let err = case(
        "kind",
        &|m| m.replace("kind = \"skill\"", "kind = \"observer\""),
        &keep,
    );
    assert!(
        err.contains(
            "plugin.toml says kind `observer`, but the component exports pincer:plugin/skill@0.5.0"
        ),
        "{err}"
    );
    let err = case(
        "wit",
        &|m| m.replace("wit = \"0.5.0\"", "wit = \"2.0.0\""),
        &keep,
    );
    assert!(
        err.contains(
            "pincer:plugin@2.0.0, but this host serves 0.1.0, 0.2.0, 0.3.0, 0.4.0, 0.5.0 (WIT major-version mismatch)"
        ),
        "{err}"
    );
    let err = case("module", &same, &|_| b"\0asm\x01\0\0\0".to_vec());
    assert!(
        err.contains("core WebAssembly module, not a component"),
        "{err}"
    );
    // Nothing was installed.
    assert!(!sandbox.home().join("plugins/skill-calc").exists());
}

#[test]
fn config_errors_carry_file_line_and_column() {
    let sandbox = Sandbox::new();
    let check = |name: &str, text: &str| {
        let path = sandbox.write(name, text);
        let err = fails(sandbox.pincer(&["config", "check", "--config", path.to_str().unwrap()]));
        (path.display().to_string(), err)
    };
    let (path, err) = check("broken.yaml", "gateway:\n  listen: [unclosed\n");
    assert!(err.contains(&format!("{path}:")), "{err}");
    let (path, err) = check("unknown.yaml", "workspaces:\n  main:\n    polices: [x]\n");
    assert!(
        err.contains(&format!("{path}:3:5:")) && err.contains("polices"),
        "{err}"
    );
    let (path, err) = check("type.yaml", "gateway:\n  num_retries: two\n");
    assert!(err.contains(&format!("{path}:2:16:")), "{err}");
    let (path, err) = check(
        "env.yaml",
        "plugins:\n  config:\n    x: {token: \"${PINCER_TEST_SURELY_UNSET}\"}\n",
    );
    assert!(
        err.contains(&format!("{path}:3:"))
            && err.contains("environment variable PINCER_TEST_SURELY_UNSET is not set"),
        "{err}"
    );

    // A plugin's settings are checked against its manifest: an empty secret
    // (which a plugin would read as unset, e.g. a webhook taking unsigned
    // requests) is refused, as are unknown keys and unknown channel plugins.
    let (path, err) = check(
        "empty-secret.yaml",
        "workspaces:\n  main: {}\nchannels:\n  hook:\n    plugin: channel-webhook\n    workspace: main\n    config:\n      secret: \"\"\n",
    );
    assert!(
        err.contains(&format!(
            "{path}:8:7: config key `secret` is a secret and is empty"
        )),
        "{err}"
    );
    let (path, err) = check(
        "plugin-config.yaml",
        "plugins:\n  config:\n    skill-calc: {precision: 3}\nchannels:\n  c:\n    plugin: channel-nowhere\n    workspace: main\nworkspaces:\n  main: {}\n",
    );
    assert!(
        err.contains(&format!("{path}:3:17: unknown config key `precision`"))
            && err.contains("no plugin named `channel-nowhere`"),
        "{err}"
    );

    let good = sandbox.write("good.yaml", "workspaces:\n  main: {}\n");
    let out = ok(sandbox.pincer(&["config", "check", "--config", good.to_str().unwrap()]));
    assert!(out.contains("ok (1 workspace"), "{out}");
    // --config works in any position.
    let out = ok(sandbox.pincer(&["config", "--config", good.to_str().unwrap(), "check"]));
    assert!(out.contains("ok"), "{out}");
}

#[test]
fn doctor_reports_what_is_there() {
    let sandbox = Sandbox::new();
    let out = sandbox.pincer(&["doctor"]);
    let text = support::stdout(&out);
    assert!(text.contains("ok       configuration"), "{text}");
    assert!(
        text.contains("ok       plugins        7 built-in plugins load"),
        "{text}"
    );
    assert!(out.status.success(), "{text}\n{}", stderr(&out));
}

#[test]
fn a_broken_config_is_reported_by_every_command() {
    let sandbox = Sandbox::new();
    sandbox.write("pincer.yaml", "nonsense_key: 1\n");
    let err = fails(sandbox.pincer(&["plugin", "list"]));
    assert!(err.contains("pincer.yaml:1:1:"), "{err}");
}

/// `pincer plugin new` for every kind: each crate, on the plugin SDK the
/// binary writes out beside it, builds for wasm32-wasip2 as generated,
/// offline and outside the checkout, and the host loads it as the kind it
/// claims and calls it.
#[test]
fn scaffolded_plugins_build_and_load() {
    let sandbox = Sandbox::new();
    // Shared across runs, so only the first run compiles wit-bindgen.
    let target = PathBuf::from(
        option_env!("CARGO_TARGET_DIR")
            .unwrap_or(concat!(env!("CARGO_MANIFEST_DIR"), "/../target")),
    )
    .join("scaffold-check");
    let plugins = sandbox.work().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    let checkout = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .canonicalize()
        .unwrap();
    assert!(
        !plugins.canonicalize().unwrap().starts_with(&checkout),
        "the scaffolds must live outside the checkout"
    );
    for kind in ["skill", "channel", "observer", "tunnel"] {
        let name = format!("my-{kind}");
        let out = ok(sandbox.pincer(&[
            "plugin",
            "new",
            "--kind",
            kind,
            "--dir",
            plugins.to_str().unwrap(),
            &name,
        ]));
        assert!(
            out.contains(&format!("created {kind} plugin `{name}`")),
            "{out}"
        );
        let dir = plugins.join(&name);
        // The SDK and its WIT are real files, nothing points into the checkout.
        for file in [
            "pincer-plugin-sdk/Cargo.toml",
            "pincer-plugin-sdk/src/lib.rs",
            "pincer-plugin-sdk/wit/worlds.wit",
        ] {
            let meta = std::fs::symlink_metadata(dir.join(file)).unwrap();
            assert!(meta.file_type().is_file(), "{file} is not a plain file");
        }
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        assert!(
            manifest.contains(r#"pincer-plugin-sdk = { path = "pincer-plugin-sdk""#),
            "{manifest}"
        );
        let build = std::process::Command::new(env!("CARGO"))
            .args(["build", "--release", "--quiet", "--offline"])
            .current_dir(&dir)
            .env("CARGO_TARGET_DIR", &target)
            .env_remove("RUSTFLAGS")
            .output()
            .unwrap();
        assert!(
            build.status.success(),
            "{kind} scaffold does not build:\n{}",
            String::from_utf8_lossy(&build.stderr)
        );
        let wasm = target
            .join("wasm32-wasip2/release")
            .join(format!("{}.wasm", name.replace('-', "_")));
        std::fs::copy(&wasm, dir.join("plugin.wasm")).unwrap();
        let report: Value = serde_json::from_str(&ok(sandbox.pincer(&[
            "plugin",
            "inspect",
            dir.to_str().unwrap(),
            "--json",
        ])))
        .unwrap();
        assert_eq!(report["kind"], kind);
    }
    let err = fails(sandbox.pincer(&[
        "plugin",
        "new",
        "--kind",
        "skill",
        "--dir",
        plugins.to_str().unwrap(),
        "my-skill",
    ]));
    assert!(err.contains("already exists"), "{err}");

    let config = sandbox.write(
        "pincer.yaml",
        &format!(
            "plugins:\n  dirs: [{}]\n  config:\n    my-skill: {{greeting: hey}}\n",
            plugins.display()
        ),
    );
    let out = ok(sandbox.pincer(&[
        "--config",
        config.to_str().unwrap(),
        "skill",
        "invoke",
        "my-skill",
        "echo",
        "--args",
        r#"{"text": "hi"}"#,
    ]));
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap(),
        serde_json::json!({"text": "hi", "greeting": "hey"})
    );
    // The tool's schema is the one derived from its argument struct.
    let out = ok(sandbox.pincer(&[
        "--config",
        config.to_str().unwrap(),
        "skill",
        "tools",
        "my-skill",
        "--json",
    ]));
    assert!(out.contains("The text to say back."), "{out}");
    assert!(!out.contains("$ref") && !out.contains("$defs"), "{out}");
    let err = fails(sandbox.pincer(&[
        "--config",
        config.to_str().unwrap(),
        "skill",
        "invoke",
        "my-skill",
        "echo",
        "--args",
        r#"{"txt": "hi"}"#,
    ]));
    assert!(err.contains("unknown field `txt`"), "{err}");
}

#[test]
fn init_writes_a_config_using_the_key_in_the_environment_and_never_overwrites_silently() {
    let sandbox = Sandbox::new();
    let base = sandbox.dir.path().join("ws");
    let init = |args: &[&str], key: Option<&str>| {
        let mut command = crate::support::pincer_command();
        command
            .arg("init")
            .args(args)
            .current_dir(sandbox.work())
            .env("PINCER_HOME", sandbox.home())
            .env("HOME", &base)
            .env_remove("PINCER_CONFIG")
            .env_remove("OPENAI_API_KEY")
            .env_remove("ANTHROPIC_API_KEY");
        if let Some(key) = key {
            command.env("OPENAI_API_KEY", key);
        }
        command.output().unwrap()
    };
    let secret = "sk-init-test-0123456789";
    let first = ok(init(&[], Some(secret)));
    assert!(first.contains("OPENAI_API_KEY"), "{first}");
    let written = std::fs::read_to_string(sandbox.home().join("pincer.yaml")).unwrap();
    assert!(written.contains("model: openai/gpt-4o-mini"), "{written}");
    assert!(written.contains("${OPENAI_API_KEY}"));
    assert!(!written.contains(secret), "the key itself was written");
    assert!(base.join("pincer_workspaces/default/AGENTS.md").exists());

    // Again: refused, file untouched.
    let again = fails(init(&[], None));
    assert!(
        again.contains("already exists") && again.contains("--force"),
        "{again}"
    );
    assert_eq!(
        std::fs::read_to_string(sandbox.home().join("pincer.yaml")).unwrap(),
        written
    );
    // --force without a key: the old file is kept, the new one says what to set.
    let forced = ok(init(&["--force"], None));
    assert!(forced.contains("no provider key found"), "{forced}");
    assert_eq!(
        std::fs::read_to_string(sandbox.home().join("pincer.yaml.bak")).unwrap(),
        written
    );
    // The file it wrote loads.
    ok(sandbox.pincer(&[
        "--config",
        sandbox.home().join("pincer.yaml").to_str().unwrap(),
        "config",
        "check",
    ]));
}

/// A copy of staged `src` whose manifest is renamed to `name`.
fn renamed(sandbox: &Sandbox, src: &str, name: &str) -> PathBuf {
    let src_dir = staged(src);
    let dir = sandbox.work().join(format!("impostor-{name}"));
    std::fs::create_dir_all(&dir).unwrap();
    let manifest = std::fs::read_to_string(src_dir.join("plugin.toml"))
        .unwrap()
        .replace(&format!("name = \"{src}\""), &format!("name = \"{name}\""));
    std::fs::write(dir.join("plugin.toml"), manifest).unwrap();
    std::fs::copy(src_dir.join("plugin.wasm"), dir.join("plugin.wasm")).unwrap();
    dir
}

/// A component calling itself `skill-notes` does not silently take the
/// built-in's place (and its notes): only `--replace` does, audited.
#[test]
fn a_plugin_cannot_take_a_builtin_name_without_replace() {
    let sandbox = Sandbox::new();
    let config = sandbox.write("pincer.yaml", "workspaces:\n  default: {}\n");
    let config = config.to_str().unwrap();
    ok(sandbox.pincer(&[
        "--config",
        config,
        "skill",
        "invoke",
        "skill-notes",
        "put",
        "--args",
        r#"{"key": "k", "text": "the built-in's note"}"#,
    ]));
    let impostor = renamed(&sandbox, "undeclared-http", "skill-notes");
    let err = fails(sandbox.pincer(&[
        "--config",
        config,
        "plugin",
        "install",
        impostor.to_str().unwrap(),
    ]));
    assert!(
        err.contains("built-in plugin is named `skill-notes`") && err.contains("--replace"),
        "{err}"
    );
    let list = ok(sandbox.pincer(&["--config", config, "plugin", "list"]));
    assert!(
        list.lines()
            .any(|l| l.starts_with("skill-notes") && l.contains("built-in")),
        "{list}"
    );
    // A configured folder cannot shadow it either.
    let dirs = sandbox.write(
        "dirs.yaml",
        &format!(
            "workspaces:\n  default: {{}}\nplugins:\n  dirs: [{}]\n",
            sandbox.work().display()
        ),
    );
    let list = ok(sandbox.pincer(&["--config", dirs.to_str().unwrap(), "plugin", "list"]));
    assert!(
        list.lines()
            .any(|l| l.starts_with("skill-notes") && l.contains("built-in")),
        "{list}"
    );
    assert!(list.contains("problem: plugin skill-notes"), "{list}");

    // --replace alone does not: the impostor asks for HTTP the built-in
    // does not, so it must be confirmed (stdin is not a terminal here).
    let err = fails(sandbox.pincer(&[
        "--config",
        config,
        "plugin",
        "install",
        "--replace",
        impostor.to_str().unwrap(),
    ]));
    assert!(
        err.contains("http to: localhost:*") && err.contains("--yes"),
        "{err}"
    );
    assert!(!sandbox.home().join("plugins/skill-notes").exists());
    // --replace --yes does it, says what happens to the state, and is audited.
    let out = ok(sandbox.pincer(&[
        "--config",
        config,
        "plugin",
        "install",
        "--replace",
        "--yes",
        impostor.to_str().unwrap(),
    ]));
    assert!(
        out.contains("replaced: the built-in `skill-notes`"),
        "{out}"
    );
    assert!(out.contains("state:"), "{out}");
    let replaced = sandbox.audited("plugin.replaced");
    assert!(
        replaced.iter().any(|d| d.starts_with("skill-notes:")),
        "{replaced:?}"
    );
}

/// `skill invoke` works with one workspace's state, named by --workspace.
#[test]
fn skill_invoke_uses_the_named_workspaces_state() {
    let sandbox = Sandbox::new();
    let config = sandbox.write(
        "pincer.yaml",
        "workspaces:\n  alice: {skills: [skill-notes]}\n  bob: {skills: [skill-notes]}\n",
    );
    let config = config.to_str().unwrap();
    let invoke = |workspace: Option<&str>, tool: &str, args: &str| {
        let mut argv = vec!["--config", config, "skill", "invoke", "skill-notes", tool];
        argv.extend(["--args", args]);
        if let Some(w) = workspace {
            argv.extend(["--workspace", w]);
        }
        sandbox.pincer(&argv)
    };
    ok(invoke(
        Some("alice"),
        "put",
        r#"{"key": "diary", "text": "alice only"}"#,
    ));
    let bob = ok(invoke(Some("bob"), "list", "{}"));
    assert!(!bob.contains("diary"), "{bob}");
    let alice = ok(invoke(Some("alice"), "list", "{}"));
    assert!(alice.contains("diary"), "{alice}");
    let err = fails(invoke(None, "list", "{}"));
    assert!(
        err.contains("several workspaces are configured (alice, bob)")
            && err.contains("--workspace"),
        "{err}"
    );
    let err = fails(invoke(Some("carol"), "list", "{}"));
    assert!(err.contains("no workspace named `carol`"), "{err}");
}

/// Refused kv and http calls of a plugin are in `pincer policy audit`.
#[test]
fn plugin_capability_denials_are_audited_for_the_workspace() {
    let sandbox = Sandbox::new();
    let config = with_fixtures(&sandbox, "workspaces:\n  w: {}\n");
    let config = config.to_str().unwrap();
    for tool in ["kv", "fetch"] {
        let out = ok(sandbox.pincer(&[
            "--config",
            config,
            "skill",
            "invoke",
            "hostile-io",
            tool,
            "--args",
            r#"{"url": "http://u:secretpw@example.com/"}"#,
            "--workspace",
            "w",
        ]));
        assert!(out.contains("\"denied\": true"), "{out}");
    }
    let audit: Value = serde_json::from_str(&ok(
        sandbox.pincer(&["--config", config, "policy", "audit", "w", "--json"])
    ))
    .unwrap();
    let denials: Vec<String> = audit["denials"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "plugin.denied")
        .filter_map(|e| e["detail"].as_str().map(str::to_string))
        .collect();
    assert!(denials.iter().any(|d| d.starts_with("kv ")), "{denials:?}");
    assert!(
        denials.iter().any(|d| d.starts_with("http ")),
        "{denials:?}"
    );
    assert!(
        denials.iter().all(|d| !d.contains("secretpw")),
        "{denials:?}"
    );
}

/// The morning-briefing task's next five fire times after
/// 2026-12-01T12:00:00Z, as `schedule check` prints them.
const SHANGHAI_NINE_AM: [&str; 5] = [
    "2026-12-02 09:00 +08:00 (01:00 UTC)",
    "2026-12-03 09:00 +08:00 (01:00 UTC)",
    "2026-12-04 09:00 +08:00 (01:00 UTC)",
    "2026-12-05 09:00 +08:00 (01:00 UTC)",
    "2026-12-06 09:00 +08:00 (01:00 UTC)",
];

/// The fire times `schedule check` printed.
fn fire_times(out: &str) -> Vec<&str> {
    out.lines()
        .filter(|l| l.starts_with("  2026-"))
        .map(str::trim)
        .collect()
}

#[test]
fn schedule_check_prints_shanghai_fire_times_of_the_example() {
    let sandbox = Sandbox::new();
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../workspaces/default/schedules.yaml"
    );
    let out = ok(sandbox.pincer(&[
        "schedule",
        "check",
        example,
        "--after",
        "2026-12-01T12:00:00Z",
    ]));
    assert!(out.contains("ok (1 task)"), "{out}");
    assert!(
        out.contains(
            "skills checked against this host's plugins; channels not checked (no configuration found)"
        ),
        "{out}"
    );
    assert!(
        out.contains("morning_briefing: schedule \"0 9 * * *\" in Asia/Shanghai"),
        "{out}"
    );
    assert_eq!(fire_times(&out), SHANGHAI_NINE_AM);
}

/// The issue's example as written names a skill no host has
/// (`generate_daily_report`): refused, yet its Shanghai fire times are shown.
#[test]
fn schedule_check_shows_the_times_of_a_file_it_refuses_for_an_unknown_skill() {
    let sandbox = Sandbox::new();
    let file = sandbox.write(
        "schedules.yaml",
        r#"tasks:
  - id: morning_briefing
    description: 每天早上9点生成简报
    schedule: "0 9 * * *"
    timezone: Asia/Shanghai
    skill: generate_daily_report
    skill_input: {template: executive_summary}
    deliver_to: ["channel:team-chat"]
    catch_up: once
    overlap: skip
    timeout: 10m
"#,
    );
    let output = sandbox.pincer(&[
        "schedule",
        "check",
        &file.display().to_string(),
        "--after",
        "2026-12-01T12:00:00Z",
    ]);
    assert_eq!(output.status.code(), Some(1));
    let err = stderr(&output);
    assert!(
        err.contains("schedules.yaml:6:12: unknown skill `generate_daily_report`"),
        "{err}"
    );
    let out = support::stdout(&output);
    assert!(
        out.contains("refused (see below); as written its tasks would fire:"),
        "{out}"
    );
    assert_eq!(fire_times(&out), SHANGHAI_NINE_AM);
}

#[test]
fn schedule_check_fails_with_the_located_error() {
    let sandbox = Sandbox::new();
    let file = sandbox.write(
        "schedules.yaml",
        "tasks:\n  - id: a\n    schedule: '0 25 * * *'\n    prompt: x\n",
    );
    let output = sandbox.pincer(&["schedule", "check", &file.display().to_string()]);
    assert_eq!(output.status.code(), Some(1));
    let err = stderr(&output);
    assert!(
        err.contains("schedules.yaml:3:15: invalid cron expression `0 25 * * *`"),
        "{err}"
    );
    // with a configuration, deliver_to channels are checked
    let config = sandbox.write("pincer.yaml", "skills:\n  skill-calc: {}\nchannels: {}\n");
    let example = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../workspaces/default/schedules.yaml"
    );
    let err = fails(sandbox.pincer(&[
        "--config",
        &config.display().to_string(),
        "schedule",
        "check",
        example,
    ]));
    assert!(
        err.contains("schedules.yaml:12:18: unknown channel `team-chat`"),
        "{err}"
    );
}

/// Without a configuration `schedule check` still checks that each skill
/// is a built-in or installed plugin and that its tool exists, and gives a
/// plugin named alone its only tool.
#[test]
fn schedule_check_without_a_configuration_checks_skills_and_tools() {
    let sandbox = Sandbox::new();
    let check = |text: &str| {
        let file = sandbox.write("schedules.yaml", text);
        let path = file.display().to_string();
        (sandbox.pincer(&["schedule", "check", &path]), path)
    };
    const T: &str = "tasks:\n  - id: a\n    every: 1h\n";
    for (skill, want) in [
        (
            "    skill: generate_daily_report\n",
            "4:12: unknown skill `generate_daily_report`: no built-in or installed plugin has that name (pincer plugin list shows them)",
        ),
        (
            "    skill: channel-slack\n",
            "4:12: `channel-slack` is a channel plugin, not a skill",
        ),
        (
            "    skill: skill-calc\n",
            "4:12: skill `skill-calc` has several tools (evaluate, convert): name one with `tool:` or write `skill: skill-calc__TOOL`",
        ),
        (
            "    skill: skill-calc\n    tool: solve\n",
            "5:11: skill `skill-calc` has no tool `solve` (its tools: evaluate, convert)",
        ),
        (
            "    skill: skill-calc__solve\n",
            "4:12: skill `skill-calc` has no tool `solve` (its tools: evaluate, convert)",
        ),
    ] {
        let (output, path) = check(&format!("{T}{skill}"));
        assert_eq!(
            fails(output).trim_end(),
            format!("error: {path}:{want}"),
            "{skill}"
        );
    }
    let (output, _) = check(&format!("{T}    skill: skill-calc\n    tool: convert\n"));
    let out = ok(output);
    assert!(
        out.contains("a: every 1h in ") && out.contains(", skill skill-calc tool convert"),
        "{out}"
    );
}

/// A task without `timezone:` and no configuration is read in the host's
/// zone (`TZ`).
#[test]
fn schedule_check_reads_a_task_without_a_zone_in_the_host_zone() {
    let sandbox = Sandbox::new();
    let file = sandbox.write(
        "schedules.yaml",
        "tasks:\n  - id: a\n    schedule: '0 9 * * *'\n    prompt: x\n",
    );
    let run = |tz: &str| {
        let output = crate::support::pincer_command()
            .args(["schedule", "check", &file.display().to_string()])
            .args(["--after", "2026-12-01T12:00:00Z"])
            .current_dir(sandbox.work())
            .env("PINCER_HOME", sandbox.home())
            .env("TZ", tz)
            .env_remove("PINCER_CONFIG")
            .env_remove("PINCER_LOG")
            .output()
            .expect("run pincer");
        ok(output)
    };
    let out = run("America/New_York");
    assert!(
        out.contains("a: schedule \"0 9 * * *\" in America/New_York, prompt")
            && out.contains("  2026-12-02 09:00 -05:00 (14:00 UTC)"),
        "{out}"
    );
    let out = run(":Asia/Shanghai");
    assert!(
        out.contains("in Asia/Shanghai") && out.contains("  2026-12-02 09:00 +08:00 (01:00 UTC)"),
        "{out}"
    );
}

/// A WIT 0.1.0 plugin reads its secret config keys through `config`:
/// `plugins.legacy_secrets` (default `refuse`) refuses to install it and to
/// load it (`skill invoke`, `config check`); `warn` installs and loads it,
/// saying the plugin will read its secrets.
#[test]
fn a_wit_0_1_0_plugin_with_secret_keys_needs_legacy_secrets_warn() {
    let sandbox = Sandbox::new();
    let src = staged("wit-v0-1-0");
    let dir = sandbox.work().join("legacy-secret");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(src.join("plugin.wasm"), dir.join("plugin.wasm")).unwrap();
    let manifest = std::fs::read_to_string(src.join("plugin.toml"))
        .unwrap()
        .replace("name = \"wit-v0-1-0\"", "name = \"legacy-secret\"");
    std::fs::write(
        dir.join("plugin.toml"),
        format!("{manifest}\n[config.api_key]\ntype = \"string\"\nsecret = true\n"),
    )
    .unwrap();
    let body = "workspaces:\n  main: {skills: [legacy-secret]}\n";
    let refuse = sandbox.write(
        "refuse.yaml",
        &format!("plugins:\n  config:\n    legacy-secret: {{api_key: k-123-legacy}}\n{body}"),
    );
    let warn = sandbox.write(
        "warn.yaml",
        &format!(
            "plugins:\n  legacy_secrets: warn\n  config:\n    legacy-secret: {{api_key: k-123-legacy}}\n{body}"
        ),
    );
    let (refuse, warn) = (refuse.to_str().unwrap(), warn.to_str().unwrap());
    let installed = sandbox.home().join("plugins/legacy-secret");

    let err = fails(sandbox.pincer(&[
        "--config",
        refuse,
        "plugin",
        "install",
        dir.to_str().unwrap(),
    ]));
    assert!(
        err.contains("WIT 0.1.0")
            && err.contains("api_key")
            && err.contains("plugins.legacy_secrets: warn"),
        "{err}"
    );
    assert!(!installed.exists(), "nothing installed");

    let out = sandbox.pincer(&["--config", warn, "plugin", "install", dir.to_str().unwrap()]);
    let warned = stderr(&out);
    ok(out);
    assert!(
        warned.contains("will read its secret config keys api_key"),
        "{warned}"
    );
    assert!(installed.exists());

    let invoke = |config: &str| {
        sandbox.pincer(&[
            "--config",
            config,
            "skill",
            "invoke",
            "legacy-secret",
            "echo",
            "--args",
            r#"{"text": "hi"}"#,
        ])
    };
    let err = fails(invoke(refuse));
    assert!(
        err.contains("api_key") && err.contains("plugins.legacy_secrets"),
        "{err}"
    );
    let err = fails(sandbox.pincer(&["--config", refuse, "config", "check"]));
    assert!(
        err.contains("refuse.yaml:3:5: ") && err.contains("api_key"),
        "{err}"
    );
    let value: Value = serde_json::from_str(&ok(invoke(warn))).unwrap();
    assert_eq!(value["text"], "hi", "{value}");
    ok(sandbox.pincer(&["--config", warn, "config", "check"]));
}

/// A `pincer.db` written by a newer release (a higher schema version) is
/// refused by every command, with what to do, and left as it was.
#[test]
fn a_database_from_a_newer_release_is_refused_and_left_untouched() {
    let sandbox = Sandbox::new();
    let id = ok(sandbox.pincer(&["memory", "add", "kept across the refusal"]));
    let db = sandbox.home().join("pincer.db");
    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert!(version >= 1, "a fresh database records its schema version");
        conn.pragma_update(None, "user_version", version + 100)
            .unwrap();
    }
    for args in [
        &["memory", "search", "kept"][..],
        &["start", "--listen", "127.0.0.1:0"],
        &["gateway", "keys", "list", "default"],
    ] {
        let said = fails(sandbox.pincer(args));
        assert!(
            said.contains("newer than the")
                && said.contains("written by a newer release of pincer"),
            "pincer {args:?}: {said}"
        );
    }
    let conn = rusqlite::Connection::open(&db).unwrap();
    let text: String = conn
        .query_row(
            "SELECT text FROM memories WHERE id = ?1",
            [id.trim().parse::<i64>().unwrap()],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(text, "kept across the refusal");
}
