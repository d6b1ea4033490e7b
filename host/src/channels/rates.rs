//! The per-sender and per-conversation rate limits of inbound messages and
//! button clicks, kept as rows (`channel_rates`) so that every daemon on a
//! shared state counts against the same window: two daemons do not let a
//! sender through twice as often.

use crate::args;
use crate::db::{Conn, DbError};

/// Messages an allowed sender may send per channel in [`RATE_WINDOW`];
/// past it they are stored as dropped (no text) and not run.
pub const SENDER_PER_MINUTE: u32 = 20;

/// Messages one conversation (a channel's conversation, all its threads and
/// senders) may receive in [`RATE_WINDOW`].
pub const CONVERSATION_PER_MINUTE: u32 = 40;

/// The window of [`SENDER_PER_MINUTE`] and [`CONVERSATION_PER_MINUTE`].
pub const RATE_WINDOW: std::time::Duration = std::time::Duration::from_secs(60);

pub(super) const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS channel_rates (
        scope TEXT NOT NULL,
        subject TEXT NOT NULL,
        window_start_ms INTEGER NOT NULL,
        taken INTEGER NOT NULL,
        reported INTEGER NOT NULL,
        unreported INTEGER NOT NULL,
        PRIMARY KEY (scope, subject)
    );";

/// A refused sender is audited (and, with `refusal: reply`, answered) at
/// most once per channel in this long; the messages between are counted
/// and the next report says how many.
pub const REFUSAL_WINDOW: std::time::Duration = std::time::Duration::from_secs(3600);

/// What the rate limits decided about one message or click.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rate {
    Take,
    /// Over a limit (`sender` tells which). `report`: the first drop of
    /// this window — audit it and tell the sender once — with how many
    /// were dropped unreported before it.
    Drop {
        sender: bool,
        report: Option<u64>,
    },
}

/// One counted subject's current window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub start_ms: i64,
    pub taken: u32,
    pub reported: bool,
    /// Dropped since the last report.
    pub unreported: u64,
}

impl Window {
    fn fresh(now_ms: i64) -> Self {
        Self {
            start_ms: now_ms,
            taken: 0,
            reported: false,
            unreported: 0,
        }
    }
}

/// A count kept in one window per (scope, subject): at most `limit` taken
/// per `window`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counter {
    scope: String,
    subject: String,
    limit: u32,
    window_ms: i64,
}

impl Counter {
    fn new(scope: String, subject: &str, limit: u32, window: std::time::Duration) -> Self {
        Self {
            scope,
            subject: subject.to_owned(),
            limit,
            window_ms: i64::try_from(window.as_millis()).unwrap_or(i64::MAX),
        }
    }

    /// A message's (or click's) counters: its sender's, then its
    /// conversation's.
    pub fn message(channel: &str, sender: &str, conversation: &str) -> [Counter; 2] {
        [
            Self::new(
                format!("sender:{channel}"),
                sender,
                SENDER_PER_MINUTE,
                RATE_WINDOW,
            ),
            Self::new(
                format!("conversation:{channel}"),
                conversation,
                CONVERSATION_PER_MINUTE,
                RATE_WINDOW,
            ),
        ]
    }

    /// A refused sender's: nothing is taken, the first refusal of each
    /// [`REFUSAL_WINDOW`] is reported.
    pub fn refusal(channel: &str, sender: &str) -> [Counter; 1] {
        [Self::new(
            format!("refused:{channel}"),
            sender,
            0,
            REFUSAL_WINDOW,
        )]
    }
}

/// Counts one message against `counters`, whose windows are `windows` (as
/// stored, `None` for a subject not seen yet), at `now_ms`: the decision
/// and the windows as they are afterwards. The first counter over its
/// limit decides; `Rate::Drop::sender` says whether that is the first one.
pub fn admit<const N: usize>(
    counters: &[Counter; N],
    windows: [Option<Window>; N],
    now_ms: i64,
) -> (Rate, [Window; N]) {
    let mut windows: [Window; N] = std::array::from_fn(|i| match windows[i] {
        // An unreported count outlives its window: the next report says
        // how many went unanswered since the last one.
        Some(w) if now_ms.saturating_sub(w.start_ms) >= counters[i].window_ms => Window {
            unreported: w.unreported,
            ..Window::fresh(now_ms)
        },
        Some(w) => w,
        None => Window::fresh(now_ms),
    });
    let over = (0..N).find(|&i| windows[i].taken >= counters[i].limit);
    let rate = match over {
        None => {
            for w in &mut windows {
                w.taken += 1;
            }
            Rate::Take
        }
        Some(i) => {
            let w = &mut windows[i];
            let report = if w.reported {
                w.unreported += 1;
                None
            } else {
                w.reported = true;
                Some(std::mem::take(&mut w.unreported))
            };
            Rate::Drop {
                sender: i == 0,
                report,
            }
        }
    };
    (rate, windows)
}

/// Decides on one message against `counters`' windows as stored in `tx`:
/// the decision and the windows to [`write`] back if the message is
/// counted. Every daemon on the state counts against the same rows;
/// callers run both in one write transaction.
pub(super) fn decide<const N: usize>(
    tx: &mut dyn Conn,
    counters: &[Counter; N],
    now_ms: i64,
) -> Result<(Rate, [Window; N]), DbError> {
    let mut stored = [None; N];
    for (slot, c) in stored.iter_mut().zip(counters) {
        *slot = tx
            .query_opt(
                "SELECT window_start_ms, taken, reported, unreported FROM channel_rates
                 WHERE scope = ?1 AND subject = ?2",
                args![&c.scope, &c.subject],
            )?
            .map(|row| -> Result<Window, DbError> {
                Ok(Window {
                    start_ms: row.get(0)?,
                    taken: u32::try_from(row.get::<i64>(1)?).unwrap_or(u32::MAX),
                    reported: row.get::<i64>(2)? != 0,
                    unreported: u64::try_from(row.get::<i64>(3)?).unwrap_or(0),
                })
            })
            .transpose()?;
    }
    Ok(admit(counters, stored, now_ms))
}

pub(super) fn write<const N: usize>(
    tx: &mut dyn Conn,
    counters: &[Counter; N],
    windows: &[Window; N],
) -> Result<(), DbError> {
    for (c, w) in counters.iter().zip(windows) {
        tx.execute(
            "INSERT INTO channel_rates
                (scope, subject, window_start_ms, taken, reported, unreported)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT (scope, subject) DO UPDATE SET
                window_start_ms = excluded.window_start_ms, taken = excluded.taken,
                reported = excluded.reported, unreported = excluded.unreported",
            args![
                &c.scope,
                &c.subject,
                w.start_ms,
                i64::from(w.taken),
                i64::from(w.reported),
                i64::try_from(w.unreported).unwrap_or(i64::MAX)
            ],
        )?;
    }
    Ok(())
}

/// Forgets the windows that started before `before_ms` (with their
/// unreported counts).
pub(super) fn prune(tx: &mut dyn Conn, before_ms: i64) -> Result<usize, DbError> {
    tx.execute(
        "DELETE FROM channel_rates WHERE window_start_ms < ?1",
        args![before_ms],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts like the store does, without one.
    #[derive(Default)]
    struct Rows(std::collections::HashMap<(String, String), Window>);

    impl Rows {
        fn count<const N: usize>(&mut self, counters: &[Counter; N], now: i64) -> Rate {
            let key = |c: &Counter| (c.scope.clone(), c.subject.clone());
            let stored = std::array::from_fn(|i| self.0.get(&key(&counters[i])).copied());
            let (rate, windows) = admit(counters, stored, now);
            for (c, w) in counters.iter().zip(windows) {
                self.0.insert(key(c), w);
            }
            rate
        }
    }

    /// Finding 7 of issue 25: an allowed sender could start any number of
    /// turns. A flood of 10,000 messages in a minute runs 20; the sender is
    /// told (and audited) once, the rest counted in the next report; other
    /// senders in the conversation share its limit of 40.
    #[test]
    fn an_allowed_sender_over_its_rate_is_told_once_and_the_rest_counted() {
        let mut rows = Rows::default();
        let mut admit = |sender: &str, conversation: &str, now: i64| {
            rows.count(&Counter::message("slack", sender, conversation), now)
        };
        let start = 1_000_000;
        let decisions: Vec<Rate> = (0..10_000).map(|_| admit("U1", "C1", start)).collect();
        let taken = decisions.iter().filter(|r| **r == Rate::Take).count();
        assert_eq!(taken, 20);
        let reports: Vec<&Rate> = decisions
            .iter()
            .filter(|r| {
                matches!(
                    r,
                    Rate::Drop {
                        report: Some(_),
                        ..
                    }
                )
            })
            .collect();
        assert_eq!(
            reports,
            [&Rate::Drop {
                sender: true,
                report: Some(0)
            }]
        );
        // the conversation's limit: others add 20 more, then it is full
        let others = (0..40)
            .filter(|i| admit(&format!("U{}", i + 2), "C1", start) == Rate::Take)
            .count();
        assert_eq!(others, 20);
        assert_eq!(
            admit("U99", "C1", start),
            Rate::Drop {
                sender: false,
                report: None
            },
            "the conversation's first drop was reported already"
        );
        assert_eq!(
            admit("U1", "C2", start),
            Rate::Drop {
                sender: true,
                report: None
            }
        );
        // a minute later: a fresh window, and the next report counts the rest
        let later = start + 60_000;
        for _ in 0..20 {
            assert_eq!(admit("U1", "C3", later), Rate::Take);
        }
        assert_eq!(
            admit("U1", "C3", later),
            Rate::Drop {
                sender: true,
                report: Some(9_980)
            }
        );
    }

    /// Finding 7 of issue 25: each refused message was audited (and with
    /// `refusal: reply` answered). A flood of 10,000 is reported once, the
    /// next report an hour later counts the rest; other senders and
    /// channels are reported on their own.
    #[test]
    fn a_refused_sender_is_reported_once_an_hour_and_the_rest_counted() {
        let mut rows = Rows::default();
        let mut refused = |channel: &str, sender: &str, now: i64| match rows
            .count(&Counter::refusal(channel, sender), now)
        {
            Rate::Drop { report, .. } => report,
            Rate::Take => panic!("a refusal is never taken"),
        };
        let start = 1_000_000;
        let reported: Vec<u64> = (0..10_000)
            .filter_map(|_| refused("slack", "U0SPAM", start))
            .collect();
        assert_eq!(reported, [0]);
        assert_eq!(refused("slack", "U0OTHER", start), Some(0));
        assert_eq!(refused("feishu", "U0SPAM", start), Some(0));
        let later = start + 3_600_000;
        assert_eq!(refused("slack", "U0SPAM", later), Some(9_999));
        assert_eq!(refused("slack", "U0SPAM", later), None);
    }
}
