//! Semantic checks after parsing. Each problem names the path of the node
//! it is about; the loader turns that path into a position.

use std::collections::BTreeSet;

use super::node::Seg;
use super::schema::{
    Budget, Channels, Config, Containers, Gateway, GatewayCache, ListenerLimits, McpContainer,
    McpServer, PluginLimits, Plugins, Workspace,
};

/// A semantic problem at `path` (the mapping key itself when `at_key`).
#[derive(Debug)]
pub(crate) struct Issue<'a> {
    pub path: Vec<Seg<'a>>,
    pub at_key: bool,
    pub message: String,
}

type Out<'a, 'o> = &'o mut Vec<Issue<'a>>;

fn at<'a>(path: Vec<Seg<'a>>, message: String) -> Issue<'a> {
    Issue {
        path,
        at_key: false,
        message,
    }
}

fn at_key<'a>(path: Vec<Seg<'a>>, message: String) -> Issue<'a> {
    Issue {
        path,
        at_key: true,
        message,
    }
}

use Seg::{Index, Key};

/// `[a-z0-9][a-z0-9_-]{0,62}`: names of workspaces, channels, skills and MCP
/// servers.
pub(crate) fn is_valid_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    let Some((first, rest)) = bytes.split_first() else {
        return false;
    };
    bytes.len() <= 63
        && (first.is_ascii_lowercase() || first.is_ascii_digit())
        && rest
            .iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_' || *c == b'-')
}

fn name_rule(what: &str, name: &str) -> String {
    format!(
        "invalid {what} name `{name}`: use 1-63 characters from a-z, 0-9, `_` and `-`, \
         starting with a letter or digit"
    )
}

/// Why `name` cannot be a skill or MCP server, if it is taken by pincer.
fn reserved_source(what: &str, name: &str) -> Option<String> {
    if name == super::MEMORY_SOURCE {
        return Some(format!(
            "`{name}` is reserved for pincer's built-in memory tools (memory__memorize, \
             memory__recall, memory__forget; see workspaces.NAME.memory): give the {what} another name"
        ));
    }
    (name == super::SCHEDULE_SOURCE).then(|| {
        format!(
            "`{name}` is reserved for pincer's built-in schedule tools (schedule__create, \
             schedule__list, schedule__cancel; see workspaces.NAME.agent_schedules): give the {what} another name"
        )
    })
}

fn is_env_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    bytes
        .first()
        .is_some_and(|c| c.is_ascii_alphabetic() || *c == b'_')
        && bytes
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || *c == b'_')
}

pub(crate) fn validate(cfg: &Config) -> Vec<Issue<'_>> {
    let mut issues = Vec::new();
    let out = &mut issues;
    gateway(cfg, out);
    if let Some(zone) = &cfg.timezone
        && zone.parse::<chrono_tz::Tz>().is_err()
    {
        out.push(at(
            vec![Key("timezone")],
            format!("unknown time zone `{zone}` (use an IANA name such as Asia/Shanghai)"),
        ));
    }
    containers(cfg, out);
    if let Err(problem) = cfg.state.location(std::path::Path::new("")) {
        out.push(at(vec![Key("state")], problem));
    }
    for (name, ws) in &cfg.workspaces {
        workspace(cfg, name, ws, out);
    }
    plugins(&cfg.plugins, out);
    channels(cfg, out);
    if cfg.web.enabled {
        web(cfg, out);
    }
    skills(cfg, out);
    for (name, server) in &cfg.mcp_servers {
        mcp_server(cfg, name, server, out);
    }
    issues
}

fn aliases(cfg: &Config) -> BTreeSet<&str> {
    cfg.gateway
        .model_list
        .iter()
        .map(|m| m.model_name.as_str())
        .collect()
}

fn gateway<'a>(cfg: &'a Config, out: Out<'a, '_>) {
    let gw = &cfg.gateway;
    if !(gw.timeout.is_finite() && gw.timeout > 0.0) {
        out.push(at(
            vec![Key("gateway"), Key("timeout")],
            "timeout must be a positive number of seconds".into(),
        ));
    }
    for (i, deployment) in gw.model_list.iter().enumerate() {
        let path =
            |leaf: &'static str| vec![Key("gateway"), Key("model_list"), Index(i), Key(leaf)];
        if deployment.model_name.trim().is_empty() {
            out.push(at(
                path("model_name"),
                "model_name must not be empty".into(),
            ));
            continue;
        }
        let params = &deployment.litellm_params;
        let params_path = |leaf: &'static str| {
            vec![
                Key("gateway"),
                Key("model_list"),
                Index(i),
                Key("litellm_params"),
                Key(leaf),
            ]
        };
        if params.model.trim().is_empty() {
            out.push(at(params_path("model"), "model must not be empty".into()));
            continue;
        }
        if let Some(timeout) = params.timeout
            && !(timeout.is_finite() && timeout > 0.0)
        {
            out.push(at(
                params_path("timeout"),
                "timeout must be a positive number of seconds".into(),
            ));
            continue;
        }
    }
    prices(gw, out);
    gateway_limits(gw, out);
    gateway_remote(gw, out);
    let known = aliases(cfg);
    let unknown = |alias: &str| {
        format!("unknown model alias `{alias}` (no model_list entry has this model_name)")
    };
    for (i, entry) in gw.fallbacks.iter().enumerate() {
        if entry.len() != 1 {
            out.push(at(
                vec![Key("gateway"), Key("fallbacks"), Index(i)],
                "each fallbacks entry must be a single `alias: [fallback aliases]` pair".into(),
            ));
            continue;
        }
        for (alias, targets) in entry {
            let path = vec![Key("gateway"), Key("fallbacks"), Index(i), Key(alias)];
            if !known.contains(alias.as_str()) {
                out.push(at_key(path, unknown(alias)));
                continue;
            }
            for (j, target) in targets.iter().enumerate() {
                if !known.contains(target.as_str()) {
                    let mut item = path.clone();
                    item.push(Index(j));
                    out.push(at(item, unknown(target)));
                    continue;
                }
            }
        }
    }
}

/// `gateway.prices`: non-empty keys, finite non-negative prices.
fn prices<'a>(gw: &'a Gateway, out: Out<'a, '_>) {
    for (model, price) in &gw.prices {
        let base = || vec![Key("gateway"), Key("prices"), Key(model.as_str())];
        if model.trim().is_empty() {
            out.push(at_key(
                base(),
                "a price key must name a `provider/model` or a model alias".into(),
            ));
            continue;
        }
        for (leaf, value) in [
            ("input_per_1m", price.input_per_1m),
            ("output_per_1m", price.output_per_1m),
        ] {
            if !(value.is_finite() && value >= 0.0) {
                let mut p = base();
                p.push(Key(leaf));
                out.push(at(
                    p,
                    format!("{leaf} must be a number of USD per million tokens, 0 or more"),
                ));
                continue;
            }
        }
    }
}

/// `gateway.cache` and `gateway.max_request_bytes` ranges.
fn gateway_limits<'a>(gw: &'a Gateway, out: Out<'a, '_>) {
    listener_limits(
        "gateway",
        gw.limits.tcp(),
        Some(gw.limits.max_connections_per_workspace),
        out,
    );
    let cache = |leaf| vec![Key("gateway"), Key("cache"), Key(leaf)];
    if !(1..=GatewayCache::MAX_TTL_SECS).contains(&gw.cache.ttl_secs) {
        out.push(at(
            cache("ttl_secs"),
            format!(
                "ttl_secs must be between 1 and {}",
                GatewayCache::MAX_TTL_SECS
            ),
        ));
    }
    if !(1..=GatewayCache::MAX_ENTRIES).contains(&gw.cache.max_entries) {
        out.push(at(
            cache("max_entries"),
            format!(
                "max_entries must be between 1 and {}",
                GatewayCache::MAX_ENTRIES
            ),
        ));
    }
    if !(Gateway::MIN_MAX_REQUEST_BYTES..=Gateway::MAX_MAX_REQUEST_BYTES)
        .contains(&gw.max_request_bytes)
    {
        out.push(at(
            vec![Key("gateway"), Key("max_request_bytes")],
            format!(
                "max_request_bytes must be between {} and {}",
                Gateway::MIN_MAX_REQUEST_BYTES,
                Gateway::MAX_MAX_REQUEST_BYTES
            ),
        ));
    }
}

/// Whether `addr` is reachable only from this machine (127.0.0.0/8, `::1`,
/// or `::ffff:127.x.y.z`). Anything else — `0.0.0.0`, `::`, a LAN or bridge
/// address — is reachable from other machines and from every
/// bridge-networked container.
pub fn is_loopback(addr: &std::net::SocketAddr) -> bool {
    addr.ip().to_canonical().is_loopback()
}

/// The refusal of a listener on `addr` that is not loopback, for
/// `section.listen` without `section.allow_remote: true`.
pub fn remote_refusal(section: &str, addr: &std::net::SocketAddr) -> String {
    format!(
        "{section}.listen {addr} is not a loopback address: other machines and every \
         bridge-networked container could reach it. Use 127.0.0.1, or set \
         `{section}.allow_remote: true` to serve it there on purpose"
    )
}

/// The refusal of a gateway that serves `/metrics` beyond loopback with no key.
pub fn metrics_key_refusal(addr: &std::net::SocketAddr) -> String {
    format!(
        "gateway.listen {addr} is not a loopback address, so /metrics needs a bearer key: \
         set `gateway.metrics_key` (e.g. `metrics_key: ${{PINCER_METRICS_KEY}}`, at least {} characters)",
        Gateway::MIN_METRICS_KEY_CHARS
    )
}

/// `gateway.listen` beyond loopback needs `allow_remote` and `metrics_key`.
fn gateway_remote<'a>(gw: &'a Gateway, out: Out<'a, '_>) {
    if let Some(key) = &gw.metrics_key
        && key.chars().count() < Gateway::MIN_METRICS_KEY_CHARS
    {
        out.push(at(
            vec![Key("gateway"), Key("metrics_key")],
            format!(
                "metrics_key must be at least {} characters (a random secret, e.g. from `openssl rand -hex 16`)",
                Gateway::MIN_METRICS_KEY_CHARS
            ),
        ));
    }
    if is_loopback(&gw.listen) {
        return;
    }
    if !gw.allow_remote {
        out.push(at(
            vec![Key("gateway"), Key("listen")],
            remote_refusal("gateway", &gw.listen),
        ));
    } else if gw.metrics_key.is_none() {
        out.push(at(
            vec![Key("gateway"), Key("listen")],
            metrics_key_refusal(&gw.listen),
        ));
    }
}

/// Every timeout allows something and no cap is zero or absurd.
fn listener_limits<'a>(
    section: &'static str,
    limits: ListenerLimits,
    per_workspace: Option<u64>,
    out: Out<'a, '_>,
) {
    let path = |leaf| vec![Key(section), Key("limits"), Key(leaf)];
    for (leaf, secs) in [
        ("header_read_secs", limits.header_read_secs),
        ("body_secs", limits.body_secs),
        ("idle_secs", limits.idle_secs),
    ] {
        if !(1..=ListenerLimits::MAX_SECS).contains(&secs) {
            out.push(at(
                path(leaf),
                format!(
                    "{leaf} must be between 1 and {} seconds",
                    ListenerLimits::MAX_SECS
                ),
            ));
        }
    }
    let caps = [("max_connections", Some(limits.max_connections))]
        .into_iter()
        .chain([("max_connections_per_workspace", per_workspace)]);
    for (leaf, cap) in caps {
        if let Some(cap) = cap
            && !(1..=ListenerLimits::MAX_CONNECTIONS).contains(&cap)
        {
            out.push(at(
                path(leaf),
                format!(
                    "{leaf} must be between 1 and {}",
                    ListenerLimits::MAX_CONNECTIONS
                ),
            ));
        }
    }
}

/// `workspaces.NAME.budget`: every limit that is set is positive.
fn budget<'a>(name: &'a str, budget: &Budget, out: Out<'a, '_>) {
    let path = |leaf| vec![Key("workspaces"), Key(name), Key("budget"), Key(leaf)];
    for (leaf, value) in [
        ("daily_usd", budget.daily_usd),
        ("monthly_usd", budget.monthly_usd),
    ] {
        if let Some(usd) = value
            && !(usd.is_finite() && usd > 0.0)
        {
            out.push(at(
                path(leaf),
                format!("{leaf} must be a positive number of USD"),
            ));
        }
    }
    for (leaf, value) in [
        ("daily_tokens", budget.daily_tokens),
        ("monthly_tokens", budget.monthly_tokens),
    ] {
        if value == Some(0) {
            out.push(at(
                path(leaf),
                format!("{leaf} must be a positive number of tokens"),
            ));
        }
    }
}

fn containers<'a>(cfg: &'a Config, out: Out<'a, '_>) {
    if cfg.containers.image.trim().is_empty() {
        out.push(at(
            vec![Key("containers"), Key("image")],
            "image must not be empty".into(),
        ));
    }
    if !(Containers::MIN_NOFILE..=Containers::MAX_NOFILE).contains(&cfg.containers.nofile) {
        out.push(at(
            vec![Key("containers"), Key("nofile")],
            format!(
                "nofile must be between {} and {} open files",
                Containers::MIN_NOFILE,
                Containers::MAX_NOFILE
            ),
        ));
    }
    if cfg.containers.idle_timeout_secs.is_some() && cfg.containers.idle.stop_after.is_some() {
        out.push(at(
            vec![Key("containers"), Key("idle_timeout_secs")],
            "idle_timeout_secs is the old name of idle.stop_after: give only `idle.stop_after`"
                .into(),
        ));
    }
    let egress = &cfg.containers.egress;
    if !(1..=4096).contains(&egress.max_connections) {
        out.push(at(
            vec![Key("containers"), Key("egress"), Key("max_connections")],
            "max_connections must be between 1 and 4096".into(),
        ));
    }
    if egress.idle_timeout_secs == 0 {
        out.push(at(
            vec![Key("containers"), Key("egress"), Key("idle_timeout_secs")],
            "idle_timeout_secs must be at least 1".into(),
        ));
    }
}

/// Problem with a container mount target, if any.
fn mount_target_problem(target: &str) -> Option<&'static str> {
    let Some(rest) = target.strip_prefix('/') else {
        return Some("mount target must be an absolute path");
    };
    let parts: Vec<&str> = rest.split('/').filter(|p| !p.is_empty()).collect();
    if parts.iter().any(|p| *p == "." || *p == "..") {
        return Some("mount target must not contain `.` or `..`");
    }
    match parts.as_slice() {
        [] => return Some("cannot mount over `/`"),
        ["workspace"] => return Some("cannot mount over `/workspace` (the workspace folder)"),
        _ => {}
    }
    // pincer's own folders (the runner binary, its sockets) and the kernel's:
    // a mount over, above or inside one would replace what pincer trusts.
    const RESERVED: [(&[&str], &str); 5] = [
        (
            &["opt", "pincer"],
            "cannot mount over, above or inside `/opt/pincer` (the agent runner)",
        ),
        (
            &["run", "pincer"],
            "cannot mount over, above or inside `/run/pincer` (the runner and gateway sockets)",
        ),
        (&["proc"], "cannot mount over or inside `/proc`"),
        (&["sys"], "cannot mount over or inside `/sys`"),
        (&["dev"], "cannot mount over or inside `/dev`"),
    ];
    RESERVED
        .iter()
        .find(|(reserved, _)| parts.starts_with(reserved) || reserved.starts_with(&parts))
        .map(|(_, why)| *why)
}

/// A tunnel's service is one DNS label: it is reached as `SERVICE.tunnel`.
fn is_tunnel_service(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && !name.starts_with('-')
        && !name.ends_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// Normalized form of a valid mount target (for duplicate detection).
fn normalized(target: &str) -> String {
    let parts: Vec<&str> = target.split('/').filter(|p| !p.is_empty()).collect();
    format!("/{}", parts.join("/"))
}

fn workspace<'a>(cfg: &'a Config, name: &'a str, ws: &'a Workspace, out: Out<'a, '_>) {
    let base = || vec![Key("workspaces"), Key(name)];
    let item = |field: &'static str, i: usize| {
        let mut p = base();
        p.extend([Key(field), Index(i)]);
        p
    };
    if !is_valid_name(name) {
        out.push(at_key(base(), name_rule("workspace", name)));
    }
    if let Some(model) = &ws.model {
        let known = aliases(cfg);
        if !known.is_empty() && !known.contains(model.as_str()) {
            let mut p = base();
            p.push(Key("model"));
            out.push(at(
                p,
                format!(
                    "unknown model alias `{model}` (no gateway.model_list entry has this model_name)"
                ),
            ));
        }
    }
    if let Some(models) = &ws.models {
        model_allowlist(cfg, name, ws, models, out);
    }
    if let Some(path) = &ws.path {
        let text = path.to_string_lossy();
        if !(text.starts_with('/') || text.starts_with('~')) {
            let mut p = base();
            p.push(Key("path"));
            out.push(at(
                p,
                format!(
                    "path must be absolute or start with ~ (found `{text}`); e.g. \"${{workspace_base_path}}/{name}\""
                ),
            ));
        }
    }
    budget(name, &ws.budget, out);
    let mut targets = BTreeSet::new();
    for (i, mount) in ws.mounts.iter().enumerate() {
        let mut p = item("mounts", i);
        if mount.source.as_os_str().is_empty() {
            p.push(Key("source"));
            out.push(at(p, "mount source must not be empty".into()));
            continue;
        }
        p.push(Key("target"));
        if let Some(problem) = mount_target_problem(&mount.target) {
            out.push(at(p, format!("{problem}: `{}`", mount.target)));
            continue;
        }
        if !targets.insert(normalized(&mount.target)) {
            out.push(at(
                p,
                format!("`{}` is mounted more than once", mount.target),
            ));
            continue;
        }
    }
    for (i, skill) in ws.skills.iter().enumerate() {
        if !is_valid_name(skill) {
            out.push(at(item("skills", i), name_rule("skill", skill)));
            continue;
        }
        if let Some(message) = reserved_source("skill", skill) {
            out.push(at(item("skills", i), message));
            continue;
        }
        if let Some(rules) = cfg.skills.get(skill)
            && !allows(&rules.allowed_workspaces, name)
        {
            out.push(at(
                item("skills", i),
                format!(
                    "skill `{skill}` does not allow workspace `{name}` (see skills.{skill}.allowed_workspaces)"
                ),
            ));
            continue;
        }
    }
    for (i, observer) in ws.observers.iter().enumerate() {
        if !is_valid_name(observer) {
            out.push(at(item("observers", i), name_rule("observer", observer)));
            continue;
        }
    }
    agent_limits(name, &ws.agent, out);
    for (plugin, hosts) in &ws.plugin_http {
        let mut p = base();
        p.extend([Key("plugin_http"), Key(plugin.as_str())]);
        if let Err(reason) = crate::plugins::check_name(plugin) {
            out.push(at_key(p, reason.0));
            continue;
        }
        for (i, host) in hosts.iter().enumerate() {
            if let Err(why) = crate::hosts::HostPattern::parse(host) {
                let mut p = p.clone();
                p.push(Index(i));
                out.push(at(p, format!("http capability `{host}`: {why}")));
                continue;
            }
        }
    }
    for (i, host) in ws.egress.iter().enumerate() {
        if let Err(why) = crate::hosts::HostPattern::parse(host) {
            out.push(at(
                item("egress", i),
                format!("egress entry `{host}`: {why}"),
            ));
        }
    }
    let services = cfg.plugins.configured_services();
    for (i, service) in ws.tunnels.iter().enumerate() {
        let why = if !is_tunnel_service(service) {
            Some(format!(
                "tunnel `{service}`: a service name is 1-63 characters from a-z, 0-9 and `-` (it is reached as http://{service}.tunnel/)"
            ))
        } else if ws.tunnels[..i].contains(service) {
            Some(format!("tunnel `{service}` is listed twice"))
        } else if !services.iter().any(|(s, _)| s == service) {
            Some(format!(
                "no tunnel serves `{service}`: configure one under plugins.config, e.g. plugins.config.tunnel-http: {{service: {service}, target: \"http://127.0.0.1:PORT\"}}"
            ))
        } else {
            None
        };
        if let Some(why) = why {
            out.push(at(item("tunnels", i), why));
        }
    }
    for (i, server) in ws.mcp_servers.iter().enumerate() {
        if let Some(message) = reserved_source("MCP server", server) {
            out.push(at(item("mcp_servers", i), message));
            continue;
        }
        let Some(def) = cfg.mcp_servers.get(server) else {
            out.push(at(
                item("mcp_servers", i),
                format!("unknown MCP server `{server}` (not defined under mcp_servers)"),
            ));
            continue;
        };
        if !allows(&def.allowed_workspaces, name) {
            out.push(at(
                item("mcp_servers", i),
                format!(
                    "MCP server `{server}` does not allow workspace `{name}` (see mcp_servers.{server}.allowed_workspaces)"
                ),
            ));
            continue;
        }
    }
    for (i, channel) in ws.channels.iter().enumerate() {
        if !cfg.channels.contains_key(channel) {
            out.push(at(
                item("channels", i),
                format!("unknown channel `{channel}` (not defined under channels)"),
            ));
            continue;
        }
    }
}

/// `workspaces.NAME.models`: known aliases, listed once, holding `model`
/// and every alias the router may fall back to from a listed one (so what
/// the audit prints is all the gateway can call).
fn model_allowlist<'a>(
    cfg: &'a Config,
    name: &'a str,
    ws: &'a Workspace,
    models: &'a [String],
    out: Out<'a, '_>,
) {
    let known = aliases(cfg);
    let item = |i: usize| vec![Key("workspaces"), Key(name), Key("models"), Index(i)];
    let before = out.len();
    for (i, alias) in models.iter().enumerate() {
        if !known.contains(alias.as_str()) {
            let defined: Vec<&str> = known.iter().copied().collect();
            out.push(at(
                item(i),
                format!(
                    "unknown model alias `{alias}` (no gateway.model_list entry has this model_name; defined: {})",
                    if defined.is_empty() {
                        "none".to_owned()
                    } else {
                        defined.join(", ")
                    }
                ),
            ));
            continue;
        }
        if models[..i].contains(alias) {
            out.push(at(item(i), format!("`{alias}` is listed more than once")));
            continue;
        }
    }
    if out.len() > before {
        // What follows is about the list as a whole: fix its entries first.
        return;
    }
    // Turns use `model`, or the alias `default` when it is unset.
    let (model, named) = match &ws.model {
        Some(model) => (model.as_str(), true),
        None => (super::DEFAULT_MODEL_ALIAS, false),
    };
    if !models.iter().any(|m| m == model) {
        let message = if named {
            format!(
                "workspaces.{name}.models must contain the workspace's own model `{model}` (workspaces.{name}.model)"
            )
        } else {
            format!(
                "workspaces.{name}.model is not set, so its turns use the alias `{model}`, which workspaces.{name}.models does not list: set workspaces.{name}.model to one of the listed aliases"
            )
        };
        out.push(at(
            vec![Key("workspaces"), Key(name), Key("models")],
            message,
        ));
    }
    for (i, alias) in models.iter().enumerate() {
        for fallback in super::with_fallbacks(cfg, alias) {
            if !models.contains(&fallback) {
                out.push(at(
                    item(i),
                    format!(
                        "`{alias}` falls back to `{fallback}` (gateway.fallbacks), which workspaces.{name}.models does not list: add `{fallback}` to the list or change gateway.fallbacks"
                    ),
                ));
                continue;
            }
        }
    }
}

fn allows(allowed: &[String], workspace: &str) -> bool {
    allowed.iter().any(|w| w == "*" || w == workspace)
}

fn plugins<'a>(plugins: &'a Plugins, out: Out<'a, '_>) {
    for (i, name) in plugins.enabled.iter().flatten().enumerate() {
        if name.trim().is_empty() {
            out.push(at(
                vec![Key("plugins"), Key("enabled"), Index(i)],
                "a plugin name must not be empty".into(),
            ));
        }
    }
    for (i, publisher) in plugins.trusted_publishers.iter().enumerate() {
        if let Err(e) = crate::plugins::parse_publisher_key(&publisher.key) {
            out.push(at(
                vec![
                    Key("plugins"),
                    Key("trusted_publishers"),
                    Index(i),
                    Key("key"),
                ],
                e.to_string(),
            ));
        }
        for (j, glob) in publisher.plugins.iter().flatten().enumerate() {
            if let Err(why) = crate::plugins::check_name_glob(glob) {
                out.push(at(
                    vec![
                        Key("plugins"),
                        Key("trusted_publishers"),
                        Index(i),
                        Key("plugins"),
                        Index(j),
                    ],
                    why.0,
                ));
            }
        }
    }
    let limits = &plugins.limits;
    let path = |leaf| vec![Key("plugins"), Key("limits"), Key(leaf)];
    if !(1..=PluginLimits::MAX_MEMORY_MB).contains(&limits.memory_mb) {
        out.push(at(
            path("memory_mb"),
            format!(
                "memory_mb must be between 1 and {}",
                PluginLimits::MAX_MEMORY_MB
            ),
        ));
    }
    if !(1..=PluginLimits::MAX_CALL_TIMEOUT_MS).contains(&limits.call_timeout_ms) {
        out.push(at(
            path("call_timeout_ms"),
            format!(
                "call_timeout_ms must be between 1 and {}",
                PluginLimits::MAX_CALL_TIMEOUT_MS
            ),
        ));
    }
    if !(1..=PluginLimits::MAX_DATA_QUOTA_MB).contains(&limits.data_quota_mb) {
        out.push(at(
            path("data_quota_mb"),
            format!(
                "data_quota_mb must be between 1 and {} (MiB of one plugin's /data folder per workspace)",
                PluginLimits::MAX_DATA_QUOTA_MB
            ),
        ));
    }
}

fn allowed_workspaces<'a>(cfg: &'a Config, list: &'a [String], base: &[Seg<'a>], out: Out<'a, '_>) {
    for (i, ws) in list.iter().enumerate() {
        if ws != "*" && !cfg.workspaces.contains_key(ws) {
            let mut p = base.to_vec();
            p.extend([Key("allowed_workspaces"), Index(i)]);
            out.push(at(
                p,
                format!("unknown workspace `{ws}` (not defined under workspaces; `*` means all)"),
            ));
            continue;
        }
    }
}

fn web<'a>(cfg: &'a Config, out: Out<'a, '_>) {
    let at_listen = || vec![Key("web"), Key("listen")];
    let listen = cfg.web.address();
    if !cfg.web.allow_remote && !is_loopback(&listen) {
        out.push(at(at_listen(), remote_refusal("web", &listen)));
    }
    for (section, other) in [
        ("gateway", cfg.gateway.listen),
        ("channels", cfg.channels.listen),
    ] {
        if other.port() == listen.port()
            && (other.ip() == listen.ip()
                || other.ip().is_unspecified()
                || listen.ip().is_unspecified())
        {
            out.push(at(
                at_listen(),
                format!("web.listen {listen} is also {section}.listen: the console needs an address of its own"),
            ));
        }
    }
}

/// Channel names pincer's own conversations carry in the session store,
/// so a configured channel cannot share their sessions.
fn builtin_channel(name: &str) -> Option<&'static str> {
    match name {
        "cli" => Some("`pincer message` and `pincer chat`"),
        "schedule" => Some("scheduled runs"),
        "web" => Some("the web console's chat"),
        _ => None,
    }
}

fn channels<'a>(cfg: &'a Config, out: Out<'a, '_>) {
    // Checked whether or not a channel is configured: the key says where
    // a listener would be, and a later channel would open it.
    if !cfg.channels.allow_remote && !is_loopback(&cfg.channels.listen) {
        out.push(at(
            vec![Key("channels"), Key(Channels::LISTEN_KEY)],
            remote_refusal("channels", &cfg.channels.listen),
        ));
    }
    listener_limits("channels", cfg.channels.limits, None, out);
    for (name, channel) in &cfg.channels {
        let base = || vec![Key("channels"), Key(name.as_str())];
        let field = |leaf| {
            let mut p = base();
            p.push(Key(leaf));
            p
        };
        if !is_valid_name(name) {
            out.push(at_key(base(), name_rule("channel", name)));
            continue;
        }
        if let Some(whose) = builtin_channel(name) {
            out.push(at_key(
                base(),
                format!("`{name}` is the channel name of {whose}; give the channel another name"),
            ));
            continue;
        }
        if channel.plugin.trim().is_empty() {
            out.push(at(field("plugin"), "plugin must not be empty".into()));
            continue;
        }
        if !cfg.workspaces.contains_key(&channel.workspace) {
            out.push(at(
                field("workspace"),
                format!(
                    "unknown workspace `{}` (not defined under workspaces)",
                    channel.workspace
                ),
            ));
            continue;
        }
        for (conversation, workspace) in &channel.conversations {
            if !cfg.workspaces.contains_key(workspace) {
                let mut path = field("conversations");
                path.push(Key(conversation.as_str()));
                out.push(at(
                    path,
                    format!("unknown workspace `{workspace}` (not defined under workspaces)"),
                ));
                continue;
            }
        }
        for (i, pattern) in channel.http.iter().enumerate() {
            if let Err(why) = crate::hosts::HostPattern::parse(pattern) {
                let mut p = field("http");
                p.push(Index(i));
                out.push(at(p, format!("http capability `{pattern}`: {why}")));
                continue;
            }
        }
    }
}

/// Every bound of a turn must allow something: zero would end every turn
/// before it starts.
fn agent_limits<'a>(workspace: &'a str, limits: &crate::config::AgentLimits, out: Out<'a, '_>) {
    let checks: [(&'static str, u64); 8] = [
        ("max_steps", u64::from(limits.max_steps)),
        ("max_tool_output_bytes", limits.max_tool_output_bytes as u64),
        ("tool_timeout_secs", limits.tool_timeout_secs),
        ("max_turn_tokens", limits.max_turn_tokens),
        ("history_tokens", limits.history_tokens),
        ("turn_timeout_secs", limits.turn_timeout_secs),
        ("max_turn_events", limits.max_turn_events),
        ("max_turn_stored_bytes", limits.max_turn_stored_bytes),
    ];
    for (key, value) in checks {
        if value == 0 {
            out.push(at(
                vec![Key("workspaces"), Key(workspace), Key("agent"), Key(key)],
                format!("agent.{key} must be at least 1"),
            ));
            continue;
        }
    }
}

fn skills<'a>(cfg: &'a Config, out: Out<'a, '_>) {
    for (name, skill) in &cfg.skills {
        let base = vec![Key("skills"), Key(name.as_str())];
        if !is_valid_name(name) {
            out.push(at_key(base, name_rule("skill", name)));
            continue;
        }
        if let Some(message) = reserved_source("skill", name) {
            out.push(at_key(base, message));
            continue;
        }
        allowed_workspaces(cfg, &skill.allowed_workspaces, &base, out);
    }
}

fn mcp_server<'a>(cfg: &'a Config, name: &'a str, server: &'a McpServer, out: Out<'a, '_>) {
    let base = vec![Key("mcp_servers"), Key(name)];
    let field = |leaf| {
        let mut p = base.clone();
        p.push(Key(leaf));
        p
    };
    if !is_valid_name(name) {
        out.push(at_key(base.clone(), name_rule("MCP server", name)));
    }
    if let Some(message) = reserved_source("MCP server", name) {
        out.push(at_key(base.clone(), message));
    }
    let kinds: Vec<&str> = [
        ("command", server.command.is_some()),
        ("url", server.url.is_some()),
        ("container", server.container.is_some()),
    ]
    .into_iter()
    .filter_map(|(kind, set)| set.then_some(kind))
    .collect();
    if kinds.len() != 1 {
        let found = if kinds.is_empty() {
            "none is set".to_owned()
        } else {
            format!("found `{}`", kinds.join("`, `"))
        };
        out.push(at_key(
            base.clone(),
            format!(
                "MCP server `{name}` needs exactly one of `command`, `url`, `container`; {found}"
            ),
        ));
    }
    if let Some(command) = &server.command
        && command
            .first()
            .is_none_or(|program| program.trim().is_empty())
    {
        out.push(at(
            field("command"),
            "command must name a program: [program, args...]".into(),
        ));
    }
    if let Some(url) = &server.url {
        match url::Url::parse(url) {
            Ok(parsed) if matches!(parsed.scheme(), "http" | "https") => {}
            Ok(_) => {
                out.push(at(field("url"), "url must be http:// or https://".into()));
            }
            Err(err) => out.push(at(field("url"), format!("invalid url: {err}"))),
        }
    }
    if let Some(container) = &server.container {
        mcp_container(name, container, out);
    }
    if !(1..=McpServer::MAX_CALL_TIMEOUT_SECS).contains(&server.call_timeout_secs) {
        out.push(at(
            field("call_timeout_secs"),
            format!(
                "call_timeout_secs must be between 1 and {}",
                McpServer::MAX_CALL_TIMEOUT_SECS
            ),
        ));
    }
    for key in server.env.keys() {
        if !is_env_name(key) {
            let mut p = field("env");
            p.push(Key(key));
            out.push(at_key(
                p,
                format!("invalid environment variable name `{key}`"),
            ));
            continue;
        }
    }
    allowed_workspaces(cfg, &server.allowed_workspaces, &base, out);
}

/// `mcp_servers.NAME.container`: an image, and volumes written
/// `HOST:CONTAINER[:ro|rw]`. Their sources are checked against the host
/// (exists, no symlink, nothing protected) when the server starts, so that
/// `config check` and `policy audit` need none of them.
fn mcp_container<'a>(name: &'a str, container: &'a McpContainer, out: Out<'a, '_>) {
    let base = || vec![Key("mcp_servers"), Key(name), Key("container")];
    if container.image.trim().is_empty() {
        let mut p = base();
        p.push(Key("image"));
        out.push(at(p, "image must not be empty".into()));
    }
    if container
        .command
        .first()
        .is_some_and(|c| c.trim().is_empty())
    {
        let mut p = base();
        p.push(Key("command"));
        out.push(at(
            p,
            "command must name a program: [program, args...]".into(),
        ));
    }
    let mut targets = BTreeSet::new();
    for (i, volume) in container.volumes.iter().enumerate() {
        let mut p = base();
        p.extend([Key("volumes"), Index(i)]);
        match parse_volume(volume) {
            Ok(parsed) => {
                if !targets.insert(normalized(&parsed.target)) {
                    out.push(at(
                        p,
                        format!("`{}` is mounted more than once", parsed.target),
                    ));
                }
            }
            Err(why) => out.push(at(p, why.0)),
        }
    }
}

/// One `mcp_servers.NAME.container.volumes` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Volume {
    /// As written (`~` allowed).
    pub source: std::path::PathBuf,
    pub target: String,
    pub read_only: bool,
}

/// Reads `HOST:CONTAINER[:ro|rw]` (default `ro`).
///
/// # Errors
/// What is wrong and how to write it.
pub fn parse_volume(volume: &str) -> Result<Volume, super::Invalid> {
    let parts: Vec<&str> = volume.split(':').collect();
    let (source, target, read_only) = match parts.as_slice() {
        [source, target] => (*source, *target, true),
        [source, target, "ro"] => (*source, *target, true),
        [source, target, "rw"] => (*source, *target, false),
        [_, _, mode] => {
            return Err(super::Invalid::from(format!(
                "volume `{volume}`: unknown mode `{mode}` (write :ro or :rw)"
            )));
        }
        _ => {
            return Err(super::Invalid::from(format!(
                "volume `{volume}` must be HOST_PATH:CONTAINER_PATH[:ro|rw], e.g. /srv/data.db:/data.db:ro"
            )));
        }
    };
    if !(source.starts_with('/') || source.starts_with('~')) {
        return Err(super::Invalid::from(format!(
            "volume `{volume}`: the host path must be absolute or start with ~ (pincer mounts host paths only, not named volumes)"
        )));
    }
    if let Some(problem) = mcp_target_problem(target) {
        return Err(super::Invalid::from(format!(
            "volume `{volume}`: {problem}"
        )));
    }
    Ok(Volume {
        source: source.into(),
        target: target.to_owned(),
        read_only,
    })
}

/// Problem with a container path of an MCP server's volume, if any.
fn mcp_target_problem(target: &str) -> Option<&'static str> {
    let Some(rest) = target.strip_prefix('/') else {
        return Some("the container path must be absolute");
    };
    let parts: Vec<&str> = rest.split('/').filter(|p| !p.is_empty()).collect();
    if parts.iter().any(|p| *p == "." || *p == "..") {
        return Some("the container path must not contain `.` or `..`");
    }
    match parts.first() {
        None => Some("cannot mount over `/`"),
        Some(&("proc" | "sys" | "dev")) => {
            Some("cannot mount over or inside `/proc`, `/sys` or `/dev`")
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for ok in ["default", "a", "0", "my-work_space", &"a".repeat(63)] {
            assert!(is_valid_name(ok), "{ok}");
        }
        for bad in [
            "",
            "Default",
            "-a",
            "_a",
            "a b",
            "a.b",
            "é",
            &"a".repeat(64),
        ] {
            assert!(!is_valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn mount_targets() {
        assert_eq!(mount_target_problem("/notes"), None);
        assert_eq!(mount_target_problem("/workspace/notes"), None);
        assert!(mount_target_problem("notes").is_some());
        assert!(mount_target_problem("/").is_some());
        assert!(mount_target_problem("//").is_some());
        assert!(mount_target_problem("/workspace/").is_some());
        assert!(mount_target_problem("/a/../workspace").is_some());
        assert_eq!(normalized("/a//b/"), "/a/b");
    }
}
