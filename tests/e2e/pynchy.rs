//! A Pynchy user's `config.yaml` (`workspaces/pynchy-example.yaml`) through
//! the real `pincer`: `config check` accepts it as written (and names the
//! one made-up plugin), reports every problem of a broken file in one run,
//! agrees with what `workspace up` and `policy audit` would refuse,
//! `config explain` says what each key became, `policy audit` shows each
//! workspace's groups, mounts and MCP reach; and an agent turn in a
//! `no_internet_access` workspace queries an MCP server running in its own
//! container (a static SQLite server built from `images/mcp-sqlite`, its
//! image imported from scratch) through the gateway, which refuses it to
//! other workspaces (called directly with their own key); the running
//! server container is inspected; its volumes are checked like workspace
//! mounts; two gateway processes of one home keep each other's server
//! containers. Network: loopback only (the fake model), and the server
//! container has none.

use crate::support;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;
use support::fake_llm::{Behaviour, FakeUpstream};
use support::{DockerCleanup, Sandbox, docker, fails, ok, stderr, stdout, unique};

const EXAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../workspaces/pynchy-example.yaml"
);

/// A sandbox whose `HOME` is its own folder (the example's `~` paths), with
/// the example's mount source created.
struct Home {
    sandbox: Sandbox,
}

impl Home {
    fn new() -> Self {
        let sandbox = Sandbox::new();
        std::fs::create_dir_all(sandbox.dir.path().join("Documents/ai_safe_zone")).unwrap();
        Home { sandbox }
    }

    fn path(&self) -> &Path {
        self.sandbox.dir.path()
    }

    /// `pincer ARGS` with `HOME` here, `ANTHROPIC_API_KEY` set and the
    /// other providers' keys unset, plus `env`.
    fn pincer(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        self.command(crate::support::pincer_command(), args, env)
            .output()
            .expect("run pincer")
    }

    /// `command` (pincer, or a wrapper of it) set up as [`Home::pincer`] does.
    fn command(&self, mut command: Command, args: &[&str], env: &[(&str, &str)]) -> Command {
        command
            .args(args)
            .current_dir(self.sandbox.work())
            .env("HOME", self.path())
            .env("PINCER_HOME", self.sandbox.home())
            .env("ANTHROPIC_API_KEY", "sk-ant-test-pynchy-0123456789")
            .env_remove("OPENAI_API_KEY")
            .env_remove("GEMINI_API_KEY")
            .env_remove("workspace_base_path")
            .env_remove("PINCER_CONFIG")
            .env_remove("PINCER_LOG");
        for (k, v) in env {
            command.env(k, v);
        }
        command
    }

    /// The example, with its made-up plugin removed unless `keep_made_up`.
    fn example(&self, keep_made_up: bool) -> PathBuf {
        let mut text = std::fs::read_to_string(EXAMPLE).unwrap();
        if !keep_made_up {
            text = text.replace(", \"my_custom_skill_package\"", "");
        }
        self.sandbox.write("config.yaml", &text)
    }

    fn write(&self, text: &str) -> PathBuf {
        self.sandbox.write("config.yaml", text)
    }
}

fn warnings(file: &str) -> String {
    format!(
        "{file}:11:15: warning: fallback `gpt-4-turbo` (openai/gpt-4-turbo) is left out: OPENAI_API_KEY is not set (set it, or define `gpt-4-turbo` in gateway.model_list with its api_key)\n\
         {file}:11:30: warning: fallback `gemini-1.5-pro` (openai_compatible/gemini-1.5-pro) is left out: GEMINI_API_KEY is not set (set it, or define `gemini-1.5-pro` in gateway.model_list with its api_key)\n"
    )
}

#[test]
fn the_pynchy_example_passes_config_check_without_its_made_up_plugin() {
    let home = Home::new();
    let config = home.example(false);
    let file = config.display().to_string();
    let out = home.pincer(&["--config", &file, "config", "check"], &[]);
    assert_eq!(
        ok(out.clone()),
        format!("{file}: ok (3 workspaces, 1 model alias, 0 channels, 1 MCP server)\n")
    );
    // Unset fallback keys are warnings, not errors.
    assert_eq!(stderr(&out), warnings(&file));

    // With every provider key set, the fallbacks are aliases of their own.
    let out = home.pincer(
        &["--config", &file, "config", "check"],
        &[("OPENAI_API_KEY", "sk-o"), ("GEMINI_API_KEY", "g")],
    );
    assert_eq!(
        ok(out.clone()),
        format!("{file}: ok (3 workspaces, 3 model aliases, 0 channels, 1 MCP server)\n")
    );
    assert_eq!(stderr(&out), "");
}

#[test]
fn the_made_up_plugin_is_refused_by_name_and_nothing_else_is() {
    let home = Home::new();
    let config = home.example(true);
    let file = config.display().to_string();
    let err = fails(home.pincer(&["--config", &file, "config", "check"], &[]));
    assert_eq!(
        err,
        format!(
            "{}{file}:26:46: no plugin named `my_custom_skill_package` (installed or built-in: channel-feishu, channel-slack, channel-webhook, observer-jsonl, skill-calc, skill-notes, tunnel-http). If it is a Python package, it is not available in pincer: pincer loads WebAssembly plugins (`pincer plugin new`, `pincer plugin install PATH`).\n\
             {file}: 1 problem (nothing was started)\n",
            warnings(&file)
        )
    );
    // A Pynchy built-in pincer does not have, and a near miss.
    let text = std::fs::read_to_string(EXAMPLE).unwrap().replace(
        "\"my_custom_skill_package\"",
        "\"pynchy.builtin.channels.discord\", \"skill-calk\"",
    );
    let config = home.write(&text);
    let err = fails(home.pincer(&["--config", &file, "config", "check"], &[]));
    let _ = config;
    assert!(
        err.contains(&format!(
            "{file}:26:46: `pynchy.builtin.channels.discord` is Pynchy's built-in channel `discord`; pincer has no plugin `channel-discord`: not available in pincer (plugins here: "
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "{file}:26:81: no plugin named `skill-calk`, did you mean `skill-calc`?"
        )),
        "{err}"
    );
    assert!(
        err.ends_with(&format!("{file}: 2 problems (nothing was started)\n")),
        "{err}"
    );
}

#[test]
fn config_explain_says_which_pincer_setting_each_pynchy_key_became() {
    let home = Home::new();
    let config = home.example(false);
    let file = config.display().to_string();
    let text = ok(home.pincer(&["config", "explain", &file], &[]));
    for (at, written, became) in [
        (
            "6:3",
            "litellm.model",
            "gateway.model_list entry model_name: default, litellm_params.model: anthropic/claude-3-5-sonnet-20241022, api_key: ${ANTHROPIC_API_KEY}",
        ),
        ("8:3", "litellm.num_retries", "gateway.num_retries: 3"),
        ("9:3", "litellm.timeout", "gateway.timeout: 120"),
        (
            "10:3",
            "litellm.routing_strategy",
            "gateway.routing_strategy: least-busy",
        ),
        (
            "13:3",
            "containers.default_runtime",
            "containers.runtime: docker",
        ),
        (
            "17:5",
            "workspaces.my_assistant.path",
            "workspaces.my_assistant.path: the workspace folder, mounted at /workspace (${workspace_base_path}/my_assistant)",
        ),
        (
            "21:61",
            "workspaces.my_finance_bot.policies[2]: \"allowed_executables: [/usr/bin/python3]\"",
            "the policies entry {allowed_executables: [/usr/bin/python3]}",
        ),
        (
            "29:5",
            "mcp_servers.company_db.type: docker",
            "mcp_servers.company_db.container: the server runs in its own container, started by pincer and spoken to over stdio (Docker's attach stream)",
        ),
        (
            "31:5",
            "mcp_servers.company_db.volumes",
            "mcp_servers.company_db.container.volumes",
        ),
    ] {
        let entry = format!("{file}:{at}: {written}\n    → {became}\n");
        assert!(text.contains(&entry), "missing {entry:?} in\n{text}");
    }
    // The folder the path resolved to.
    let folder = home.path().join("pynchy_workspaces/my_assistant");
    assert!(
        text.contains(&format!("      = {}", folder.display())),
        "{text}"
    );
}

fn audit(home: &Home, config: &Path, workspace: &str) -> (String, Value) {
    let file = config.display().to_string();
    let text = ok(home.pincer(&["--config", &file, "policy", "audit", workspace], &[]));
    let json = ok(home.pincer(
        &["--config", &file, "policy", "audit", workspace, "--json"],
        &[],
    ));
    (text, serde_json::from_str(&json).expect("audit JSON"))
}

fn groups(report: &Value) -> Vec<&str> {
    report["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect()
}

#[test]
fn policy_audit_of_each_example_workspace_shows_its_groups_mounts_and_mcp_reach() {
    let home = Home::new();
    let config = home.example(false);

    let (text, report) = audit(&home, &config, "my_assistant");
    assert_eq!(groups(&report), ["no_internet_access", "max_memory_1gb"]);
    let folder = home.path().join("pynchy_workspaces/my_assistant");
    assert_eq!(report["mounts"][0]["target"], "/workspace");
    assert_eq!(report["mounts"][0]["source"], folder.display().to_string());
    assert!(
        text.lines().any(|l| l.split_whitespace().eq([
            "/documents",
            "ro",
            "~/Documents/ai_safe_zone"
        ])),
        "{text}"
    );
    assert_eq!(report["container"]["network_mode"], "none");
    assert_eq!(report["reach"]["mcp_servers"], Value::Array(vec![]));

    let (_, report) = audit(&home, &config, "my_finance_bot");
    assert_eq!(
        groups(&report),
        [
            "no_internet_access",
            "no_process_creation",
            "allowed_executables",
            "max_memory_512mb",
            "read_only_mounts"
        ]
    );
    assert_eq!(
        report["container"]["runner"],
        serde_json::json!({
            "no_process_creation": true,
            "allowed_executables": ["/usr/bin/python3"],
            // No way out, but the relay answers a client with why (403).
            "egress": {"listen": "127.0.0.1:3128", "socket": "/run/pincer/gateway/egress.sock"},
        })
    );
    assert_eq!(report["container"]["memory_bytes"], 512 << 20);
    assert_eq!(report["container"]["mounts_read_only"], true);

    let (text, report) = audit(&home, &config, "sales_analyst_bot");
    assert_eq!(groups(&report), ["no_internet_access"]);
    let server = &report["reach"]["mcp_servers"][0];
    assert_eq!(server["name"], "company_db");
    assert_eq!(server["reachable"], true);
    assert_eq!(server["tools"], serde_json::json!(["query_sql"]));
    let container = &report["mcp_containers"][0];
    assert_eq!(container["server"], "company_db");
    assert_eq!(container["image"], "my-mcp-sqlite-server:latest");
    assert_eq!(
        container["groups"],
        serde_json::json!(["no_internet_access", "read_only_rootfs"])
    );
    assert_eq!(container["container"]["network_mode"], "none");
    assert_eq!(container["container"]["read_only_rootfs"], true);
    assert_eq!(
        container["container"]["cap_drop"],
        serde_json::json!(["ALL"])
    );
    assert_eq!(
        container["mounts"],
        serde_json::json!([{"source": "/path/to/company/data.db", "target": "/data.db", "mode": "ro"}])
    );
    // The server's volume is private data the workspace can read.
    assert_eq!(
        report["trifecta"]["private_data"],
        serde_json::json!(["MCP server company_db volume /path/to/company/data.db → /data.db"])
    );
    assert!(
        text.contains("mcp server company_db (its own container, image my-mcp-sqlite-server:latest; stdio over Docker's attach stream, no host network)"),
        "{text}"
    );
}

#[test]
fn a_broken_configuration_gets_every_problem_in_one_run_each_with_its_position() {
    let home = Home::new();
    let config = home.write(
        "gateway:\n\
         \x20 timeout: -1\n\
         \x20 retries: 3\n\
         workspaces:\n\
         \x20 a:\n\
         \x20   policies: [no_internet, \"allowed_executables: /bin/sh\"]\n\
         \x20   mounts: [{source: /nonexistent/pincer-pynchy, target: /m}]\n\
         \x20   mcp_servers: [ghost]\n\
         \x20 B: {}\n\
         litellm:\n\
         \x20 model: llama3\n\
         mcp_servers:\n\
         \x20 db:\n\
         \x20   type: docker\n\
         \x20   image: i\n\
         \x20   volumes: [\"data.db:/data.db\"]\n\
         \x20   env: {KEY: \"${PINCER_PYNCHY_UNSET}\"}\n",
    );
    let file = config.display().to_string();
    let err = fails(home.pincer(&["--config", &file, "config", "check"], &[]));
    let want = [
        "2:12: timeout must be a positive number of seconds",
        "3:3: unknown key `retries` (expected one of `listen`, `allow_remote`, `metrics_key`, `limits`, `model_list`, `fallbacks`, `routing_strategy`, `num_retries`, `timeout`, `prices`, `cache`, `max_request_bytes`)",
        "6:16: workspace a: unknown policy group `no_internet`, did you mean `no_internet_access`? (known: egress_any_public, egress_none, no_internet_access, no_process_creation, read_only_mounts, read_only_rootfs, max_memory_<N>mb, max_memory_<N>gb, max_cpus_<N>, max_pids_<N>, {allowed_executables: [paths]})",
        "6:29: cannot read `allowed_executables: /bin/sh` as a policy entry (expected a [list] after `allowed_executables:`); write allowed_executables: [/usr/bin/python3, ...] with absolute paths, or the mapping {allowed_executables: [...]}",
        "7:23: workspace a: mount source /nonexistent/pincer-pynchy does not exist",
        "8:19: unknown MCP server `ghost` (not defined under mcp_servers)",
        "9:3: invalid workspace name `B`: use 1-63 characters from a-z, 0-9, `_` and `-`, starting with a letter or digit",
        "11:10: no provider for this model: `llama3` is not a name pincer resolves (claude-* is Anthropic, gpt-*/o1*/o3*/o4* OpenAI, gemini-* Google); write it as provider/model, e.g. ollama/llama3, or openai_compatible/llama3 with api_base",
        "16:15: volume `data.db:/data.db`: the host path must be absolute or start with ~ (pincer mounts host paths only, not named volumes)",
        "17:17: environment variable PINCER_PYNCHY_UNSET is not set",
    ];
    let lines: Vec<&str> = err.lines().collect();
    for (line, expected) in lines.iter().zip(&want) {
        assert_eq!(*line, format!("{file}:{expected}"), "in\n{err}");
    }
    assert_eq!(
        lines.len(),
        want.len() + 1,
        "every problem once, then the count:\n{err}"
    );
    assert_eq!(
        lines[want.len()],
        format!("{file}: {} problems (nothing was started)", want.len())
    );
}

/// What `config check` accepts, `workspace up` and `policy audit` accept
/// too, and the other way round: an unknown group written as a string was
/// `ok` for `check` and refused only at start.
#[test]
fn check_refuses_what_workspace_up_and_policy_audit_refuse() {
    let home = Home::new();
    let config =
        home.write("workspaces:\n  w:\n    policies: [\"allowed_executable: [/bin/sh]\"]\n");
    let file = config.display().to_string();
    let check = fails(home.pincer(&["--config", &file, "config", "check"], &[]));
    assert_eq!(
        check.lines().next().unwrap(),
        format!(
            "{file}:3:16: workspace w: unknown policy group `allowed_executable: [/bin/sh]` (known: egress_any_public, egress_none, no_internet_access, no_process_creation, read_only_mounts, read_only_rootfs, max_memory_<N>mb, max_memory_<N>gb, max_cpus_<N>, max_pids_<N>, {{allowed_executables: [paths]}})"
        )
    );
    let audit = fails(home.pincer(&["--config", &file, "policy", "audit", "w"], &[]));
    assert!(
        audit.contains("unknown policy group `allowed_executable: [/bin/sh]`"),
        "{audit}"
    );

    // Written right, all three accept it and mean the same.
    let config =
        home.write("workspaces:\n  w:\n    policies: [\"allowed_executables: [/bin/sh]\"]\n");
    let file = config.display().to_string();
    ok(home.pincer(&["--config", &file, "config", "check"], &[]));
    let (_, report) = audit_of(&home, &file, "w");
    assert_eq!(
        report["container"]["runner"]["allowed_executables"],
        serde_json::json!(["/bin/sh"])
    );
}

fn audit_of(home: &Home, file: &str, workspace: &str) -> (String, Value) {
    audit(home, Path::new(file), workspace)
}

/// `${workspace_base_path}` is the configuration's value: an environment
/// variable of that name does not move the workspace (a warning says so).
#[test]
fn a_config_value_wins_over_an_environment_variable_of_the_same_name() {
    let home = Home::new();
    let base = home.path().join("bases");
    let config = home.write(&format!(
        "containers:\n  workspace_base_path: {}\nworkspaces:\n  w:\n    path: \"${{workspace_base_path}}/w\"\n",
        base.display()
    ));
    let file = config.display().to_string();
    let env = [("workspace_base_path", "/tmp/elsewhere")];
    let out = home.pincer(&["--config", &file, "config", "check"], &env);
    ok(out.clone());
    assert_eq!(
        stderr(&out),
        format!(
            "{file}:5:12: warning: `${{workspace_base_path}}` is the configuration value containers.workspace_base_path (pincer uses it); the environment variable workspace_base_path is also set and is not used here\n"
        )
    );
    let json = ok(home.pincer(&["--config", &file, "policy", "audit", "w", "--json"], &env));
    let report: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        report["mounts"][0]["source"],
        base.join("w").display().to_string()
    );
    // A workspace folder may not be a place no container may reach.
    let config = home.write("workspaces:\n  w:\n    path: /\n");
    let file = config.display().to_string();
    assert_eq!(
        fails(home.pincer(&["--config", &file, "config", "check"], &[])),
        format!(
            "{file}:3:11: workspace w: mount source / is the root folder; mount a folder inside it\n{file}: 1 problem (nothing was started)\n"
        )
    );
}

#[test]
fn litellm_and_gateway_naming_the_same_alias_or_setting_is_an_error_naming_both() {
    let home = Home::new();
    let config = home.write(
        "gateway:\n  timeout: 30\n  model_list:\n    - {model_name: default, litellm_params: {model: openai/gpt-4o, api_key: k}}\n\
         litellm:\n  model: gpt-4o\n  timeout: 60\n",
    );
    let file = config.display().to_string();
    assert_eq!(
        fails(home.pincer(&["--config", &file, "config", "check"], &[])),
        format!(
            "{file}:6:3: litellm.model defines the model alias `default`, and gateway.model_list defines it too (at 4:8): keep one of the two\n\
             {file}:7:3: `timeout` is set in both litellm.timeout and gateway.timeout (at 2:3): keep one\n\
             {file}: 2 problems (nothing was started)\n"
        )
    );
}

// ---- the MCP server in its own container ------------------------------

/// Removes the test's image on drop.
struct Image(String);

impl Drop for Image {
    fn drop(&mut self) {
        docker(&["rmi", "-f", &self.0]);
    }
}

/// The static test server `images/mcp-sqlite` as an image built from
/// scratch (the binary and the empty folders a container needs), imported
/// with no registry.
fn sqlite_server_image(label: &str) -> Image {
    let path = env!("PINCER_TEST_MCP_SQLITE");
    let binary = std::fs::read(path).unwrap_or_else(|e| {
        panic!("the test MCP server {path}: {e} (test builds make it; a release build does not: use scripts/test)")
    });
    let mut tar = tar::Builder::new(Vec::new());
    for dir in ["dev", "proc", "sys", "tmp", "etc"] {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(if dir == "tmp" { 0o1777 } else { 0o755 });
        h.set_size(0);
        tar.append_data(&mut h, dir, std::io::empty()).unwrap();
    }
    let mut h = tar::Header::new_gnu();
    h.set_mode(0o755);
    h.set_size(binary.len() as u64);
    tar.append_data(&mut h, "pincer-mcp-sqlite", binary.as_slice())
        .unwrap();
    let rootfs = tar.into_inner().unwrap();
    let tag = format!("pincer-test-mcp-sqlite:{label}");
    let mut import = Command::new("docker")
        .args([
            "import",
            "--change",
            "ENTRYPOINT [\"/pincer-mcp-sqlite\"]",
            "--change",
            &format!("LABEL pincer.test={label}"),
            "-",
            &tag,
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("docker import");
    import.stdin.take().unwrap().write_all(&rootfs).unwrap();
    let out = import.wait_with_output().unwrap();
    assert!(out.status.success(), "docker import: {}", stderr(&out));
    Image(tag)
}

fn events(out: &Output) -> Vec<Value> {
    stdout(out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

fn tool_results(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["event"] == "message" && e["message"]["role"] == "tool")
        .map(|e| e["message"]["content"].as_str().unwrap_or("").to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_no_internet_workspace_queries_the_containerised_mcp_server_and_nothing_more() {
    let label = unique();
    let image = sqlite_server_image(&label);
    let upstream = FakeUpstream::spawn(Behaviour::Script(vec![
        // sales: read, try to write, try the filtered-out tool, answer
        Behaviour::tool(
            "company_db__query_sql",
            r#"{"sql": "SELECT region, amount FROM sales ORDER BY region"}"#,
        ),
        Behaviour::tool(
            "company_db__query_sql",
            r#"{"sql": "INSERT INTO sales VALUES ('east', 1)"}"#,
        ),
        Behaviour::tool("company_db__list_tables", "{}"),
        Behaviour::answer("north 120, south 80"),
    ]))
    .await;
    let home = Home::new();
    let cleanup = DockerCleanup {
        home: home.sandbox.home(),
        label: label.clone(),
    };
    // The database: writable by anyone on the host, so only the read-only
    // volume can stop a write.
    let data = home.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let db = data.join("company.db");
    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.execute_batch(
            "CREATE TABLE sales (region TEXT, amount INTEGER);
             INSERT INTO sales VALUES ('north', 120), ('south', 80);",
        )
        .unwrap();
    }
    std::fs::set_permissions(&db, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
    let config = home.write(&format!(
        "gateway:\n  num_retries: 0\n  model_list:\n    - model_name: default\n      litellm_params: {{model: openai/fake-model, api_base: \"{}\", api_key: sk-pynchy-test-provider}}\n\
         containers:\n  default_runtime: docker\n  workspace_base_path: {}\n\
         workspaces:\n  sales:\n    policies: [\"no_internet_access\"]\n    mcp_servers: [\"company_db\"]\n  intruder:\n    policies: [\"no_internet_access\"]\n\
         mcp_servers:\n  company_db:\n    type: docker\n    image: \"{}\"\n    volumes: [\"{}:/data.db:ro\"]\n    env: {{DB_PATH: /data.db}}\n    tools: [query_sql]\n    allowed_workspaces: [sales]\n",
        upstream.base_url,
        home.path().join("ws").display(),
        image.0,
        db.display()
    ));
    let file = config.display().to_string();
    ok(home.pincer(&["--config", &file, "config", "check"], &[]));
    ok(home.pincer(&["--config", &file, "image", "build"], &[]));

    let out = home.pincer(
        &[
            "--config",
            &file,
            "message",
            "-w",
            "sales",
            "--json",
            "--text",
            "sales by region?",
        ],
        &[],
    );
    let seen = events(&out);
    assert!(out.status.success(), "{}\n{seen:?}", stderr(&out));
    let started = seen.iter().find(|e| e["event"] == "started").unwrap();
    let tools = started["tools"].to_string();
    assert!(
        tools.contains("company_db__query_sql"),
        "{tools}\n{}",
        stderr(&out)
    );
    assert!(
        !tools.contains("list_tables"),
        "filtered out by tools: {tools}"
    );
    let results = tool_results(&seen);
    assert_eq!(
        results[0], r#"[{"amount":120,"region":"north"},{"amount":80,"region":"south"}]"#,
        "{seen:?}"
    );
    assert!(
        results[1].contains("query failed: attempt to write a readonly database"),
        "{}",
        results[1]
    );
    assert!(!results[2].contains("sales"), "{}", results[2]);
    // Nothing was written.
    let rows: i64 = rusqlite::Connection::open(&db)
        .unwrap()
        .query_row("SELECT count(*) FROM sales", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 2);

    // A workspace the server does not allow cannot call it, not even
    // straight on the gateway's MCP endpoint with its own key: the gateway
    // refuses, naming the key, audits it, and never starts the server.
    let gateway = support::gateway::serve(&home.sandbox, &config, "gateway.log", &[]);
    let mcp_url = format!("{}/mcp", gateway.base);
    let key = |workspace: &str| {
        ok(home.pincer(
            &["--config", &file, "gateway", "keys", "create", workspace],
            &[],
        ))
        .trim()
        .to_string()
    };
    let started_before = mcp_kinds(&home.sandbox)
        .iter()
        .filter(|k| k.starts_with("mcp.server_started"))
        .count();
    let refused = support::gateway::python_client(
        "mcp_call.py",
        &[
            &mcp_url,
            &key("intruder"),
            "company_db__query_sql",
            r#"{"sql": "SELECT * FROM sales"}"#,
        ],
    );
    assert_eq!(refused["ok"], false, "{refused}");
    let why = "tool `company_db__query_sql` is not available to workspace `intruder`: `company_db` is not a skill or MCP server this workspace may use (list it in workspaces.intruder.skills or workspaces.intruder.mcp_servers)";
    assert_eq!(refused["error"], format!("MCPError: {why}"), "{refused}");
    // Written by the gateway's writer, one group commit after the answer.
    let mut denied = audit_rows(&home.sandbox, "gateway.denied");
    for _ in 0..100 {
        if !denied.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        denied = audit_rows(&home.sandbox, "gateway.denied");
    }
    assert_eq!(
        denied,
        [format!("workspace:intruder {why}")],
        "audited once"
    );
    assert_eq!(
        mcp_kinds(&home.sandbox)
            .iter()
            .filter(|k| k.starts_with("mcp.server_started"))
            .count(),
        started_before,
        "the refused call started no server"
    );
    assert!(running(&image).is_empty(), "no server container runs");

    // What Docker runs for the allowed workspace is what the audit said:
    // no network (only `lo`), read-only root, no capabilities, no new
    // privileges, the volume read-only, pincer's labels.
    let answered = support::gateway::python_client(
        "mcp_call.py",
        &[
            &mcp_url,
            &key("sales"),
            "company_db__query_sql",
            r#"{"sql": "SELECT region FROM sales ORDER BY region"}"#,
        ],
    );
    assert_eq!(answered["ok"], true, "{answered}");
    let ids = running(&image);
    assert_eq!(ids.len(), 1, "{ids:?}");
    let inspected: Value = serde_json::from_str(&stdout(&docker(&["inspect", &ids[0]]))).unwrap();
    let c = &inspected[0];
    let host = &c["HostConfig"];
    assert_eq!(host["NetworkMode"], "none", "{host}");
    assert_eq!(host["ReadonlyRootfs"], true);
    assert_eq!(host["CapDrop"], serde_json::json!(["ALL"]));
    assert!(
        host["CapAdd"].as_array().is_none_or(Vec::is_empty),
        "{}",
        host["CapAdd"]
    );
    assert_eq!(host["Privileged"], false);
    assert!(
        host["SecurityOpt"]
            .as_array()
            .unwrap()
            .iter()
            .any(|o| o.as_str().unwrap().starts_with("no-new-privileges")),
        "{}",
        host["SecurityOpt"]
    );
    let mounts = c["Mounts"].as_array().unwrap();
    assert_eq!(mounts.len(), 1, "only its volume: {mounts:?}");
    assert_eq!(mounts[0]["Source"], db.display().to_string());
    assert_eq!(mounts[0]["Destination"], "/data.db");
    assert_eq!(mounts[0]["RW"], false);
    let labels = &c["Config"]["Labels"];
    let instance = std::fs::read_to_string(home.sandbox.home().join("instance-id")).unwrap();
    assert_eq!(labels["pincer.mcp-server"], "company_db", "{labels}");
    assert_eq!(labels["pincer.instance"], instance.trim(), "{labels}");
    let owner = labels["pincer.mcp-owner"].as_str().unwrap_or_default();
    assert_eq!(
        owner.split(':').nth(1),
        Some(gateway.child.as_ref().unwrap().id().to_string().as_str()),
        "owned by the gateway process: {labels}"
    );
    let pid = c["State"]["Pid"].as_u64().unwrap();
    let net = std::fs::read_to_string(format!("/proc/{pid}/net/dev")).unwrap();
    let interfaces: Vec<&str> = net
        .lines()
        .skip(2)
        .filter_map(|l| l.split(':').next())
        .map(str::trim)
        .collect();
    assert_eq!(interfaces, ["lo"], "{net}");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    for cap in ["CapPrm", "CapEff", "CapBnd"] {
        assert!(
            status
                .lines()
                .any(|l| l.starts_with(cap) && l.ends_with("0000000000000000")),
            "{cap} not empty:\n{status}"
        );
    }
    drop(gateway);

    // The audit log has the server's start and every call.
    let actions = strings(
        &home.sandbox,
        "SELECT kind || ' ' || detail FROM audit_events ORDER BY id",
    );
    assert!(
        actions
            .iter()
            .any(|a| a.starts_with("mcp.server_started container ")),
        "{actions:?}"
    );
    assert!(
        actions
            .iter()
            .any(|a| a == "gateway.tool_call company_db__query_sql: ok"),
        "{actions:?}"
    );
    drop(cleanup);
}

/// A containerised MCP server that hangs (a query that never ends) is cut
/// off at `call_timeout_secs`, audited and replaced, and the next call in
/// the same turn gets a fresh server that answers.
#[tokio::test(flavor = "multi_thread")]
async fn a_hung_mcp_server_times_out_and_the_next_call_gets_a_fresh_one() {
    let label = unique();
    let image = sqlite_server_image(&label);
    let upstream = FakeUpstream::spawn(Behaviour::Script(vec![
        Behaviour::tool(
            "company_db__query_sql",
            r#"{"sql": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"}"#,
        ),
        Behaviour::tool(
            "company_db__query_sql",
            r#"{"sql": "SELECT region FROM sales ORDER BY region"}"#,
        ),
        Behaviour::answer("north, south"),
    ]))
    .await;
    let home = Home::new();
    let cleanup = DockerCleanup {
        home: home.sandbox.home(),
        label: label.clone(),
    };
    let data = home.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let db = data.join("company.db");
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute_batch(
            "CREATE TABLE sales (region TEXT, amount INTEGER);
             INSERT INTO sales VALUES ('north', 120), ('south', 80);",
        )
        .unwrap();
    let config = home.write(&format!(
        "gateway:\n  num_retries: 0\n  model_list:\n    - model_name: default\n      litellm_params: {{model: openai/fake-model, api_base: \"{}\", api_key: sk-pynchy-test-provider}}\n\
         containers:\n  workspace_base_path: {}\n\
         workspaces:\n  sales:\n    policies: [no_internet_access]\n    mcp_servers: [company_db]\n\
         mcp_servers:\n  company_db:\n    type: docker\n    image: \"{}\"\n    volumes: [\"{}:/data.db:ro\"]\n    env: {{DB_PATH: /data.db}}\n    call_timeout_secs: 3\n",
        upstream.base_url,
        home.path().join("ws").display(),
        image.0,
        db.display()
    ));
    let file = config.display().to_string();
    ok(home.pincer(&["--config", &file, "image", "build"], &[]));
    let out = home.pincer(
        &[
            "--config", &file, "message", "-w", "sales", "--json", "--text", "regions?",
        ],
        &[],
    );
    let seen = events(&out);
    assert!(out.status.success(), "{}\n{seen:?}", stderr(&out));
    let results = tool_results(&seen);
    assert!(
        results[0].contains("did not answer `query_sql` within 3s"),
        "{}",
        results[0]
    );
    assert_eq!(
        results[1], r#"[{"region":"north"},{"region":"south"}]"#,
        "a fresh server answered the next call: {seen:?}"
    );
    let kinds = strings(
        &home.sandbox,
        "SELECT kind FROM audit_events WHERE kind LIKE 'mcp.%' ORDER BY id",
    );
    assert_eq!(
        kinds,
        [
            "mcp.server_started",
            "mcp.call_timeout",
            "mcp.server_started"
        ],
        "started, cut off, started again"
    );
    drop(cleanup);
}

/// A containerised MCP server that dies between calls (its container
/// killed) is started again on the next call, which gets its answer; the
/// restart is audited. Through `pincer gateway serve` and the official
/// `mcp` client.
#[tokio::test(flavor = "multi_thread")]
async fn a_crashed_mcp_server_is_started_again_on_next_use() {
    let label = unique();
    let image = sqlite_server_image(&label);
    let data = tempfile::tempdir().unwrap();
    let db = sales_db(data.path());
    let served = support::gateway::Served::start(&sales_config(&image, &db), &[]);
    let cleanup = DockerCleanup {
        home: served.sandbox.home(),
        label: label.clone(),
    };
    let key = served.key("sales");
    let query = |served: &support::gateway::Served| {
        support::gateway::python_client(
            "mcp_call.py",
            &[
                &format!("{}/mcp", served.base),
                &key,
                "company_db__query_sql",
                r#"{"sql": "SELECT region FROM sales ORDER BY region"}"#,
            ],
        )
    };
    let first = query(&served);
    assert_eq!(first["ok"], true, "{first}\n{}", served.log());
    assert!(first["text"].to_string().contains("north"), "{first}");

    let running = stdout(&docker(&[
        "ps",
        "-q",
        "--filter",
        &format!("ancestor={}", image.0),
    ]));
    let ids: Vec<&str> = running.split_whitespace().collect();
    assert_eq!(ids.len(), 1, "one server container: {running}");
    assert!(docker(&["kill", ids[0]]).status.success(), "docker kill");

    let second = query(&served);
    assert_eq!(second["ok"], true, "{second}\n{}", served.log());
    assert!(second["text"].to_string().contains("south"), "{second}");
    let kinds = strings(
        &served.sandbox,
        "SELECT kind FROM audit_events WHERE kind LIKE 'mcp.%' ORDER BY id",
    );
    assert!(
        kinds.iter().filter(|k| *k == "mcp.server_started").count() == 2
            && kinds.iter().any(|k| k == "mcp.server_restarted"),
        "started, restarted after the crash: {kinds:?}"
    );
    drop(cleanup);
}

/// Workspace `sales` with server `company_db` in a container of `image`,
/// `db` mounted read-only at /data.db.
fn sales_config(image: &Image, db: &Path) -> String {
    format!(
        "workspaces:\n  sales:\n    policies: [no_internet_access]\n    mcp_servers: [company_db]\n\
         mcp_servers:\n  company_db:\n    type: docker\n    image: \"{}\"\n    volumes: [\"{}:/data.db:ro\"]\n    env: {{DB_PATH: /data.db}}\n",
        image.0,
        db.display()
    )
}

fn sales_db(dir: &Path) -> PathBuf {
    let db = dir.join("company.db");
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute_batch(
            "CREATE TABLE sales (region TEXT, amount INTEGER);
             INSERT INTO sales VALUES ('north', 120), ('south', 80);",
        )
        .unwrap();
    db
}

/// The ids of the running containers of `image`.
fn running(image: &Image) -> Vec<String> {
    stdout(&docker(&[
        "ps",
        "-q",
        "--no-trunc",
        "--filter",
        &format!("ancestor={}", image.0),
    ]))
    .split_whitespace()
    .map(str::to_string)
    .collect()
}

/// The `actor detail` of every `kind` row of the audit log.
fn audit_rows(sandbox: &Sandbox, kind: &str) -> Vec<String> {
    sandbox
        .db()
        .run(|c| {
            c.query(
                "SELECT actor || ' ' || detail FROM audit_events WHERE kind = ?1 ORDER BY id",
                &[kind.into()],
            )
        })
        .unwrap()
        .iter()
        .map(|r| r.get(0).unwrap())
        .collect()
}

fn mcp_kinds(sandbox: &Sandbox) -> Vec<String> {
    strings(
        sandbox,
        "SELECT kind || ' ' || detail FROM audit_events WHERE kind LIKE 'mcp.%' ORDER BY id",
    )
}

/// The first column of every row `sql` selects from the sandbox's state.
fn strings(sandbox: &Sandbox, sql: &str) -> Vec<String> {
    sandbox
        .rows(sql)
        .iter()
        .map(|r| r.get(0).unwrap())
        .collect()
}

/// Two gateway processes of one home (a daemon and a one-shot `pincer
/// message`, or two `gateway serve`) each run their own server container:
/// the second one's start does not remove the first one's live container
/// (it did: one container name per server, and the first use removed every
/// server container of the instance). A container whose gateway is gone is
/// removed by the next gateway's first use, and only that one.
#[tokio::test(flavor = "multi_thread")]
async fn two_gateways_of_one_home_do_not_remove_each_others_live_server_containers() {
    let label = unique();
    let image = sqlite_server_image(&label);
    let data = tempfile::tempdir().unwrap();
    let db = sales_db(data.path());
    let served = support::gateway::Served::start(&sales_config(&image, &db), &[]);
    let cleanup = DockerCleanup {
        home: served.sandbox.home(),
        label: label.clone(),
    };
    let key = served.key("sales");
    let query = |base: &str| {
        let out = support::gateway::python_client(
            "mcp_call.py",
            &[
                &format!("{base}/mcp"),
                &key,
                "company_db__query_sql",
                r#"{"sql": "SELECT region FROM sales ORDER BY region"}"#,
            ],
        );
        assert_eq!(out["ok"], true, "{out}\n{}", served.log());
        assert!(out["text"].to_string().contains("north"), "{out}");
    };
    query(&served.base);
    let first = running(&image);
    assert_eq!(first.len(), 1, "the first gateway's server: {first:?}");

    let second = served.another("gateway-b.log");
    query(&second.base);
    let both = running(&image);
    assert!(
        both.contains(&first[0]),
        "the second gateway removed the first one's live server container: {both:?}\n{:?}",
        mcp_kinds(&served.sandbox)
    );
    assert_eq!(both.len(), 2, "one server container each: {both:?}");
    query(&served.base);
    let kinds = mcp_kinds(&served.sandbox);
    assert!(
        !kinds.iter().any(|k| k.starts_with("mcp.server_restarted")),
        "the first gateway's server was never restarted: {kinds:?}"
    );

    // The second gateway dies without cleaning up: the next gateway's
    // first use removes its container, not the first one's.
    let orphan = both.iter().find(|id| **id != first[0]).unwrap().clone();
    drop(second);
    let third = served.another("gateway-c.log");
    query(&third.base);
    let now = running(&image);
    assert!(now.contains(&first[0]), "{now:?}");
    assert_eq!(now.len(), 2, "the first and the third gateway's: {now:?}");
    assert!(
        !docker(&["inspect", &orphan]).status.success(),
        "the dead gateway's container was removed"
    );
    let kinds = mcp_kinds(&served.sandbox);
    assert_eq!(
        kinds
            .iter()
            .filter(|k| k.starts_with("mcp.orphan_removed"))
            .count(),
        1,
        "{kinds:?}"
    );
    drop(third);
    drop(cleanup);
}

// ---- what check refuses, nothing starts --------------------------------

/// `workspace up` refuses what `config check` refuses, with the same lines
/// (it started a workspace whose configuration failed the check only on a
/// plugin name or a model deployment); both, and `policy audit`, work
/// with `DOCKER_HOST` naming a socket that does not exist.
#[test]
fn workspace_up_refuses_what_config_check_refuses_and_neither_needs_docker() {
    let home = Home::new();
    let config = home.write(
        "plugins:\n  enabled: [no-such-plugin]\n\
         gateway:\n  model_list:\n    - {model_name: default, litellm_params: {model: bogus/m, api_key: k}}\n\
         workspaces:\n  w: {}\n",
    );
    let file = config.display().to_string();
    let env = [("DOCKER_HOST", "unix:///nonexistent/pincer-test/docker.sock")];
    let check = fails(home.pincer(&["--config", &file, "config", "check"], &env));
    assert_eq!(
        check,
        format!(
            "{file}:2:13: no plugin named `no-such-plugin` (installed or built-in: channel-feishu, channel-slack, channel-webhook, observer-jsonl, skill-calc, skill-notes, tunnel-http).\n\
             {file}:5:53: gateway configuration: gateway.model_list[0] (`default#0`, model `bogus/m`): unknown provider; `model` must be one of openai/<model>, anthropic/<model>, ollama/<model>, openai_compatible/<model> or local/<name-or-path>\n\
             {file}: 2 problems (nothing was started)\n"
        )
    );
    let up = fails(home.pincer(&["--config", &file, "workspace", "up", "w"], &env));
    assert_eq!(up, format!("error: {check}"));
    // `pincer start` too (bounded: a daemon that started would run on).
    let mut start = Command::new("timeout");
    start.args(["20", env!("CARGO_BIN_EXE_pincer")]);
    let start = home
        .command(
            start,
            &["--config", &file, "start", "--listen", "127.0.0.1:0"],
            &env,
        )
        .output()
        .unwrap();
    assert_eq!(fails(start), format!("error: {check}"));

    let config = home.write(
        "gateway:\n  model_list:\n    - {model_name: default, litellm_params: {model: openai/m, api_key: k}}\n\
         workspaces:\n  w: {policies: [no_internet_access]}\n",
    );
    let file = config.display().to_string();
    ok(home.pincer(&["--config", &file, "config", "check"], &env));
    let json = ok(home.pincer(&["--config", &file, "policy", "audit", "w", "--json"], &env));
    let report: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(report["workspace"], "w", "{report}");
}

/// `plugins.enabled`: only the plugins it lists and those the
/// configuration names elsewhere (here a workspace's skill) are loaded; any
/// other is not, though it is installed.
#[test]
fn plugins_enabled_loads_only_the_listed_and_the_referenced_plugins() {
    let home = Home::new();
    let config = home
        .write("plugins:\n  enabled: [skill-calc]\nworkspaces:\n  w:\n    skills: [skill-notes]\n");
    let file = config.display().to_string();
    ok(home.pincer(&["--config", &file, "config", "check"], &[]));
    let listed = ok(home.pincer(&["--config", &file, "skill", "tools", "skill-calc"], &[]));
    assert!(listed.starts_with("evaluate: "), "{listed}");
    let referenced = ok(home.pincer(&["--config", &file, "skill", "tools", "skill-notes"], &[]));
    assert!(referenced.starts_with("put: "), "{referenced}");
    let refused = fails(home.pincer(
        &["--config", &file, "plugin", "inspect", "observer-jsonl"],
        &[],
    ));
    assert_eq!(
        refused,
        "error: plugin `observer-jsonl` is not enabled: plugins.enabled does not list it and no channel, skills rule or workspace names it (add it to plugins.enabled)\n"
    );
    // Without `plugins.enabled` every plugin loads.
    let config = home.write("workspaces:\n  w: {}\n");
    let file = config.display().to_string();
    ok(home.pincer(
        &["--config", &file, "plugin", "inspect", "observer-jsonl"],
        &[],
    ));
}

/// Pynchy-key mistakes, each with its exact message and position.
#[test]
fn pynchy_key_mistakes_each_get_their_message_and_position() {
    let home = Home::new();
    let config = home.write(
        "gateway:\n\
         \x20 fallbacks: [{default: [other]}]\n\
         \x20 model_list:\n\
         \x20   - {model_name: other, litellm_params: {model: openai/gpt-4o, api_key: k}}\n\
         litellm:\n\
         \x20 model: claude-3-5-sonnet-20241022\n\
         \x20 fallbacks: [claude-3-haiku-20240307]\n\
         \x20 max_tokens: 5\n\
         containers:\n\
         \x20 default_runtime: docker\n\
         \x20 runtime: docker\n\
         mcp_servers:\n\
         \x20 a:\n\
         \x20   type: docker\n\
         \x20   image: i\n\
         \x20   container: {image: i}\n\
         \x20 b:\n\
         \x20   type: sse\n\
         \x20   url: http://127.0.0.1:1/mcp\n",
    );
    let file = config.display().to_string();
    assert_eq!(
        fails(home.pincer(&["--config", &file, "config", "check"], &[])),
        format!(
            "{file}:7:3: litellm.fallbacks sets the fallbacks of `default`, and gateway.fallbacks does too (at 2:16): keep one of the two\n\
             {file}:8:3: unknown key `max_tokens` in litellm (pincer reads model, api_key, api_base, num_retries, timeout, routing_strategy and fallbacks there; anything else goes under gateway:, e.g. gateway.model_list[].litellm_params.max_tokens)\n\
             {file}:10:3: `default_runtime` and `runtime` (at 11:3) are the same setting: keep one\n\
             {file}:14:5: `type: docker` and `container:` (at 16:5) both describe the container: keep one\n\
             {file}:18:11: unknown MCP server type `sse`: pincer runs `docker` (write `container: {{image: ...}}` or `type: docker` with `image`), `stdio` (`command: [program, args...]`) and `http` (`url: https://...`)\n\
             {file}: 5 problems (nothing was started)\n"
        )
    );

    let config = home.write("litellm:\n  api_key: k\n");
    let file = config.display().to_string();
    assert_eq!(
        fails(home.pincer(&["--config", &file, "config", "check"], &[])),
        format!(
            "{file}:1:1: litellm needs `model` (e.g. claude-3-5-sonnet-20241022); it becomes the model alias `default`\n\
             {file}: 1 problem (nothing was started)\n"
        )
    );

    let config = home.write("plugins:\n  enabled: [pynchy.builtin.agents.claude]\n");
    let file = config.display().to_string();
    assert_eq!(
        fails(home.pincer(&["--config", &file, "config", "check"], &[])),
        format!(
            "{file}:2:13: `pynchy.builtin.agents.claude` is a Pynchy entry point of kind `agents`, which pincer does not have (it loads channels, skills, observers and tunnels): not available in pincer\n\
             {file}: 1 problem (nothing was started)\n"
        )
    );

    // `litellm:` and `gateway.model_list` for different aliases: both kept.
    let config = home.write(
        "gateway:\n  model_list:\n    - {model_name: local, litellm_params: {model: openai/m, api_key: k}}\n\
         litellm:\n  model: claude-3-5-sonnet-20241022\n",
    );
    let file = config.display().to_string();
    let out = ok(home.pincer(&["--config", &file, "config", "check"], &[]));
    assert_eq!(
        out,
        format!("{file}: ok (0 workspaces, 2 model aliases, 0 channels, 0 MCP servers)\n")
    );
}

/// MCP server volumes go through the checks of workspace mounts: `config
/// check` refuses the engine's socket, pincer's home and a workspace
/// folder, each with its position.
#[test]
fn mcp_server_volumes_are_checked_like_workspace_mounts() {
    let home = Home::new();
    let base = home.path().join("ws");
    std::fs::create_dir_all(base.join("w")).unwrap();
    let socket = home.path().join("engine.sock");
    let _engine = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let config = home.write(&format!(
        "containers:\n  workspace_base_path: {}\n\
         workspaces:\n  w: {{}}\n\
         mcp_servers:\n  db:\n    type: docker\n    image: i\n    volumes:\n      - \"{}:/s\"\n      - \"{}:/h\"\n      - \"{}:/w\"\n",
        base.display(),
        socket.display(),
        home.sandbox.home().display(),
        base.join("w").display(),
    ));
    let file = config.display().to_string();
    let docker_host = format!("unix://{}", socket.display());
    let never =
        "a container must never reach it — mount a folder that holds only what the agent may see";
    assert_eq!(
        fails(home.pincer(
            &["--config", &file, "config", "check"],
            &[("DOCKER_HOST", &docker_host)]
        )),
        format!(
            "{file}:10:9: MCP server db: mount source {sock} is {sock} (the container engine's socket (DOCKER_HOST)); {never}\n\
             {file}:11:9: MCP server db: mount source {home} is {home} (pincer's state: database, tokens, sockets (PINCER_HOME)); {never}\n\
             {file}:12:9: MCP server db: mount source {ws} is inside {base} (the folder of every workspace (containers.workspace_base_path)); {never}\n\
             {file}: 3 problems (nothing was started)\n",
            sock = socket.display(),
            home = home.sandbox.home().display(),
            ws = base.join("w").display(),
            base = base.display(),
        )
    );
}

/// A volume source that passed the check and was then swapped for a
/// symlink (to pincer's database) is refused when the server starts: no
/// container, the failure audited, and the check now refuses it too.
#[tokio::test(flavor = "multi_thread")]
async fn an_mcp_volume_swapped_for_a_symlink_is_refused_at_start() {
    let label = unique();
    let image = sqlite_server_image(&label);
    let data = tempfile::tempdir().unwrap();
    let db = sales_db(data.path());
    let served = support::gateway::Served::start(&sales_config(&image, &db), &[]);
    let cleanup = DockerCleanup {
        home: served.sandbox.home(),
        label: label.clone(),
    };
    ok(served.cli(&["config", "check"]));
    let key = served.key("sales");
    std::fs::rename(&db, data.path().join("moved.db")).unwrap();
    // A symlink to the host's state file (on PostgreSQL, to another file).
    let target = match &served.sandbox.state() {
        pincer::db::Location::Sqlite(path) => path.clone(),
        pincer::db::Location::Postgres(_) => data.path().join("moved.db"),
    };
    std::os::unix::fs::symlink(&target, &db).unwrap();
    let out = support::gateway::python_client(
        "mcp_call.py",
        &[
            &format!("{}/mcp", served.base),
            &key,
            "company_db__query_sql",
            r#"{"sql": "SELECT name FROM sqlite_master"}"#,
        ],
    );
    assert_eq!(out["ok"], false, "{out}");
    assert_eq!(
        out["error"],
        format!(
            "MCPError: MCP server `company_db`: volume `{}:/data.db:ro`: mount source {} resolves through a symlink to {}; name the real path",
            db.display(),
            db.display(),
            target.display()
        ),
        "{out}"
    );
    assert!(running(&image).is_empty());
    let kinds = mcp_kinds(&served.sandbox);
    assert!(
        !kinds.iter().any(|k| k.starts_with("mcp.server_started")),
        "{kinds:?}"
    );
    assert!(
        kinds.iter().any(|k| k.starts_with("mcp.server_failed")),
        "{kinds:?}"
    );
    let check = fails(served.cli(&["config", "check"]));
    let file = served.sandbox.work().join("pincer.yaml");
    assert_eq!(
        check,
        format!(
            "{file}:9:15: MCP server company_db: mount source {} resolves through a symlink to {}; name the real path\n\
             {file}: 1 problem (nothing was started)\n",
            db.display(),
            target.display(),
            file = file.display()
        )
    );
    drop(cleanup);
}
