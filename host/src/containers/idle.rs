//! Two-stage idleness (`containers.idle`, `workspaces.NAME.idle`): the
//! daemon freezes (`docker pause`) a workspace container unused for
//! `pause_after`, stops one unused for `stop_after` (frozen or not; the next
//! use cold-starts), and keeps at most `max_paused` frozen, stopping the
//! least recently used past that. It looks at every workspace container of
//! its instance, also those a one-shot command started.
//!
//! "Unused" is what the runner says (no command or turn running, and for
//! how long: a turn waiting on a person's approval is a turn running), and
//! nobody holds the container in use ([`super::in_use`]): the supervisor
//! acts only while it holds it unused, so a request never meets a runner
//! frozen or stopped under it. A frozen container's unused time is what it
//! had when frozen plus the time since ([`super::Frozen`], kept on disk so
//! a restarted daemon goes on counting); one frozen by someone else counts
//! from the moment the supervisor found it.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;

use super::ContainerRuntime;
use crate::config::{Config, Idleness};

/// What the supervisor saw of one container.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// In use, or its runner is working or did not answer.
    Busy,
    /// Running, unused for this long.
    Running(Duration),
    /// Frozen, unused for this long.
    Frozen(Duration),
}

/// What to do with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Keep,
    Freeze,
    Stop,
}

/// The step `idleness` asks for a container seen as `seen`.
pub fn step(idleness: Idleness, seen: Seen) -> Step {
    let reached = |after: Option<Duration>, unused: Duration| after.is_some_and(|a| unused >= a);
    match seen {
        Seen::Busy => Step::Keep,
        Seen::Running(unused) if reached(idleness.stop_after, unused) => Step::Stop,
        Seen::Running(unused) if reached(idleness.pause_after, unused) => Step::Freeze,
        Seen::Frozen(unused) if reached(idleness.stop_after, unused) => Step::Stop,
        Seen::Running(_) | Seen::Frozen(_) => Step::Keep,
    }
}

/// The frozen containers to stop so that at most `max` stay frozen: the
/// longest unused first.
pub fn over_limit(mut frozen: Vec<(String, Duration)>, max: usize) -> Vec<String> {
    frozen.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let excess = frozen.len().saturating_sub(max);
    frozen.into_iter().take(excess).map(|(ws, _)| ws).collect()
}

/// How often the supervisor looks: a quarter of the shortest step any
/// workspace takes, between 1 and 15 seconds.
pub fn interval(config: &Config) -> Duration {
    let mut names: Vec<&str> = config.workspaces.keys().map(String::as_str).collect();
    // Containers of workspaces no longer configured follow the global setting.
    names.push("");
    names
        .into_iter()
        .flat_map(|name| {
            let idle = config.idleness(name);
            [idle.pause_after, idle.stop_after]
        })
        .flatten()
        .min()
        .map_or(Duration::from_secs(15), |shortest| shortest / 4)
        .clamp(Duration::from_secs(1), Duration::from_secs(15))
}

/// Freezes and stops the instance's unused containers until `stop` turns
/// true.
pub async fn supervise(
    runtime: Arc<ContainerRuntime>,
    config: Arc<Config>,
    mut stop: watch::Receiver<bool>,
) {
    let every = interval(&config);
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            () = tokio::time::sleep(every) => {}
        }
        if let Err(e) = look(&runtime, &config).await {
            tracing::warn!("idle containers: {e}");
        }
    }
}

/// One look at every container: the steps their idleness asks for, then
/// `max_paused`.
pub async fn look(
    runtime: &ContainerRuntime,
    config: &Config,
) -> Result<(), super::ContainerError> {
    let mut frozen = Vec::new();
    for container in runtime.list().await? {
        let workspace = container.workspace.as_str();
        let idleness = config.idleness(workspace);
        if container.paused() {
            let record = match runtime.frozen(workspace, &container.id) {
                Some(record) => record,
                None => runtime.adopt_frozen(workspace, &container.id),
            };
            let unused = record.unused_at(SystemTime::now());
            if step(idleness, Seen::Frozen(unused)) == Step::Stop {
                stop(runtime, workspace, &unused_for(unused)).await;
            } else {
                frozen.push((workspace.to_string(), unused));
            }
            continue;
        }
        if !container.running() {
            continue;
        }
        let Some(unused) = held_unused(runtime, workspace) else {
            continue;
        };
        let seen = match runtime.ping(workspace, &container.id).await {
            Some(status) if status.busy == 0 => {
                Seen::Running(Duration::from_millis(status.idle_ms))
            }
            _ => Seen::Busy,
        };
        match (step(idleness, seen), seen) {
            (Step::Freeze, Seen::Running(idle)) => {
                match runtime
                    .freeze(&unused, &container.id, idle, &unused_for(idle))
                    .await
                {
                    Ok(()) => frozen.push((workspace.to_string(), idle)),
                    Err(e) => tracing::warn!(%workspace, "cannot freeze its container: {e}"),
                }
            }
            (Step::Stop, Seen::Running(idle)) => {
                if let Err(e) = runtime.stop_unused(&unused, &unused_for(idle)).await {
                    tracing::warn!(%workspace, "cannot stop its container: {e}");
                }
            }
            _ => {}
        }
    }
    let max = usize::try_from(config.containers.idle.max_paused).unwrap_or(usize::MAX);
    for workspace in over_limit(frozen, max) {
        let why = format!(
            "to keep at most {max} frozen (containers.idle.max_paused), the least recently used first"
        );
        stop(runtime, &workspace, &why).await;
    }
    Ok(())
}

/// Stops the workspace's container unless someone uses it now.
async fn stop(runtime: &ContainerRuntime, workspace: &str, why: &str) {
    let Some(unused) = held_unused(runtime, workspace) else {
        return;
    };
    if let Err(e) = runtime.stop_unused(&unused, why).await {
        tracing::warn!(%workspace, "cannot stop its container: {e}");
    }
}

/// The workspace's container held unused; `None` while someone uses it or
/// when its lock cannot be taken (said in the log).
fn held_unused(runtime: &ContainerRuntime, workspace: &str) -> Option<super::Unused> {
    runtime
        .try_unused(workspace)
        .inspect_err(|e| tracing::warn!(%workspace, "{e}"))
        .ok()
        .flatten()
}

fn unused_for(unused: Duration) -> String {
    format!(
        "unused for {}",
        humantime::format_duration(Duration::from_secs(unused.as_secs()))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idle(pause: Option<u64>, stop: Option<u64>) -> Idleness {
        Idleness {
            pause_after: pause.map(Duration::from_secs),
            stop_after: stop.map(Duration::from_secs),
        }
    }

    #[test]
    fn a_busy_container_is_kept_however_long_it_has_run() {
        assert_eq!(step(idle(Some(1), Some(2)), Seen::Busy), Step::Keep);
    }

    #[test]
    fn unused_containers_are_frozen_then_stopped() {
        let idleness = idle(Some(120), Some(6 * 3600));
        let secs = Duration::from_secs;
        assert_eq!(step(idleness, Seen::Running(secs(119))), Step::Keep);
        assert_eq!(step(idleness, Seen::Running(secs(120))), Step::Freeze);
        assert_eq!(step(idleness, Seen::Frozen(secs(3600))), Step::Keep);
        assert_eq!(step(idleness, Seen::Frozen(secs(6 * 3600))), Step::Stop);
        // A daemon that was down may find a running container unused for longer.
        assert_eq!(step(idleness, Seen::Running(secs(7 * 3600))), Step::Stop);
    }

    #[test]
    fn zero_means_never() {
        let secs = Duration::from_secs;
        assert_eq!(
            step(idle(None, Some(60)), Seen::Running(secs(59))),
            Step::Keep
        );
        assert_eq!(
            step(idle(None, Some(60)), Seen::Running(secs(60))),
            Step::Stop
        );
        assert_eq!(
            step(idle(Some(60), None), Seen::Frozen(secs(1_000_000))),
            Step::Keep
        );
    }

    #[test]
    fn past_the_limit_the_longest_unused_frozen_containers_are_stopped() {
        let secs = Duration::from_secs;
        let frozen = vec![
            ("a".to_string(), secs(10)),
            ("b".to_string(), secs(300)),
            ("c".to_string(), secs(60)),
        ];
        assert_eq!(over_limit(frozen.clone(), 3), Vec::<String>::new());
        assert_eq!(over_limit(frozen.clone(), 2), vec!["b".to_string()]);
        assert_eq!(over_limit(frozen, 0), vec!["b", "c", "a"]);
    }

    #[test]
    fn the_supervisor_looks_four_times_per_shortest_step_within_bounds() {
        let config = |yaml: &str| {
            crate::config::Config::from_str_with_env(yaml, std::path::Path::new("t.yaml"), |_| None)
                .unwrap()
        };
        let defaults = config("workspaces: {a: {}}\n");
        assert_eq!(interval(&defaults), Duration::from_secs(15));
        let quick = config("workspaces: {a: {idle: {pause_after: 2s}}}\n");
        assert_eq!(interval(&quick), Duration::from_secs(1));
        let minutes = config("containers: {idle: {pause_after: 40s}}\nworkspaces: {a: {}}\n");
        assert_eq!(interval(&minutes), Duration::from_secs(10));
    }
}
