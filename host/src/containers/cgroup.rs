//! The kernel's own counters for a container's cgroup: how often the OOM
//! killer fired and how often a fork hit the pids limit. Read from the host,
//! for cgroup v1 (cgroupfs driver) and v2 layouts; missing files read as 0.

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    pub oom_kills: u64,
    pub pids_limit_hits: u64,
}

impl Counters {
    pub fn read(container_id: &str) -> Self {
        let v1 = |controller: &str, file: &str| {
            format!("/sys/fs/cgroup/{controller}/docker/{container_id}/{file}")
        };
        let v2 = [
            format!("/sys/fs/cgroup/system.slice/docker-{container_id}.scope"),
            format!("/sys/fs/cgroup/docker/{container_id}"),
        ];
        let first = |paths: Vec<String>, key: &str| {
            paths
                .iter()
                .find_map(|p| std::fs::read_to_string(p).ok())
                .and_then(|text| counter(&text, key))
                .unwrap_or(0)
        };
        let mut oom_paths = vec![v1("memory", "memory.oom_control")];
        oom_paths.extend(v2.iter().map(|d| format!("{d}/memory.events")));
        let mut pids_paths = vec![v1("pids", "pids.events")];
        pids_paths.extend(v2.iter().map(|d| format!("{d}/pids.events")));
        Self {
            oom_kills: first(oom_paths, "oom_kill"),
            pids_limit_hits: first(pids_paths, "max"),
        }
    }
}

/// The value of a `key value` line.
fn counter(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_parse() {
        assert_eq!(
            counter("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", "oom_kill"),
            Some(3)
        );
        assert_eq!(counter("max 12\n", "max"), Some(12));
        assert_eq!(counter("low 0\n", "max"), None);
        assert_eq!(Counters::read("no-such-container"), Counters::default());
    }
}
