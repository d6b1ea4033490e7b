//! `pincer channel test NAME`: loads a channel's plugin with its settings
//! and lets it check them against the platform (Slack: the tokens against
//! `auth.test` and `apps.connections.open`, the scopes the app has).

use std::path::Path;
use std::sync::Arc;

use super::{Context, ExitStatus};
use crate::channels::LoadedChannel;

pub async fn test(config_flag: Option<&Path>, name: &str) -> anyhow::Result<()> {
    let ctx = Context::load(config_flag)?;
    let Some(channel) = ctx.config.channels.get(name) else {
        let known: Vec<&str> = ctx.config.channels.keys().map(String::as_str).collect();
        let hint = crate::suggest::closest(name, known.iter().copied())
            .map(|best| format!(", did you mean `{best}`?"))
            .unwrap_or_default();
        anyhow::bail!(
            "no channel named `{name}`{hint} (configured: {})",
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        );
    };
    let plugins = Arc::new(ctx.plugin_host()?);
    let loaded = LoadedChannel::load(name, channel, &plugins, &ctx.catalog(), ctx.limits()).await?;
    println!(
        "channel {name}: plugin {} {} (WIT {}), workspace {}",
        loaded.plugin.name(),
        loaded.plugin.manifest.plugin.version,
        loaded.plugin.manifest.plugin.wit,
        channel.workspace
    );
    let items = plugins.channel_check(&loaded.plugin).await?;
    let mut failed = 0;
    for item in &items {
        let mark = if item.ok { "ok  " } else { "FAIL" };
        failed += usize::from(!item.ok);
        println!("  {mark} {:<16} {}", item.name, item.detail);
    }
    if channel.allowed_senders.is_empty() {
        println!(
            "  note {:<16} empty: every message is refused; add user ids (or \"*\") to channels.{name}.allowed_senders",
            "allowed_senders"
        );
    }
    if failed > 0 {
        eprintln!("pincer: {failed} check(s) of channel `{name}` failed");
        return Err(ExitStatus(1).into());
    }
    Ok(())
}
