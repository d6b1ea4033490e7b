//! What the scheduler benches read of a process and of their arguments.

use chrono::{DateTime, Timelike as _, Utc};

/// The `n`th argument that is not a flag, as a number, or `default`.
pub fn arg(n: usize, default: u64) -> u64 {
    std::env::args()
        .filter(|a| !a.starts_with('-'))
        .nth(n)
        .and_then(|a| a.parse().ok())
        .unwrap_or(default)
}

/// utime + stime of `pid` (all its threads), in seconds.
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // after the command name in parentheses: field 3 onwards
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    // utime and stime are fields 14 and 15 (1-based), 11 and 12 here
    (ticks(11) + ticks(12)) / hz
}

/// A `/proc/PID/status` figure in KiB (`VmRSS:`, `VmHWM:`).
pub fn status_kib(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The `p`th percentile of `sorted`, 0 when empty.
pub fn percentile(sorted: &[i64], p: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// A 6-field cron expression firing once a day at `t`'s second.
pub fn cron_at(t: DateTime<Utc>) -> String {
    format!("{} {} {} * * *", t.second(), t.minute(), t.hour())
}
