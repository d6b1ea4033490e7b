use std::path::Path;

use crate::config::{self, Config};

pub fn check(config_flag: Option<&Path>) -> anyhow::Result<()> {
    let Some(path) = config::resolve_config_path(config_flag) else {
        println!("no configuration file found; using built-in defaults (they are valid)");
        println!("searched: --config, $PINCER_CONFIG, ./pincer.yaml, $PINCER_HOME/pincer.yaml");
        return Ok(());
    };
    let config = Config::load(&path)?;
    println!(
        "{}: ok ({} workspace{}, {} model alias{}, {} channel{}, {} MCP server{})",
        path.display(),
        config.workspaces.len(),
        plural(config.workspaces.len()),
        config.gateway.model_list.len(),
        if config.gateway.model_list.len() == 1 {
            ""
        } else {
            "es"
        },
        config.channels.len(),
        plural(config.channels.len()),
        config.mcp_servers.len(),
        plural(config.mcp_servers.len()),
    );
    Ok(())
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}
