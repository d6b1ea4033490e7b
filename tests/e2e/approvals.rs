//! Approvals from the terminal (issue 27): the real `pincer message` in
//! workspaces of each tier, real containers, a scripted model. `--approve`
//! decides as the operator (`operator:cli`); `pincer approvals` lists,
//! shows and revokes.

use serde_json::Value;

use crate::agent::{Env, events, of_kind, tool_results};
use crate::support::fake_llm::Behaviour;
use crate::support::ok;

/// One turn in `workspace` (conversation `conversation`) decided with
/// `--approve how`; its events.
fn turn(env: &Env, workspace: &str, conversation: &str, how: &str, text: &str) -> Vec<Value> {
    let out = env.pincer(&[
        "message",
        "-w",
        workspace,
        "--conversation",
        conversation,
        "--json",
        "--approve",
        how,
        "--text",
        text,
    ]);
    events(&out)
}

fn bash(command: &str) -> Behaviour {
    Behaviour::tool(
        "bash",
        &serde_json::json!({ "command": command }).to_string(),
    )
}

/// Each tier judges the same kind of call its own way: read-only refuses
/// without asking, approval asks (deny, once, session, always), the
/// built-in read commands run unasked but never a chain, and an "always"
/// rule is listed, honoured and revoked.
#[tokio::test(flavor = "multi_thread")]
async fn each_tier_and_each_decision_from_the_terminal() {
    let steps = [
        ("readonly", "c", "deny", "touch /workspace/ro"),
        ("asked", "c", "deny", "touch /workspace/denied"),
        ("asked", "c", "once", "touch /workspace/once"),
        ("asked", "c", "deny", "ls /workspace"),
        (
            "asked",
            "c",
            "deny",
            "ls /workspace; touch /workspace/chained",
        ),
        ("asked", "s", "session", "touch /workspace/s1"),
        ("asked", "s", "deny", "touch /workspace/s2"),
        ("asked", "other", "deny", "touch /workspace/s3"),
        ("asked", "a", "always", "mkdir -p /workspace/a1"),
        ("asked", "b", "deny", "mkdir -p /workspace/a1"),
    ];
    let mut script = Vec::new();
    for (_, _, _, command) in &steps {
        script.push(bash(command));
        script.push(Behaviour::answer("done"));
    }
    // After the revoke: asked again, denied.
    script.push(bash("mkdir -p /workspace/a1"));
    script.push(Behaviour::answer("done"));
    let env = Env::new(
        script,
        "  readonly: {approvals: {tier: read-only}}\n  asked: {approvals: {tier: approval}}\n",
    )
    .await;
    let asked_dir = env.workspace_dir("asked");
    let mut seen = Vec::new();
    for (workspace, conversation, how, command) in steps {
        let events = turn(&env, workspace, conversation, how, command);
        let asked = of_kind(&events, "approval").len();
        let result = tool_results(&events).first().cloned().unwrap_or_default();
        seen.push((command, asked, result));
    }
    let asked: Vec<usize> = seen.iter().map(|(_, a, _)| *a).collect();
    assert_eq!(asked, [0, 1, 1, 0, 1, 1, 0, 1, 1, 0], "{seen:#?}");
    assert!(seen[0].2.contains("read-only"), "{seen:#?}");
    assert!(!env.workspace_dir("readonly").join("ro").exists());
    assert!(seen[1].2.contains("denied by operator:cli"), "{seen:#?}");
    assert!(!asked_dir.join("denied").exists());
    assert!(asked_dir.join("once").exists());
    assert!(!asked_dir.join("chained").exists());
    assert!(asked_dir.join("s1").exists() && asked_dir.join("s2").exists());
    assert!(
        !asked_dir.join("s3").exists(),
        "a session decision covers its session only"
    );
    let rules = ok(env.pincer(&["approvals", "rules", "-w", "asked"]));
    assert_eq!(rules.trim(), "bash: mkdir -p /workspace/a1");

    ok(env.pincer(&[
        "approvals",
        "revoke",
        "-w",
        "asked",
        "bash: mkdir -p /workspace/a1",
    ]));
    let after = turn(&env, "asked", "b", "deny", "mkdir again");
    assert_eq!(of_kind(&after, "approval").len(), 1, "revoked: asked again");

    // Every request is kept with its decision.
    let listed = ok(env.pincer(&["approvals", "list", "--json"]));
    assert_eq!(listed.trim(), "[]", "nothing is left pending");
    assert_eq!(env.sandbox.audited("approval.requested").len(), 7);
}

/// A call whose arguments are too long for a person to review (over
/// `MAX_PREVIEW_BYTES`) is refused without asking: no request is stored,
/// the model reads why, and nothing runs.
#[tokio::test(flavor = "multi_thread")]
async fn a_call_too_long_to_review_is_refused_without_asking() {
    let huge = format!("echo {} > /workspace/huge", "x".repeat(70 * 1024));
    let env = Env::new(
        vec![bash(&huge), Behaviour::answer("done")],
        "  asked: {approvals: {tier: approval}}\n",
    )
    .await;
    let events = turn(&env, "asked", "c", "once", "write a lot");
    assert!(of_kind(&events, "approval").is_empty(), "nobody is asked");
    let result = tool_results(&events).first().cloned().unwrap_or_default();
    assert!(
        result.contains("more than the 65536 a person is asked to review"),
        "{result}"
    );
    assert!(!env.workspace_dir("asked").join("huge").exists());
    assert!(env.sandbox.audited("approval.requested").is_empty());
    assert_eq!(env.sandbox.audited("approval.denied").len(), 1);
}

/// Claims are not trust: a tool said to only read (an MCP server's
/// `readOnlyHint`, a skill's `effect = "read"` in its plugin.toml) runs
/// unasked in tier approval only where the operator trusts its source
/// (`trust_annotations`, `trust_effects`). The same claim from an untrusted
/// server is asked (here denied), and a trusted skill's write tool is asked.
#[tokio::test(flavor = "multi_thread")]
async fn read_only_claims_count_only_from_sources_the_operator_trusts() {
    use crate::support::gateway::{python, python_script};
    let server = format!(
        "command: [\"{}\", \"{}\"]",
        python(),
        python_script("mcp_echo_server.py").display()
    );
    let steps = [
        ("trusting", "echoer__echo", r#"{"text":"hi"}"#),
        ("trusting", "skill-notes__list", "{}"),
        ("trusting", "skill-notes__put", r#"{"key":"k","text":"v"}"#),
        ("doubting", "doubted__echo", r#"{"text":"hi"}"#),
    ];
    let mut script = Vec::new();
    for (_, tool, arguments) in steps {
        script.push(Behaviour::tool(tool, arguments));
        script.push(Behaviour::answer("done"));
    }
    let env = Env::new(
        script,
        &format!(
            "  trusting: {{approvals: {{tier: approval}}, mcp_servers: [echoer], skills: [skill-notes]}}
  doubting: {{approvals: {{tier: approval}}, mcp_servers: [doubted]}}
mcp_servers:
  echoer: {{{server}, tools: [echo], trust_annotations: true}}
  doubted: {{{server}, tools: [echo]}}
skills:
  skill-notes: {{trust_effects: true}}
"
        ),
    )
    .await;
    let mut seen = Vec::new();
    for (workspace, tool, _) in steps {
        let events = turn(&env, workspace, "c", "deny", tool);
        let asked = of_kind(&events, "approval").len();
        let result = tool_results(&events).first().cloned().unwrap_or_default();
        seen.push((tool, asked, result));
    }
    let asked: Vec<usize> = seen.iter().map(|(_, a, _)| *a).collect();
    assert_eq!(asked, [0, 0, 1, 1], "{seen:#?}");
    assert!(seen[0].2.contains("echo: hi"), "{seen:#?}");
    assert!(!seen[1].2.contains("denied"), "{seen:#?}");
    for (_, _, result) in &seen[2..] {
        assert!(result.contains("denied by operator:cli"), "{seen:#?}");
    }
}
