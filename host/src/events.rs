//! Process-wide counters of what the daemon's parts do, which the gateway's
//! `/metrics` (the gateway's `metrics` module) exposes next to its own:
//!
//! - `pincer_container_starts_total{workspace}`: workspace containers
//!   created and started;
//! - `pincer_container_verify_failures_total{workspace}`: containers removed
//!   because their policy or runner could not be verified;
//! - `pincer_container_pauses_total{workspace}` and
//!   `pincer_container_wakes_total{workspace}`: containers frozen and thawed;
//! - `pincer_container_wake_seconds`: how long thawing took (`docker
//!   unpause`), a histogram;
//! - `pincer_container_stops_total{workspace}`: containers stopped because
//!   they were unused (`containers.idle`);
//! - `pincer_plugin_faults_total{plugin}`: plugin calls that trapped, ran out
//!   of time or memory;
//! - `pincer_channel_reconnects_total{channel}`: connections a channel opened
//!   again after losing one;
//! - `pincer_channel_store_failures_total{channel}`: inbound messages that
//!   could not be stored, so they were not acked (the platform redelivers);
//! - `pincer_egress_connections_total{workspace,result}`: connections through
//!   a workspace's egress proxy, `allowed` or `refused`;
//! - `pincer_egress_bytes_total{workspace,direction}`: bytes relayed by
//!   allowed ones, `up` (to the origin) and `down`.
//!
//! Counters live for the process (a `prometheus-client` family each, shared
//! by every gateway the process builds), so the parts that count need no
//! handle to the gateway; a process that runs none of these parts (e.g.
//! `pincer gateway serve`) shows the families with no samples.

use std::sync::LazyLock;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WorkspaceLabel {
    workspace: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginLabel {
    plugin: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ChannelLabel {
    channel: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EgressLabel {
    workspace: String,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EgressBytesLabel {
    workspace: String,
    direction: &'static str,
}

struct Events {
    container_starts: Family<WorkspaceLabel, Counter>,
    container_pauses: Family<WorkspaceLabel, Counter>,
    container_wakes: Family<WorkspaceLabel, Counter>,
    wake_seconds: Histogram,
    container_stops: Family<WorkspaceLabel, Counter>,
    verify_failures: Family<WorkspaceLabel, Counter>,
    plugin_faults: Family<PluginLabel, Counter>,
    channel_reconnects: Family<ChannelLabel, Counter>,
    channel_store_failures: Family<ChannelLabel, Counter>,
    egress_connections: Family<EgressLabel, Counter>,
    egress_bytes: Family<EgressBytesLabel, Counter>,
}

static EVENTS: LazyLock<Events> = LazyLock::new(|| Events {
    container_starts: Family::default(),
    container_pauses: Family::default(),
    container_wakes: Family::default(),
    // 2 ms to about 1 s.
    wake_seconds: Histogram::new(exponential_buckets(0.002, 2.0, 10)),
    container_stops: Family::default(),
    verify_failures: Family::default(),
    plugin_faults: Family::default(),
    channel_reconnects: Family::default(),
    channel_store_failures: Family::default(),
    egress_connections: Family::default(),
    egress_bytes: Family::default(),
});

/// A connection through `workspace`'s egress proxy was let through and has
/// ended, having relayed `up` and `down` bytes.
pub fn egress_allowed(workspace: &str, up: u64, down: u64) {
    EVENTS
        .egress_connections
        .get_or_create(&EgressLabel {
            workspace: workspace.to_owned(),
            result: "allowed",
        })
        .inc();
    for (direction, bytes) in [("up", up), ("down", down)] {
        EVENTS
            .egress_bytes
            .get_or_create(&EgressBytesLabel {
                workspace: workspace.to_owned(),
                direction,
            })
            .inc_by(bytes);
    }
}

/// A connection through `workspace`'s egress proxy was refused.
pub fn egress_refused(workspace: &str) {
    EVENTS
        .egress_connections
        .get_or_create(&EgressLabel {
            workspace: workspace.to_owned(),
            result: "refused",
        })
        .inc();
}

fn count_for(family: &Family<WorkspaceLabel, Counter>, workspace: &str) {
    family
        .get_or_create(&WorkspaceLabel {
            workspace: workspace.to_owned(),
        })
        .inc();
}

/// A workspace container was created and started.
pub fn container_started(workspace: &str) {
    count_for(&EVENTS.container_starts, workspace);
}

/// A workspace container was frozen (`docker pause`).
pub fn container_paused(workspace: &str) {
    count_for(&EVENTS.container_pauses, workspace);
}

/// A frozen workspace container was thawed to be used, in `took`.
pub fn container_woken(workspace: &str, took: std::time::Duration) {
    count_for(&EVENTS.container_wakes, workspace);
    EVENTS.wake_seconds.observe(took.as_secs_f64());
}

/// An unused workspace container was stopped.
pub fn container_stopped(workspace: &str) {
    count_for(&EVENTS.container_stops, workspace);
}

/// A workspace container failed verification and was removed.
pub fn container_verify_failed(workspace: &str) {
    count_for(&EVENTS.verify_failures, workspace);
}

/// A call into `plugin` trapped, ran out of time or of memory.
pub fn plugin_fault(plugin: &str) {
    EVENTS
        .plugin_faults
        .get_or_create(&PluginLabel {
            plugin: plugin.to_owned(),
        })
        .inc();
}

/// `channel` opened its connection again after losing it.
pub fn channel_reconnected(channel: &str) {
    EVENTS
        .channel_reconnects
        .get_or_create(&ChannelLabel {
            channel: channel.to_owned(),
        })
        .inc();
}

/// An inbound message of `channel` could not be stored (and was not acked).
pub fn channel_store_failed(channel: &str) {
    EVENTS
        .channel_store_failures
        .get_or_create(&ChannelLabel {
            channel: channel.to_owned(),
        })
        .inc();
}

/// Registers the process's counters in `registry` (they stay shared: what
/// is counted later shows in every registry they were added to).
pub fn register(registry: &mut Registry) {
    registry.register(
        "pincer_container_starts",
        "Workspace containers created and started, by workspace",
        EVENTS.container_starts.clone(),
    );
    registry.register(
        "pincer_container_pauses",
        "Workspace containers frozen (docker pause), by workspace",
        EVENTS.container_pauses.clone(),
    );
    registry.register(
        "pincer_container_wakes",
        "Frozen workspace containers thawed to be used, by workspace",
        EVENTS.container_wakes.clone(),
    );
    registry.register(
        "pincer_container_wake_seconds",
        "Time to thaw a frozen workspace container (docker unpause)",
        EVENTS.wake_seconds.clone(),
    );
    registry.register(
        "pincer_container_stops",
        "Workspace containers stopped because they were unused (containers.idle), by workspace",
        EVENTS.container_stops.clone(),
    );
    registry.register(
        "pincer_container_verify_failures",
        "Workspace containers removed because their policy or runner could not be verified",
        EVENTS.verify_failures.clone(),
    );
    registry.register(
        "pincer_plugin_faults",
        "Plugin calls that trapped, ran out of time or of memory, by plugin",
        EVENTS.plugin_faults.clone(),
    );
    registry.register(
        "pincer_channel_reconnects",
        "Channel connections opened again after one was lost, by channel",
        EVENTS.channel_reconnects.clone(),
    );
    registry.register(
        "pincer_egress_connections",
        "Connections through a workspace's egress proxy, allowed or refused",
        EVENTS.egress_connections.clone(),
    );
    registry.register(
        "pincer_egress_bytes",
        "Bytes relayed by a workspace's egress proxy, up (to the origin) and down",
        EVENTS.egress_bytes.clone(),
    );
    registry.register(
        "pincer_channel_store_failures",
        "Inbound channel messages that could not be stored, so they were not acknowledged, by channel",
        EVENTS.channel_store_failures.clone(),
    );
}
