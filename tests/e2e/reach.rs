//! One reach for audit and enforcement (invariant 7), through the real
//! `pincer gateway serve` and `pincer policy audit`, with the official `mcp`
//! and `openai` Python clients: what a workspace's policy and configuration
//! refuse (skills, MCP servers, model aliases) the gateway refuses too, keys
//! of workspaces that are no longer configured are refused, upstream
//! requests carry the completion bound the budget reserved, and for every
//! example workspace the audit's printed reach equals what the gateway
//! serves. Loopback only.

use crate::support;

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::{Value, json};
use support::fake_llm::{Behaviour, FakeUpstream};
use support::gateway::{Served, python, python_client, python_script};
use support::ok;

/// What the official clients see with `key`: MCP tools and the outcome of
/// calling each of `tools`, `/v1/models` and the outcome of a chat with each
/// of `chats`.
fn served_to(served: &Served, key: &str, tools: &[String], chats: &[String]) -> Value {
    let mut each = served_to_each(served, &[(key.to_owned(), tools.to_vec(), chats.to_vec())]);
    each.pop().expect("one answer")
}

/// [`served_to`] for several `(key, tools, chats)` in one client process.
fn served_to_each(served: &Served, asks: &[(String, Vec<String>, Vec<String>)]) -> Vec<Value> {
    let mut args = vec![served.base.clone()];
    for (key, tools, chats) in asks {
        args.push(key.clone());
        args.push(json!({"tools": tools, "chats": chats}).to_string());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let answers = python_client("reach_client.py", &args);
    let answers = answers.as_array().expect("a list of answers").clone();
    assert_eq!(answers.len(), asks.len(), "one answer per key");
    answers
}

fn audit(served: &Served, workspace: &str) -> Value {
    serde_json::from_str(&ok(served.cli(&["policy", "audit", workspace, "--json"])))
        .expect("audit JSON")
}

fn stdio_server() -> String {
    format!(
        "command: [\"{}\", \"{}\"]",
        python(),
        python_script("mcp_echo_server.py").display()
    )
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// A gateway whose config has `containers.policy_dirs` pointing at a folder
/// holding the user groups `groups` (`(name, yaml)`).
fn with_groups(groups: &[(&str, &str)], rest: &str) -> (tempfile::TempDir, Served) {
    let dir = tempfile::tempdir().expect("groups dir");
    for (name, text) in groups {
        std::fs::write(dir.path().join(format!("{name}.yaml")), text).expect("group file");
    }
    let config = format!(
        "containers:\n  policy_dirs: [\"{}\"]\n{rest}",
        dir.path().display()
    );
    let served = Served::start(&config, &[]);
    (dir, served)
}

#[test]
fn a_policy_allowing_no_skills_or_servers_gets_none_from_the_gateway() {
    let (_groups, served) = with_groups(
        &[(
            "no_tools",
            "description: no skills, no MCP servers\nallowed_skills: []\nallowed_mcp_servers: []\n",
        )],
        &format!(
            "mcp_servers:\n  echoer:\n    {}\nworkspaces:\n  boxed:\n    policies: [no_tools]\n    skills: [skill-calc]\n    mcp_servers: [echoer]\n",
            stdio_server()
        ),
    );
    // The audit says neither is reachable...
    let report = audit(&served, "boxed");
    assert_eq!(report["reach"]["skills"][0]["reachable"], false, "{report}");
    assert_eq!(
        report["reach"]["mcp_servers"][0]["reachable"], false,
        "{report}"
    );

    // ...and the gateway serves neither, nor lets them be called.
    let key = served.key("boxed");
    let calls = [
        "skill-calc__evaluate".to_string(),
        "echoer__echo".to_string(),
        "memory__recall".to_string(),
    ];
    let got = served_to(&served, &key, &calls, &[]);
    let tools = strings(&got["tools"]);
    assert!(
        tools.is_empty(),
        "allowed_skills: [] and allowed_mcp_servers: [] must leave no tools, got {tools:?}"
    );
    for (call, key) in [
        ("skill-calc__evaluate", "allowed_skills"),
        ("echoer__echo", "allowed_mcp_servers"),
        ("memory__recall", "allowed_skills"),
    ] {
        let outcome = &got["calls"][call];
        assert_eq!(outcome["ok"], false, "{call}: {outcome}");
        let error = outcome["error"].as_str().unwrap_or_default();
        assert!(
            error.contains("not available to workspace `boxed`")
                && error.contains(key)
                && error.contains("no_tools"),
            "{call}: the refusal names the policy key and group: {error}"
        );
    }
    let denied = served.audited_showing("boxed", "gateway.denied", |d| {
        d.iter().any(|d| d.contains("skill-calc__evaluate"))
            && d.iter().any(|d| d.contains("echoer__echo"))
    });
    for call in ["skill-calc__evaluate", "echoer__echo"] {
        assert!(denied.iter().any(|d| d.contains(call)), "{denied:?}");
    }
}

#[test]
fn allowed_skills_keeps_only_the_listed_skills_and_memory() {
    let (_groups, served) = with_groups(
        &[(
            "calc_only",
            "description: calculator and memory only\nallowed_skills: [skill-calc, memory]\n",
        )],
        &format!(
            "mcp_servers:\n  echoer:\n    {}\n    tools: [echo]\nworkspaces:\n  calc:\n    policies: [calc_only]\n    skills: [skill-calc, skill-notes]\n    mcp_servers: [echoer]\n",
            stdio_server()
        ),
    );
    let key = served.key("calc");
    let got = served_to(
        &served,
        &key,
        &[
            "skill-notes__put".to_string(),
            "echoer__secret_admin".to_string(),
        ],
        &[],
    );
    assert_eq!(
        got["tools"],
        json!([
            "echoer__echo",
            "memory__forget",
            "memory__memorize",
            "memory__recall",
            "skill-calc__convert",
            "skill-calc__evaluate"
        ]),
        "{got}"
    );
    for call in ["skill-notes__put", "echoer__secret_admin"] {
        assert_eq!(got["calls"][call]["ok"], false, "{call}: {got}");
    }
}

fn deployment(alias: &str, model: &str, upstream: &FakeUpstream) -> String {
    format!(
        "    - model_name: {alias}\n      litellm_params: {{model: {model}, api_base: \"{}\", api_key: test-key}}\n",
        upstream.base_url
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workspace_calls_only_its_model_aliases() {
    let local = FakeUpstream::spawn(Behaviour::answer("from the local model")).await;
    let cloud = FakeUpstream::spawn(Behaviour::answer("from the cloud")).await;
    let served = Served::start(
        &format!(
            "gateway:\n  model_list:\n{}{}workspaces:\n  offline:\n    model: local\n    policies: [no_internet_access]\n  open: {{}}\n  picky:\n    model: cloud\n    models: [cloud]\n",
            deployment("local", "openai_compatible/local-model", &local),
            deployment("cloud", "openai_compatible/cloud-model", &cloud),
        ),
        &[],
    );
    let offline = served.key("offline");
    let chats = ["local".to_string(), "cloud".to_string()];
    let got = served_to(&served, &offline, &[], &chats);
    assert_eq!(got["models"], json!(["local"]), "{got}");
    assert_eq!(got["chats"]["local"]["ok"], true, "{got}");
    let refused = &got["chats"]["cloud"];
    assert_eq!(refused["status"], 403, "{got}");
    let error = refused["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("workspaces.offline.models") && error.contains("local"),
        "the refusal says what to change: {error}"
    );
    assert!(
        cloud.received().is_empty(),
        "a network: none workspace's data must not reach the cloud model"
    );

    // The Anthropic-style route enforces the same list.
    let response = pincer::gateway::default_client()
        .expect("http client")
        .post(format!("{}/v1/messages", served.base))
        .bearer_auth(&offline)
        .header("content-type", "application/json")
        .body(json!({"model": "cloud", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}).to_string())
        .send()
        .await
        .expect("gateway answers");
    assert_eq!(response.status().as_u16(), 403);
    assert!(cloud.received().is_empty());
    // Written by the gateway's writer, one group-commit window later.
    let denied = served.audited_showing("offline", "gateway.denied", |d| {
        d.iter().any(|d| d.contains("model `cloud`"))
    });
    assert!(
        denied.iter().any(|d| d.contains("model `cloud`")),
        "{denied:?}"
    );

    // No `model`: every alias; an explicit list: exactly it.
    let open = served_to(&served, &served.key("open"), &[], &chats);
    assert_eq!(open["models"], json!(["cloud", "local"]), "{open}");
    assert_eq!(open["chats"]["cloud"]["ok"], true, "{open}");
    let picky = served_to(&served, &served.key("picky"), &[], &chats);
    assert_eq!(picky["models"], json!(["cloud"]), "{picky}");
    assert_eq!(picky["chats"]["local"]["status"], 403, "{picky}");

    // The audit prints the same lists and where each comes from.
    for (workspace, aliases, from) in [
        ("offline", json!(["local"]), "model_and_fallbacks"),
        ("open", json!(["cloud", "local"]), "every_alias"),
        ("picky", json!(["cloud"]), "explicit"),
    ] {
        let models = &audit(&served, workspace)["reach"]["models"];
        assert_eq!(models["aliases"], aliases, "{workspace}: {models}");
        assert_eq!(models["from"], from, "{workspace}: {models}");
    }
    let text = ok(served.cli(&["policy", "audit", "picky"]));
    assert!(
        text.contains("cloud (explicit: workspaces.picky.models)"),
        "{text}"
    );
}

#[test]
fn an_unknown_alias_in_models_is_a_config_error_with_its_position() {
    let sandbox = support::Sandbox::new();
    let config = sandbox.write(
        "pincer.yaml",
        "gateway:\n  model_list:\n    - {model_name: local, litellm_params: {model: ollama/llama3.2}}\n    - {model_name: cloud, litellm_params: {model: openai/gpt-4o-mini}}\n  fallbacks: [{local: [cloud]}]\nworkspaces:\n  a:\n    models: [local, clowd]\n",
    );
    let path = config.to_str().unwrap();
    let err = support::fails(sandbox.pincer(&["--config", path, "config", "check"]));
    assert!(
        err.contains("pincer.yaml:8:") && err.contains("unknown model alias `clowd`"),
        "{err}"
    );
    // A listed alias whose fallback is not listed would let the router
    // reach past the list.
    sandbox.write(
        "pincer.yaml",
        "gateway:\n  model_list:\n    - {model_name: local, litellm_params: {model: ollama/llama3.2}}\n    - {model_name: cloud, litellm_params: {model: openai/gpt-4o-mini}}\n  fallbacks: [{local: [cloud]}]\nworkspaces:\n  a:\n    model: local\n    models: [local]\n",
    );
    let err = support::fails(sandbox.pincer(&["--config", path, "config", "check"]));
    assert!(
        err.contains("pincer.yaml:9:") && err.contains("falls back to `cloud`"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_of_workspaces_no_longer_configured_are_refused() {
    let served = Served::start("workspaces:\n  main: {}\n", &[]);
    // A key minted while `gone` was configured, and a container token of
    // `gone`, both still in the database.
    let earlier = served.sandbox.write(
        "earlier.yaml",
        &format!(
            "workspaces:\n  gone: {{}}\n{}",
            served.sandbox.state_section()
        ),
    );
    let minted = crate::support::pincer_command()
        .arg("--config")
        .arg(&earlier)
        .args(["gateway", "keys", "create", "gone"])
        .env("PINCER_HOME", served.sandbox.home())
        .output()
        .expect("run pincer");
    let key = ok(minted).trim().to_string();
    let store = pincer::gateway::KeyStore::open_at(&served.sandbox.state()).expect("key store");
    let container_token = store.mint_container_token("gone").expect("token");

    let client = pincer::gateway::default_client().expect("http client");
    for token in [&key, &container_token] {
        let models = client
            .get(format!("{}/v1/models", served.base))
            .bearer_auth(token)
            .send()
            .await
            .expect("gateway answers");
        assert_eq!(models.status().as_u16(), 403);
        let body: Value =
            serde_json::from_str(&models.text().await.expect("body")).expect("JSON error");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("workspace `gone`") && message.contains("not in the configuration"),
            "{body}"
        );
        let chat = client
            .post(format!("{}/v1/chat/completions", served.base))
            .bearer_auth(token)
            .header("content-type", "application/json")
            .body(
                json!({"model": "default", "messages": [{"role": "user", "content": "hi"}]})
                    .to_string(),
            )
            .send()
            .await
            .expect("gateway answers");
        assert_eq!(chat.status().as_u16(), 403);
        let mcp = client
            .post(format!("{}/mcp", served.base))
            .bearer_auth(token)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .body(
                json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}})
                    .to_string(),
            )
            .send()
            .await
            .expect("gateway answers");
        assert_eq!(mcp.status().as_u16(), 403);
    }
    // Such a key can still be revoked.
    ok(served.cli(&["gateway", "keys", "revoke", "gone", "default"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_requests_carry_the_reserved_completion_bound() {
    let compatible = FakeUpstream::spawn(Behaviour::answer("ok")).await;
    let openai = FakeUpstream::spawn(Behaviour::answer("ok")).await;
    let served = Served::start(
        &format!(
            "gateway:\n  model_list:\n{}{}workspaces:\n  main:\n    budget: {{daily_tokens: 1000000}}\n",
            deployment("compat", "openai_compatible/fake", &compatible),
            deployment("oai", "openai/gpt-4o-mini", &openai),
        ),
        &[],
    );
    let key = served.key("main");
    let client = pincer::gateway::default_client().expect("http client");
    let post = |path: &str, body: Value| {
        client
            .post(format!("{}{path}", served.base))
            .bearer_auth(&key)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
    };
    let hi = json!([{"role": "user", "content": "hi"}]);
    let cases = [
        (
            json!({"model": "compat", "messages": hi}),
            json!(4096),
            Value::Null,
        ),
        (
            json!({"model": "compat", "messages": hi, "stream": true}),
            json!(4096),
            Value::Null,
        ),
        (
            json!({"model": "compat", "messages": hi, "max_tokens": 16}),
            json!(16),
            Value::Null,
        ),
        (
            json!({"model": "compat", "messages": hi, "max_tokens": 100, "max_completion_tokens": 10}),
            json!(10),
            json!(10),
        ),
        (
            json!({"model": "compat", "messages": hi, "max_tokens": null}),
            json!(4096),
            Value::Null,
        ),
    ];
    for (i, (body, max_tokens, max_completion_tokens)) in cases.iter().enumerate() {
        let response = post("/v1/chat/completions", body.clone())
            .await
            .expect("answer");
        assert_eq!(response.status().as_u16(), 200, "{body}");
        let _ = response.bytes().await;
        let sent = &compatible.received()[i];
        assert_eq!(&sent["max_tokens"], max_tokens, "{body} sent {sent}");
        assert_eq!(
            &sent["max_completion_tokens"], max_completion_tokens,
            "{body} sent {sent}"
        );
    }
    // Anthropic-style requests to an OpenAI-compatible upstream.
    let response = post(
        "/v1/messages",
        json!({"model": "compat", "max_tokens": 12, "messages": hi}),
    )
    .await
    .expect("answer");
    assert_eq!(response.status().as_u16(), 200);
    let sent = compatible.received();
    assert_eq!(sent.last().unwrap()["max_tokens"], 12, "{sent:?}");

    // OpenAI itself gets `max_completion_tokens` (its current field), never
    // the deprecated `max_tokens`.
    for (body, bound) in [
        (json!({"model": "oai", "messages": hi}), 4096),
        (
            json!({"model": "oai", "messages": hi, "max_tokens": 20}),
            20,
        ),
    ] {
        let response = post("/v1/chat/completions", body.clone())
            .await
            .expect("answer");
        assert_eq!(response.status().as_u16(), 200, "{body}");
        let sent = openai.received();
        let sent = sent.last().unwrap();
        assert_eq!(sent["max_completion_tokens"], bound, "{body} sent {sent}");
        assert!(sent.get("max_tokens").is_none(), "{body} sent {sent}");
    }
}

// ---- the agreement test ----

/// Every alias of `gateway.model_list` in `config`.
fn all_aliases(config: &pincer::config::Config) -> BTreeSet<String> {
    config
        .gateway
        .model_list
        .iter()
        .map(|d| d.model_name.clone())
        .collect()
}

/// A real tool of each source the tests use, to call when it is refused.
fn some_tool(source: &str) -> String {
    let tool = match source {
        "memory" => "recall",
        "skill-calc" => "evaluate",
        "skill-notes" => "get",
        _ => "echo",
    };
    format!("{source}__{tool}")
}

/// For each workspace of `config_text`: `policy audit --json`'s reach equals
/// what the gateway serves to that workspace's key (MCP tools/list, every
/// tool inside its source's filter, `/v1/models`), and everything the audit
/// lists as not reachable, or does not list, is refused.
fn assert_audit_matches_gateway(label: &str, config_text: &str) {
    let config =
        pincer::config::Config::from_str_with_env(config_text, Path::new("pincer.yaml"), |name| {
            std::env::var(name).ok()
        })
        .unwrap_or_else(|e| panic!("{label}: {e}"));
    let served = Served::start(config_text, &[]);
    let aliases = all_aliases(&config);
    // What the audit says of each workspace: its reachable sources with
    // their tools filters, the calls it must refuse and the aliases it may
    // not use.
    let mut audited = Vec::new();
    for workspace in config.workspaces.keys() {
        let reach = audit(&served, workspace)["reach"].clone();
        // What the audit says.
        let mut reachable: Vec<(String, Vec<String>)> = Vec::new();
        let mut refused: Vec<String> = Vec::new();
        let memory = &reach["memory"];
        if memory["reachable"] == true {
            reachable.push(("memory".into(), Vec::new()));
        } else {
            refused.push(some_tool("memory"));
        }
        for item in strings_items(&reach["skills"]).chain(strings_items(&reach["mcp_servers"])) {
            let name = item["name"].as_str().unwrap_or_default().to_string();
            if item["reachable"] == true {
                reachable.push((name, strings(&item["tools"])));
            } else {
                refused.push(some_tool(&name));
            }
        }
        // A skill the workspace does not list is never served.
        if !reachable.iter().any(|(n, _)| n == "skill-calc") {
            refused.push(some_tool("skill-calc"));
        }
        let allowed_models: BTreeSet<String> =
            strings(&reach["models"]["aliases"]).into_iter().collect();
        let not_allowed: Vec<String> = aliases.difference(&allowed_models).cloned().collect();
        audited.push((workspace, reachable, refused, allowed_models, not_allowed));
    }

    // What the gateway serves each workspace's key.
    let asks: Vec<_> = audited
        .iter()
        .map(|(workspace, _, refused, _, not_allowed)| {
            (served.key(workspace), refused.clone(), not_allowed.clone())
        })
        .collect();
    let served_each = served_to_each(&served, &asks);
    for ((workspace, reachable, refused, allowed_models, not_allowed), got) in
        audited.iter().zip(&served_each)
    {
        let at = format!("{label}: workspace {workspace}");
        let tools = strings(&got["tools"]);
        let served_sources: BTreeSet<String> = tools
            .iter()
            .filter_map(|t| t.split_once("__").map(|(s, _)| s.to_string()))
            .collect();
        let audited_sources: BTreeSet<String> = reachable.iter().map(|(n, _)| n.clone()).collect();
        assert_eq!(
            served_sources, audited_sources,
            "{at}: the MCP tools served ({tools:?}) come from exactly the sources the audit lists as reachable"
        );
        for (source, filter) in reachable {
            let expected: Vec<String> = if source == "memory" {
                ["forget", "memorize", "recall"]
                    .iter()
                    .map(|t| format!("memory__{t}"))
                    .collect()
            } else {
                Vec::new()
            };
            let of_source: Vec<&String> = tools
                .iter()
                .filter(|t| t.starts_with(&format!("{source}__")))
                .collect();
            if !expected.is_empty() {
                assert_eq!(of_source, expected.iter().collect::<Vec<_>>(), "{at}");
            }
            for tool in &of_source {
                let bare = &tool[source.len() + 2..];
                assert!(
                    filter.is_empty() || filter.iter().any(|f| f == bare),
                    "{at}: {tool} is outside the audited tools filter {filter:?}"
                );
            }
        }
        for call in refused {
            let outcome = &got["calls"][call];
            assert_eq!(
                outcome["ok"], false,
                "{at}: {call} must be refused: {outcome}"
            );
            assert!(
                outcome["error"]
                    .as_str()
                    .is_some_and(|e| e.contains("not available to workspace")),
                "{at}: {call}: {outcome}"
            );
        }
        let served_models: BTreeSet<String> = strings(&got["models"]).into_iter().collect();
        assert_eq!(
            served_models, *allowed_models,
            "{at}: /v1/models must list exactly the audited model aliases"
        );
        for alias in not_allowed {
            assert_eq!(
                got["chats"][alias]["status"], 403,
                "{at}: a chat with {alias} must be refused: {got}"
            );
        }
    }
}

fn strings_items(value: &Value) -> impl Iterator<Item = &Value> {
    value.as_array().into_iter().flatten()
}

#[test]
fn the_audit_and_the_gateway_agree_on_every_example_workspace() {
    // The example workspaces.
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/../workspaces/pincer.yaml");
    let text = std::fs::read_to_string(examples).expect("workspaces/pincer.yaml");
    assert_audit_matches_gateway("workspaces/pincer.yaml", &text);

    // The built-in configuration (as `pincer init` writes it without keys).
    let (builtin, _) = pincer::config::starter::starter_config(&|_| false);
    assert_audit_matches_gateway("the built-in configuration", &builtin);

    // Each built-in policy group (policies/), and a user group restricting
    // skills and MCP servers, on a workspace that uses skills, an MCP server
    // with a tools filter and several models.
    let groups = tempfile::tempdir().expect("groups dir");
    std::fs::write(
        groups.path().join("calc_only.yaml"),
        "description: the calculator and memory, no MCP servers\nallowed_skills: [skill-calc, memory]\nallowed_mcp_servers: []\n",
    )
    .expect("group file");
    let catalog = pincer::policy::PolicyCatalog::builtin().expect("built-in groups");
    let mut workspaces = String::new();
    let uses = "    skills: [skill-calc, skill-notes]\n    mcp_servers: [echoer]\n";
    for group in catalog.groups().iter().filter(|g| g.name != "baseline") {
        workspaces.push_str(&format!(
            "  {}:\n    policies: [{}]\n{uses}",
            group.name.replace('_', "-"),
            group.name
        ));
    }
    workspaces.push_str(&format!(
        "  calc-only:\n    policies: [calc_only]\n    model: small\n{uses}  no-memory:\n    memory: {{enabled: false}}\n    model: big\n    models: [big]\n{uses}  execs:\n    policies: [{{allowed_executables: [/bin/busybox]}}]\n{uses}"
    ));
    let config = format!(
        "containers:\n  policy_dirs: [\"{}\"]\ngateway:\n  model_list:\n    - {{model_name: small, litellm_params: {{model: ollama/llama3.2}}}}\n    - {{model_name: big, litellm_params: {{model: \"openai/gpt-4o\", api_key: unused}}}}\n    - {{model_name: spare, litellm_params: {{model: ollama/qwen2.5}}}}\n  fallbacks: [{{small: [spare]}}]\nmcp_servers:\n  echoer:\n    {}\n    tools: [echo]\nskills:\n  skill-notes:\n    tools: [list]\nworkspaces:\n{workspaces}",
        groups.path().display(),
        stdio_server()
    );
    assert_audit_matches_gateway("policies/ groups", &config);
}
