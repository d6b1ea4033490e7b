//! Several `pincer start` daemons on one PostgreSQL state: each with its
//! own home, all holding a Socket Mode connection to the same (fake) Slack
//! app, the workspace run by the daemon holding its lease. The real
//! daemons, the real Slack component, real containers; the database is a
//! private PostgreSQL server this test process starts.

use std::time::{Duration, Instant};

use pincer::db::{Db, Location};

use crate::slack::{ALLOWED, Env, FakeSlack};
use crate::support::daemon::Daemon;
use crate::support::fake_llm::Behaviour;
use crate::support::{DockerCleanup, unique};

fn one<T: pincer::db::FromValue + Send>(db: &Db, sql: &str) -> T {
    db.run(|c| c.query_one(sql, &[])?.get(0)).expect(sql)
}

/// Who holds workspace `team` (empty while nobody does).
fn holder(db: &Db) -> String {
    db.run(|c| {
        c.query_opt(
            "SELECT owner FROM cluster_leases WHERE what = 'workspace:team' AND expires_ms > 0",
            &[],
        )?
        .map_or(Ok(String::new()), |row| row.get(0))
    })
    .expect("read the lease")
}

fn instance(home: &std::path::Path) -> String {
    std::fs::read_to_string(home.join("instance-id"))
        .unwrap()
        .trim()
        .to_owned()
}

/// Containers of `home`'s daemon (its `pincer.instance` label).
fn containers_of(home: &std::path::Path) -> usize {
    let out = std::process::Command::new("docker")
        .args([
            "ps",
            "-q",
            "--filter",
            &format!("label=pincer.instance={}", instance(home)),
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .count()
}

/// Two daemons of one configuration on one private PostgreSQL, both
/// connected to the fake Slack app: A on the sandbox's home, started first
/// (so it holds the workspace), and B on a home of its own.
struct Cluster {
    // Dropped first: it reads home B's instance id, which dropping `env`
    // deletes with the sandbox (B's containers were left running so).
    _cleanup_b: DockerCleanup,
    env: Env,
    db: Db,
    home_b: std::path::PathBuf,
}

impl Cluster {
    async fn start(script: Vec<Behaviour>, lease: Option<&str>) -> (Cluster, Daemon, Daemon) {
        let cluster = Self::new(script, "{}", lease).await;
        let (a, b) = cluster.daemons().await;
        (cluster, a, b)
    }

    /// The environment, workspace `team` configured as `workspace` (YAML
    /// flow mapping); no daemon started yet.
    async fn new(script: Vec<Behaviour>, workspace: &str, lease: Option<&str>) -> Cluster {
        let at = pincer::db::testing::database();
        let Location::Postgres(url) = &at else {
            unreachable!()
        };
        let lease = lease.map(|l| format!("  lease: {l}\n")).unwrap_or_default();
        let env = Env::configured_with(
            script,
            FakeSlack::start(),
            workspace,
            "reply",
            &format!("state:\n  backend: postgres\n  url: \"{url}\"\n{lease}"),
        )
        .await;
        let home_b = env.sandbox.dir.path().join("home-b");
        std::fs::create_dir_all(&home_b).unwrap();
        Cluster {
            db: Db::open(&at).unwrap(),
            _cleanup_b: DockerCleanup {
                home: home_b.clone(),
                label: unique(),
            },
            home_b,
            env,
        }
    }

    /// A, then B once A holds its connection.
    async fn daemons(&self) -> (Daemon, Daemon) {
        let a = self.env.start_traced();
        self.env.slack.connections(1).await;
        let b = self.env.start_at(&self.home_b);
        self.env.slack.connections(2).await;
        (a, b)
    }

    fn home_a(&self) -> std::path::PathBuf {
        self.env.sandbox.home()
    }

    /// `daemon`'s id in the cluster, `home` being its home.
    fn id(home: &std::path::Path, daemon: &Daemon) -> String {
        format!("{}:{}", instance(home), daemon.child.id())
    }
}

/// The first `count` messages posted, once there are that many; the
/// daemons' logs if they do not come.
async fn answered(env: &Env, count: usize, daemons: &[&Daemon]) -> Vec<serde_json::Value> {
    let (status, _) = env
        .slack
        .get(&format!(
            "/wait?what=calls&method=chat.postMessage&count={count}&timeout=60"
        ))
        .await;
    if status != 200 {
        let logs: Vec<String> = daemons.iter().map(|d| d.log()).collect();
        let (_, calls) = env.slack.get("/calls").await;
        let (_, connections) = env.slack.get("/connections").await;
        panic!(
            "fewer than {count} messages posted\ncalls: {calls:#}\nconnections: {connections:#}\n{}",
            logs.join("\n-----\n")
        );
    }
    env.slack.posted(count).await
}

/// The texts of the `chat.postMessage` calls Slack answered so far.
async fn posted_now(env: &Env) -> Vec<String> {
    let (_, calls) = env.slack.get("/calls?method=chat.postMessage").await;
    calls["calls"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["response"]["ok"] == true)
        .map(|c| c["args"]["text"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// The ids of the fake Slack's open Socket Mode connections, oldest first.
async fn open_connections(env: &Env) -> Vec<i64> {
    let (_, seen) = env.slack.get("/connections").await;
    let mut ids: Vec<i64> = seen["connections"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["open"] == true)
        .map(|c| c["id"].as_i64().unwrap())
        .collect();
    ids.sort_unstable();
    ids
}

/// Pushes `event` over the fake Slack's Socket Mode and waits for its ack,
/// the `acks`-th (stored before the next one is sent, as a person types).
async fn push_acked(
    env: &Env,
    event: serde_json::Value,
    acks: &mut usize,
    daemons: &[&Daemon],
) -> serde_json::Value {
    let pushed = env.slack.post("/socket/push", event).await;
    *acks += 1;
    let (status, _) = env
        .slack
        .get(&format!("/wait?what=acks&count={acks}&timeout=30"))
        .await;
    if status != 200 {
        let logs: Vec<String> = daemons.iter().map(|d| d.log()).collect();
        panic!("not acked\n{}", logs.join("\n-----\n"));
    }
    pushed
}

/// The texts of the `posted` messages in `channel`, in order.
fn replies_in<'a>(posted: &'a [serde_json::Value], channel: &str) -> Vec<&'a str> {
    posted
        .iter()
        .filter(|p| p["args"]["channel"] == channel)
        .map(|p| p["args"]["text"].as_str().unwrap_or_default())
        .collect()
}

async fn until(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < within, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A message accepted by daemon B for a workspace daemon A holds is run by
/// A; `kill -9` of A mid-turn: B takes the workspace within the lease, tells
/// the sender the cut turn has no answer, answers the next message in its
/// own container; SIGTERM of B hands the workspace to A (restarted) at once.
/// Every message is answered once.
#[tokio::test(flavor = "multi_thread")]
async fn daemons_on_one_state_run_each_workspace_on_its_lease_holder_and_fail_over() {
    let (cluster, mut a, mut b) = Cluster::start(
        vec![
            Behaviour::answer("answered by the holder"),
            Behaviour::Hang,
            Behaviour::answer("answered after the takeover"),
            Behaviour::answer("answered after the handover"),
        ],
        Some("9s"),
    )
    .await;
    let (env, db) = (&cluster.env, &cluster.db);
    let (home_a, home_b) = (cluster.home_a(), cluster.home_b.clone());
    let id_a = Cluster::id(&home_a, &a);
    let id_b = Cluster::id(&home_b, &b);
    assert_eq!(holder(db), id_a, "the first daemon took the workspace");
    let status = env.cli(&["status"]);
    let shown = String::from_utf8_lossy(&status.stdout);
    assert!(
        shown.contains("cluster: 2 daemon(s) alive"),
        "{shown}\n{}",
        a.log()
    );
    assert!(
        shown.contains(&id_a) && shown.contains(&id_b),
        "both daemons listed: {shown}"
    );

    // Slack delivers on the newest connection: B's. A runs the turn.
    let pushed = env.slack.dm("first", ALLOWED, "D0CLU").await;
    assert!(pushed["envelope_id"].is_string(), "{pushed}");
    let posted = answered(env, 1, &[&a, &b]).await;
    assert_eq!(posted[0]["args"]["text"], "answered by the holder");
    assert_eq!(
        containers_of(&home_a),
        1,
        "A runs the workspace's container"
    );
    assert_eq!(containers_of(&home_b), 0, "B runs none\n{}", b.log());

    // A second turn hangs in the model; A is killed while it runs.
    env.slack.dm("second", ALLOWED, "D0CLU").await;
    until(
        "the second turn reaches the model",
        Duration::from_secs(60),
        || env.model.received().len() >= 2,
    )
    .await;
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    let killed = Instant::now();
    let posted = answered(env, 2, &[&b]).await;
    assert_eq!(
        posted[1]["args"]["text"],
        pincer::router::inbound::INTERRUPTED_REPLY,
        "the sender is told the cut turn has no answer\n{}",
        b.log()
    );
    assert!(
        killed.elapsed() < Duration::from_secs(30),
        "taken over within the 9 s lease and a step: {:?}",
        killed.elapsed()
    );
    assert_eq!(holder(db), id_b);
    until(
        "B stops the container A left running on the shared engine",
        Duration::from_secs(30),
        || containers_of(&home_a) == 0,
    )
    .await;
    env.slack.dm("third", ALLOWED, "D0CLU").await;
    let posted = answered(env, 3, &[&b]).await;
    assert_eq!(
        posted[2]["args"]["text"],
        "answered after the takeover",
        "{}",
        b.log()
    );
    assert_eq!(containers_of(&home_b), 1, "B runs it in its own container");

    // A comes back and waits: B holds the workspace. SIGTERM of B hands it
    // over at once, long before B's 9 s lease would have run out.
    let mut a = env.start_traced();
    env.slack.connections(3).await;
    let id_a = Cluster::id(&home_a, &a);
    assert_eq!(holder(db), id_b);
    assert!(b.stop().success(), "{}", b.log());
    until(
        "A takes the workspace B handed back",
        Duration::from_secs(5),
        || holder(db) == id_a,
    )
    .await;
    env.slack.dm("fourth", ALLOWED, "D0CLU").await;
    let posted = answered(env, 4, &[&a]).await;
    assert_eq!(
        posted[3]["args"]["text"],
        "answered after the handover",
        "{}",
        a.log()
    );
    assert_eq!(containers_of(&home_a), 1, "A started its container again");
    until("A stops B's container", Duration::from_secs(30), || {
        containers_of(&home_b) == 0
    })
    .await;
    assert!(a.stop().success(), "{}", a.log());

    // Each message once: one answer each, nothing left running or queued.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(env.slack.posted(4).await.len(), 4, "nothing answered twice");
    let states: Vec<String> = db
        .run(|c| {
            c.query("SELECT state FROM channel_inbound ORDER BY id", &[])?
                .iter()
                .map(|r| r.get(0))
                .collect()
        })
        .unwrap();
    assert_eq!(states, ["done", "interrupted", "done", "done"]);
    assert_eq!(
        one::<i64>(db, "SELECT COUNT(*) FROM sessions"),
        1,
        "one conversation, continued by every daemon"
    );
    let alive: i64 = one(
        db,
        &format!(
            "SELECT COUNT(*) FROM cluster_members WHERE expires_ms > {}",
            pincer::db::now_ms()
        ),
    );
    assert_eq!(
        alive, 0,
        "stopped daemons left; the killed one was marked gone when its home restarted"
    );
}

/// A daemon paused (SIGSTOP) past its lease while a turn runs: the other
/// daemon takes the workspace and tells the sender; when the paused one
/// resumes and its turn ends, its answer is refused by the fence, and
/// nothing more reaches the conversation.
#[tokio::test(flavor = "multi_thread")]
async fn a_daemon_paused_past_its_lease_cannot_answer_when_it_resumes() {
    let (cluster, mut a, mut b) = Cluster::start(
        vec![Behaviour::slow_answer(15_000, "a stale answer")],
        Some("3s"),
    )
    .await;
    let (env, db) = (&cluster.env, &cluster.db);
    let id_a = Cluster::id(&cluster.home_a(), &a);
    let id_b = Cluster::id(&cluster.home_b, &b);
    assert_eq!(holder(db), id_a);

    env.slack.dm("slow one", ALLOWED, "D0STOP").await;
    until(
        "the turn reaches the model",
        Duration::from_secs(60),
        || !env.model.received().is_empty(),
    )
    .await;
    let pid = a.child.id() as i32;
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let posted = answered(env, 1, &[&b]).await;
    assert_eq!(
        posted[0]["args"]["text"],
        pincer::router::inbound::INTERRUPTED_REPLY,
        "{}",
        b.log()
    );
    assert_eq!(holder(db), id_b);

    unsafe { libc::kill(pid, libc::SIGCONT) };
    until(
        "the resumed daemon's answer is refused",
        Duration::from_secs(60),
        || a.log().contains("the write was refused"),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let posted = env.slack.posted(1).await;
    assert_eq!(posted.len(), 1, "nothing more posted: {posted:#?}");
    let state: String = one(db, "SELECT state FROM channel_inbound");
    assert_eq!(state, "interrupted");
    let queued: i64 = one(db, "SELECT COUNT(*) FROM channel_outbox");
    assert_eq!(queued, 1, "the stale answer was never queued");
    assert!(b.stop().success(), "{}", b.log());
    assert!(a.stop().success(), "{}", a.log());
}

/// Two daemons on one Slack app, a fresh workspace: 200 DMs over 20
/// conversations (one sender each), each conversation's messages
/// alternating between the two connections, and every message of one
/// conversation delivered on both. Every message is answered once, in order
/// within its conversation; the 20 first messages arriving at once start
/// one container, not 20. Then one sender writes 21 conversations over both
/// connections: the rate limit counts across the cluster, so 20 are
/// answered and the 21st is dropped and its sender told.
#[tokio::test(flavor = "multi_thread")]
async fn two_daemons_answer_every_message_once_and_in_order_over_both_connections() {
    let cluster = Cluster::new(vec![Behaviour::EchoUser], "{}", None).await;
    cluster.env.allow_everyone();
    let (a, b) = cluster.daemons().await;
    let env = &cluster.env;
    let connections = open_connections(env).await;
    assert_eq!(connections.len(), 2, "{connections:?}");

    let mut acks = 0;
    let mut push =
        async |event: serde_json::Value| push_acked(env, event, &mut acks, &[&a, &b]).await;
    const CONVERSATIONS: usize = 20;
    const ROUNDS: usize = 10;
    for round in 0..ROUNDS {
        for c in 0..CONVERSATIONS {
            let on = connections[(round + c) % 2];
            let event = serde_json::json!({"kind": "dm", "text": format!("c{c:02}-m{round:02}"),
                "user": format!("U0S{c:02}"), "channel": format!("D0C{c:02}"), "connection": on});
            let pushed = push(event.clone()).await;
            if c == 0 {
                // The same event again, on the other connection.
                let mut again = event;
                again["ts"] = pushed["ts"].clone();
                again["connection"] = connections[(round + c + 1) % 2].into();
                push(again).await;
            }
        }
    }
    let total = CONVERSATIONS * ROUNDS;
    let started = Instant::now();
    let mut posted = Vec::new();
    for _ in 0..5 {
        let (status, _) = env
            .slack
            .get(&format!(
                "/wait?what=calls&method=chat.postMessage&count={total}&timeout=60"
            ))
            .await;
        if status == 200 {
            posted = env.slack.posted(total).await;
            break;
        }
    }
    let (_, calls) = env.slack.get("/calls?method=chat.postMessage").await;
    assert_eq!(
        posted.len(),
        total,
        "every message answered; {} posted in {:?}\n{}\n-----\n{}",
        calls["calls"].as_array().map_or(0, Vec::len),
        started.elapsed(),
        a.log(),
        b.log()
    );
    eprintln!("{total} messages answered in {:?}", started.elapsed());
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(posted_now(env).await.len(), total, "none twice");
    for c in 0..CONVERSATIONS {
        let channel = format!("D0C{c:02}");
        let replies = replies_in(&posted, &channel);
        assert_eq!(replies.len(), ROUNDS, "{channel}: {replies:#?}");
        for (round, reply) in replies.iter().enumerate() {
            assert!(
                reply.contains(&format!("c{c:02}-m{round:02}")),
                "{channel}: reply {round} is {reply:?}, in order: {replies:#?}"
            );
        }
    }

    const FLOOD: usize = 21;
    for f in 0..FLOOD {
        push(
            serde_json::json!({"kind": "dm", "text": format!("flood-{f:02}"),
            "user": "U0FLOOD", "channel": format!("D0F{f:02}"), "connection": connections[f % 2]}),
        )
        .await;
    }
    let flood = answered(env, total + FLOOD, &[&a, &b])
        .await
        .split_off(total);
    let told: Vec<&serde_json::Value> = flood
        .iter()
        .filter(|p| {
            p["args"]["text"]
                .as_str()
                .unwrap_or_default()
                .starts_with("Too many messages")
        })
        .collect();
    assert_eq!(told.len(), 1, "{flood:#?}");
    assert_eq!(told[0]["args"]["channel"], "D0F20", "the 21st is dropped");
    let dropped: i64 = one(
        &cluster.db,
        "SELECT COUNT(*) FROM channel_inbound WHERE sender = 'U0FLOOD' AND state = 'dropped'",
    );
    assert_eq!(dropped, 1);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(posted_now(env).await.len(), total + FLOOD, "nothing more");
}

/// `kill -9` of the holder while messages keep coming on both connections
/// (10 conversations, 6 messages each, the model taking 300 ms a turn):
/// the other daemon takes the workspace within the lease, and every
/// message gets exactly one reply in its conversation's order — its
/// answer, or for a turn the kill cut short the notice to send it again.
/// Nothing is lost and nothing is answered twice.
#[tokio::test(flavor = "multi_thread")]
async fn kill_9_of_the_holder_mid_load_loses_and_doubles_nothing() {
    let cluster = Cluster::new(
        vec![Behaviour::Slow(
            Duration::from_millis(300),
            Box::new(Behaviour::EchoUser),
        )],
        "{}",
        Some("5s"),
    )
    .await;
    cluster.env.allow_everyone();
    let (mut a, mut b) = cluster.daemons().await;
    let env = &cluster.env;
    let connections = open_connections(env).await;
    assert_eq!(connections.len(), 2, "{connections:?}");
    // B connected second: its connection is the newer one.
    let on_b = connections[1];
    const CONVERSATIONS: usize = 10;
    const ROUNDS: usize = 6;
    let mut acks = 0;
    let mut killed = None;
    for round in 0..ROUNDS {
        if round == ROUNDS / 2 {
            a.child.kill().unwrap();
            a.child.wait().unwrap();
            killed = Some(Instant::now());
        }
        for c in 0..CONVERSATIONS {
            let on = if killed.is_some() {
                on_b
            } else {
                connections[(round + c) % 2]
            };
            let event = serde_json::json!({"kind": "dm", "text": format!("c{c:02}-m{round:02}"),
                "user": format!("U0K{c:02}"), "channel": format!("D0K{c:02}"), "connection": on});
            push_acked(env, event, &mut acks, &[&a, &b]).await;
        }
    }
    let total = CONVERSATIONS * ROUNDS;
    let posted = answered(env, total, &[&b]).await;
    let killed = killed.expect("killed half way");
    eprintln!("{total} replies {:?} after the kill", killed.elapsed());
    assert_eq!(
        holder(&cluster.db),
        Cluster::id(&cluster.home_b, &b),
        "B took the workspace"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(posted_now(env).await.len(), total, "none twice");
    let mut cut = 0;
    for c in 0..CONVERSATIONS {
        let channel = format!("D0K{c:02}");
        let replies = replies_in(&posted, &channel);
        assert_eq!(replies.len(), ROUNDS, "{channel}: {replies:#?}");
        // The answers, in the order the messages were sent; a cut turn's
        // notice in place of its answer.
        let answers: Vec<usize> = replies
            .iter()
            .filter(|r| **r != pincer::router::inbound::INTERRUPTED_REPLY)
            .map(|r| {
                let round = r
                    .rsplit_once("-m")
                    .and_then(|(_, n)| n.get(..2))
                    .and_then(|n| n.parse().ok());
                round.unwrap_or_else(|| panic!("{channel}: unexpected reply {r:?}"))
            })
            .collect();
        assert!(
            answers.windows(2).all(|w| w[0] < w[1]),
            "{channel}: answered in order, each once: {replies:#?}"
        );
        cut += ROUNDS - answers.len();
    }
    let interrupted: i64 = one(
        &cluster.db,
        "SELECT COUNT(*) FROM channel_inbound WHERE state = 'interrupted'",
    );
    assert_eq!(
        usize::try_from(interrupted).unwrap(),
        cut,
        "one notice per turn the kill cut"
    );
    eprintln!("{cut} turn(s) cut by the kill");
    assert!(
        cut <= CONVERSATIONS,
        "at most the turns running at the kill: {cut}"
    );
    let unfinished: i64 = one(
        &cluster.db,
        "SELECT COUNT(*) FROM channel_inbound WHERE state NOT IN ('done', 'interrupted')",
    );
    assert_eq!(unfinished, 0, "nothing left queued or running");
    assert!(b.stop().success(), "{}", b.log());
}

/// A skill due every 2 s, two daemons on one state for half a minute, the
/// holder stopped half way (the due times of the handover caught up): every due time from the first to the last runs
/// exactly once (none skipped at the handover, none run by both daemons),
/// and each run's output is posted once. A terminal turn of the workspace
/// is refused by the daemon that does not hold it and by a home without a
/// daemon, and runs on the holder.
#[tokio::test(flavor = "multi_thread")]
async fn a_schedule_fires_once_per_due_time_across_two_daemons_and_a_handover() {
    let cluster = Cluster::new(
        vec![Behaviour::answer("unused")],
        "{skills: [skill-calc]}",
        None,
    )
    .await;
    cluster.env.sandbox.write(
        "workspaces/team/schedules.yaml",
        r#"tasks:
  - id: every_2s
    schedule: "*/2 * * * * *"
    skill: skill-calc__evaluate
    skill_input: {expression: "6*7"}
    deliver_to: ["channel:slack"]
"#,
    );
    let (mut a, mut b) = cluster.daemons().await;
    for daemon in [&a, &b] {
        assert!(
            daemon.banner.contains("1 scheduled task(s)"),
            "{}",
            daemon.banner
        );
    }
    let (env, db) = (&cluster.env, &cluster.db);
    let id_a = Cluster::id(&cluster.home_a(), &a);
    // A terminal turn of the workspace runs where the workspace does: B's
    // daemon refuses it, and so does a home with no daemon (its turn would
    // start a second container).
    let home_b = cluster.home_b.to_str().unwrap();
    let message = ["message", "--workspace", "team", "--text", "hello"];
    let refused = crate::support::fails(env.cli_with_env(&message, &[("PINCER_HOME", home_b)]));
    assert!(
        refused.contains("workspace `team` runs on another pincer daemon of this cluster"),
        "{refused}"
    );
    let home_c = env.sandbox.dir.path().join("home-c");
    std::fs::create_dir_all(&home_c).unwrap();
    let refused = crate::support::fails(
        env.cli_with_env(&message, &[("PINCER_HOME", home_c.to_str().unwrap())]),
    );
    assert!(
        refused.contains(&format!("runs on the pincer daemon {id_a} of this cluster")),
        "{refused}"
    );
    assert!(env.model.received().is_empty(), "no turn ran");
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert!(a.stop().success(), "{}", a.log());
    let id_b = Cluster::id(&cluster.home_b, &b);
    until("B holds the workspace", Duration::from_secs(10), || {
        holder(db) == id_b
    })
    .await;
    // B runs the workspace now: its terminal turns too.
    let answered = crate::support::ok(env.cli_with_env(&message, &[("PINCER_HOME", home_b)]));
    assert!(answered.contains("unused"), "{answered}");
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert!(b.stop().success(), "{}", b.log());

    let runs: Vec<(i64, String, String, i64)> = db
        .run(|c| {
            c.query(
                "SELECT due_ms, status, COALESCE(claimed_by, ''), attempt FROM schedule_runs
                 WHERE task = 'every_2s' ORDER BY due_ms",
                &[],
            )?
            .iter()
            .map(|r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .collect::<Result<Vec<_>, pincer::db::DbError>>()
        })
        .unwrap();
    assert!(
        runs.len() >= 11,
        "half a minute of a 2 s schedule: {runs:#?}"
    );
    for pair in runs.windows(2) {
        assert_eq!(
            pair[1].0 - pair[0].0,
            2_000,
            "no due time skipped: {runs:#?}"
        );
    }
    assert!(
        runs.iter().all(|r| r.1 == "done" && r.3 == 1),
        "each ran once, to its end: {runs:#?}\n{}\n-----\n{}",
        a.log(),
        b.log()
    );
    let by_a = runs.iter().filter(|r| r.2 == id_a).count();
    assert!(
        by_a > 0 && by_a < runs.len(),
        "both daemons ran some ({by_a} by A): {runs:#?}"
    );
    let posted = posted_now(env).await;
    assert_eq!(
        posted.len(),
        runs.len(),
        "each output posted once: {posted:#?}"
    );
    assert!(posted.iter().all(|text| text.contains("42")), "{posted:#?}");
}
