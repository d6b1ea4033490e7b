use std::path::Path;

use anyhow::{Context as _, bail};

use super::{Context, SkillCommand};

pub async fn run(config_flag: Option<&Path>, command: SkillCommand) -> anyhow::Result<()> {
    let ctx = Context::load(config_flag)?;
    let host = ctx.plugin_host()?;
    match command {
        SkillCommand::Invoke {
            plugin,
            tool,
            args,
            workspace,
        } => {
            let parsed: serde_json::Value = serde_json::from_str(&args)
                .with_context(|| format!("--args is not valid JSON: {args}"))?;
            if !parsed.is_object() {
                bail!("--args must be a JSON object, e.g. '{{\"expression\": \"1+1\"}}'");
            }
            let workspace = ctx.plugin_workspace(workspace.as_deref())?;
            let loaded = ctx.load_plugin_for(&host, &plugin, &workspace)?;
            match host.skill_invoke(&loaded, &tool, &args).await? {
                Ok(output) => {
                    let value: serde_json::Value = serde_json::from_str(&output.json)
                        .with_context(|| {
                            format!("skill {plugin} returned invalid JSON: {}", output.json)
                        })?;
                    println!("{}", serde_json::to_string_pretty(&value)?);
                    Ok(())
                }
                Err(e) => bail!("{plugin}.{tool}: {}", describe(&e)),
            }
        }
        SkillCommand::Tools { plugin, json } => {
            let loaded = ctx.load_plugin(&host, &plugin)?;
            let tools = host.skill_tools(&loaded).await?;
            if json.json {
                let tools: Vec<serde_json::Value> = tools
                    .iter()
                    .map(|t| {
                        serde_json::json!({
                            "name": t.name,
                            "description": t.description,
                            "input_schema": serde_json::from_str::<serde_json::Value>(&t.input_schema)
                                .unwrap_or(serde_json::Value::String(t.input_schema.clone())),
                        })
                    })
                    .collect();
                println!("{}", serde_json::to_string_pretty(&tools)?);
            } else {
                for t in tools {
                    println!("{}: {}\n  args: {}", t.name, t.description, t.input_schema);
                }
            }
            Ok(())
        }
    }
}

pub use crate::plugins::describe_tool_error as describe;
