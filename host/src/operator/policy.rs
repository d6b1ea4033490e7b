//! `pincer policy audit`'s report of one workspace, for the CLI and the web
//! console.

use std::collections::BTreeMap;

use anyhow::bail;

use crate::daemon::context::Context;
use crate::plugins::{Manifest, plugin_http_reach};
use crate::policy::{self, PolicyCatalog, ReportInput};

/// What `policy audit NAME --json` prints (the web console shows the same
/// value).
pub fn policy_report(ctx: &Context, name: &str) -> anyhow::Result<policy::PolicyReport> {
    let Some(workspace) = ctx.config.workspaces.get(name) else {
        let known: Vec<&str> = ctx.config.workspaces.keys().map(String::as_str).collect();
        bail!(
            "no workspace named `{name}` (configured: {})",
            known.join(", ")
        );
    };
    let policy = PolicyCatalog::load(&ctx.config.containers.policy_dirs)?
        .effective(name, &workspace.policies)?;
    // Skills that may make outbound HTTP requests are a way out: their HTTP
    // reach in this workspace (manifest ∩ workspaces.NAME.plugin_http), from
    // the same computation the plugin host enforces.
    let catalog = ctx.catalog();
    let plugin_http: BTreeMap<String, Vec<String>> = workspace
        .skills
        .iter()
        .filter_map(|skill| {
            let plugin = catalog.plugins.get(skill)?;
            let manifest = Manifest::parse(&plugin.manifest_text, skill).ok()?;
            let hosts = plugin_http_reach(&ctx.config, name, skill, &manifest).effective();
            (!hosts.is_empty()).then(|| (skill.clone(), hosts))
        })
        .collect();
    let workspace_dir = ctx.config.workspace_dir(name);
    // The workspace's MCP servers that run in their own container: the
    // policy `containers::mcp` starts them under, and their volumes.
    let catalog_policy = PolicyCatalog::load(&ctx.config.containers.policy_dirs)?;
    let mcp_containers: Vec<_> = workspace
        .mcp_servers
        .iter()
        .filter_map(|server| {
            let container = ctx.config.mcp_servers.get(server)?.container.as_ref()?;
            let effective = crate::containers::server_policy(&catalog_policy, server, container)
                .map_err(|e| e.to_string());
            let volumes: Vec<(String, String, bool)> =
                crate::containers::volumes_as_written(container)
                    .into_iter()
                    .map(|m| (m.source.display().to_string(), m.target, m.read_only))
                    .collect();
            Some(policy::mcp_container_summary(
                server,
                &container.image,
                container
                    .policy_entries()
                    .iter()
                    .map(ToString::to_string)
                    .collect(),
                effective.as_ref().map_err(Clone::clone),
                &volumes,
            ))
        })
        .collect();
    let mut report = policy::report(
        &policy,
        &ReportInput {
            config: &ctx.config,
            workspace,
            workspace_dir: &workspace_dir,
            run_dir: &ctx.home.join("run").join(name),
            runner_binary: &crate::containers::runner_path(&ctx.home),
            plugin_http: &plugin_http,
            mcp_containers: &mcp_containers,
            approval_rules: &ctx.approvals()?.store().rules(name)?,
        },
    );
    report.denials = ctx.audit_log()?.for_workspace(name, 50)?;
    Ok(report)
}
