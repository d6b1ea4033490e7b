//! The assistant inside a team's chat (issue 29), end to end over the real
//! daemon, the real `channel-slack` component, a real workspace container
//! and `tests/python/fake_slack.py`: commands answered by the host, and
//! pairing for people not yet allowed.

use crate::slack::{ALLOWED, Env, FakeSlack, last_tool_result, texts};
use crate::support::fake_llm::Behaviour;
use crate::support::ok;

use serde_json::json;

/// `/help`, an unknown command and `/status` are answered by the host and
/// reach no model; Slack's `/pincer status|tier|new` work as pincer's
/// `/status`, `/tier`, `/new`; after `/pincer tier read-only` a write tool
/// is refused in that conversation.
#[tokio::test(flavor = "multi_thread")]
async fn commands_in_chat_are_answered_by_the_host_and_tighten_the_tier() {
    let env = Env::with_workspace(
        vec![
            Behaviour::tool("bash", r#"{"command":"touch /workspace/written"}"#),
            Behaviour::answer("I could not write it"),
        ],
        FakeSlack::start(),
        "{approvals: {tier: approval}}",
    )
    .await;
    let mut daemon = env.start();
    env.slack.connections(1).await;

    env.slack.dm("/help", ALLOWED, "D0DM").await;
    let said = texts(&env, 1).await;
    assert!(
        said[0].contains("/status") && said[0].contains("/pincer new"),
        "{said:#?}"
    );
    env.slack.dm("/frobnicate now", ALLOWED, "D0DM").await;
    let said = texts(&env, 2).await;
    assert!(
        said[1].contains("/frobnicate") && said[1].contains("not a command"),
        "{said:#?}"
    );
    env.slack.dm("/status", ALLOWED, "D0DM").await;
    let said = texts(&env, 3).await;
    for part in ["Workspace `team`", "model: `default`", "tier `approval`", "queue:"] {
        assert!(said[2].contains(part), "{part}: {said:#?}");
    }

    // Slack's own command, over Socket Mode.
    let slash = |text: &str| {
        json!({"kind": "slash", "command": "/pincer", "text": text, "user": ALLOWED,
               "channel": "D0DM"})
    };
    env.slack.post("/socket/push", slash("tier read-only")).await;
    let said = texts(&env, 4).await;
    assert!(said[3].contains("tier `read-only`"), "{said:#?}");
    env.slack.post("/socket/push", slash("status")).await;
    let said = texts(&env, 5).await;
    assert!(said[4].contains("tier `read-only`"), "{said:#?}");
    assert!(
        env.model.received().is_empty(),
        "no command reached the model"
    );
    assert_eq!(env.sandbox.audited("approval.tier_set").len(), 1);

    // A turn in that conversation may not write.
    env.slack.dm("please write a file", ALLOWED, "D0DM").await;
    let said = texts(&env, 6).await;
    assert_eq!(said[5], "I could not write it", "{said:#?}");
    let refused = last_tool_result(&env);
    assert!(refused.contains("read-only"), "{refused}");
    assert!(
        !env.sandbox.dir.path().join("ws/team/written").exists(),
        "nothing was written"
    );

    env.slack.post("/socket/push", slash("new")).await;
    let said = texts(&env, 7).await;
    assert_eq!(said[6], "Started a new session.", "{said:#?}");
    assert_eq!(env.model.received().len(), 2, "only the one turn");
    assert!(daemon.stop().success(), "{}", daemon.log());
}

/// A stranger (`refusal: pair`) gets a code by DM, never in the channel
/// they wrote in; a wrong, an expired and a used code are refused by
/// `pincer pairing approve` (non-zero, saying why); the right one lets
/// them in from their next message on, with no restart, and tells them;
/// `pincer pairing remove` takes them out again. All of it is audited.
#[tokio::test(flavor = "multi_thread")]
async fn a_stranger_pairs_with_a_code_the_operator_approves() {
    const STRANGER: &str = "U0STRANGER";
    let env = Env::configured(
        vec![Behaviour::answer("welcome aboard")],
        FakeSlack::start(),
        "{}",
        "pair",
    )
    .await;
    let mut daemon = env.start();
    env.slack.connections(1).await;

    env.slack
        .post(
            "/socket/push",
            json!({"kind": "mention", "text": "let me in", "user": STRANGER, "channel": "C0CHAN"}),
        )
        .await;
    let posted = env.slack.posted(1).await;
    let dm = &posted[0]["args"];
    assert_eq!(dm["channel"], STRANGER, "by direct message: {posted:#?}");
    let text = dm["text"].as_str().unwrap();
    let code = text
        .split('`')
        .nth(1)
        .unwrap_or_else(|| panic!("a code in {text}"))
        .to_string();
    assert_eq!(code.len(), 8, "{text}");
    assert!(
        code.bytes()
            .all(|b| b"0123456789ABCDEFGHJKMNPQRSTVWXYZ".contains(&b)),
        "{code}"
    );
    assert_eq!(env.inbound()[0].1, "refused");

    let listed = ok(env.cli(&["pairing", "list"]));
    let first = listed.lines().next().unwrap_or_default();
    assert!(
        first.starts_with(&code) && first.contains(STRANGER),
        "{listed}"
    );

    // Wrong and expired codes are refused.
    let wrong = env.cli(&["pairing", "approve", "ZZZZZZZZ"]);
    assert!(!wrong.status.success());
    assert!(
        String::from_utf8_lossy(&wrong.stderr).contains("no pairing code `ZZZZZZZZ`"),
        "{wrong:?}"
    );
    env.slack.dm("me too", "U0LATE", "D0LATE").await;
    env.slack.posted(2).await;
    let db = rusqlite::Connection::open(env.sandbox.home().join("pincer.db")).unwrap();
    db.execute(
        "UPDATE pairing_requests SET expires_ms = 1 WHERE sender = 'U0LATE'",
        [],
    )
    .unwrap();
    let late: String = db
        .query_row(
            "SELECT code FROM pairing_requests WHERE sender = 'U0LATE'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let expired = env.cli(&["pairing", "approve", &late]);
    assert!(!expired.status.success());
    let why = String::from_utf8_lossy(&expired.stderr);
    assert!(why.contains("expired") && why.contains("U0LATE"), "{why}");

    // The right code lets the stranger in and tells them.
    let approved = ok(env.cli(&["pairing", "approve", &code.to_ascii_lowercase()]));
    assert!(approved.contains(STRANGER), "{approved}");
    let posted = env.slack.posted(3).await;
    assert_eq!(posted[2]["args"]["channel"], STRANGER, "{posted:#?}");
    assert!(
        posted[2]["args"]["text"]
            .as_str()
            .unwrap()
            .contains("approved"),
        "{posted:#?}"
    );
    let used = env.cli(&["pairing", "approve", &code]);
    assert!(!used.status.success());
    assert!(
        String::from_utf8_lossy(&used.stderr).contains("already approved"),
        "{used:?}"
    );
    env.slack
        .post(
            "/socket/push",
            json!({"kind": "mention", "text": "hello again", "user": STRANGER, "channel": "C0CHAN"}),
        )
        .await;
    let said = texts(&env, 4).await;
    assert_eq!(said[3], "welcome aboard", "{said:#?}");
    let allowed = ok(env.cli(&["pairing", "allowed"]));
    assert!(
        allowed.contains(STRANGER) && allowed.contains(&format!("pairing {code} approved by")),
        "{allowed}"
    );

    // Removed again: the next message is refused.
    ok(env.cli(&["pairing", "remove", STRANGER]));
    env.slack
        .post(
            "/socket/push",
            json!({"kind": "mention", "text": "still there?", "user": STRANGER, "channel": "C0CHAN"}),
        )
        .await;
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let states: Vec<String> = env.inbound().into_iter().map(|(_, s)| s).collect();
    assert_eq!(states.last().map(String::as_str), Some("refused"), "{states:?}");
    assert_eq!(env.model.received().len(), 1, "one turn only");
    assert_eq!(env.sandbox.audited("channel.pairing_asked").len(), 2);
    assert_eq!(env.sandbox.audited("channel.pairing_approved").len(), 1);
    assert_eq!(env.sandbox.audited("channel.pairing_removed").len(), 1);
    assert!(daemon.stop().success(), "{}", daemon.log());
}
