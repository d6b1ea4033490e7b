use std::collections::BTreeMap;
use std::path::Path;

use super::*;

const FILE: &str = "pincer.yaml";

fn env(name: &str) -> Option<String> {
    match name {
        "OPENAI_API_KEY" => Some("sk-test-openai".into()),
        "WEBHOOK_SECRET" => Some("key: value\n- item\n{flow: x} # not a comment".into()),
        "EMPTY" => Some(String::new()),
        "RETRIES" => Some("5".into()),
        "NOT_A_NUMBER" => Some("hunter2-secret".into()),
        _ => None,
    }
}

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::from_str_with_env(text, Path::new(FILE), env)
}

#[track_caller]
fn error(text: &str) -> String {
    match parse(text) {
        Ok(cfg) => panic!("expected an error, parsed {cfg:?}"),
        Err(err) => err.to_string(),
    }
}

/// Asserts the exact `file:line:column: ` prefix and that the message
/// contains every `needle`.
#[track_caller]
fn assert_error(text: &str, line: usize, column: usize, needles: &[&str]) -> String {
    let shown = error(text);
    let prefix = format!("{FILE}:{line}:{column}: ");
    assert!(
        shown.starts_with(&prefix),
        "want prefix {prefix:?}, got {shown:?}"
    );
    for needle in needles {
        assert!(shown.contains(needle), "{needle:?} missing from {shown:?}");
    }
    shown
}

// ---- syntax ----

#[test]
fn broken_yaml_has_position() {
    assert_error("gateway:\n  listen: [1, 2\n  timeout: 3\n", 3, 10, &[]);
    assert_error("gateway:\n  listen: \"127.0.0.1:4000\n", 2, 11, &["quote"]);
    assert_error("gateway: a: b\n", 1, 11, &["mapping values"]);
}

#[test]
fn broken_yaml_is_a_syntax_error() {
    let err = parse("a: [\n").unwrap_err();
    assert!(matches!(err, ConfigError::Syntax { .. }), "{err:?}");
    assert!(err.position().is_some());
}

#[test]
fn duplicate_keys_are_errors() {
    assert_error(
        "workspaces:\n  dev: {}\n  dev: {}\n",
        3,
        3,
        &["duplicate", "dev"],
    );
    assert_error("gateway: {}\ngateway: {}\n", 2, 1, &["duplicate"]);
}

#[test]
fn more_than_one_document_is_an_error() {
    assert_error("gateway: {}\n---\nplugins: {}\n", 3, 1, &["single"]);
}

fn nested(depth: usize) -> String {
    format!(
        "plugins:\n  config:\n    x: {}{}\n",
        "[".repeat(depth),
        "]".repeat(depth)
    )
}

#[test]
fn deep_nesting_is_an_error_not_a_crash() {
    // root, plugins and config are three levels: 29 more reach the limit
    let limit = node::MAX_DEPTH - 3;
    let cfg = parse(&nested(limit)).unwrap();
    assert!(cfg.plugins.config["x"].is_array());
    assert_error(
        &nested(limit + 1),
        3,
        8 + limit,
        &["nested more than 32 levels deep"],
    );
    // far deeper: the YAML parser's own flow-nesting limit answers first
    let shown = error(&nested(10_000));
    assert!(shown.starts_with("pincer.yaml:3:"), "{shown}");
}

#[test]
fn unknown_alias_is_a_syntax_error() {
    assert_error("gateway: *nope\n", 1, 10, &["unknown anchor"]);
}

// ---- schema ----

#[test]
fn unknown_top_level_key() {
    assert_error(
        "gateway: {}\nworkspace:\n  dev: {}\n",
        2,
        1,
        &[
            "unknown key `workspace`",
            "did you mean `workspaces`",
            "`mcp_servers`",
        ],
    );
}

#[test]
fn unknown_nested_key() {
    let shown = assert_error(
        "workspaces:\n  x:\n    model: default\n    polices: [no_internet_access]\n",
        4,
        5,
        &[
            "unknown key `polices`",
            "did you mean `policies`",
            "`mounts`",
        ],
    );
    let err = parse("workspaces:\n  x:\n    polices: []\n").unwrap_err();
    assert!(matches!(err, ConfigError::Schema { .. }), "{shown}");
}

#[test]
fn unknown_key_in_flow_mapping_and_list_item() {
    assert_error(
        "workspaces:\n  x:\n    mounts: [{source: a, target: /a, readonly: true}]\n",
        3,
        38,
        &["unknown key `readonly`", "`read_only`"],
    );
    assert_error(
        "gateway:\n  model_list:\n    - model_name: a\n      litellm_params: {model: m, api_keys: k}\n",
        4,
        34,
        &["unknown key `api_keys`", "did you mean `api_key`"],
    );
}

#[test]
fn wrong_type() {
    assert_error(
        "gateway:\n  num_retries: \"two\"\n",
        2,
        16,
        &["wrong type", "u32", "\"two\""],
    );
    assert_error(
        "plugins:\n  limits:\n    memory_mb: [64]\n",
        3,
        16,
        &["wrong type", "sequence"],
    );
    assert_error("workspaces:\n  x: [a]\n", 2, 6, &["wrong type"]);
    assert_error("gateway:\n  listen: 4000\n", 2, 11, &["socket address"]);
    assert_error("hello\n", 1, 1, &["wrong type"]);
}

#[test]
fn enum_value_lists_the_allowed_values() {
    assert_error(
        "gateway:\n  routing_strategy: fastest\n",
        2,
        21,
        &[
            "`fastest`",
            "`simple-shuffle`",
            "`least-busy`",
            "`latency-based`",
        ],
    );
    assert_error("containers:\n  runtime: podman\n", 2, 12, &["`docker`"]);
}

#[test]
fn missing_required_key() {
    assert_error(
        "workspaces:\n  dev: {}\nchannels:\n  hook:\n    workspace: dev\n",
        5,
        5,
        &["missing required key `plugin`"],
    );
}

#[test]
fn complex_mapping_keys_are_rejected() {
    assert_error("workspaces:\n  ? [a]\n  : {}\n", 2, 5, &["key"]);
}

// ---- interpolation ----

#[test]
fn missing_env_points_at_the_dollar() {
    let text = "gateway:\n  model_list:\n    - model_name: default\n      litellm_params:\n        model: openai/gpt-4o-mini\n        api_key: \"Bearer ${ANTHROPIC_API_KEY}\"\n";
    let shown = assert_error(text, 6, 26, &[]);
    assert_eq!(
        shown,
        "pincer.yaml:6:26: environment variable ANTHROPIC_API_KEY is not set"
    );
    assert!(matches!(
        parse(text).unwrap_err(),
        ConfigError::MissingEnv { ref name, .. } if name == "ANTHROPIC_API_KEY"
    ));
}

#[test]
fn missing_env_in_free_form_and_block_scalars() {
    assert_error(
        "plugins:\n  config:\n    my-plugin:\n      nested: [{deep: \"x ${NOPE}\"}]\n",
        4,
        26,
        &["environment variable NOPE is not set"],
    );
    assert_error(
        "plugins:\n  config:\n    p:\n      script: |\n        line one\n        two ${NOPE} three\n",
        6,
        13,
        &["environment variable NOPE is not set"],
    );
    // plain scalar, second reference on the line
    assert_error(
        "containers:\n  image: ${OPENAI_API_KEY}-${NOPE}\n",
        2,
        28,
        &["NOPE"],
    );
}

#[test]
fn malformed_reference_is_a_positioned_syntax_error() {
    let text = "containers:\n  image: \"pincer-${1TAG}\"\n";
    let shown = assert_error(text, 2, 18, &["invalid reference", "$${"]);
    assert!(
        matches!(parse(text).unwrap_err(), ConfigError::Syntax { .. }),
        "{shown}"
    );
    assert_error(
        "containers:\n  image: \"pincer-${TAG\"\n",
        2,
        18,
        &["unterminated"],
    );
}

#[test]
fn interpolated_value_stays_one_string() {
    let cfg = parse(
        "plugins:\n  config:\n    channel-webhook: {secret: \"${WEBHOOK_SECRET}\"}\n    plain:\n      secret: ${WEBHOOK_SECRET}\n",
    )
    .unwrap();
    let want = serde_json::json!({"secret": "key: value\n- item\n{flow: x} # not a comment"});
    assert_eq!(cfg.plugins.config["channel-webhook"], want);
    assert_eq!(cfg.plugins.config["plain"], want);
}

#[test]
fn interpolation_inside_typed_strings_maps_and_lists() {
    let cfg = parse(
        "gateway:\n  model_list:\n    - model_name: default\n      litellm_params:\n        model: openai/gpt-4o-mini\n        api_key: ${OPENAI_API_KEY}\nmcp_servers:\n  s:\n    command: [server, \"--token=${OPENAI_API_KEY}\"]\n    env: {TOKEN: \"${OPENAI_API_KEY}\"}\n",
    )
    .unwrap();
    let params = &cfg.gateway.model_list[0].litellm_params;
    assert_eq!(params.api_key.as_deref(), Some("sk-test-openai"));
    let server = &cfg.mcp_servers["s"];
    assert_eq!(
        server.command.as_deref(),
        Some(&["server".to_owned(), "--token=sk-test-openai".to_owned()][..])
    );
    assert_eq!(server.env["TOKEN"], "sk-test-openai");
}

#[test]
fn dollar_dollar_brace_escapes() {
    let cfg = parse(
        "containers:\n  image: \"$${NOT_ENV} $$HOME $5\"\nplugins:\n  config:\n    p: {tpl: \"$${X:-y}\"}\n",
    )
    .unwrap();
    assert_eq!(cfg.containers.image, "${NOT_ENV} $$HOME $5");
    assert_eq!(
        cfg.plugins.config["p"],
        serde_json::json!({"tpl": "${X:-y}"})
    );
}

#[test]
fn default_syntax() {
    let cfg = parse(
        "containers:\n  image: \"${IMAGE:-pincer-agent:dev}\"\n  workspace_base_path: ${EMPTY:-/srv/ws}\ngateway:\n  listen: ${LISTEN:-0.0.0.0:8080}\n  allow_remote: true\n  metrics_key: ${KEY:-0123456789abcdef}\n",
    )
    .unwrap();
    assert_eq!(cfg.containers.image, "pincer-agent:dev");
    assert_eq!(cfg.containers.workspace_base_path, Path::new("/srv/ws"));
    assert_eq!(cfg.gateway.listen.to_string(), "0.0.0.0:8080");
}

#[test]
fn interpolated_numbers_and_their_errors() {
    let cfg = parse("gateway:\n  num_retries: ${RETRIES}\n  timeout: ${T:-12.5}\n").unwrap();
    assert_eq!(cfg.gateway.num_retries, 5);
    assert_eq!(cfg.gateway.timeout, 12.5);
    // a literal quoted number is still a string
    assert_error("gateway:\n  num_retries: \"5\"\n", 2, 16, &["wrong type"]);
}

#[test]
fn errors_never_show_substituted_values() {
    for (text, column) in [
        ("gateway:\n  num_retries: ${NOT_A_NUMBER}\n", 16),
        ("gateway:\n  routing_strategy: ${NOT_A_NUMBER}\n", 21),
        ("workspaces:\n  x: ${NOT_A_NUMBER}\n", 6),
    ] {
        let shown = assert_error(text, 2, column, &["${NOT_A_NUMBER}"]);
        assert!(!shown.contains("hunter2"), "{shown}");
    }
    // semantic checks quote values too
    let shown = assert_error(
        "workspaces:\n  dev: {}\nchannels:\n  c: {plugin: p, workspace: \"${NOT_A_NUMBER}\"}\n",
        4,
        29,
        &["unknown workspace `${NOT_A_NUMBER}`"],
    );
    assert!(!shown.contains("hunter2"), "{shown}");
}

#[test]
fn keys_are_not_interpolated() {
    let cfg = parse("plugins:\n  config:\n    p: {\"${OPENAI_API_KEY}\": 1}\n").unwrap();
    assert_eq!(
        cfg.plugins.config["p"],
        serde_json::json!({"${OPENAI_API_KEY}": 1})
    );
}

// ---- defaults and full configs ----

#[test]
fn empty_file_is_the_defaults() {
    assert_eq!(parse("").unwrap(), Config::default());
    assert_eq!(parse("# nothing\n").unwrap(), Config::default());
    assert_eq!(
        parse("gateway:\nworkspaces:\n  dev:\n").unwrap(),
        Config {
            workspaces: BTreeMap::from([("dev".to_owned(), Workspace::default())]),
            ..Config::default()
        }
    );
}

#[test]
fn default_config_parses_to_the_defaults() {
    let cfg = Config::from_str_with_env(DEFAULT_CONFIG, Path::new("<embedded>"), |_| None).unwrap();
    let want = Config {
        workspaces: BTreeMap::from([("default".to_owned(), Workspace::default())]),
        ..Config::default()
    };
    assert_eq!(cfg, want);
    assert_eq!(cfg.gateway.listen.to_string(), "127.0.0.1:4000");
    assert_eq!(cfg.plugins.limits.memory_mb, 64);
    assert_eq!(cfg.containers.image, "pincer-agent:latest");
}

const FULL: &str = r#"
gateway:
  listen: "127.0.0.1:4100"
  model_list:
    - model_name: default
      litellm_params:
        model: openai/gpt-4o-mini
        api_base: "https://api.openai.com/v1"
        api_key: "${OPENAI_API_KEY}"
        rpm: 60
        tpm: 100000
        timeout: 30
    - model_name: default            # a second deployment of the same alias
      litellm_params: {model: "azure/gpt-4o-mini", api_key: "${AZURE_KEY:-unset}"}
    - model_name: backup
      litellm_params: {model: "anthropic/claude-3-5-haiku-latest"}
    - model_name: cheap
      litellm_params: {model: "ollama/llama3.2", api_base: "http://localhost:11434"}
  fallbacks: [{default: [backup, cheap]}, {backup: [cheap]}]
  routing_strategy: least-busy
  num_retries: 3
  timeout: 45.5

containers:
  runtime: docker
  image: "ghcr.io/example/pincer-agent:1.10"
  workspace_base_path: "~/pincer_workspaces"
  policy_dirs: ["~/.pincer/policies"]
  idle_timeout_secs: 600

workspaces:
  default:
    model: default
    policies: [no_internet_access]
    mounts:
      - {source: "~/notes", target: /notes}
      - source: ~/code
        target: /workspace/code
        read_only: false
    mcp_servers: [files, docs]
    skills: [web-search, notes]
    channels: [webhook]
    instructions: AGENTS.md
  research-2:
    model: cheap
    policies: &strict [no_internet_access, no_process_creation]
    skills: [web-search]
  scratch:
    policies: *strict

plugins:
  dirs: ["~/.pincer/plugins"]
  limits: {memory_mb: 128, call_timeout_ms: 10000}
  config:
    channel-webhook:
      secret: "${WEBHOOK_SECRET}"
      port: 8080
      paths: [/hook, /alt]
      tls: {enabled: false, ratio: 0.5, note: null}
    memory: {}

channels:
  webhook:
    plugin: channel-webhook
    workspace: default
    allowed_senders: ["alice@example.com"]

skills:
  web-search:
    allowed_workspaces: [default, research-2]
    tools: [search]
  notes: {}

mcp_servers:
  files:
    command: [npx, -y, "@modelcontextprotocol/server-filesystem", /workspace]
    env: {NODE_ENV: production, TOKEN: "${OPENAI_API_KEY}"}
    tools: [read_file, list_directory]
    allowed_workspaces: [default]
  docs:
    url: "https://docs.example.com/mcp"
  sandboxed:
    command: [docker, run, -i, --rm, --network, none, "mcp/fetch:latest"]
    allowed_workspaces: ["*"]
"#;

#[test]
fn full_config_parses() {
    let cfg = parse(FULL).unwrap();
    let gw = &cfg.gateway;
    assert_eq!(gw.listen.to_string(), "127.0.0.1:4100");
    assert_eq!(gw.model_list.len(), 4);
    let first = &gw.model_list[0].litellm_params;
    assert_eq!(first.api_key.as_deref(), Some("sk-test-openai"));
    assert_eq!(
        (first.rpm, first.tpm, first.timeout),
        (Some(60), Some(100_000), Some(30.0))
    );
    assert_eq!(
        gw.model_list[1].litellm_params.api_key.as_deref(),
        Some("unset")
    );
    assert_eq!(gw.fallbacks[0]["default"], ["backup", "cheap"]);
    assert_eq!(gw.routing_strategy, RoutingStrategy::LeastBusy);
    assert_eq!((gw.num_retries, gw.timeout), (3, 45.5));
    assert_eq!(cfg.containers.image, "ghcr.io/example/pincer-agent:1.10");
    assert_eq!(cfg.containers.idle_timeout_secs, Some(600));
    assert_eq!(
        cfg.idleness("default").stop_after,
        Some(std::time::Duration::from_secs(600)),
        "the old name still sets stop_after"
    );

    let ws = &cfg.workspaces["default"];
    assert_eq!(ws.model.as_deref(), Some("default"));
    assert_eq!(ws.mounts.len(), 2);
    assert!(ws.mounts[0].read_only);
    assert!(!ws.mounts[1].read_only);
    assert_eq!(ws.instructions.as_deref(), Some(Path::new("AGENTS.md")));
    assert_eq!(
        cfg.workspaces["scratch"].policies,
        ["no_internet_access", "no_process_creation"]
    );

    assert_eq!(cfg.plugins.limits.memory_mb, 128);
    assert_eq!(
        cfg.plugins.config["channel-webhook"],
        serde_json::json!({
            "secret": "key: value\n- item\n{flow: x} # not a comment",
            "port": 8080,
            "paths": ["/hook", "/alt"],
            "tls": {"enabled": false, "ratio": 0.5, "note": null},
        })
    );
    assert_eq!(cfg.channels["webhook"].workspace, "default");
    assert_eq!(cfg.skills["notes"], Skill::default());
    assert_eq!(cfg.mcp_servers["files"].env["TOKEN"], "sk-test-openai");
    assert_eq!(
        cfg.mcp_servers["sandboxed"].command.as_ref().map(Vec::len),
        Some(7)
    );
    assert_eq!(cfg.mcp_servers["docs"].allowed_workspaces, ["*"]);
}

#[test]
fn container_mcp_servers_are_accepted_and_their_volumes_checked() {
    let cfg = parse(
        "mcp_servers:\n  db:\n    container: {image: \"mcp/sqlite:1\", volumes: [\"/srv/d.db:/data.db\", \"~/x:/x:rw\"]}\n",
    )
    .unwrap();
    let container = cfg.mcp_servers["db"].container.clone().unwrap();
    assert_eq!(container.image, "mcp/sqlite:1");
    assert_eq!(
        crate::config::parse_volume(&container.volumes[0]).unwrap(),
        crate::config::Volume {
            source: "/srv/d.db".into(),
            target: "/data.db".into(),
            read_only: true
        }
    );
    assert!(
        !crate::config::parse_volume(&container.volumes[1])
            .unwrap()
            .read_only
    );
    assert_eq!(
        container.policy_entries(),
        vec![
            PolicyEntry::from("no_internet_access"),
            PolicyEntry::from("read_only_rootfs")
        ]
    );
    for (volume, message) in [
        (
            "data.db:/data.db",
            "volume `data.db:/data.db`: the host path must be absolute or start with ~ (pincer mounts host paths only, not named volumes)",
        ),
        (
            "/d.db",
            "volume `/d.db` must be HOST_PATH:CONTAINER_PATH[:ro|rw], e.g. /srv/data.db:/data.db:ro",
        ),
        (
            "/d.db:/data.db:rx",
            "volume `/d.db:/data.db:rx`: unknown mode `rx` (write :ro or :rw)",
        ),
        (
            "/d.db:data.db",
            "volume `/d.db:data.db`: the container path must be absolute",
        ),
        (
            "/d:/proc/x",
            "volume `/d:/proc/x`: cannot mount over or inside `/proc`, `/sys` or `/dev`",
        ),
    ] {
        let shown = error(&format!(
            "mcp_servers:\n  db:\n    container:\n      image: i\n      volumes: [\"{volume}\"]\n"
        ));
        assert_eq!(shown, format!("{FILE}:5:17: {message}"));
    }
}

#[test]
fn debug_output_hides_secrets() {
    let cfg = parse(FULL).unwrap();
    let shown = format!("{cfg:?}");
    assert!(!shown.contains("sk-test-openai"), "{shown}");
    assert!(!shown.contains("key: value"), "{shown}");
    assert!(shown.contains("<redacted>"));
}

#[test]
fn merge_keys_and_aliases_work() {
    let cfg = parse(
        "workspaces:\n  a: &base\n    policies: [p1]\n    skills: [s]\n  b:\n    <<: *base\n    skills: [t]\n",
    )
    .unwrap();
    assert_eq!(cfg.workspaces["b"].policies, ["p1"]);
    assert_eq!(cfg.workspaces["b"].skills, ["t"]);
}

// ---- semantic validation ----

#[test]
fn semantic_errors_have_positions() {
    // workspace name: the key
    assert_error(
        "workspaces:\n  dev: {}\n  My_Space: {}\n",
        3,
        3,
        &["invalid workspace name `My_Space`"],
    );
    // mount target: the value
    assert_error(
        "workspaces:\n  dev:\n    mounts:\n      - source: ~/x\n        target: /\n",
        5,
        17,
        &["cannot mount over `/`"],
    );
    assert_error(
        "workspaces:\n  dev:\n    mounts: [{source: a, target: /workspace/}]\n",
        3,
        34,
        &["/workspace"],
    );
    assert_error(
        "workspaces:\n  dev:\n    mounts: [{source: a, target: notes}]\n",
        3,
        34,
        &["absolute"],
    );
    for (target, says) in [
        ("/run/pincer", "/run/pincer"),
        ("/run", "/run/pincer"),
        ("/run/pincer/gateway", "/run/pincer"),
        ("/opt", "/opt/pincer"),
        ("/opt/pincer/pincer-agent", "/opt/pincer"),
        ("/proc", "/proc"),
        ("/proc/self", "/proc"),
        ("/dev/shm", "/dev"),
        ("/sys", "/sys"),
    ] {
        assert_error(
            &format!("workspaces:\n  dev:\n    mounts: [{{source: a, target: {target}}}]\n"),
            3,
            34,
            &[says],
        );
    }
    // channel.workspace
    assert_error(
        "workspaces:\n  dev: {}\nchannels:\n  hook: {plugin: channel-webhook, workspace: prod}\n",
        4,
        46,
        &["unknown workspace `prod`"],
    );
    // workspace references
    assert_error(
        "workspaces:\n  dev:\n    channels: [hook]\n",
        3,
        16,
        &["unknown channel `hook`"],
    );
    assert_error(
        "workspaces:\n  dev:\n    mcp_servers: [files]\n",
        3,
        19,
        &["unknown MCP server `files`"],
    );
    assert_error(
        "workspaces:\n  dev:\n    skills: [ok, Bad.Name]\n",
        3,
        18,
        &["invalid skill name `Bad.Name`"],
    );
    // mcp exactly one of: the server's key
    assert_error(
        "mcp_servers:\n  files:\n    command: [x]\n    url: \"http://localhost:1\"\n",
        2,
        3,
        &["exactly one of", "`command`, `url`"],
    );
    assert_error("mcp_servers:\n  files: {}\n", 2, 3, &["none is set"]);
    assert_error(
        "mcp_servers:\n  web:\n    url: \"ftp://x\"\n",
        3,
        10,
        &["http"],
    );
    // fallbacks
    assert_error(
        "gateway:\n  model_list:\n    - {model_name: a, litellm_params: {model: m}}\n  fallbacks: [{a: [b]}]\n",
        4,
        20,
        &["unknown model alias `b`"],
    );
    assert_error(
        "gateway:\n  model_list:\n    - {model_name: a, litellm_params: {model: m}}\n  fallbacks:\n    - a: [a]\n    - z: [a]\n",
        6,
        7,
        &["unknown model alias `z`"],
    );
    // workspace model
    assert_error(
        "gateway:\n  model_list:\n    - {model_name: a, litellm_params: {model: m}}\nworkspaces:\n  dev: {model: gpt}\n",
        5,
        16,
        &["unknown model alias `gpt`"],
    );
    // workspace model allowlist
    let two = "gateway:\n  model_list:\n    - {model_name: a, litellm_params: {model: m}}\n    - {model_name: b, litellm_params: {model: m}}\n";
    assert_error(
        &format!("{two}workspaces:\n  dev:\n    models: [a, gpt]\n"),
        7,
        17,
        &["unknown model alias `gpt`", "defined: a, b"],
    );
    assert_error(
        &format!("{two}workspaces:\n  dev:\n    models: [a, a]\n"),
        7,
        17,
        &["`a` is listed more than once"],
    );
    assert_error(
        &format!("{two}workspaces:\n  dev:\n    model: b\n    models: [a]\n"),
        8,
        13,
        &["must contain the workspace's own model `b`"],
    );
    assert_error(
        &format!(
            "{two}  fallbacks: [{{a: [b]}}]\nworkspaces:\n  dev:\n    model: a\n    models: [a]\n"
        ),
        9,
        14,
        &["`a` falls back to `b`", "workspaces.dev.models"],
    );
    assert_error(
        &format!("{two}workspaces:\n  dev:\n    models: [b]\n"),
        7,
        13,
        &["turns use the alias `default`", "set workspaces.dev.model"],
    );
    assert_error(
        "workspaces:\n  dev:\n    models: [a]\n",
        3,
        14,
        &["unknown model alias `a`", "defined: none"],
    );
    // limits
    assert_error(
        "plugins:\n  limits:\n    memory_mb: 0\n",
        3,
        16,
        &["memory_mb must be between 1 and 4096"],
    );
    assert_error(
        "plugins:\n  limits: {call_timeout_ms: 600001}\n",
        2,
        29,
        &["call_timeout_ms"],
    );
    // allowed_workspaces
    assert_error(
        "workspaces:\n  dev: {skills: [s]}\nskills:\n  s: {allowed_workspaces: [prod]}\n",
        2,
        18,
        &["does not allow workspace `dev`"],
    );
    assert_error(
        "workspaces:\n  dev: {}\nskills:\n  s: {allowed_workspaces: [prod]}\n",
        4,
        28,
        &["unknown workspace `prod`"],
    );
}

#[test]
fn semantic_errors_are_invalid_errors() {
    let err = parse("workspaces:\n  Bad: {}\n").unwrap_err();
    assert!(matches!(err, ConfigError::Invalid { .. }), "{err:?}");
}

// ---- files ----

#[test]
fn load_reads_a_file_and_reports_unreadable_ones() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pincer.yaml");
    std::fs::write(&path, "workspaces:\n  dev: {}\n").unwrap();
    let cfg = Config::load(&path).unwrap();
    assert!(cfg.workspaces.contains_key("dev"));

    std::fs::write(&path, "workspaces:\n  dev: {polices: []}\n").unwrap();
    let shown = Config::load(&path).unwrap_err().to_string();
    assert!(
        shown.starts_with(&format!("{}:2:9: unknown key", path.display())),
        "{shown}"
    );

    let missing = dir.path().join("missing.yaml");
    let err = Config::load(&missing).unwrap_err();
    assert!(err.position().is_none());
    assert!(
        err.to_string()
            .starts_with(&format!("{}: cannot read: ", missing.display())),
        "{err}"
    );
}

// ---- gateway accounting: budgets, prices, cache, request size ----

#[test]
fn accounting_defaults() {
    let cfg = Config::default();
    let gw = &cfg.gateway;
    assert!(gw.prices.is_empty());
    assert_eq!(
        gw.cache,
        GatewayCache {
            enabled: false,
            ttl_secs: 300,
            max_entries: 1000
        }
    );
    assert_eq!(gw.max_request_bytes, 4 * 1024 * 1024);
    assert!(Workspace::default().budget.is_unlimited());
    assert!(!Workspace::default().budget.has_usd_limit());
}

#[test]
fn accounting_keys_parse() {
    let cfg = parse(
        r#"
gateway:
  model_list:
    - {model_name: default, litellm_params: {model: openai/gpt-4o-mini}}
  max_request_bytes: 1048576
  prices:
    openai/gpt-4o-mini: {input_per_1m: 0.2, output_per_1m: 0.8}
    default: {input_per_1m: 1, output_per_1m: 0}
  cache: {enabled: true, ttl_secs: 60}
workspaces:
  dev:
    budget: {daily_usd: 1.5, monthly_tokens: 1000000}
  ops:
    budget:
      monthly_usd: 20
      daily_tokens: ${RETRIES}
"#,
    )
    .unwrap();
    let gw = &cfg.gateway;
    assert_eq!(gw.max_request_bytes, 1 << 20);
    assert_eq!(
        gw.prices["openai/gpt-4o-mini"],
        ModelPrice {
            input_per_1m: 0.2,
            output_per_1m: 0.8
        }
    );
    assert_eq!(gw.prices["default"].input_per_1m, 1.0);
    assert_eq!(
        gw.cache,
        GatewayCache {
            enabled: true,
            ttl_secs: 60,
            max_entries: 1000
        }
    );
    assert_eq!(
        cfg.workspaces["dev"].budget,
        Budget {
            daily_usd: Some(1.5),
            monthly_tokens: Some(1_000_000),
            ..Budget::default()
        }
    );
    let ops = &cfg.workspaces["ops"].budget;
    assert_eq!((ops.monthly_usd, ops.daily_tokens), (Some(20.0), Some(5)));
    assert!(ops.has_usd_limit() && !ops.is_unlimited());
}

/// The commented-out examples in the built-in file are valid once uncommented.
#[test]
fn default_config_documents_accounting_keys() {
    const KEYS: [&str; 25] = [
        "max_request_bytes:",
        "prices:",
        "openai/gpt-4o-mini:",
        "default: {input_per_1m",
        "cache:",
        // The cache's; `memory.enabled` stays commented with its block.
        "enabled: false",
        "ttl_secs:",
        "max_entries:",
        "budget:",
        "daily_usd:",
        "monthly_usd:",
        "daily_tokens:",
        "monthly_tokens:",
        "memory:",
        "recall_limit:",
        "recall_chars:",
        "agent:",
        "max_steps:",
        "max_tool_output_bytes:",
        "tool_timeout_secs:",
        "max_turn_tokens:",
        "history_tokens:",
        "turn_timeout_secs:",
        "max_turn_events:",
        "max_turn_stored_bytes:",
    ];
    let text: String = DEFAULT_CONFIG
        .lines()
        .map(|line| {
            let indent = line.len() - line.trim_start().len();
            match line.trim_start().strip_prefix("# ") {
                Some(rest) if KEYS.iter().any(|k| rest.trim_start().starts_with(k)) => {
                    format!("{}{rest}\n", &line[..indent])
                }
                _ => format!("{line}\n"),
            }
        })
        .collect();
    assert!(text.contains("\n  cache:\n    enabled: false\n"), "{text}");
    let cfg = Config::from_str_with_env(&text, Path::new("<uncommented>"), |_| None).unwrap();
    let gw = &cfg.gateway;
    assert_eq!(gw.max_request_bytes, Gateway::DEFAULT_MAX_REQUEST_BYTES);
    assert_eq!(gw.cache, GatewayCache::default());
    assert_eq!(gw.prices.len(), 2);
    assert_eq!(gw.prices["openai/gpt-4o-mini"].output_per_1m, 0.6);
    assert_eq!(
        cfg.workspaces["default"].budget,
        Budget {
            daily_usd: Some(5.0),
            monthly_usd: Some(50.0),
            daily_tokens: Some(2_000_000),
            monthly_tokens: Some(20_000_000),
        }
    );
    // The documented values are the defaults.
    assert_eq!(cfg.workspaces["default"].memory, WorkspaceMemory::default());
    assert_eq!(cfg.workspaces["default"].agent, AgentLimits::default());
}

#[test]
fn accounting_schema_errors() {
    assert_error(
        "workspaces:\n  dev:\n    budget: {daily_dollars: 1}\n",
        3,
        14,
        &["unknown key `daily_dollars`", "`daily_usd`"],
    );
    assert_error(
        "workspaces:\n  dev:\n    budget: {daily_tokens: 1.5}\n",
        3,
        28,
        &["wrong type"],
    );
    assert_error(
        "gateway:\n  prices:\n    m: {input_per_1m: 1}\n",
        3,
        8,
        &["missing required key `output_per_1m`"],
    );
    assert_error(
        "gateway:\n  prices:\n    m: {input_per_1m: 1, output_per_1m: 2, cached_per_1m: 0}\n",
        3,
        44,
        &["unknown key `cached_per_1m`"],
    );
    assert_error(
        "gateway:\n  cache: {enabled: yes please}\n",
        2,
        20,
        &["wrong type"],
    );
    assert_error(
        "gateway:\n  cache: {ttl_sec: 5}\n",
        2,
        11,
        &["unknown key `ttl_sec`", "did you mean `ttl_secs`"],
    );
}

#[test]
fn accounting_semantic_errors_have_positions() {
    for (leaf, column) in [("daily_usd: 0", 14), ("monthly_usd: -2", 14)] {
        assert_error(
            &format!("workspaces:\n  dev:\n    budget: {{{leaf}}}\n"),
            3,
            column + leaf.find(':').unwrap() + 2,
            &["must be a positive number of USD"],
        );
    }
    assert_error(
        "workspaces:\n  dev:\n    budget:\n      daily_usd: 2\n      monthly_tokens: 0\n",
        5,
        23,
        &["monthly_tokens must be a positive number of tokens"],
    );
    assert_error(
        "gateway:\n  prices:\n    openai/x: {input_per_1m: -1, output_per_1m: 2}\n",
        3,
        30,
        &["input_per_1m must be a number of USD per million tokens, 0 or more"],
    );
    assert_error(
        "gateway:\n  prices:\n    \" \": {input_per_1m: 1, output_per_1m: 2}\n",
        3,
        5,
        &["a price key must name"],
    );
    assert_error(
        "gateway:\n  cache:\n    ttl_secs: 0\n",
        3,
        15,
        &["ttl_secs must be between 1 and 2592000"],
    );
    assert_error(
        "gateway:\n  cache: {max_entries: 0}\n",
        2,
        24,
        &["max_entries must be between 1 and 1000000"],
    );
    assert_error(
        "gateway:\n  max_request_bytes: 10\n",
        2,
        22,
        &["max_request_bytes must be between 1024 and 268435456"],
    );
}

#[test]
fn memory_is_a_reserved_skill_and_mcp_server_name() {
    let reserved = "reserved for pincer's built-in memory tools";
    assert_error(
        "skills:\n  memory: {}\n",
        2,
        3,
        &[reserved, "give the skill another name"],
    );
    assert_error(
        "mcp_servers:\n  memory: {url: \"https://x.example/mcp\"}\n",
        2,
        3,
        &[reserved, "give the MCP server another name"],
    );
    assert_error(
        "workspaces:\n  main: {skills: [notes, memory]}\n",
        2,
        26,
        &[reserved],
    );
    assert_error(
        "workspaces:\n  main: {mcp_servers: [memory]}\n",
        2,
        24,
        &[reserved],
    );
    // `memory` stays a workspace setting, and other names are fine.
    let cfg =
        parse("workspaces:\n  main: {skills: [memory-notes], memory: {enabled: false}}\n").unwrap();
    assert!(!cfg.workspaces["main"].memory.enabled);
}

/// `workspaces.NAME.models` is documented in the built-in file, and its
/// example is valid with the example model list.
#[test]
fn default_config_documents_the_model_allowlist() {
    assert!(
        DEFAULT_CONFIG.contains("    # models: [default, backup]"),
        "{DEFAULT_CONFIG}"
    );
    let cfg = parse(
        "gateway:\n  model_list:\n    - {model_name: default, litellm_params: {model: m}}\n    - {model_name: backup, litellm_params: {model: m}}\n  fallbacks: [{default: [backup]}]\nworkspaces:\n  default:\n    model: default\n    models: [default, backup]\n  open: {}\n",
    )
    .unwrap();
    assert_eq!(
        cfg.workspaces["default"].models.as_deref(),
        Some(&["default".to_owned(), "backup".to_owned()][..])
    );
    assert_eq!(cfg.workspaces["open"].models, None);
}

#[test]
fn plugin_http_grants_and_data_quota_are_checked() {
    let cfg = parse(
        "workspaces:\n  dev:\n    plugin_http: {channel-webhook: [\"hooks.example.com\", \"127.0.0.1:*\"]}\n",
    )
    .unwrap();
    assert_eq!(
        cfg.workspaces["dev"].plugin_http["channel-webhook"],
        vec!["hooks.example.com".to_string(), "127.0.0.1:*".to_string()]
    );
    assert_eq!(cfg.plugins.limits.data_quota_mb, 100);
    assert_error(
        "workspaces:\n  dev:\n    plugin_http: {skill-x: [\"https://a.example.com\"]}\n",
        3,
        29,
        &["not a URL"],
    );
    assert_error(
        "workspaces:\n  dev:\n    plugin_http: {Bad_Name: []}\n",
        3,
        19,
        &["plugin name `Bad_Name`"],
    );
    assert_error(
        "plugins:\n  limits:\n    data_quota_mb: 0\n",
        3,
        20,
        &["data_quota_mb must be between 1 and 1048576"],
    );
}

#[test]
fn channels_take_a_listen_address_bindings_refusal_and_extra_hosts() {
    let cfg = parse(
        "workspaces:\n  team: {}\n  ops: {}\n\
         channels:\n  listen: 127.0.0.1:9123\n  slack:\n    plugin: channel-slack\n    workspace: team\n    \
         allowed_senders: [U1, \"*\"]\n    refusal: reply\n    http: [\"127.0.0.1:*\"]\n    \
         conversations: {C0OPS: ops}\n    config: {bot_token: xoxb-1, api_base: \"http://127.0.0.1:9/api\"}\n",
    )
    .unwrap();
    assert_eq!(cfg.channels.listen, "127.0.0.1:9123".parse().unwrap());
    let slack = &cfg.channels["slack"];
    assert_eq!(slack.workspace_for("C0OPS"), "ops");
    assert_eq!(slack.workspace_for("D0DM"), "team");
    assert!(slack.allows("anyone"), "`*` allows everyone");
    assert_eq!(slack.refusal, crate::config::Refusal::Reply);
    assert_eq!(slack.plugin_config()["bot_token"], "xoxb-1");
    assert!(
        !format!("{slack:?}").contains("xoxb-1"),
        "config values are hidden from Debug"
    );
    // Defaults: loopback listener, nobody allowed, silent refusals.
    let cfg = parse(
        "workspaces:\n  team: {}\nchannels:\n  slack: {plugin: channel-slack, workspace: team}\n",
    )
    .unwrap();
    assert_eq!(cfg.channels.listen, crate::config::Channels::DEFAULT_LISTEN);
    assert!(!cfg.channels["slack"].allows("U1"));
    assert_eq!(
        cfg.channels["slack"].refusal,
        crate::config::Refusal::Silent
    );
}

#[test]
fn bad_channel_settings_are_located() {
    assert_error(
        "workspaces:\n  team: {}\nchannels:\n  slack:\n    plugin: channel-slack\n    workspace: team\n    conversations: {C1: nowhere}\n",
        7,
        25,
        &["unknown workspace `nowhere`"],
    );
    assert_error(
        "workspaces:\n  team: {}\nchannels:\n  slack:\n    plugin: channel-slack\n    workspace: team\n    http: [\"https://x.io/\"]\n",
        7,
        12,
        &["http capability `https://x.io/`"],
    );
    assert_error(
        "workspaces:\n  team: {}\nchannels:\n  slack:\n    plugin: channel-slack\n    workspace: team\n    refusal: shout\n",
        7,
        14,
        &["unknown value `shout`, expected one of `silent`, `reply`"],
    );
    assert_error("channels:\n  listen: nowhere\n", 2, 11, &["address"]);
}

#[test]
fn channel_context_has_defaults_sizes_and_refuses_what_it_cannot_read() {
    let base = "workspaces:\n  team: {}\nchannels:\n  slack:\n    plugin: channel-slack\n    workspace: team\n";
    let cfg = parse(base).unwrap();
    assert_eq!(cfg.channels["slack"].context.thread, 30);
    assert_eq!(cfg.channels["slack"].context.channel, 0);
    assert_eq!(cfg.channels["slack"].context.max_bytes.0, 16 * 1024);
    let cfg = parse(&format!(
        "{base}    context: {{thread: 5, channel: 10, max_bytes: 2k, senders: allowed}}\n"
    ))
    .unwrap();
    let context = &cfg.channels["slack"].context;
    assert_eq!(
        (context.thread, context.channel, context.max_bytes.0),
        (5, 10, 2048)
    );
    assert_eq!(context.senders, crate::config::ContextSenders::Allowed);
    assert_eq!(
        parse(&format!("{base}    context: {{max_bytes: 1m}}\n"))
            .unwrap()
            .channels["slack"]
            .context
            .max_bytes
            .0,
        1024 * 1024
    );
    assert_error(
        &format!("{base}    context: {{max_bytes: lots}}\n"),
        7,
        14,
        &["`lots` is not a size"],
    );
}

#[test]
fn listener_limits_and_nofile_have_defaults_and_ranges() {
    let cfg = parse("").unwrap();
    assert_eq!(cfg.gateway.limits.header_read_secs, 10);
    assert_eq!(cfg.gateway.limits.body_secs, 30);
    assert_eq!(cfg.gateway.limits.idle_secs, 60);
    assert_eq!(cfg.gateway.limits.max_connections, 1024);
    assert_eq!(cfg.gateway.limits.max_connections_per_workspace, 64);
    assert_eq!(
        cfg.channels.limits,
        crate::config::ListenerLimits::default()
    );
    assert_eq!(cfg.containers.nofile, 1024);
    assert!(!cfg.gateway.allow_remote && !cfg.channels.allow_remote);

    let cfg = parse(
        "gateway:\n  limits: {header_read_secs: 2, max_connections_per_workspace: 8}\n\
         channels:\n  limits: {idle_secs: 5, max_connections: 7}\ncontainers:\n  nofile: 256\n",
    )
    .unwrap();
    assert_eq!(cfg.gateway.limits.tcp().header_read_secs, 2);
    assert_eq!(cfg.gateway.limits.workspace().max_connections, 8);
    assert_eq!(cfg.gateway.limits.tcp().max_connections, 1024);
    assert_eq!(
        (
            cfg.channels.limits.idle_secs,
            cfg.channels.limits.max_connections
        ),
        (5, 7)
    );
    assert!(cfg.channels.is_empty(), "`limits` is not a channel");
    assert_eq!(cfg.containers.nofile, 256);

    assert_error(
        "gateway:\n  limits:\n    idle_secs: 0\n",
        3,
        16,
        &["idle_secs", "between 1"],
    );
    assert_error(
        "channels:\n  limits: {max_connections: 0}\n",
        2,
        29,
        &["max_connections"],
    );
    assert_error(
        "containers:\n  nofile: 8\n",
        2,
        11,
        &["nofile", "between 64"],
    );
    assert_error("gateway:\n  metrics_key: short\n", 2, 16, &["at least 16"]);
}

#[test]
fn listeners_beyond_loopback_need_allow_remote() {
    for listen in [
        "0.0.0.0:4100",
        "\"[::]:4100\"",
        "10.1.2.3:4100",
        "\"[::ffff:10.0.0.1]:4100\"",
    ] {
        let shown = assert_error(
            &format!("channels:\n  listen: {listen}\n"),
            2,
            11,
            &["channels.allow_remote: true", "not a loopback address"],
        );
        assert!(!shown.contains("metrics_key"), "{shown}");
        let shown = assert_error(
            &format!("gateway:\n  listen: {listen}\n"),
            2,
            11,
            &["gateway.allow_remote: true"],
        );
        assert!(!shown.contains("metrics_key"), "{shown}");
    }
    for loopback in [
        "127.0.0.1:4100",
        "127.9.9.9:4100",
        "\"[::1]:4100\"",
        "\"[::ffff:127.0.0.1]:4100\"",
    ] {
        parse(&format!(
            "channels:\n  listen: {loopback}\ngateway:\n  listen: {loopback}\n"
        ))
        .unwrap();
    }
    parse("channels:\n  listen: 0.0.0.0:4100\n  allow_remote: true\n").unwrap();
    assert_error(
        "gateway:\n  listen: 0.0.0.0:4000\n  allow_remote: true\n",
        2,
        11,
        &["gateway.metrics_key"],
    );
    parse(
        "gateway:\n  listen: 0.0.0.0:4000\n  allow_remote: true\n  metrics_key: 0123456789abcdef\n",
    )
    .unwrap();
}

#[test]
fn egress_hosts_are_not_approval_rules_and_tunnels_must_be_served() {
    let shown = error("workspaces:\n  w:\n    approvals: {allow: [\"egress: pypi.org\"]}\n");
    assert!(
        shown.contains("listed in workspaces.NAME.egress, not approvals.allow"),
        "{shown}"
    );
    assert_error(
        "workspaces:\n  w:\n    tunnels: [Grafana]\n",
        3,
        15,
        &["a service name is 1-63 characters"],
    );
    assert_error(
        "workspaces:\n  w:\n    tunnels: [grafana]\n",
        3,
        15,
        &["no tunnel serves `grafana`"],
    );
    let cfg = parse(
        "plugins:\n  config:\n    tunnel-http:\n      - {service: grafana, target: \"http://127.0.0.1:3000\"}\n      - {service: wiki, target: \"http://127.0.0.1:3001\"}\nworkspaces:\n  w: {tunnels: [wiki], egress_ask: true}\n",
    )
    .expect("valid");
    assert_eq!(
        cfg.plugins.configured_services(),
        [("grafana", "tunnel-http"), ("wiki", "tunnel-http")]
    );
}

#[test]
fn pincers_own_channel_names_are_refused_for_channels() {
    for (name, whose) in [
        ("web", "the web console's chat"),
        ("cli", "`pincer message`"),
        ("schedule", "scheduled runs"),
    ] {
        assert_error(
            &format!(
                "workspaces:\n  main: {{}}\nchannels:\n  {name}: {{plugin: slack, workspace: main}}\n"
            ),
            4,
            3,
            &[whose, "give the channel another name"],
        );
    }
}

// ---- containers.idle ----

#[test]
fn idleness_defaults_to_freezing_after_two_minutes_and_stopping_after_six_hours() {
    let cfg = parse("workspaces: {a: {}}\n").unwrap();
    let idle = cfg.idleness("a");
    assert_eq!(idle.pause_after, Some(std::time::Duration::from_secs(120)));
    assert_eq!(
        idle.stop_after,
        Some(std::time::Duration::from_secs(6 * 3600))
    );
    assert_eq!(cfg.containers.idle.max_paused, 50);
}

#[test]
fn a_workspaces_idle_overrides_the_global_one_field_by_field_and_zero_is_never() {
    let cfg = parse(
        "containers:\n  idle: {pause_after: 30s, stop_after: 1h, max_paused: 3}\n\
         workspaces:\n  a: {}\n  b: {idle: {pause_after: \"0\"}}\n  c: {idle: {stop_after: 90m}}\n",
    )
    .unwrap();
    let secs = |n: u64| Some(std::time::Duration::from_secs(n));
    assert_eq!(
        cfg.idleness("a"),
        Idleness {
            pause_after: secs(30),
            stop_after: secs(3600)
        }
    );
    assert_eq!(
        cfg.idleness("b"),
        Idleness {
            pause_after: None,
            stop_after: secs(3600)
        }
    );
    assert_eq!(
        cfg.idleness("c"),
        Idleness {
            pause_after: secs(30),
            stop_after: secs(5400)
        }
    );
    assert_eq!(cfg.containers.idle.max_paused, 3);
}

#[test]
fn idle_timeout_secs_is_the_old_name_of_stop_after_and_not_both() {
    let cfg = parse("containers: {idle_timeout_secs: 0}\nworkspaces: {a: {}}\n").unwrap();
    assert_eq!(cfg.idleness("a").stop_after, None, "0 was never before too");
    assert_error(
        "containers:\n  idle_timeout_secs: 60\n  idle: {stop_after: 2h}\n",
        2,
        22,
        &["old name of idle.stop_after"],
    );
}

#[test]
fn idle_durations_that_are_not_durations_are_refused_where_written() {
    assert_error(
        "containers:\n  idle: {pause_after: soon}\n",
        2,
        23,
        &["invalid duration `soon`", "`2m`"],
    );
    assert_error(
        "workspaces:\n  a: {idle: {stop_after: 500ms}}\n",
        2,
        26,
        &["shorter than a second"],
    );
    assert_error(
        "workspaces:\n  a: {idle: {max_paused: 3}}\n",
        2,
        14,
        &["max_paused"],
    );
}

#[test]
fn state_lives_in_sqlite_by_default_and_in_postgres_when_asked() {
    let home = Path::new("/srv/pincer");
    assert_eq!(
        parse("").unwrap().state.location(home),
        Ok(crate::db::Location::Sqlite(home.join("pincer.db")))
    );
    let cfg =
        parse("state:\n  backend: postgres\n  url: postgres://p@${RETRIES}/pincer\n").unwrap();
    assert_eq!(
        cfg.state.location(home),
        Ok(crate::db::Location::Postgres(
            "postgres://p@5/pincer".into()
        ))
    );
    let shown = error("state:\n  backend: postgres\n");
    assert!(
        shown.contains("state.backend is postgres but state.url is missing"),
        "{shown}"
    );
    let shown = error("state:\n  url: postgres://p@h/pincer\n");
    assert!(
        shown.contains("state.url is set but state.backend is sqlite"),
        "{shown}"
    );
    let shown = error("state:\n  backend: mysql\n");
    assert!(shown.contains("mysql"), "{shown}");
}
