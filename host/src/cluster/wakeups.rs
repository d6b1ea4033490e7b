//! Wake-ups between daemons: "there is new work for `topic`" (a message
//! stored for a workspace another daemon holds, a lease handed back).
//!
//! On PostgreSQL a wake-up is a `NOTIFY` on one channel, heard by a `LISTEN`
//! connection each daemon keeps on a thread of its own: it blocks on the
//! socket, so an idle daemon spends no CPU waiting, unlike a poll loop. On
//! SQLite (one daemon per file) wake-ups stay in the process. A wake-up
//! only says where to look: the work itself is in the store, so one missed
//! while a connection was down costs latency, not data; after reconnecting
//! the listener sends [`Wake::everything`] so subscribers re-read.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::broadcast;

use crate::args;
use crate::db::{Db, DbError, Location};

const CHANNEL: &str = "pincer_wake";
/// How often the listener thread looks up from the socket to see whether
/// it should stop (it wakes for notifications immediately).
const STOP_CHECK: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wake {
    pub topic: String,
    pub payload: String,
}

impl Wake {
    /// Sent after the listener reconnects: wake-ups may have been missed.
    pub fn everything() -> Self {
        Self {
            topic: "*".into(),
            payload: String::new(),
        }
    }
}

pub struct Wakeups {
    local: broadcast::Sender<Wake>,
    db: Option<Db>,
    stop: Arc<AtomicBool>,
}

impl Wakeups {
    /// On PostgreSQL, starts listening before it returns, so a wake-up sent
    /// after `open` is heard.
    pub fn open(at: &Location) -> Result<Self, DbError> {
        let (local, _) = broadcast::channel(1024);
        let stop = Arc::new(AtomicBool::new(false));
        let db = match at {
            Location::Sqlite(_) => None,
            Location::Postgres(url) => {
                let (ready_tx, ready_rx) = std::sync::mpsc::channel();
                let (url, sender, stop) = (url.clone(), local.clone(), stop.clone());
                std::thread::Builder::new()
                    .name("pincer-listen".into())
                    .spawn(move || listen(&url, &sender, &stop, Some(ready_tx)))
                    .map_err(|e| {
                        DbError::Unsupported(format!("cannot start the listener thread: {e}"))
                    })?;
                ready_rx
                    .recv()
                    .map_err(|_| DbError::Unsupported("the listener thread ended".into()))??;
                Some(Db::open(at)?)
            }
        };
        Ok(Self { local, db, stop })
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Wake> {
        self.local.subscribe()
    }

    /// Wakes every daemon (this one included) listening for `topic`.
    pub fn wake(&self, topic: &str, payload: &str) -> Result<(), DbError> {
        match &self.db {
            None => {
                let _ = self.local.send(Wake {
                    topic: topic.into(),
                    payload: payload.into(),
                });
                Ok(())
            }
            Some(db) => db.run(|conn| {
                conn.execute(
                    "SELECT pg_notify(CAST(?1 AS TEXT), CAST(?2 AS TEXT))",
                    args![CHANNEL, format!("{topic}\n{payload}")],
                )
                .map(drop)
            }),
        }
    }
}

impl Drop for Wakeups {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

type Ready = std::sync::mpsc::Sender<Result<(), DbError>>;

fn listen(
    url: &str,
    sender: &broadcast::Sender<Wake>,
    stop: &AtomicBool,
    mut ready: Option<Ready>,
) {
    let mut backoff = Duration::from_millis(100);
    while !stop.load(Ordering::Relaxed) {
        let connected = crate::db::connect_postgres(url).and_then(|mut client| {
            client
                .batch_execute(&format!("LISTEN {CHANNEL}"))
                .map(|()| client)
                .map_err(DbError::from)
        });
        let mut client = match connected {
            Ok(client) => client,
            Err(e) => {
                if let Some(ready) = ready.take() {
                    let _ = ready.send(Err(e));
                    return;
                }
                tracing::warn!("cluster wake-ups: cannot listen ({e}); retrying in {backoff:?}");
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(Duration::from_secs(10));
                continue;
            }
        };
        match ready.take() {
            Some(ready) => drop(ready.send(Ok(()))),
            None => drop(sender.send(Wake::everything())),
        }
        backoff = Duration::from_millis(100);
        loop {
            // A fresh iterator each time: one's timer is not re-armed once
            // it fired, so a kept one would return at once ever after (a
            // thread spinning on the CPU).
            let next = {
                let mut notifications = client.notifications();
                let mut heard = notifications.timeout_iter(STOP_CHECK);
                ::postgres::fallible_iterator::FallibleIterator::next(&mut heard)
            };
            match next {
                Ok(Some(n)) => {
                    let (topic, payload) =
                        n.payload().split_once('\n').unwrap_or((n.payload(), ""));
                    let _ = sender.send(Wake {
                        topic: topic.into(),
                        payload: payload.into(),
                    });
                }
                Ok(None) if stop.load(Ordering::Relaxed) => return,
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(
                        "cluster wake-ups: the listening connection failed ({e}); reconnecting"
                    );
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::testing::database;

    async fn next(rx: &mut broadcast::Receiver<Wake>) -> Wake {
        tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("a wake-up within 10 s")
            .expect("open channel")
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_wake_up_from_one_daemon_reaches_the_others() {
        let at = database();
        let (a, b) = (Wakeups::open(&at).unwrap(), Wakeups::open(&at).unwrap());
        let (mut heard_a, mut heard_b) = (a.subscribe(), b.subscribe());
        a.wake("workspace:main", "inbound 7").unwrap();
        let expected = Wake {
            topic: "workspace:main".into(),
            payload: "inbound 7".into(),
        };
        assert_eq!(next(&mut heard_b).await, expected);
        assert_eq!(
            next(&mut heard_a).await,
            expected,
            "the sender hears itself too"
        );
    }

    /// Heard after the listener has waited through several of its stop
    /// checks, without spinning meanwhile.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_wake_up_after_a_quiet_while_is_heard() {
        let at = database();
        let (a, b) = (Wakeups::open(&at).unwrap(), Wakeups::open(&at).unwrap());
        let mut heard = b.subscribe();
        // CPU of every listener thread in this process, in clock ticks.
        let cpu = || -> u64 {
            std::fs::read_dir("/proc/self/task")
                .unwrap()
                .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("stat")).ok())
                .filter(|stat| stat.contains("(pincer-listen)"))
                .map(|stat| {
                    let after = stat.rsplit(')').next().unwrap_or_default();
                    after
                        .split_whitespace()
                        .skip(11)
                        .take(2)
                        .map(|f| f.parse::<u64>().unwrap_or(0))
                        .sum::<u64>()
                })
                .sum()
        };
        let before = cpu();
        tokio::time::sleep(STOP_CHECK * 3).await;
        let ticks = cpu() - before;
        a.wake("inbound", "main").unwrap();
        assert_eq!(next(&mut heard).await.payload, "main");
        // Idle listeners block on their sockets: a spinning one would burn
        // a core, about 300 ticks in 3 s.
        assert!(ticks < 30, "{ticks} clock ticks of listener CPU while idle");
    }

    #[tokio::test]
    async fn on_sqlite_wake_ups_stay_in_the_process() {
        let dir = tempfile::tempdir().unwrap();
        let wakeups = Wakeups::open(&Location::Sqlite(dir.path().join("p.db"))).unwrap();
        let mut heard = wakeups.subscribe();
        wakeups.wake("workspace:main", "").unwrap();
        assert_eq!(next(&mut heard).await.topic, "workspace:main");
    }
}
