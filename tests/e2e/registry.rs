//! `pincer plugin publish` and `pincer plugin install REF` against a real
//! OCI registry: Debian's `docker-registry` (the CNCF distribution server
//! 2.8), started on a free loopback port with its storage in a temporary
//! folder and stopped after. One `PINCER_HOME` publishes, another installs
//! and calls the skill; every refusal leaves nothing installed.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use support::{Sandbox, fails, ok, staged};

const REGISTRY_BIN: &str = "/usr/bin/docker-registry";

struct Registry {
    child: Child,
    dir: tempfile::TempDir,
    addr: String,
}

impl Registry {
    fn start() -> Registry {
        assert!(
            Path::new(REGISTRY_BIN).is_file(),
            "{REGISTRY_BIN} is missing: install Debian's docker-registry (apt-get install docker-registry)"
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog: {{level: error}}\nstorage:\n  filesystem: {{rootdirectory: {}}}\n  delete: {{enabled: true}}\nhttp:\n  addr: {addr}\n",
                dir.path().join("data").display()
            ),
        )
        .unwrap();
        let child = Command::new(REGISTRY_BIN)
            .args(["serve", config.to_str().unwrap()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Dropped (and so killed and waited for) even if it never starts.
        let registry = Registry { child, dir, addr };
        for _ in 0..100 {
            if std::net::TcpStream::connect(&registry.addr).is_ok() {
                return registry;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("the registry did not start on {}", registry.addr);
    }

    /// The stored blob with this digest (`sha256:…`).
    fn blob(&self, digest: &str) -> PathBuf {
        let hex = digest.trim_start_matches("sha256:");
        self.dir
            .path()
            .join("data/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
    }
}

/// skill-calc under another name (so it never collides with the built-in).
fn acme_calc(sandbox: &Sandbox) -> PathBuf {
    let src = staged("skill-calc");
    let dir = sandbox.work().join("acme-calc");
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(&src).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
    }
    let manifest = dir.join("plugin.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(
        &manifest,
        text.replacen("name = \"skill-calc\"", "name = \"acme-calc\"", 1),
    )
    .unwrap();
    dir
}

/// The value after `label` on a line of `out`.
fn field(out: &str, label: &str) -> String {
    out.lines()
        .find_map(|l| l.trim().strip_prefix(label))
        .unwrap_or_else(|| panic!("no `{label}` in:\n{out}"))
        .trim()
        .to_string()
}

fn consumer(trusted: &[(&str, &str)]) -> Sandbox {
    let sandbox = Sandbox::new();
    let list: Vec<String> = trusted
        .iter()
        .map(|(name, key)| format!("      - {{name: {name}, key: \"{key}\"}}\n"))
        .collect();
    sandbox.write(
        "pincer.yaml",
        &format!(
            "plugins:\n  trusted_publishers:\n{}workspaces:\n  main: {{skills: [acme-calc]}}\n",
            if list.is_empty() {
                "    []\n".to_string()
            } else {
                list.concat()
            }
        ),
    );
    sandbox
}

fn installed(sandbox: &Sandbox) -> bool {
    sandbox.home().join("plugins/acme-calc").exists()
}

fn key(sandbox: &Sandbox, name: &str) -> (PathBuf, String) {
    let path = sandbox.work().join(format!("{name}.key"));
    let out = ok(sandbox.pincer(&["plugin", "key", "generate", "--out", path.to_str().unwrap()]));
    (path, field(&out, "public key:"))
}

#[test]
fn a_signed_plugin_is_published_then_installed_by_another_home_and_called() {
    let registry = Registry::start();
    let publisher = Sandbox::new();
    let dir = acme_calc(&publisher);
    let (key_file, public) = key(&publisher, "acme");
    assert!(public.starts_with("ed25519:"), "{public}");
    let reference = format!("{}/acme/acme-calc:1.0.0", registry.addr);
    let out = ok(publisher.pincer(&[
        "plugin",
        "publish",
        dir.to_str().unwrap(),
        &reference,
        "--key",
        key_file.to_str().unwrap(),
    ]));
    assert!(out.contains("published acme-calc 0.1.0"), "{out}");
    assert!(out.contains(&format!("signed by {public}")), "{out}");
    let digest = field(&out, "digest:");
    assert!(
        digest.starts_with("sha256:") && digest.len() == 71,
        "{digest}"
    );

    let user = consumer(&[("acme", &public)]);
    // not interactive and no --yes: shown, not installed
    let refused = fails(user.pincer(&["plugin", "install", &reference]));
    assert!(refused.contains("pass --yes"), "{refused}");
    assert!(!installed(&user), "nothing installed without --yes");

    let out = ok(user.pincer(&["plugin", "install", &reference, "--yes"]));
    assert!(
        out.contains(&format!("publisher: acme ({public}), trusted")),
        "{out}"
    );
    assert!(
        out.contains("pincer:plugin/skill-plugin@"),
        "the WIT version is shown: {out}"
    );
    assert!(out.contains("asks for:"), "{out}");
    let pinned = format!("{}/acme/acme-calc@{digest}", registry.addr);
    assert!(out.contains(&format!("pinned:    {pinned}")), "{out}");

    let list = ok(user.pincer(&["plugin", "list"]));
    assert!(
        list.lines().any(|l| l.starts_with("acme-calc")
            && l.contains(&format!("registry {pinned} (signed by acme)"))),
        "{list}"
    );
    let answer = ok(user.pincer(&[
        "skill",
        "invoke",
        "acme-calc",
        "evaluate",
        "--args",
        r#"{"expression": "6*7"}"#,
    ]));
    assert!(answer.contains("42"), "{answer}");

    // by digest too
    let again = consumer(&[("acme", &public)]);
    ok(again.pincer(&["plugin", "install", &pinned, "--yes"]));
    assert!(installed(&again));
}

#[test]
fn unsigned_untrusted_tampered_and_unreachable_packages_are_refused() {
    let mut registry = Registry::start();
    let publisher = Sandbox::new();
    let dir = acme_calc(&publisher);
    let (trusted_key, trusted_public) = key(&publisher, "acme");
    let (stranger_key, stranger_public) = key(&publisher, "stranger");
    let publish = |tag: &str, key: Option<&Path>| {
        let reference = format!("{}/acme/acme-calc:{tag}", registry.addr);
        let mut args = vec![
            "plugin".to_string(),
            "publish".into(),
            dir.display().to_string(),
            reference.clone(),
        ];
        if let Some(key) = key {
            args.extend(["--key".into(), key.display().to_string()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        (reference, ok(publisher.pincer(&args)))
    };
    let user = consumer(&[("acme", &trusted_public)]);

    // unsigned
    let (unsigned, out) = publish("unsigned", None);
    assert!(out.contains("UNSIGNED (no --key)"), "{out}");
    let err = fails(user.pincer(&["plugin", "install", &unsigned, "--yes"]));
    assert!(
        err.contains("is not signed")
            && err.contains("nothing was installed")
            && err.contains("--allow-unsigned"),
        "{err}"
    );
    assert!(!installed(&user));

    // signed by a key nobody trusts
    let (untrusted, _) = publish("stranger", Some(&stranger_key));
    let err = fails(user.pincer(&["plugin", "install", &untrusted, "--yes"]));
    assert!(
        err.contains(&format!(
            "is signed by {stranger_public}, which plugins.trusted_publishers does not list"
        )),
        "{err}"
    );
    assert!(!installed(&user));

    // an unsigned package installed on purpose is audited
    let out = ok(user.pincer(&["plugin", "install", &unsigned, "--yes", "--allow-unsigned"]));
    assert!(out.contains("publisher: nobody: NOT signed"), "{out}");
    assert!(installed(&user));
    let audited: i64 =
        user.scalar("SELECT COUNT(*) FROM audit_events WHERE kind = 'plugin.install_unsigned'");
    assert_eq!(audited, 1);

    // a tampered component blob (signed by the trusted key)
    let victim = consumer(&[("acme", &trusted_public)]);
    let (tampered, out) = publish("tampered", Some(&trusted_key));
    let digest = field(&out, "digest:");
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(registry.blob(&digest)).unwrap()).unwrap();
    let layer = registry.blob(manifest["layers"][0]["digest"].as_str().unwrap());
    let mut bytes = std::fs::read(&layer).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&layer, bytes).unwrap();
    let err = fails(victim.pincer(&["plugin", "install", &tampered, "--yes"]));
    assert!(
        err.contains("does not match its digest") && err.contains("nothing was installed"),
        "{err}"
    );
    assert!(!installed(&victim), "nothing half-installed");

    // the registry is down
    registry.stop();
    let other = consumer(&[("acme", &trusted_public)]);
    let out = other.pincer(&["plugin", "install", &unsigned, "--yes"]);
    let err = fails(out);
    assert!(err.contains("cannot be reached"), "{err}");
    assert!(!installed(&other));

    // a key that is not a key, in pincer.yaml
    let bad = Sandbox::new();
    bad.write(
        "pincer.yaml",
        "plugins:\n  trusted_publishers:\n    - {name: acme, key: \"ed25519:AAAA\"}\n",
    );
    let err = fails(bad.pincer(&["config", "check"]));
    assert!(
        err.contains("pincer.yaml:3:25: `ed25519:AAAA` is not a publisher key"),
        "{err}"
    );
}

#[test]
fn update_installs_a_new_digest_and_asks_again_only_when_it_requests_more() {
    let registry = Registry::start();
    let publisher = Sandbox::new();
    let dir = acme_calc(&publisher);
    let (key_file, public) = key(&publisher, "acme");
    let reference = format!("{}/acme/acme-calc:stable", registry.addr);
    let publish = |dir: &Path| {
        let out = ok(publisher.pincer(&[
            "plugin",
            "publish",
            dir.to_str().unwrap(),
            &reference,
            "--key",
            key_file.to_str().unwrap(),
        ]));
        field(&out, "digest:")
    };
    let set_manifest = |from: &str, to: &str| {
        let manifest = dir.join("plugin.toml");
        let text = std::fs::read_to_string(&manifest).unwrap();
        assert!(text.contains(from), "{text}");
        std::fs::write(&manifest, text.replacen(from, to, 1)).unwrap();
    };
    let first = publish(&dir);
    let user = consumer(&[("acme", &public)]);
    ok(user.pincer(&["plugin", "install", &reference, "--yes"]));

    let same = ok(user.pincer(&["plugin", "update", "acme-calc"]));
    assert!(
        same.contains(&format!(
            "acme-calc is up to date ({reference} is still {first})"
        )),
        "{same}"
    );

    // 0.1.1 asks for nothing more: installed without a question
    set_manifest("version = \"0.1.0\"", "version = \"0.1.1\"");
    let second = publish(&dir);
    let out = ok(user.pincer(&["plugin", "update", "acme-calc"]));
    assert!(
        out.contains("nothing more than the installed 0.1.0 asks for"),
        "{out}"
    );
    let origin = || -> serde_json::Value {
        serde_json::from_slice(
            &std::fs::read(user.home().join("plugins/acme-calc/origin.json")).unwrap(),
        )
        .unwrap()
    };
    assert_eq!(origin()["digest"], second.as_str());

    // 0.2.0 asks for HTTP and kv: shown, and refused without --yes
    set_manifest("version = \"0.1.1\"", "version = \"0.2.0\"");
    let text = std::fs::read_to_string(dir.join("plugin.toml")).unwrap();
    std::fs::write(
        dir.join("plugin.toml"),
        format!("{text}\n[capabilities]\nhttp = [\"api.example.com\"]\nkv = true\n"),
    )
    .unwrap();
    let third = publish(&dir);
    let refused = user.pincer(&["plugin", "update", "acme-calc"]);
    let shown = support::stdout(&refused);
    let refused = fails(refused);
    assert!(
        shown.contains("MORE than the installed 0.1.1 asks for")
            && shown.contains("http to: api.example.com")
            && shown.contains("kv: a private key-value store"),
        "{shown}"
    );
    assert!(
        refused.contains("the installed acme-calc 0.1.1 is unchanged"),
        "{refused}"
    );
    assert_eq!(origin()["digest"], second.as_str(), "nothing changed");
    let answer = ok(user.pincer(&[
        "skill",
        "invoke",
        "acme-calc",
        "evaluate",
        "--args",
        r#"{"expression": "2+2"}"#,
    ]));
    assert!(
        answer.contains('4'),
        "the old version still answers: {answer}"
    );

    let out = ok(user.pincer(&["plugin", "update", "acme-calc", "--yes"]));
    assert!(out.contains("installed acme-calc 0.2.0"), "{out}");
    assert_eq!(origin()["digest"], third.as_str());
    let updates: i64 = user
        .scalar("SELECT COUNT(*) FROM audit_events WHERE kind = 'plugin.updated_from_registry'");
    assert_eq!(updates, 2, "both updates audited");

    // a tag that now holds another plugin is refused
    set_manifest("name = \"acme-calc\"", "name = \"acme-other\"");
    publish(&dir);
    let err = fails(user.pincer(&["plugin", "update", "acme-calc", "--yes"]));
    assert!(
        err.contains("now holds a plugin named `acme-other`, not `acme-calc`"),
        "{err}"
    );
    assert_eq!(origin()["digest"], third.as_str());

    // a plugin installed from a folder has nothing to update from
    let local = Sandbox::new();
    ok(local.pincer(&["plugin", "install", dir.to_str().unwrap()]));
    let err = fails(local.pincer(&["plugin", "update", "acme-other"]));
    assert!(err.contains("was installed from a folder"), "{err}");
    let err = fails(local.pincer(&["plugin", "update", "nothing-here"]));
    assert!(err.contains("is not installed"), "{err}");
}

/// The "Write a skill" guide of docs/plugins.md, command by command, in a fresh
/// folder outside the checkout: a Rust skill and a Python skill made by
/// `plugin new`, built by `plugin build`, signed and published by one
/// `PINCER_HOME`, installed by another that trusts the key, and called.
#[test]
fn the_write_a_skill_guide_works_in_both_languages() {
    let registry = Registry::start();
    let author = Sandbox::new();
    let run = |sandbox: &Sandbox, args: &[&str]| {
        let python = std::path::PathBuf::from(support::gateway::python());
        crate::support::pincer_command()
            .args(args)
            .current_dir(sandbox.work())
            .env("PINCER_HOME", sandbox.home())
            .env(
                "PINCER_COMPONENTIZE_PY",
                python.with_file_name("componentize-py"),
            )
            // The scaffold's crates come from the local cargo cache.
            .env("CARGO_NET_OFFLINE", "true")
            .env_remove("CARGO_TARGET_DIR")
            .env_remove("PINCER_CONFIG")
            .output()
            .expect("run pincer")
    };
    let key_file = author.home().join("keys/publisher.key");
    let generated = ok(run(&author, &["plugin", "key", "generate"]));
    let public = field(&generated, "public key:");
    let user = Sandbox::new();
    user.write(
        "pincer.yaml",
        &format!(
            "plugins:\n  trusted_publishers:\n    - {{name: me, key: \"{public}\"}}\n  config:\n    my-skill: {{greeting: hello}}\n    my-py-skill: {{greeting: hej}}\n"
        ),
    );
    for (name, lang, greeting) in [
        ("my-skill", "rust", "hello"),
        ("my-py-skill", "python", "hej"),
    ] {
        ok(run(
            &author,
            &["plugin", "new", "--kind", "skill", "--lang", lang, name],
        ));
        let built = ok(run(&author, &["plugin", "build", name]));
        assert!(built.contains(&format!("built {name} 0.1.0")), "{built}");
        let reference = format!("{}/me/{name}:0.1.0", registry.addr);
        let published = ok(run(
            &author,
            &[
                "plugin",
                "publish",
                &format!("{name}/dist"),
                &reference,
                "--key",
                key_file.to_str().unwrap(),
            ],
        ));
        assert!(
            published.contains(&format!("signed by {public}")),
            "{published}"
        );
        let installed = ok(run(&user, &["plugin", "install", &reference, "--yes"]));
        assert!(
            installed.contains(&format!("publisher: me ({public}), trusted")),
            "{installed}"
        );
        let answer: serde_json::Value = serde_json::from_str(&ok(run(
            &user,
            &[
                "skill",
                "invoke",
                name,
                "echo",
                "--args",
                r#"{"text": "hi"}"#,
            ],
        )))
        .unwrap();
        assert_eq!(answer["text"], "hi", "{name}: {answer}");
        assert_eq!(answer["greeting"], greeting, "{name}: {answer}");
    }
}

/// A copy of staged `src` named `acme-calc` in `sandbox`'s folder `dir`,
/// its manifest edited by `edit`.
fn variant(sandbox: &Sandbox, src: &str, dir: &str, edit: impl Fn(String) -> String) -> PathBuf {
    let from = staged(src);
    let to = sandbox.work().join(dir);
    std::fs::create_dir_all(&to).unwrap();
    for entry in std::fs::read_dir(&from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
    let manifest = to.join("plugin.toml");
    let text = std::fs::read_to_string(&manifest).unwrap().replacen(
        &format!("name = \"{src}\""),
        "name = \"acme-calc\"",
        1,
    );
    let edited = edit(text.clone());
    assert_ne!(edited, text, "{dir}: the edit changed nothing");
    std::fs::write(&manifest, edited).unwrap();
    to
}

/// acme-calc 0.1.0 on WIT 0.4.0 with kv and a secret key `api_key`.
const SECRET_KEY: &str =
    "\n[capabilities]\nkv = true\n\n[config.api_key]\ntype = \"string\"\nsecret = true\n";

/// Finding 3: an update that asks for more than the installed version in
/// ways beyond hosts and key names — a WIT 0.1.0 build (which reads its
/// secrets through `config`), a secret made plain, another kind, an older
/// version — is refused without a terminal and without `--yes`, naming
/// the reason; the installed version keeps working. A downgrade is refused
/// even with `--yes` unless `--allow-downgrade`; `install --replace` of a
/// folder is held to the same rules.
#[test]
fn updates_that_read_secrets_unsecret_change_kind_or_roll_back_are_refused() {
    let registry = Registry::start();
    let publisher = Sandbox::new();
    let (key_file, public) = key(&publisher, "acme");
    let reference = format!("{}/acme/acme-calc:stable", registry.addr);
    let publish = |dir: &Path| {
        let out = ok(publisher.pincer(&[
            "plugin",
            "publish",
            dir.to_str().unwrap(),
            &reference,
            "--key",
            key_file.to_str().unwrap(),
        ]));
        field(&out, "digest:")
    };
    let base = variant(&publisher, "skill-calc", "base", |m| {
        format!("{m}{SECRET_KEY}")
    });
    let installed_digest = publish(&base);
    let user = Sandbox::new();
    // `warn`, so what refuses the 0.1.0 build below is the update's own
    // question, not the install-time refusal of legacy secrets.
    user.write(
        "pincer.yaml",
        &format!(
            "plugins:\n  legacy_secrets: warn\n  trusted_publishers:\n    - {{name: acme, key: \"{public}\"}}\n  config:\n    acme-calc: {{api_key: k-123-acme-key}}\nworkspaces:\n  main: {{skills: [acme-calc]}}\n"
        ),
    );
    ok(user.pincer(&["plugin", "install", &reference, "--yes"]));
    let origin = || -> serde_json::Value {
        serde_json::from_slice(
            &std::fs::read(user.home().join("plugins/acme-calc/origin.json")).unwrap(),
        )
        .unwrap()
    };
    let still_installed = |case: &str| {
        assert_eq!(
            origin()["digest"],
            installed_digest.as_str(),
            "{case}: nothing was installed"
        );
        let list = ok(user.pincer(&["plugin", "list"]));
        assert!(
            list.lines()
                .any(|l| l.starts_with("acme-calc") && l.contains("0.1.0")),
            "{case}: {list}"
        );
    };

    let legacy = variant(&publisher, "wit-v0-1-0", "legacy", |m| {
        format!(
            "{}\n[config.api_key]\ntype = \"string\"\nsecret = true\n",
            m.replacen("version = \"0.1.0\"", "version = \"0.2.0\"", 1)
        )
    });
    let unsecret = variant(&publisher, "skill-calc", "unsecret", |m| {
        format!("{m}{SECRET_KEY}")
            .replacen("version = \"0.1.0\"", "version = \"0.2.0\"", 1)
            .replace("secret = true", "secret = false")
    });
    let observer = variant(&publisher, "observer-jsonl", "observer", |m| {
        format!(
            "{}\n[config.api_key]\ntype = \"string\"\nsecret = true\n",
            m.replacen("version = \"0.1.0\"", "version = \"0.2.0\"", 1)
                .replacen("data_dir = true", "data_dir = true\nkv = true", 1)
        )
    });
    let older = variant(&publisher, "skill-calc", "older", |m| {
        format!("{m}{SECRET_KEY}").replacen("version = \"0.1.0\"", "version = \"0.0.9\"", 1)
    });
    for (case, dir, reason) in [
        (
            "a WIT 0.1.0 build",
            &legacy,
            "reads its secrets: built against WIT 0.1.0, older than 0.2.0, so the plugin reads the values of its secret config keys api_key",
        ),
        (
            "a secret made plain",
            &unsecret,
            "no longer secret: api_key",
        ),
        (
            "another kind",
            &observer,
            "another kind: a observer plugin, not a skill",
        ),
        (
            "an older version",
            &older,
            "an older version: 0.0.9 is lower than the installed 0.1.0",
        ),
    ] {
        publish(dir);
        let out = user.pincer(&["plugin", "update", "acme-calc"]);
        let err = fails(out);
        assert!(
            err.contains(reason) && err.contains("the installed acme-calc 0.1.0 is unchanged"),
            "{case}: {err}"
        );
        if dir == &older {
            assert!(err.contains("--allow-downgrade"), "{case}: {err}");
        } else {
            assert!(err.contains("--yes"), "{case}: {err}");
        }
        still_installed(case);
        // The same package from a folder, over the installed plugin.
        let err = fails(user.pincer(&["plugin", "install", "--replace", dir.to_str().unwrap()]));
        assert!(err.contains(reason), "{case}, install --replace: {err}");
        still_installed(case);
    }
    let answer = ok(user.pincer(&[
        "skill",
        "invoke",
        "acme-calc",
        "evaluate",
        "--args",
        r#"{"expression": "2+2"}"#,
    ]));
    assert!(
        answer.contains('4'),
        "the installed version answers: {answer}"
    );

    // A rollback is refused even with --yes, and done with --allow-downgrade.
    let err = fails(user.pincer(&["plugin", "update", "acme-calc", "--yes"]));
    assert!(
        err.contains("0.0.9 is lower than the installed 0.1.0")
            && err.contains("--allow-downgrade"),
        "{err}"
    );
    still_installed("--yes alone");
    let out = ok(user.pincer(&[
        "plugin",
        "update",
        "acme-calc",
        "--yes",
        "--allow-downgrade",
    ]));
    assert!(out.contains("installed acme-calc 0.0.9"), "{out}");
    assert_ne!(origin()["digest"], installed_digest.as_str());
}

/// `plugins.trusted_publishers[].plugins` scopes a key to plugin names: a
/// package of another name signed by it is refused as untrusted.
#[test]
fn a_publisher_key_signs_only_the_names_it_is_trusted_for() {
    let registry = Registry::start();
    let publisher = Sandbox::new();
    let dir = acme_calc(&publisher);
    let (key_file, public) = key(&publisher, "acme");
    let reference = format!("{}/acme/acme-calc:1.0.0", registry.addr);
    ok(publisher.pincer(&[
        "plugin",
        "publish",
        dir.to_str().unwrap(),
        &reference,
        "--key",
        key_file.to_str().unwrap(),
    ]));
    let scoped = |globs: &str| {
        let sandbox = Sandbox::new();
        sandbox.write(
            "pincer.yaml",
            &format!(
                "plugins:\n  trusted_publishers:\n    - {{name: acme, key: \"{public}\", plugins: [{globs}]}}\nworkspaces:\n  main: {{skills: [acme-calc]}}\n"
            ),
        );
        sandbox
    };
    let narrow = scoped("\"weather-*\", \"acme-notes\"");
    let err = fails(narrow.pincer(&["plugin", "install", &reference, "--yes"]));
    assert!(
        err.contains("acme-calc")
            && err.contains("may sign only weather-*, acme-notes")
            && err.contains("nothing was installed"),
        "{err}"
    );
    assert!(!installed(&narrow));
    let wide = scoped("\"acme-*\"");
    let out = ok(wide.pincer(&["plugin", "install", &reference, "--yes"]));
    assert!(out.contains("publisher: acme ("), "{out}");
    assert!(installed(&wide));
    let bad = scoped("\"Acme/*\"");
    let err = fails(bad.pincer(&["config", "check"]));
    assert!(err.contains("pincer.yaml:3:"), "{err}");
}

/// Finding 8: a registry answering with a 400 MiB manifest (streamed, with
/// its length declared and chunked without one) is refused at the 1 MiB
/// cap, and `plugin install` never holds it: its peak RSS stays under
/// 100 MB.
#[test]
fn a_huge_manifest_is_refused_without_being_read() {
    use axum::routing::get;
    const HUGE: u64 = 400 << 20;
    async fn huge(
        axum::extract::Path(tag): axum::extract::Path<String>,
    ) -> axum::response::Response {
        let chunk = bytes::Bytes::from(vec![b' '; 1 << 20]);
        let chunks = futures_util::stream::iter(
            (0..HUGE >> 20).map(move |_| Ok::<_, std::io::Error>(chunk.clone())),
        );
        let mut response = axum::response::Response::builder()
            .header("content-type", "application/vnd.oci.image.manifest.v1+json");
        if tag == "declared" {
            response = response.header("content-length", HUGE);
        }
        response
            .body(axum::body::Body::from_stream(chunks))
            .unwrap()
    }
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let addr = runtime.block_on(support::serve(
        axum::Router::new()
            .route("/v2/", get(|| async { "{}" }))
            .route("/v2/acme/huge/manifests/{tag}", get(huge)),
    ));
    let user = consumer(&[]);
    for tag in ["declared", "chunked"] {
        let reference = format!("{addr}/acme/huge:{tag}");
        // The child's own peak memory. `ru_maxrss` of a process this test
        // process spawns starts at this process's RSS (Linux keeps the old
        // address space's high-water mark across exec), and all end-to-end
        // tests share this process; so a small Python parent spawns pincer
        // and reports the peak of its one waited-for child.
        let output = Command::new("python3")
            .args([
                "-c",
                "import resource, subprocess, sys\n\
                 rc = subprocess.run(sys.argv[1:], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL).returncode\n\
                 print(rc, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)",
                env!("CARGO_BIN_EXE_pincer"),
                "plugin",
                "install",
                &reference,
                "--yes",
            ])
            .current_dir(user.work())
            .env("PINCER_HOME", user.home())
            .env_remove("PINCER_CONFIG")
            .env_remove("PINCER_LOG")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&output.stderr).into_owned();
        let report = String::from_utf8_lossy(&output.stdout);
        let (code, peak_kib) = report
            .trim()
            .split_once(' ')
            .and_then(|(code, kib)| Some((code.parse::<i32>().ok()?, kib.parse::<u64>().ok()?)))
            .unwrap_or_else(|| panic!("{tag}: no report from the wrapper: {report:?} {err}"));
        assert!(code > 0, "{tag}: should have failed (exit {code}): {err}");
        let peak_mb = peak_kib / 1024;
        assert!(
            peak_mb < 100,
            "{tag}: plugin install peaked at {peak_mb} MB: {err}"
        );
        assert!(
            err.contains("its manifest is larger than 1 MiB")
                && err.contains("nothing was installed"),
            "{tag}: {err}"
        );
    }
    drop(runtime);
}
