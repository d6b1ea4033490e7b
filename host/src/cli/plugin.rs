use std::path::Path;

use anyhow::Context as _;
use serde_json::json;

use super::{Context, PluginCommand};
use crate::plugins::{LoadedPlugin, PluginHost, PluginPackage, PluginSource, catalog, scaffold};

pub async fn run(config_flag: Option<&Path>, command: PluginCommand) -> anyhow::Result<()> {
    let ctx = Context::load(config_flag)?;
    match command {
        PluginCommand::List(flag) => list(&ctx, flag.json),
        PluginCommand::Inspect { target, json } => inspect(&ctx, &target, json.json).await,
        PluginCommand::Install { path, replace } => install(&ctx, &path, replace),
        PluginCommand::New { kind, name, dir } => {
            let parent = dir.unwrap_or_else(|| ".".into());
            let created = scaffold::create(&parent, &kind, &name)?;
            println!("created {} plugin `{name}` in {}", kind, created.display());
            println!(
                "build it:   cd {} && cargo build --release --target wasm32-wasip2",
                created.display()
            );
            println!("inspect it: pincer plugin inspect {}", created.display());
            Ok(())
        }
    }
}

fn list(ctx: &Context, json: bool) -> anyhow::Result<()> {
    let catalog = ctx.all_plugins();
    let rows: Vec<serde_json::Value> = catalog
        .plugins
        .iter()
        .map(|(name, package)| {
            let manifest = crate::plugins::Manifest::parse(&package.manifest_text, name);
            match manifest {
                Ok(m) => json!({
                    "name": name,
                    "kind": m.kind().as_str(),
                    "version": m.plugin.version.to_string(),
                    "wit": m.plugin.wit.to_string(),
                    "source": package.source.to_string(),
                    "description": m.plugin.description,
                }),
                Err(e) => json!({"name": name, "error": e.to_string(), "source": package.source.to_string()}),
            }
        })
        .collect();
    let problems: Vec<String> = catalog.problems.iter().map(ToString::to_string).collect();
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({"plugins": rows, "problems": problems}))?
        );
        return Ok(());
    }
    println!(
        "{:<20} {:<9} {:<8} {:<6} SOURCE",
        "NAME", "KIND", "VERSION", "WIT"
    );
    for row in &rows {
        let s = |k: &str| row[k].as_str().unwrap_or("?").to_string();
        match row.get("error") {
            Some(e) => println!("{:<20} (invalid: {})", s("name"), e.as_str().unwrap_or("?")),
            None => println!(
                "{:<20} {:<9} {:<8} {:<6} {}",
                s("name"),
                s("kind"),
                s("version"),
                s("wit"),
                s("source")
            ),
        }
    }
    for problem in problems {
        println!("problem: {problem}");
    }
    Ok(())
}

/// A path that exists is read as a plugin folder; anything else is a name.
fn resolve(ctx: &Context, target: &str) -> anyhow::Result<PluginPackage> {
    let path = Path::new(target);
    if path.exists() {
        return Ok(PluginPackage::read(
            path,
            PluginSource::Dir(path.to_path_buf()),
        )?);
    }
    Ok(ctx.catalog().get(target)?.clone())
}

async fn inspect(ctx: &Context, target: &str, json: bool) -> anyhow::Result<()> {
    let host = ctx.plugin_host()?;
    let package = resolve(ctx, target)?;
    let plugin = host.load(&package, None, ctx.limits())?;
    let report = describe(&host, &plugin).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report);
    }
    Ok(())
}

async fn describe(host: &PluginHost, plugin: &LoadedPlugin) -> anyhow::Result<serde_json::Value> {
    let m = &plugin.manifest;
    let mut report = json!({
        "name": plugin.name(),
        "kind": plugin.kind().as_str(),
        "world": format!("pincer:plugin/{}@{}", plugin.kind().world(), m.plugin.wit),
        "wit": m.plugin.wit.to_string(),
        "version": m.plugin.version.to_string(),
        "description": m.plugin.description,
        "sha256": plugin.sha256,
        "size_bytes": plugin.size_bytes,
        "source": plugin.source.to_string(),
        "compiled": format!("{:?}", plugin.compiled),
        "capabilities": {
            "http": m.capabilities.http,
            "kv": m.capabilities.kv,
            "data_dir": m.capabilities.data_dir,
        },
        "config": m.config.iter().map(|(k, v)| (k.clone(), json!({
            "type": format!("{:?}", v.ty).to_lowercase(),
            "required": v.required,
            "secret": v.secret,
            "description": v.description,
        }))).collect::<serde_json::Map<_, _>>(),
        "imports": plugin.imports,
    });
    if plugin.kind() == crate::plugins::PluginKind::Skill {
        let tools = host.skill_tools(plugin).await?;
        report["tools"] = tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description}))
            .collect();
    }
    Ok(report)
}

fn print_report(r: &serde_json::Value) {
    let s = |k: &str| r[k].as_str().unwrap_or_default().to_string();
    println!("{} {} ({})", s("name"), s("version"), s("description"));
    println!("  kind:     {}", s("kind"));
    println!("  world:    {}", s("world"));
    println!("  sha256:   {}", s("sha256"));
    println!("  size:     {} bytes", r["size_bytes"]);
    println!("  source:   {}", s("source"));
    let caps = &r["capabilities"];
    let http: Vec<&str> = caps["http"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    println!("  capabilities:");
    println!(
        "    http:     {}",
        if http.is_empty() {
            "none".to_string()
        } else {
            http.join(", ")
        }
    );
    println!("    kv:       {}", caps["kv"]);
    println!("    data_dir: {}", caps["data_dir"]);
    if let Some(config) = r["config"].as_object().filter(|c| !c.is_empty()) {
        println!("  config:");
        for (key, spec) in config {
            println!(
                "    {key}: {}{}{}",
                spec["type"].as_str().unwrap_or("?"),
                if spec["required"] == true {
                    ", required"
                } else {
                    ""
                },
                if spec["secret"] == true {
                    ", secret"
                } else {
                    ""
                },
            );
        }
    }
    if let Some(tools) = r["tools"].as_array() {
        println!("  tools:");
        for tool in tools {
            println!(
                "    {}: {}",
                tool["name"].as_str().unwrap_or("?"),
                tool["description"].as_str().unwrap_or("")
            );
        }
    }
}

fn install(ctx: &Context, path: &Path, replace: bool) -> anyhow::Result<()> {
    let host = ctx.plugin_host()?;
    let package = PluginPackage::read(path, PluginSource::Dir(path.to_path_buf()))?;
    let plugin = host.load(&package, None, ctx.limits())?;
    let name = plugin.name().to_string();
    // What has this name now: a built-in and/or an installed plugin.
    let builtin = PluginPackage::builtin()
        .into_iter()
        .find(|p| p.label() == name);
    let installed_dir = ctx.home.join("plugins").join(&name);
    let installed = installed_dir
        .join(catalog::MANIFEST_FILE)
        .is_file()
        .then(|| {
            PluginPackage::read(
                &installed_dir,
                PluginSource::Installed(installed_dir.clone()),
            )
        })
        .and_then(Result::ok);
    let current = installed.as_ref().or(builtin.as_ref());
    let replaced = current
        .filter(|c| c.sha256() != plugin.sha256)
        .map(|c| (c.source.clone(), c.sha256()));
    if let Some((source, old)) = &replaced
        && !replace
    {
        anyhow::bail!(
            "a {source} plugin is named `{name}` (sha256 {old}); installing this component (sha256 {}) would replace it and hand it that plugin's kv and /data state in every workspace. Rename the plugin (`name` in its plugin.toml), or pass --replace to replace it deliberately",
            plugin.sha256
        );
    }
    let replaces_builtin = builtin.as_ref().map(PluginPackage::sha256);
    let target = catalog::install(
        &ctx.home,
        &package,
        &plugin.manifest,
        replaces_builtin.as_deref(),
    )
    .with_context(|| format!("installing into {}", ctx.home.join("plugins").display()))?;
    let caps = &plugin.manifest.capabilities;
    println!(
        "installed {} {} ({}) into {}",
        plugin.name(),
        plugin.manifest.plugin.version,
        plugin.kind(),
        target.display()
    );
    println!("  sha256 pinned: {}", plugin.sha256);
    if let Some((source, old)) = &replaced {
        let owners = host.kv().owners_of(&name).unwrap_or_default();
        let detail = format!(
            "{name}: the {source} component (sha256 {old}) replaced by sha256 {} from {}",
            plugin.sha256,
            path.display()
        );
        ctx.audit_log()?
            .record("cli", None, "plugin.replaced", &detail);
        println!("  replaced: the {source} `{name}` (sha256 {old}); this was audited");
        println!(
            "  state: this component now uses the kv entries and /data folders of `{name}` in every workspace{}",
            if owners.is_empty() {
                String::new()
            } else {
                format!(" (kv entries kept for: {})", owners.join(", "))
            }
        );
    }
    println!("  requests:");
    if caps.http.is_empty() && !caps.kv && !caps.data_dir {
        println!("    nothing beyond logging, config and clock");
    }
    if !caps.http.is_empty() {
        println!("    http to: {}", caps.http.join(", "));
    }
    if caps.kv {
        println!("    kv: a private key-value store per workspace");
    }
    if caps.data_dir {
        println!(
            "    data_dir: a private folder per workspace at {} (at most {} MiB each)",
            ctx.home
                .join("plugin-data")
                .join("workspace.NAME")
                .join(plugin.name())
                .display(),
            ctx.config.plugins.limits.data_quota_mb
        );
    }
    Ok(())
}
