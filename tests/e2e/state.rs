//! The host's state on PostgreSQL (`state.backend: postgres`): the real
//! daemon with the real Slack component, answering over the fake Slack,
//! with every record in a private PostgreSQL server this test process
//! starts (`pincer::db::testing`) and nothing in `pincer.db`.

use std::time::Duration;

use pincer::db::{Db, Location};
use serde_json::json;

use crate::slack::{ALLOWED, Env, FakeSlack};
use crate::support::fake_llm::Behaviour;
use crate::support::ok;

fn count(db: &Db, sql: &str) -> i64 {
    db.run(|c| c.query_one(sql, &[])?.get(0)).expect(sql)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_daemon_on_postgres_answers_once_keeps_every_record_there_and_survives_a_restart() {
    // The daemon reaches the server over loopback TCP with TLS, checking
    // its certificate; the test reads the same database over the socket.
    let (ca, _) = pincer::db::testing::test_cas();
    let (at, url) = pincer::db::testing::tls_database(&format!(
        "sslmode=verify-full sslrootcert={}",
        ca.display()
    ));
    let env = Env::configured_with(
        vec![
            Behaviour::answer("first answer"),
            Behaviour::answer("second answer"),
        ],
        FakeSlack::start(),
        "{observers: [observer-jsonl]}",
        "reply",
        &format!("state:\n  backend: postgres\n  url: \"{url}\"\n"),
    )
    .await;
    let mut daemon = env.start();
    let (status, _) = env
        .slack
        .get("/wait?what=connections&count=1&timeout=30")
        .await;
    assert_eq!(status, 200, "no Socket Mode connection\n{}", daemon.log());

    let pushed = env.slack.dm("hello from postgres", ALLOWED, "D0PG").await;
    let posted = env.slack.posted(1).await;
    assert_eq!(posted[0]["args"]["text"], "first answer", "{posted:#?}");
    let plain = count(
        &Db::open(&at).unwrap(),
        "SELECT COUNT(*) FROM pg_stat_activity a JOIN pg_stat_ssl s ON s.pid = a.pid
         WHERE a.datname = current_database() AND a.client_port > 0 AND NOT s.ssl",
    );
    let encrypted = count(
        &Db::open(&at).unwrap(),
        "SELECT COUNT(*) FROM pg_stat_activity a JOIN pg_stat_ssl s ON s.pid = a.pid
         WHERE a.datname = current_database() AND a.client_port > 0 AND s.ssl",
    );
    assert_eq!(plain, 0, "every TCP connection of the daemon is encrypted");
    assert!(encrypted > 0, "the daemon's connections are over TCP");
    // Slack delivers the same event again: one turn, one reply.
    env.slack
        .post(
            "/socket/push",
            json!({"kind": "dm", "text": "hello from postgres", "user": ALLOWED,
                   "channel": "D0PG", "ts": pushed["ts"]}),
        )
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(daemon.stop().success(), "{}", daemon.log());

    let db = Db::open(&at).unwrap();
    assert_eq!(
        count(
            &db,
            "SELECT COUNT(*) FROM channel_inbound WHERE state = 'done'"
        ),
        1
    );
    assert_eq!(
        count(
            &db,
            "SELECT COUNT(*) FROM channel_outbox WHERE state = 'sent'"
        ),
        1
    );
    assert_eq!(count(&db, "SELECT COUNT(*) FROM gateway_usage"), 1);
    assert!(count(&db, "SELECT COUNT(*) FROM session_messages") >= 2);
    assert!(count(&db, "SELECT COUNT(*) FROM audit_events") >= 1);
    let sqlite = env.sandbox.home().join(pincer::db::FILE_NAME);
    assert!(
        !sqlite.exists(),
        "nothing is kept in {} when the state is on PostgreSQL",
        sqlite.display()
    );

    // A restarted daemon finds the conversation where it was: the old event
    // is still known, the next message continues the session.
    let mut daemon = env.start();
    let (status, _) = env
        .slack
        .get("/wait?what=connections&count=2&timeout=30")
        .await;
    assert_eq!(status, 200, "no Socket Mode connection\n{}", daemon.log());
    env.slack
        .post(
            "/socket/push",
            json!({"kind": "dm", "text": "hello from postgres", "user": ALLOWED,
                   "channel": "D0PG", "ts": pushed["ts"]}),
        )
        .await;
    env.slack.dm("and again", ALLOWED, "D0PG").await;
    let posted = env.slack.posted(2).await;
    assert_eq!(posted[1]["args"]["text"], "second answer", "{posted:#?}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        env.slack.posted(2).await.len(),
        2,
        "the old event made no second turn"
    );
    let status = env.cli(&["status"]);
    let shown = String::from_utf8_lossy(&status.stdout);
    assert!(shown.contains("state: PostgreSQL host="), "{shown}");
    assert!(daemon.stop().success(), "{}", daemon.log());
    assert_eq!(count(&db, "SELECT COUNT(*) FROM channel_inbound"), 2);
    assert_eq!(
        count(&db, "SELECT COUNT(*) FROM sessions"),
        1,
        "one session, continued"
    );
}

/// `pincer state copy` moves a home's SQLite state into an empty
/// PostgreSQL database: every table's rows and checksum read back equal,
/// the memory index and the day sums rebuilt there, and the copied home
/// works on PostgreSQL as it did on SQLite. Copied back into a new SQLite
/// file, every table has the same rows and checksum again, and a home on
/// it works. A second copy into a full database or an existing file is
/// refused, touching nothing.
#[test]
fn state_copy_moves_a_home_to_postgres_with_counts_and_checksums() {
    let sandbox = crate::support::Sandbox::new();
    let sqlite_config = sandbox.write(
        "pincer.yaml",
        // The home this test copies is on SQLite whichever backend the
        // other tests run on.
        "workspaces:\n  default: {}\n  research: {}\nstate:\n  backend: sqlite\n",
    );
    let on_sqlite = |args: &[&str]| {
        let mut all = vec!["--config", sqlite_config.to_str().unwrap()];
        all.extend_from_slice(args);
        sandbox.pincer(&all)
    };
    let seat = ok(on_sqlite(&[
        "memory",
        "add",
        "--kind",
        "preference",
        "用户喜欢靠窗的座位",
    ]));
    ok(on_sqlite(&[
        "memory",
        "add",
        "--workspace",
        "research",
        "Deploy with cargo dist",
    ]));
    ok(on_sqlite(&["gateway", "keys", "create", "default"]));
    let keys_before = ok(on_sqlite(&["gateway", "keys", "list", "default"]));

    let at = pincer::db::testing::database();
    let Location::Postgres(url) = &at else {
        unreachable!()
    };
    let db_file = sandbox.home().join(pincer::db::FILE_NAME);
    let from = format!("sqlite:{}", db_file.display());
    let copied = ok(sandbox.pincer(&["state", "copy", "--from", &from, "--to", url]));
    for table in ["memories", "gateway_keys"] {
        assert!(
            copied
                .lines()
                .any(|l| l.trim_start().starts_with(table) && l.contains("(same read back)")),
            "{table} copied and checked:\n{copied}"
        );
    }
    assert!(copied.contains("the memory index (2 memories)"), "{copied}");

    // And back, into a new SQLite file: the same tables, rows and checksums,
    // and a home on it works as the first did.
    let home_back = sandbox.dir.path().join("home-back");
    std::fs::create_dir_all(&home_back).unwrap();
    let back_file = home_back.join(pincer::db::FILE_NAME);
    let back_to = format!("sqlite:{}", back_file.display());
    let back = ok(sandbox.pincer(&["state", "copy", "--from", url, "--to", &back_to]));
    // table -> (rows, checksum)
    let tables = |report: &str| -> std::collections::BTreeMap<String, (u64, String)> {
        report
            .lines()
            .filter(|l| l.contains("(same read back)"))
            .map(|l| {
                let words: Vec<&str> = l.split_whitespace().collect();
                (
                    words[0].to_owned(),
                    (words[1].parse().unwrap(), words[4].to_owned()),
                )
            })
            .collect()
    };
    let (there, back_again) = (tables(&copied), tables(&back));
    assert!(there.contains_key("memories") && there.contains_key("gateway_keys"));
    for (table, rows_and_sum) in &back_again {
        match there.get(table) {
            Some(first) => assert_eq!(rows_and_sum, first, "{table}: {back}\n-----\n{copied}"),
            // Made on PostgreSQL by the stores, empty: the SQLite home had
            // no such table.
            None => assert_eq!(rows_and_sum.0, 0, "{table}: {back}"),
        }
    }
    assert!(
        there.keys().all(|t| back_again.contains_key(t)),
        "{back}\n-----\n{copied}"
    );
    assert!(back.contains("the memory index (2 memories)"), "{back}");
    let on_back = |args: &[&str]| {
        let out = sandbox
            .command()
            .env("PINCER_HOME", &home_back)
            .arg("--config")
            .arg(&sqlite_config)
            .args(args)
            .output()
            .unwrap();
        ok(out)
    };
    assert!(on_back(&["memory", "search", "座位偏好"]).contains("用户喜欢靠窗的座位"));
    assert_eq!(
        on_back(&["gateway", "keys", "list", "default"]),
        keys_before
    );
    let again =
        crate::support::fails(sandbox.pincer(&["state", "copy", "--from", url, "--to", &back_to]));
    assert!(again.contains("exists already"), "{again}");

    let pg_config = sandbox.write(
        "pg.yaml",
        &format!("workspaces:\n  default: {{}}\n  research: {{}}\nstate:\n  backend: postgres\n  url: \"{url}\"\n"),
    );
    let on_postgres = |args: &[&str]| {
        let mut all = vec!["--config", pg_config.to_str().unwrap()];
        all.extend_from_slice(args);
        sandbox.pincer(&all)
    };
    let found = ok(on_postgres(&["memory", "search", "座位偏好"]));
    assert!(found.contains("用户喜欢靠窗的座位"), "{found}");
    let found = ok(on_postgres(&[
        "memory",
        "search",
        "--workspace",
        "research",
        "cargo",
    ]));
    assert!(found.contains("Deploy with cargo dist"), "{found}");
    assert_eq!(
        ok(on_postgres(&["gateway", "keys", "list", "default"])),
        keys_before
    );
    // New rows get new ids after the copied ones.
    let next = ok(on_postgres(&[
        "memory",
        "add",
        "a memory added on postgres",
    ]));
    assert!(
        next.trim().parse::<i64>().unwrap() > seat.trim().parse::<i64>().unwrap(),
        "{next}"
    );

    let db = Db::open(&at).unwrap();
    let memories = count(&db, "SELECT COUNT(*) FROM memories");
    let again =
        crate::support::fails(sandbox.pincer(&["state", "copy", "--from", &from, "--to", url]));
    assert!(again.contains("already holds rows"), "{again}");
    assert_eq!(
        count(&db, "SELECT COUNT(*) FROM memories"),
        memories,
        "nothing written"
    );

    let wrong = crate::support::fails(sandbox.pincer(&[
        "state",
        "copy",
        "--from",
        "pincer.db",
        "--to",
        url,
    ]));
    assert!(wrong.contains("--from is `sqlite:PATH`"), "{wrong}");
}

/// `pincer state migrate` makes every table of this release in the
/// configured state, PostgreSQL or SQLite, and a second run changes
/// nothing; a database written by a newer release is refused.
#[test]
fn state_migrate_makes_every_table_and_refuses_a_newer_schema() {
    let sandbox = crate::support::Sandbox::new();
    let at = pincer::db::testing::database();
    let Location::Postgres(url) = &at else {
        unreachable!()
    };
    let config = sandbox.write(
        "pincer.yaml",
        &format!("workspaces:\n  default: {{}}\nstate:\n  backend: postgres\n  url: \"{url}\"\n"),
    );
    let migrate = || sandbox.pincer(&["--config", config.to_str().unwrap(), "state", "migrate"]);
    let said = ok(migrate());
    assert!(
        said.contains("every table of this release is there (schema version"),
        "{said}"
    );
    let db = Db::open(&at).unwrap();
    let tables = || {
        count(
            &db,
            "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = current_schema()",
        )
    };
    let made = tables();
    for table in [
        "channel_inbound",
        "cluster_leases",
        "cluster_members",
        "memories",
    ] {
        assert_eq!(
            count(
                &db,
                &format!(
                    "SELECT COUNT(*) FROM information_schema.tables WHERE table_name = '{table}'"
                )
            ),
            1,
            "{table} made"
        );
    }
    ok(migrate());
    assert_eq!(tables(), made, "a second run makes nothing more");

    db.run(|c| c.execute("UPDATE pincer_schema SET version = version + 1", &[]))
        .unwrap();
    let refused = crate::support::fails(migrate());
    assert!(refused.contains("newer than"), "{refused}");

    // On SQLite (the default) it makes pincer.db.
    let sqlite = sandbox.write("sqlite.yaml", "workspaces:\n  default: {}\n");
    ok(sandbox.pincer(&["--config", sqlite.to_str().unwrap(), "state", "migrate"]));
    assert!(sandbox.home().join(pincer::db::FILE_NAME).is_file());
}
