//! When a task is due.
//!
//! Due times are whole seconds and a pure function of the task and the
//! previous due time: [`next_after`] never looks at "now", so a slow tick, a
//! reload or a restart finds the same due times again (and the store refuses
//! to claim one twice).
//!
//! - `schedule:` (cron) is read on the wall clock of the task's zone.
//! - `every: D` fires at the multiples of `D` since the Unix epoch (UTC), so
//!   `every: 2h` is 00:00, 02:00, ... UTC whatever happened before.
//! - `at:` fires once.
//!
//! # Daylight saving time
//!
//! The rule is croner's (the Open Cron Pattern Specification's, as Vixie
//! cron does it), pinned by the tests below:
//!
//! - **Fixed-time jobs** (seconds, minutes and hours are plain numbers, e.g.
//!   `30 2 * * *`): on a spring-forward day a time that does not exist runs
//!   once, at the first valid instant after the gap (`America/New_York`,
//!   2026-03-08: a 02:30 job runs at 03:00 EDT = 07:00 UTC); on a fall-back
//!   day a time that exists twice runs once, at its first occurrence (01:30
//!   EDT, not again at 01:30 EST).
//! - **Interval or wildcard jobs** (`*/15 * * * *`, `0 * * * *`): times in
//!   the gap are skipped; times in the repeated hour run on both passes.
//! - `every:` is counted in UTC and ignores the zone; `at:` is resolved once
//!   when the file is read (see [`super::file::parse_at`]).

use chrono::{DateTime, Duration as ChronoDuration, Utc};

use super::file::{CatchUp, Task, Trigger};

/// The most runs `catch_up: all` replays after an outage: the oldest ones;
/// later missed due times are passed over.
pub const MAX_CATCH_UP: usize = 1000;

/// Bound on the due times one search walks through (a 1-second cron over a
/// day is 86,400): past it the search stops with what it found.
const MAX_WALK: usize = 200_000;

fn whole_seconds(t: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp(t.timestamp(), 0).unwrap_or(t)
}

/// The first due time strictly after `after`, if the task has one.
pub fn next_after(task: &Task, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let after = whole_seconds(after);
    match &task.trigger {
        Trigger::At(at) => (*at > after).then_some(*at),
        Trigger::Every(every) => {
            let step = i64::try_from(every.as_secs()).ok()?.max(1);
            let secs = after.timestamp();
            let next = secs.div_euclid(step).checked_add(1)?.checked_mul(step)?;
            DateTime::from_timestamp(next, 0)
        }
        Trigger::Cron { cron, .. } => cron
            .find_next_occurrence(&after.with_timezone(&task.zone), false)
            .ok()
            .map(|t| t.with_timezone(&Utc)),
    }
}

/// The next `n` due times after `after`.
pub fn upcoming(task: &Task, after: DateTime<Utc>, n: usize) -> Vec<DateTime<Utc>> {
    let mut out = Vec::with_capacity(n);
    let mut cursor = after;
    while out.len() < n {
        match next_after(task, cursor) {
            Some(next) => {
                out.push(next);
                cursor = next;
            }
            None => break,
        }
    }
    out
}

/// Due times in `(from, to]` that `catch_up` keeps: `skip` none, `once` the
/// latest only, `all` every one, oldest first, at most [`MAX_CATCH_UP`].
pub fn due_between(
    task: &Task,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    catch_up: CatchUp,
) -> Vec<DateTime<Utc>> {
    if to <= from {
        return Vec::new();
    }
    match catch_up {
        CatchUp::Skip => Vec::new(),
        CatchUp::Once => latest_between(task, from, to).into_iter().collect(),
        CatchUp::All => walk(task, from, to, MAX_CATCH_UP),
    }
}

/// Up to `limit` due times in `(from, to]`, oldest first.
fn walk(task: &Task, from: DateTime<Utc>, to: DateTime<Utc>, limit: usize) -> Vec<DateTime<Utc>> {
    let mut out = Vec::new();
    let mut cursor = from;
    while out.len() < limit {
        match next_after(task, cursor) {
            Some(next) if next <= to => {
                out.push(next);
                cursor = next;
            }
            _ => break,
        }
    }
    out
}

/// The latest due time in `(from, to]`.
pub fn latest_between(
    task: &Task,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let to = whole_seconds(to);
    match &task.trigger {
        Trigger::At(at) => (*at > from && *at <= to).then_some(*at),
        Trigger::Every(every) => {
            let step = i64::try_from(every.as_secs()).ok()?.max(1);
            let last = to.timestamp().div_euclid(step).checked_mul(step)?;
            DateTime::from_timestamp(last, 0).filter(|t| *t > from)
        }
        Trigger::Cron { cron, .. } => {
            // A backward search finds the neighbourhood fast; the forward
            // walk from a day before it decides (so the DST rule is the one
            // of `next_after`).
            let start = cron
                .find_previous_occurrence(&to.with_timezone(&task.zone), true)
                .ok()
                .map(|t| t.with_timezone(&Utc) - ChronoDuration::days(1))
                .map_or(from, |t| t.max(from));
            walk(task, start, to, MAX_WALK).last().copied()
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use chrono::TimeZone;
    use chrono_tz::Tz;

    use super::*;
    use crate::scheduler::file::{Checks, parse};

    fn task(schedule: &str, zone: &str) -> Task {
        let text = format!(
            "tasks:\n  - id: t\n    schedule: '{schedule}'\n    timezone: {zone}\n    prompt: x\n"
        );
        let mut tasks =
            parse(&text, Path::new("s.yaml"), &Checks::offline(Tz::UTC)).expect("task parses");
        tasks.remove(0)
    }

    fn utc(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .expect("test time")
            .with_timezone(&Utc)
    }

    fn fmt(times: &[DateTime<Utc>]) -> Vec<String> {
        times
            .iter()
            .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
            .collect()
    }

    #[test]
    fn shanghai_has_no_dst() {
        let t = task("0 9 * * *", "Asia/Shanghai");
        assert_eq!(
            fmt(&upcoming(&t, utc("2026-03-07T12:00:00Z"), 3)),
            [
                "2026-03-08T01:00:00Z",
                "2026-03-09T01:00:00Z",
                "2026-03-10T01:00:00Z"
            ]
        );
    }

    #[test]
    fn spring_forward_runs_a_skipped_fixed_time_once_after_the_gap() {
        let t = task("30 2 * * *", "America/New_York");
        assert_eq!(
            fmt(&upcoming(&t, utc("2026-03-07T00:00:00Z"), 3)),
            // 02:30 EST; 03:00 EDT (02:30 does not exist); 02:30 EDT
            [
                "2026-03-07T07:30:00Z",
                "2026-03-08T07:00:00Z",
                "2026-03-09T06:30:00Z"
            ]
        );
    }

    #[test]
    fn fall_back_runs_a_repeated_fixed_time_once_at_its_first_occurrence() {
        let t = task("30 1 * * *", "America/New_York");
        assert_eq!(
            fmt(&upcoming(&t, utc("2026-10-31T00:00:00Z"), 3)),
            // 01:30 EDT; 01:30 EDT (the first of two); 01:30 EST
            [
                "2026-10-31T05:30:00Z",
                "2026-11-01T05:30:00Z",
                "2026-11-02T06:30:00Z"
            ]
        );
    }

    #[test]
    fn fall_back_runs_an_hourly_job_on_both_passes() {
        let t = task("0 * * * *", "America/New_York");
        let times = walk(
            &t,
            utc("2026-11-01T04:30:00Z"),
            utc("2026-11-01T07:30:00Z"),
            10,
        );
        // 01:00 EDT, 01:00 EST, 02:00 EST
        assert_eq!(
            fmt(&times),
            [
                "2026-11-01T05:00:00Z",
                "2026-11-01T06:00:00Z",
                "2026-11-01T07:00:00Z"
            ]
        );
    }

    #[test]
    fn every_is_aligned_and_from_the_previous_due_time() {
        let text = "tasks:\n  - id: t\n    every: 2h\n    prompt: x\n";
        let t = parse(text, Path::new("s.yaml"), &Checks::offline(Tz::UTC))
            .expect("parses")
            .remove(0);
        let first = next_after(&t, utc("2026-01-01T01:59:59.900Z")).expect("next");
        assert_eq!(first, utc("2026-01-01T02:00:00Z"));
        assert_eq!(next_after(&t, first), Some(utc("2026-01-01T04:00:00Z")));
    }

    #[test]
    fn six_fields_have_seconds() {
        let t = task("*/2 * * * * *", "UTC");
        assert_eq!(
            fmt(&upcoming(&t, utc("2026-01-01T00:00:00Z"), 2)),
            ["2026-01-01T00:00:02Z", "2026-01-01T00:00:04Z"]
        );
    }

    #[test]
    fn catch_up_policies() {
        let t = task("0 * * * *", "UTC");
        let from = utc("2026-01-01T09:30:00Z");
        let to = utc("2026-01-01T12:30:00Z");
        assert!(due_between(&t, from, to, CatchUp::Skip).is_empty());
        assert_eq!(
            fmt(&due_between(&t, from, to, CatchUp::Once)),
            ["2026-01-01T12:00:00Z"]
        );
        assert_eq!(
            fmt(&due_between(&t, from, to, CatchUp::All)),
            [
                "2026-01-01T10:00:00Z",
                "2026-01-01T11:00:00Z",
                "2026-01-01T12:00:00Z"
            ]
        );
        let t = task("* * * * * *", "UTC");
        let all = due_between(&t, from, to, CatchUp::All);
        assert_eq!(all.len(), MAX_CATCH_UP);
        assert_eq!(all[0], from + ChronoDuration::seconds(1));
        assert_eq!(
            due_between(&t, from, to, CatchUp::Once),
            vec![to],
            "latest of 10800"
        );
    }

    #[test]
    fn latest_respects_the_fall_back_rule() {
        let t = task("30 1 * * *", "America/New_York");
        // after both 01:30s of 2026-11-01: the first one is the due time
        let latest = latest_between(&t, utc("2026-10-30T00:00:00Z"), utc("2026-11-01T07:00:00Z"));
        assert_eq!(latest, Some(utc("2026-11-01T05:30:00Z")));
        let zone: Tz = "America/New_York".parse().expect("zone");
        assert_eq!(
            zone.with_ymd_and_hms(2026, 11, 1, 1, 30, 0)
                .earliest()
                .map(|t| t.with_timezone(&Utc)),
            latest
        );
    }
}
