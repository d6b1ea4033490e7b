use std::path::Path;

use anyhow::Context as _;
use serde_json::json;

use super::{Context, PluginCommand, PluginKeyCommand};
use crate::plugins::{
    self, Escalation, LoadedPlugin, PluginHost, PluginPackage, PluginSource, PublisherKey,
    Signature,
};

pub async fn run(config_flag: Option<&Path>, command: PluginCommand) -> anyhow::Result<()> {
    let ctx = Context::load(config_flag)?;
    match command {
        PluginCommand::List(flag) => list(&ctx, flag.json),
        PluginCommand::Inspect { target, json } => inspect(&ctx, &target, json.json).await,
        PluginCommand::Install {
            target,
            replace,
            yes,
            allow_unsigned,
            allow_untrusted,
            allow_downgrade,
            insecure,
        } => {
            let path = Path::new(&target);
            let asked = Asked {
                replace,
                yes,
                allow_downgrade,
            };
            if path.exists() {
                let package = PluginPackage::read(path, PluginSource::Dir(path.to_path_buf()))?;
                install(&ctx, package, &path.display().to_string(), asked, None)
            } else if target.contains('/') {
                let flags = RegistryFlags {
                    yes,
                    allow_unsigned,
                    allow_untrusted,
                    allow_downgrade,
                    insecure,
                };
                let pulled = plugins::pull(&target, &trusted(&ctx), flags.insecure).await?;
                install_from_registry(&ctx, &target, pulled, replace, flags, None).await
            } else {
                anyhow::bail!(
                    "`{target}` is neither a plugin folder nor a registry reference (e.g. localhost:5000/acme/{target}:1.0.0)"
                )
            }
        }
        PluginCommand::Update {
            name,
            to,
            yes,
            allow_unsigned,
            allow_untrusted,
            allow_downgrade,
            insecure,
        } => {
            let flags = RegistryFlags {
                yes,
                allow_unsigned,
                allow_untrusted,
                allow_downgrade,
                insecure,
            };
            update(&ctx, &name, to.as_deref(), flags).await
        }
        PluginCommand::Build { dir, out, json } => {
            let dir = dir.unwrap_or_else(|| ".".into());
            let out = out.unwrap_or_else(|| dir.join("dist"));
            build(&ctx, &dir, &out, json.json)
        }
        PluginCommand::Publish {
            dir,
            reference,
            key,
            insecure,
        } => publish(&ctx, &dir, &reference, key.as_deref(), insecure).await,
        PluginCommand::Key(PluginKeyCommand::Generate { out }) => {
            let path = out.unwrap_or_else(|| ctx.home.join("keys").join("publisher.key"));
            let key = PublisherKey::generate(&path)?;
            println!(
                "wrote the publisher key {} (keep it private) and {}",
                path.display(),
                path.with_extension("pub").display()
            );
            println!("public key: {}", key.public());
            println!(
                "to trust it, add to pincer.yaml:\n  plugins:\n    trusted_publishers:\n      - {{name: YOUR-NAME, key: \"{}\"}}",
                key.public()
            );
            Ok(())
        }
        PluginCommand::New {
            kind,
            name,
            dir,
            lang,
        } => {
            let parent = dir.unwrap_or_else(|| ".".into());
            let created = plugins::scaffold_plugin(
                &parent,
                &kind,
                &name,
                plugins::ScaffoldLang::parse(&lang)?,
            )?;
            println!(
                "created {kind} plugin `{name}` ({lang}) in {}",
                created.display()
            );
            println!("build it:   pincer plugin build {}", created.display());
            println!(
                "install it: pincer plugin install {}",
                created.join("dist").display()
            );
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
            let origin = match &package.source {
                PluginSource::Installed(dir) => plugins::package_origin(dir),
                _ => None,
            };
            let source = match &origin {
                Some(o) => format!(
                    "registry {} ({})",
                    o["pinned"].as_str().unwrap_or("?"),
                    match o["publisher"].as_str() {
                        Some(publisher) => format!("signed by {publisher}"),
                        None => o["signature"].as_str().unwrap_or("?").to_owned(),
                    }
                ),
                None => package.source.to_string(),
            };
            match manifest {
                Ok(m) => json!({
                    "name": name,
                    "kind": m.kind().as_str(),
                    "version": m.plugin.version.to_string(),
                    "wit": m.plugin.wit.to_string(),
                    "source": source,
                    "sha256": package.sha256(),
                    "origin": origin,
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

/// The plugin an install replaces, and what the new one may do that it
/// may not ([`plugins::compare_replacement`]).
struct Replacing {
    name: String,
    version: semver::Version,
    escalations: Vec<Escalation>,
}

/// Shows a loaded plugin and asks before it is installed; with the plugin
/// it replaces, when it replaces one.
type Confirm<'a> = dyn Fn(&LoadedPlugin, Option<&Replacing>) -> anyhow::Result<()> + 'a;

/// What the operator said about replacing and asking.
#[derive(Debug, Clone, Copy)]
struct Asked {
    replace: bool,
    yes: bool,
    allow_downgrade: bool,
}

/// Asks before `replacing` is replaced by a plugin that asks for more
/// (each reason listed), and refuses a rollback without
/// `--allow-downgrade`. `always`: ask even when it asks for nothing more
/// (a registry install shows the package and asks every time).
fn confirm_replacement(
    replacing: Option<&Replacing>,
    asked: Asked,
    always: bool,
) -> anyhow::Result<()> {
    if replacing.is_none() && !always {
        return Ok(());
    }
    let unchanged = replacing.map_or("nothing was installed".to_owned(), |r| {
        format!(
            "nothing was installed; the installed {} {} is unchanged",
            r.name, r.version
        )
    });
    if let Some(r) = replacing {
        let reasons: Vec<String> = r.escalations.iter().map(ToString::to_string).collect();
        if r.escalations.iter().any(Escalation::needs_allow_downgrade) && !asked.allow_downgrade {
            anyhow::bail!(
                "refused: {}. {unchanged}. Pass --allow-downgrade to roll back deliberately (it is still asked about, or needs --yes)",
                reasons.join("; ")
            );
        }
        if reasons.is_empty() {
            println!("  nothing more than the installed {} asks for", r.version);
            if !always {
                return Ok(());
            }
        } else {
            println!("  MORE than the installed {} asks for:", r.version);
            for line in &reasons {
                println!("    {line}");
            }
        }
    }
    if asked.yes {
        return Ok(());
    }
    use std::io::IsTerminal as _;
    if !std::io::stdin().is_terminal() {
        let more = replacing
            .filter(|r| !r.escalations.is_empty())
            .map(|r| {
                format!(
                    " it asks for more than the installed {} {}: {};",
                    r.name,
                    r.version,
                    r.escalations
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("; ")
                )
            })
            .unwrap_or_default();
        anyhow::bail!(
            "not installed:{more} pass --yes to install it without asking (stdin is not a terminal); {unchanged}"
        );
    }
    print!("install it? [y/N] ");
    use std::io::Write as _;
    std::io::stdout().flush()?;
    let mut answer = String::new();
    std::io::stdin().read_line(&mut answer)?;
    if !matches!(answer.trim(), "y" | "Y" | "yes") {
        anyhow::bail!("not installed; {unchanged}");
    }
    Ok(())
}

/// Installs a checked package; `from` names where it came from in messages
/// and the audit log; `origin` is recorded beside it (registry installs),
/// and its confirmation replaces the question a folder install asks when
/// it replaces a plugin that asks for less.
fn install(
    ctx: &Context,
    package: PluginPackage,
    from: &str,
    asked: Asked,
    origin: Option<(&serde_json::Value, &Confirm<'_>)>,
) -> anyhow::Result<()> {
    let host = ctx.plugin_host()?;
    let plugin = host.load(&package, None, ctx.limits())?;
    let name = plugin.name().to_string();
    let reads = plugins::readable_secret_keys(&plugin.manifest);
    if !reads.is_empty() {
        match ctx.config.plugins.legacy_secrets {
            crate::config::LegacySecrets::Refuse => {
                return Err(crate::plugins::PluginError::LegacySecrets {
                    plugin: name,
                    wit: plugin.manifest.plugin.wit.to_string(),
                    keys: reads,
                }
                .into());
            }
            crate::config::LegacySecrets::Warn => eprintln!(
                "warning: {name} is built against WIT {}: it will read its secret config keys {} through `config` (plugins.legacy_secrets: warn)",
                plugin.manifest.plugin.wit,
                reads.join(", ")
            ),
        }
    }
    // What has this name now: a built-in and/or an installed plugin.
    let builtin = PluginPackage::builtin()
        .into_iter()
        .find(|p| p.label() == name);
    let installed_dir = ctx.home.join("plugins").join(&name);
    let installed = installed_dir
        .join(plugins::MANIFEST_FILE)
        .is_file()
        .then(|| {
            PluginPackage::read(
                &installed_dir,
                PluginSource::Installed(installed_dir.clone()),
            )
        })
        .and_then(Result::ok);
    let current = installed.as_ref().or(builtin.as_ref());
    // The component or the manifest differs: a manifest alone can ask for
    // more (a secret made plain, a new host), so it counts as a replacement.
    let replaced = current
        .filter(|c| c.sha256() != plugin.sha256 || c.manifest_text != package.manifest_text)
        .map(|c| (c.source.clone(), c.sha256()));
    if let Some((source, old)) = &replaced
        && !asked.replace
    {
        anyhow::bail!(
            "a {source} plugin is named `{name}` (sha256 {old}); installing this component (sha256 {}) would replace it and hand it that plugin's kv and /data state in every workspace. Rename the plugin (`name` in its plugin.toml), or pass --replace to replace it deliberately",
            plugin.sha256
        );
    }
    let replacing = match current.filter(|_| replaced.is_some()) {
        Some(c) => {
            let old = crate::plugins::Manifest::parse(&c.manifest_text, &name)?;
            Some(Replacing {
                name: name.clone(),
                escalations: plugins::compare_replacement(
                    &old,
                    &plugin.manifest,
                    (ctx.config.plugins.limits.memory_mb as usize) << 20,
                ),
                version: old.plugin.version,
            })
        }
        None => None,
    };
    match &origin {
        Some((_, confirm)) => confirm(&plugin, replacing.as_ref())?,
        None => {
            if replacing.is_some() {
                confirm_replacement(replacing.as_ref(), asked, false)?;
            }
        }
    }
    let origin = origin.map(|(o, _)| o);
    let replaces_builtin = builtin.as_ref().map(PluginPackage::sha256);
    let origin_text = origin.map(|o| format!("{o:#}\n"));
    let target = plugins::install_package(
        &ctx.home,
        &package,
        &plugin.manifest,
        replaces_builtin.as_deref(),
        origin_text.as_deref(),
    )
    .with_context(|| format!("installing into {}", ctx.home.join("plugins").display()))?;
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
            "{name}: the {source} component (sha256 {old}) replaced by sha256 {} from {from}",
            plugin.sha256,
        );
        ctx.audit_log()?.record(
            crate::audit::Actor::Cli(None),
            None,
            crate::audit::Action::PluginReplaced,
            &detail,
        );
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
    for line in requests(ctx, &plugin) {
        println!("    {line}");
    }
    Ok(())
}

/// What a plugin's manifest asks for, one line each.
fn requests(ctx: &Context, plugin: &LoadedPlugin) -> Vec<String> {
    let caps = &plugin.manifest.capabilities;
    let mut lines = Vec::new();
    let asks_memory = plugin.manifest.limits.memory_mb.is_some();
    if caps.http.is_empty() && !caps.kv && !caps.data_dir && !asks_memory {
        lines.push("nothing beyond logging, config and clock".to_owned());
    }
    if asks_memory {
        lines.push(format!(
            "memory: up to {} MiB per call (plugins.limits.memory_mb is {})",
            plugin.memory_limit_bytes() >> 20,
            ctx.config.plugins.limits.memory_mb
        ));
    }
    if !caps.http.is_empty() {
        lines.push(format!("http to: {}", caps.http.join(", ")));
    }
    if caps.kv {
        lines.push("kv: a private key-value store per workspace".to_owned());
    }
    if caps.data_dir {
        lines.push(format!(
            "data_dir: a private folder per workspace at {} (at most {} MiB each)",
            ctx.home
                .join("plugin-data")
                .join("workspace.NAME")
                .join(plugin.name())
                .display(),
            ctx.config.plugins.limits.data_quota_mb
        ));
    }
    let secrets = plugin.manifest.secret_keys();
    let keys: Vec<String> = plugin
        .manifest
        .config
        .keys()
        .map(|k| {
            if secrets.contains(k) {
                format!("{k} (secret)")
            } else {
                k.clone()
            }
        })
        .collect();
    if !keys.is_empty() {
        lines.push(format!("config keys: {}", keys.join(", ")));
    }
    let reads: Vec<&str> = plugin.manifest.read_tools().collect();
    if !reads.is_empty() {
        let trusted = ctx
            .config
            .skills
            .get(plugin.name())
            .is_some_and(|s| s.trust_effects);
        lines.push(format!(
            "says these tools only read: {} ({})",
            reads.join(", "),
            if trusted {
                "believed: skills.NAME.trust_effects is true, so they run unasked in tier approval"
            } else {
                "not believed unless skills.NAME.trust_effects: true; until then they are asked like any write"
            }
        ));
    }
    lines
}

/// Flags of `pincer plugin install REF`.
struct RegistryFlags {
    yes: bool,
    allow_unsigned: bool,
    allow_untrusted: bool,
    allow_downgrade: bool,
    insecure: bool,
}

fn trusted(ctx: &Context) -> Vec<plugins::Trusted> {
    ctx.config
        .plugins
        .trusted_publishers
        .iter()
        .map(|p| plugins::Trusted {
            name: p.name.clone(),
            key: p.key.clone(),
            plugins: p.plugins.clone(),
        })
        .collect()
}

/// `pincer plugin update NAME`: pull the reference NAME was installed from
/// (or `to`) again; a new digest is installed in its place, asking again
/// when it requests more than the installed version.
async fn update(
    ctx: &Context,
    name: &str,
    to: Option<&str>,
    flags: RegistryFlags,
) -> anyhow::Result<()> {
    let dir = ctx.home.join("plugins").join(name);
    if !dir.join(plugins::MANIFEST_FILE).is_file() {
        anyhow::bail!(
            "`{name}` is not installed in {} (`pincer plugin list` shows what is)",
            ctx.home.join("plugins").display()
        );
    }
    let origin = plugins::package_origin(&dir);
    let reference = match (to, &origin) {
        (Some(to), _) => to.to_string(),
        (None, Some(origin)) => origin["reference"]
            .as_str()
            .context("origin.json names no reference")?
            .to_string(),
        (None, None) => anyhow::bail!(
            "`{name}` was installed from a folder, not a registry: install the new version with `pincer plugin install DIR --replace`, or name a registry reference with --to"
        ),
    };
    let current = ctx.plugin_host()?.load(
        &PluginPackage::read(&dir, PluginSource::Installed(dir.clone()))?,
        None,
        ctx.limits(),
    )?;
    let pulled = plugins::pull(&reference, &trusted(ctx), flags.insecure).await?;
    if origin.as_ref().and_then(|o| o["digest"].as_str()) == Some(pulled.digest.as_str()) {
        println!(
            "{name} is up to date ({reference} is still {})",
            pulled.digest
        );
        return Ok(());
    }
    install_from_registry(ctx, &reference, pulled, true, flags, Some(&current)).await
}

/// `pincer plugin install REF`: pull and check everything, show what the
/// plugin can do and who signed it, ask, then install and pin the digest.
/// With `updating`, the installed plugin it replaces: the question is asked
/// only when the new version requests more ([`plugins::compare_replacement`]), and a
/// rollback is refused without `--allow-downgrade`.
async fn install_from_registry(
    ctx: &Context,
    reference: &str,
    pulled: plugins::Pulled,
    replace: bool,
    flags: RegistryFlags,
    updating: Option<&LoadedPlugin>,
) -> anyhow::Result<()> {
    let audit = ctx.audit_log()?;
    let (publisher, key) = match &pulled.signature {
        Signature::Trusted { publisher, key } => (Some(publisher.clone()), Some(key.clone())),
        Signature::Untrusted { key } => {
            if !flags.allow_untrusted {
                anyhow::bail!(
                    "{reference} is signed by {key}, which plugins.trusted_publishers does not list; nothing was installed. If you trust it, add `{{name: NAME, key: \"{key}\"}}` to plugins.trusted_publishers, or pass --allow-untrusted (audited)"
                );
            }
            audit.record(
                crate::audit::Actor::Cli(None),
                None,
                crate::audit::Action::PluginInstallUntrusted,
                &format!("{} signed by {key}", pulled.pinned),
            );
            (None, Some(key.clone()))
        }
        Signature::Unsigned => {
            if !flags.allow_unsigned {
                anyhow::bail!(
                    "{reference} is not signed (no {}.sig beside it); nothing was installed. Ask its publisher to sign it (`pincer plugin publish --key`), or pass --allow-unsigned (audited)",
                    pulled.digest.replace(':', "-")
                );
            }
            audit.record(
                crate::audit::Actor::Cli(None),
                None,
                crate::audit::Action::PluginInstallUnsigned,
                &pulled.pinned,
            );
            (None, None)
        }
        Signature::OutOfScope {
            publisher,
            key,
            plugin,
            may_sign,
        } => {
            if !flags.allow_untrusted {
                anyhow::bail!(
                    "{reference} holds `{plugin}`, signed by {publisher} ({key}), whose plugins.trusted_publishers entry may sign only {}: the key is not trusted for `{plugin}`, and nothing was installed. Add `{plugin}` (or a pattern matching it) to that entry's `plugins`, or pass --allow-untrusted (audited)",
                    may_sign.join(", ")
                );
            }
            audit.record(
                crate::audit::Actor::Cli(None),
                None,
                crate::audit::Action::PluginInstallUntrusted,
                &format!(
                    "{} signed by {key} ({publisher}, not trusted for `{plugin}`)",
                    pulled.pinned
                ),
            );
            (None, Some(key.clone()))
        }
    };
    let signature = match &pulled.signature {
        Signature::Trusted { .. } => "trusted",
        Signature::Untrusted { .. } | Signature::OutOfScope { .. } => "untrusted",
        Signature::Unsigned => "unsigned",
    };
    let origin = json!({
        "reference": reference,
        "pinned": pulled.pinned,
        "digest": pulled.digest,
        "signature": signature,
        "publisher": publisher,
        "key": key,
        "installed_ms": crate::db::now_ms(),
    });
    let staging = tempfile::tempdir()?;
    let manifest = crate::plugins::Manifest::parse(&pulled.manifest_text, reference)?;
    if let Some(old) = updating
        && manifest.name() != old.name()
    {
        anyhow::bail!(
            "{reference} now holds a plugin named `{}`, not `{}`; nothing was changed (install it under its own name with `pincer plugin install {reference}`)",
            manifest.name(),
            old.name()
        );
    }
    std::fs::write(
        staging.path().join(plugins::MANIFEST_FILE),
        &pulled.manifest_text,
    )?;
    std::fs::write(
        staging.path().join(&manifest.plugin.component),
        &pulled.wasm,
    )?;
    let package = PluginPackage::read(
        staging.path(),
        PluginSource::Dir(staging.path().to_path_buf()),
    )?;
    let confirm = |plugin: &LoadedPlugin, replacing: Option<&Replacing>| -> anyhow::Result<()> {
        let m = &plugin.manifest;
        println!(
            "{} {} ({}, pincer:plugin/{}@{})",
            plugin.name(),
            m.plugin.version,
            plugin.kind(),
            plugin.kind().world(),
            m.plugin.wit
        );
        println!("  from:      {}", pulled.pinned);
        println!(
            "  publisher: {}",
            match (&publisher, &key) {
                (Some(name), Some(key)) => format!("{name} ({key}), trusted"),
                (None, Some(key)) => format!("{key}, NOT in plugins.trusted_publishers"),
                _ => "nobody: NOT signed".to_owned(),
            }
        );
        println!("  asks for:");
        for line in requests(ctx, plugin) {
            println!("    {line}");
        }
        // An update asks only when the new version asks for more; a
        // fresh install (even one with --replace) asks every time.
        confirm_replacement(
            replacing,
            Asked {
                replace,
                yes: flags.yes,
                allow_downgrade: flags.allow_downgrade,
            },
            updating.is_none(),
        )
    };
    install(
        ctx,
        package,
        &pulled.pinned,
        Asked {
            replace,
            yes: flags.yes,
            allow_downgrade: flags.allow_downgrade,
        },
        Some((&origin, &confirm)),
    )?;
    let (action, was) = match updating {
        Some(old) => (
            crate::audit::Action::PluginUpdatedFromRegistry,
            format!(
                ", replacing {} sha256 {}",
                old.manifest.plugin.version, old.sha256
            ),
        ),
        None => (
            crate::audit::Action::PluginInstalledFromRegistry,
            String::new(),
        ),
    };
    audit.record(
        crate::audit::Actor::Cli(None),
        None,
        action,
        &format!("{} ({signature}){was}", pulled.pinned),
    );
    println!("  pinned:    {}", pulled.pinned);
    Ok(())
}

/// `pincer plugin build [DIR]`: build, then check the package the way an
/// install does; a package that fails the check is removed.
fn build(ctx: &Context, dir: &Path, out: &Path, json: bool) -> anyhow::Result<()> {
    let built = plugins::build_plugin(dir, out)?;
    let checked = PluginPackage::read(&built.dir, PluginSource::Dir(built.dir.clone()))
        .map_err(anyhow::Error::from)
        .and_then(|package| Ok(ctx.plugin_host()?.load(&package, None, ctx.limits())?));
    let plugin = match checked {
        Ok(plugin) => plugin,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&built.dir);
            return Err(e.context(format!(
                "{} was built but is not a plugin this host can load; the package was removed",
                built.component.display()
            )));
        }
    };
    let m = &plugin.manifest;
    let world = format!("pincer:plugin/{}@{}", plugin.kind().world(), m.plugin.wit);
    if json {
        println!(
            "{:#}",
            json!({
                "name": plugin.name(),
                "version": m.plugin.version.to_string(),
                "kind": plugin.kind().to_string(),
                "world": world,
                "package": built.dir,
                "component": built.component,
                "sha256": built.sha256,
                "size_bytes": plugin.size_bytes,
                "memory_limit_mb": plugin.memory_limit_bytes() >> 20,
                "requests": requests(ctx, &plugin),
            })
        );
        return Ok(());
    }
    println!(
        "built {} {} ({}, {world}) with {}",
        plugin.name(),
        m.plugin.version,
        plugin.kind(),
        match built.toolchain {
            plugins::Toolchain::Cargo => "cargo",
            plugins::Toolchain::ComponentizePy => "componentize-py",
        }
    );
    println!("  package:   {}", built.dir.display());
    println!(
        "  component: {} ({} KiB)",
        built.component.display(),
        plugin.size_bytes / 1024
    );
    println!("  sha256:    {}", built.sha256);
    println!("  requests:");
    for line in requests(ctx, &plugin) {
        println!("    {line}");
    }
    println!(
        "next: pincer plugin install {0}   or   pincer plugin publish {0} REGISTRY/NAME:{1} --key KEY",
        built.dir.display(),
        m.plugin.version
    );
    Ok(())
}

/// `pincer plugin publish DIR REF`.
async fn publish(
    ctx: &Context,
    dir: &Path,
    reference: &str,
    key: Option<&Path>,
    insecure: bool,
) -> anyhow::Result<()> {
    let package = PluginPackage::read(dir, PluginSource::Dir(dir.to_path_buf()))?;
    let host = ctx.plugin_host()?;
    // The same checks as an install: the manifest, the world, a WIT version
    // this host serves.
    let plugin = host.load(&package, None, ctx.limits())?;
    let key = key.map(PublisherKey::load).transpose()?;
    let m = &plugin.manifest;
    let world = format!("pincer:plugin/{}@{}", plugin.kind().world(), m.plugin.wit);
    let published = plugins::publish(
        reference,
        &plugins::RegistryPackage {
            manifest_text: &package.manifest_text,
            name: plugin.name(),
            version: &m.plugin.version.to_string(),
            description: &m.plugin.description,
            world: &world,
            wasm: &package.wasm,
        },
        key.as_ref(),
        insecure,
    )
    .await?;
    println!(
        "published {} {} to {reference}",
        plugin.name(),
        m.plugin.version
    );
    println!("  digest: {}", published.digest);
    println!("  pinned: {}", published.pinned);
    match &published.signed_by {
        Some(key) => println!("  signed by {key}"),
        None => println!(
            "  UNSIGNED (no --key): `pincer plugin install` refuses it unless the installer passes --allow-unsigned"
        ),
    }
    Ok(())
}
