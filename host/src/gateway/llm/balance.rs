//! Per-deployment runtime state (in-flight count, recent latencies,
//! cooldown) and the routing strategies that choose among deployments.

use std::collections::VecDeque;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::provider::Deployment;
use crate::config::RoutingStrategy;

/// Latencies kept per deployment for the moving average.
const LATENCY_WINDOW: usize = 10;

#[derive(Debug, Default)]
struct Stats {
    latencies: VecDeque<Duration>,
    cooldown_until: Option<Instant>,
}

#[derive(Debug)]
pub(crate) struct DeploymentState {
    pub deployment: Deployment,
    in_flight: AtomicUsize,
    stats: Mutex<Stats>,
}

impl DeploymentState {
    pub fn new(deployment: Deployment) -> Self {
        DeploymentState {
            deployment,
            in_flight: AtomicUsize::new(0),
            stats: Mutex::new(Stats::default()),
        }
    }

    fn stats(&self) -> MutexGuard<'_, Stats> {
        // The stats stay usable even if a holder panicked.
        self.stats.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Average of the recent latencies; `None` when never tried.
    pub fn average_latency(&self) -> Option<Duration> {
        let stats = self.stats();
        let n = u32::try_from(stats.latencies.len())
            .ok()
            .filter(|n| *n > 0)?;
        Some(stats.latencies.iter().sum::<Duration>() / n)
    }

    pub fn record_latency(&self, latency: Duration) {
        let mut stats = self.stats();
        if stats.latencies.len() == LATENCY_WINDOW {
            stats.latencies.pop_front();
        }
        stats.latencies.push_back(latency);
    }

    pub fn cool_down(&self, duration: Duration) {
        let now = Instant::now();
        let until = now
            .checked_add(duration)
            .unwrap_or(now + Duration::from_secs(86_400));
        let mut stats = self.stats();
        stats.cooldown_until = Some(stats.cooldown_until.map_or(until, |u| u.max(until)));
    }

    pub fn is_cooling(&self, now: Instant) -> bool {
        self.stats().cooldown_until.is_some_and(|u| u > now)
    }
}

/// Counts a request as in flight until dropped (for streams: until the
/// stream ends or is dropped).
#[derive(Debug)]
pub(crate) struct InFlight(Arc<DeploymentState>);

impl InFlight {
    pub fn new(state: &Arc<DeploymentState>) -> Self {
        state.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(Arc::clone(state))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A random number for load spreading and jitter (not for secrets).
pub(crate) fn random_u64() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.finish()
}

/// A random element of a non-empty slice.
fn pick_random(items: &[usize]) -> Option<usize> {
    let len = u64::try_from(items.len()).ok().filter(|l| *l > 0)?;
    let at = usize::try_from(random_u64() % len).ok()?;
    items.get(at).copied()
}

/// Chooses among `candidates` (indices into `states`, non-empty). Ties are
/// broken at random so that equal deployments share the load.
/// - simple-shuffle: uniformly at random;
/// - least-busy: fewest requests in flight;
/// - latency-based: a deployment never tried first, else the lowest average
///   of its recent latencies.
pub(crate) fn choose(
    strategy: RoutingStrategy,
    states: &[Arc<DeploymentState>],
    candidates: &[usize],
) -> Option<usize> {
    match strategy {
        RoutingStrategy::SimpleShuffle => pick_random(candidates),
        RoutingStrategy::LeastBusy => {
            let load = |i: &usize| states.get(*i).map_or(usize::MAX, |s| s.in_flight());
            let least = candidates.iter().map(load).min()?;
            let tied: Vec<usize> = candidates
                .iter()
                .copied()
                .filter(|i| load(i) == least)
                .collect();
            pick_random(&tied)
        }
        RoutingStrategy::LatencyBased => {
            let latency = |i: &usize| states.get(*i).and_then(|s| s.average_latency());
            let untried: Vec<usize> = candidates
                .iter()
                .copied()
                .filter(|i| latency(i).is_none())
                .collect();
            if !untried.is_empty() {
                return pick_random(&untried);
            }
            let best = candidates.iter().filter_map(latency).min()?;
            let tied: Vec<usize> = candidates
                .iter()
                .copied()
                .filter(|i| latency(i) == Some(best))
                .collect();
            pick_random(&tied)
        }
    }
}

/// Jittered exponential backoff before retry number `retry` (1-based):
/// `min(cap, base · 2^(retry-1))`, scaled by a random factor in [0.5, 1).
pub(crate) fn backoff(retry: u32, base: Duration, cap: Duration) -> Duration {
    let exp = base.saturating_mul(1u32 << retry.saturating_sub(1).min(16));
    let full = exp.min(cap);
    let jitter = 0.5 + (random_u64() % 1000) as f64 / 2000.0;
    full.mul_f64(jitter)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        let base = Duration::from_millis(100);
        let cap = Duration::from_secs(2);
        for _ in 0..50 {
            let first = backoff(1, base, cap);
            assert!(
                first >= Duration::from_millis(50) && first < base,
                "{first:?}"
            );
            let third = backoff(3, base, cap);
            assert!(third >= Duration::from_millis(200) && third < Duration::from_millis(400));
            let late = backoff(30, base, cap);
            assert!(late >= Duration::from_secs(1) && late < cap, "{late:?}");
        }
    }

    #[test]
    fn random_pick_stays_in_range() {
        let items = [3, 5, 9];
        for _ in 0..100 {
            assert!(items.contains(&pick_random(&items).unwrap()));
        }
        assert_eq!(pick_random(&[]), None);
    }
}
