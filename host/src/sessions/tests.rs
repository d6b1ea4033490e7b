use serde_json::json;

use super::history::{INTERRUPTED_TOOL_RESULT, estimate_tokens};
use super::*;
use crate::db::testing::{database, each_backend};

fn key(conversation: &str) -> SessionKey {
    SessionKey {
        channel: "cli".into(),
        conversation: conversation.into(),
        workspace: "default".into(),
    }
}

fn user(text: &str) -> Value {
    json!({"role": "user", "content": text})
}

#[test]
fn a_session_is_reused_until_a_new_one_is_started() {
    each_backend(|at| {
        let store = SessionStore::open_at(at).unwrap();
        let first = store.current(&key("a")).unwrap();
        assert_eq!(store.current(&key("a")).unwrap().id, first.id);
        assert_ne!(store.current(&key("b")).unwrap().id, first.id);
        let fresh = store.start_new(&key("a")).unwrap();
        assert_ne!(fresh.id, first.id);
        assert_eq!(store.current(&key("a")).unwrap().id, fresh.id);
    });
}

#[test]
fn messages_survive_reopening_and_keep_their_order() {
    each_backend(messages_survive_reopening_and_keep_their_order_on);
}

fn messages_survive_reopening_and_keep_their_order_on(at: &Location) {
    let session = {
        let store = SessionStore::open_at(at).unwrap();
        let session = store.current(&key("a")).unwrap();
        store.begin_turn(session.id, "t1").unwrap();
        store.append(session.id, "t1", &user("你好")).unwrap();
        store
            .append(
                session.id,
                "t1",
                &json!({"role": "assistant", "content": "hi"}),
            )
            .unwrap();
        store.add_usage("t1", 10, 2).unwrap();
        store.finish_turn("t1", TurnStatus::Done, None).unwrap();
        session
    };
    let store = SessionStore::open_at(at).unwrap();
    let messages = store.messages(session.id).unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0].message["content"], "你好");
    assert_eq!(messages[1].message["role"], "assistant");
    let turn = store.turn("t1").unwrap().unwrap();
    assert_eq!(turn.status, TurnStatus::Done);
    assert_eq!((turn.prompt_tokens, turn.completion_tokens), (10, 2));
    assert_eq!(turn.steps, 1);
}

#[test]
fn a_turn_needs_an_existing_session() {
    each_backend(|at| {
        let store = SessionStore::open_at(at).unwrap();
        assert!(matches!(
            store.begin_turn(42, "t"),
            Err(SessionError::UnknownSession(42))
        ));
    });
}

fn stored(turn: &str, message: Value) -> StoredMessage {
    StoredMessage {
        turn_id: turn.into(),
        message,
    }
}

#[test]
fn trimming_keeps_whole_newest_turns_within_the_budget() {
    let long = "x".repeat(3000);
    let history = vec![
        stored("t1", user(&long)),
        stored("t1", json!({"role": "assistant", "content": "a1"})),
        stored("t2", user("short")),
        stored("t2", json!({"role": "assistant", "content": "a2"})),
    ];
    let all = trim_to_budget(&history, 10_000, None);
    assert_eq!(all.messages.len(), 4);
    assert_eq!(all.dropped_turns, 0);
    let newest = trim_to_budget(&history, 100, None);
    assert_eq!(newest.dropped_turns, 1);
    assert_eq!(newest.messages.len(), 2);
    assert_eq!(newest.messages[0]["content"], "short");
    // The newest turn is kept even when it alone exceeds the budget.
    let tiny = trim_to_budget(&history, 1, None);
    assert_eq!(tiny.messages.len(), 2);
    assert!(tiny.estimated_tokens >= estimate_tokens(&history[3].message));
}

#[test]
fn tool_calls_of_a_killed_turn_get_a_stated_result() {
    let history = vec![
        stored("t1", user("write it")),
        stored(
            "t1",
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}},
                {"id": "c2", "type": "function", "function": {"name": "read", "arguments": "{}"}}
            ]}),
        ),
        stored(
            "t1",
            json!({"role": "tool", "tool_call_id": "c1", "content": "done"}),
        ),
        // A result whose call is not in the history is dropped.
        stored(
            "t1",
            json!({"role": "tool", "tool_call_id": "zz", "content": "stray"}),
        ),
    ];
    let trimmed = trim_to_budget(&history, 10_000, None);
    let roles: Vec<_> = trimmed
        .messages
        .iter()
        .map(|m| {
            format!(
                "{}:{}",
                m["role"].as_str().unwrap(),
                m["tool_call_id"].as_str().unwrap_or("")
            )
        })
        .collect();
    assert_eq!(roles, ["user:", "assistant:", "tool:c2", "tool:c1"]);
    assert_eq!(trimmed.messages[2]["content"], INTERRUPTED_TOOL_RESULT);

    // A turn being resumed keeps its last calls open for the runner.
    let resumed = trim_to_budget(&history, 10_000, Some("t1"));
    let ids: Vec<_> = resumed
        .messages
        .iter()
        .filter_map(|m| m["tool_call_id"].as_str())
        .collect();
    assert_eq!(ids, ["c1"]);
}

#[test]
fn tool_calls_are_recorded_with_the_turn() {
    each_backend(tool_calls_are_recorded_with_the_turn_on);
}

fn tool_calls_are_recorded_with_the_turn_on(at: &Location) {
    let store = SessionStore::open_at(at).unwrap();
    let session = store.current(&key("a")).unwrap();
    store.begin_turn(session.id, "t1").unwrap();
    let call = ToolCallRecord {
        call_id: "c1".into(),
        name: "bash".into(),
        arguments: r#"{"command":"ls"}"#.into(),
        ok: true,
        output_bytes: 12,
        truncated: false,
        duration_ms: 3,
    };
    store.record_tool_call("t1", &call).unwrap();
    assert_eq!(store.tool_calls("t1").unwrap(), vec![call]);
    assert_eq!(store.turn("t1").unwrap().unwrap().tool_calls, 1);
    store
        .finish_turn("t1", TurnStatus::Failed, Some("container stopped"))
        .unwrap();
    let turn = store.turn("t1").unwrap().unwrap();
    assert_eq!(turn.status, TurnStatus::Failed);
    assert_eq!(turn.error.as_deref(), Some("container stopped"));
}

#[test]
fn sessions_are_listed_and_filtered_alike_on_both_backends() {
    each_backend(|at| {
        let store = SessionStore::open_at(at).unwrap();
        let a = store.current(&key("a")).unwrap();
        store.begin_turn(a.id, "t1").unwrap();
        store.begin_turn(a.id, "t2").unwrap();
        store.append(a.id, "t1", &user("Hello World")).unwrap();
        store.append(a.id, "t2", &user("50% off_")).unwrap();
        let b = store.current(&key("b")).unwrap();
        let c = store
            .current(&SessionKey {
                channel: "slack".into(),
                conversation: "D1".into(),
                workspace: "other".into(),
            })
            .unwrap();
        store.begin_turn(c.id, "t3").unwrap();
        // What the sender filter reads of the channels' inbound table.
        crate::db::Db::open(at)
            .unwrap()
            .transaction(|conn| -> Result<(), DbError> {
                conn.schema(
                    "CREATE TABLE channel_inbound (sender TEXT, sender_name TEXT, turn_id TEXT)",
                )?;
                conn.execute(
                    "INSERT INTO channel_inbound VALUES ('U1', 'Ann', 't3')",
                    crate::args![],
                )
                .map(drop)
            })
            .unwrap();

        let ids = |filter: SessionFilter| -> Vec<i64> {
            store
                .list(&SessionFilter {
                    limit: 10,
                    ..filter
                })
                .unwrap()
                .iter()
                .map(|s| s.id)
                .collect()
        };
        assert_eq!(ids(SessionFilter::default()), [c.id, b.id, a.id]);
        let text = |t: &str| SessionFilter {
            text: Some(t.into()),
            ..SessionFilter::default()
        };
        assert_eq!(ids(text("wORLD")), [a.id]);
        assert_eq!(ids(text("% OFF_")), [a.id]);
        assert!(ids(text("_x")).is_empty());
        let workspace = SessionFilter {
            workspace: Some("other".into()),
            ..SessionFilter::default()
        };
        assert_eq!(ids(workspace), [c.id]);
        let sender = |s: &str| SessionFilter {
            sender: Some(s.into()),
            ..SessionFilter::default()
        };
        assert_eq!(ids(sender("Ann")), [c.id]);
        assert_eq!(ids(sender("U1")), [c.id]);
        assert!(ids(sender("U2")).is_empty());
        let page = SessionFilter {
            before_id: Some(c.id),
            ..SessionFilter::default()
        };
        assert_eq!(ids(page), [b.id, a.id]);

        let found = store.get(a.id).unwrap().unwrap();
        assert_eq!((found.messages, found.closed_ms), (2, None));
        assert!(found.last_ms.is_some());
        assert_eq!(store.get(b.id).unwrap().unwrap().last_ms, None);
        assert!(store.get(c.id + 1).unwrap().is_none());
        let turns: Vec<String> = store
            .turns(a.id)
            .unwrap()
            .into_iter()
            .map(|t| t.id)
            .collect();
        assert_eq!(turns, ["t1", "t2"]);
    });
}

/// Two daemons on one PostgreSQL database, both asked for the open session
/// of the same conversations at once: each conversation gets one session.
#[test]
fn two_daemons_asking_for_a_conversation_at_once_share_one_session() {
    let at = database();
    let daemons = [
        SessionStore::open_at(&at).unwrap(),
        SessionStore::open_at(&at).unwrap(),
    ];
    let got = std::sync::Mutex::new(Vec::new());
    let start = std::sync::Barrier::new(4);
    std::thread::scope(|s| {
        for store in &daemons {
            for _ in 0..2 {
                s.spawn(|| {
                    // Connected before the race starts, so no thread runs ahead.
                    store.current(&key("warm-up")).unwrap();
                    start.wait();
                    for i in 0..30 {
                        let session = store.current(&key(&format!("c{i}"))).unwrap();
                        got.lock().unwrap().push((i, session.id));
                    }
                });
            }
        }
    });
    let mut got = got.into_inner().unwrap();
    assert_eq!(got.len(), 120);
    got.sort_unstable();
    got.dedup();
    assert_eq!(got.len(), 30, "one session per conversation: {got:?}");
    assert_eq!(
        daemons[0]
            .list(&SessionFilter {
                limit: 100,
                ..SessionFilter::default()
            })
            .unwrap()
            .len(),
        31
    );
}
