//! `pincer doctor`: what this machine lacks for pincer, and how to fix it.

use std::path::Path;
use std::process::Command;

use anyhow::bail;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::Context;
use crate::plugins::PluginPackage;

struct Check {
    name: &'static str,
    /// `Err(why, fix)` when it failed.
    outcome: Result<String, (String, String)>,
    level: Level,
}

/// What a failed check means.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    /// pincer cannot run without it.
    Required,
    /// Only some commands need it.
    Optional,
    /// It runs, but less safely than it could.
    Warning,
}

pub async fn run(config_flag: Option<&Path>) -> anyhow::Result<()> {
    let mut checks = Vec::new();
    let ctx = Context::load(config_flag);
    checks.push(Check {
        name: "configuration",
        outcome: match &ctx {
            Ok(ctx) => Ok(match &ctx.config_path {
                Some(p) => format!("{} is valid", p.display()),
                None => "no file; built-in defaults".into(),
            }),
            Err(e) => Err((
                format!("{e:#}"),
                "fix the file at the position shown, then run `pincer config check`".into(),
            )),
        },
        level: Level::Required,
    });
    if let Ok(ctx) = &ctx {
        checks.push(home_check(&ctx.home));
        checks.push(plugins_check(ctx));
        checks.push(container_user_check(ctx));
    }
    let docker = docker_check().await;
    let docker_ok = docker.outcome.is_ok();
    checks.push(docker);
    if let (Ok(ctx), true) = (&ctx, docker_ok) {
        checks.push(image_check(ctx).await);
    }
    checks.push(busybox_check());
    checks.push(wasm_target_check());

    let mut failed_required = 0;
    for check in &checks {
        match &check.outcome {
            Ok(detail) => println!("ok       {:<14} {detail}", check.name),
            Err((why, fix)) => {
                let label = match check.level {
                    Level::Required => "MISSING",
                    Level::Optional => "optional",
                    Level::Warning => "warning",
                };
                println!(
                    "{label:<8} {:<14} {why}\n         {:<14} fix: {fix}",
                    check.name, ""
                );
                failed_required += usize::from(check.level == Level::Required);
            }
        }
    }
    if failed_required > 0 {
        bail!("{failed_required} required check(s) failed");
    }
    Ok(())
}

fn home_check(home: &Path) -> Check {
    let probe = home.join(".doctor-probe");
    let outcome = std::fs::write(&probe, b"ok")
        .and_then(|()| std::fs::remove_file(&probe))
        .map(|()| format!("{} is writable", home.display()))
        .map_err(|e| {
            (
                format!("{} is not writable: {e}", home.display()),
                "set PINCER_HOME to a writable folder".into(),
            )
        });
    Check {
        name: "PINCER_HOME",
        outcome,
        level: Level::Required,
    }
}

fn plugins_check(ctx: &Context) -> Check {
    let outcome = (|| {
        let host = ctx.plugin_host().map_err(|e| format!("{e:#}"))?;
        let builtin = PluginPackage::builtin();
        for package in &builtin {
            host.load(package, None, ctx.limits())
                .map_err(|e| e.to_string())?;
        }
        Ok::<_, String>(format!("{} built-in plugins load", builtin.len()))
    })()
    .map_err(|why| {
        (
            why,
            "rebuild pincer (`cargo build --release`); report a bug if it persists".into(),
        )
    });
    Check {
        name: "plugins",
        outcome,
        level: Level::Required,
    }
}

/// Pings the Docker Engine API over its unix socket.
async fn docker_check() -> Check {
    let socket = std::env::var("DOCKER_HOST")
        .ok()
        .and_then(|h| h.strip_prefix("unix://").map(str::to_string))
        .unwrap_or_else(|| "/var/run/docker.sock".into());
    let ping = async {
        let mut stream = tokio::net::UnixStream::connect(&socket).await?;
        stream
            .write_all(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            .await?;
        let mut reply = String::new();
        stream.read_to_string(&mut reply).await?;
        Ok::<_, std::io::Error>(reply)
    };
    let outcome = match tokio::time::timeout(std::time::Duration::from_secs(3), ping).await {
        Ok(Ok(reply)) if reply.ends_with("OK") => Ok(format!("engine answers on {socket}")),
        Ok(Ok(reply)) => Err(format!(
            "unexpected answer on {socket}: {}",
            reply.lines().next().unwrap_or("")
        )),
        Ok(Err(e)) => Err(format!("cannot reach {socket}: {e}")),
        Err(_) => Err(format!("{socket} did not answer within 3 s")),
    };
    Check {
        name: "docker",
        outcome: outcome.map_err(|why| {
            (
                why,
                "install Docker Engine (`apt-get install docker.io`) and start it (`systemctl start docker`); every workspace runs in a container".into(),
            )
        }),
        level: Level::Optional,
    }
}

async fn image_check(ctx: &Context) -> Check {
    let tag = ctx.config.containers.image.clone();
    let outcome = match ctx.container_runtime().await {
        Ok(runtime) => {
            if runtime.has_image(&tag).await {
                Ok(format!("{tag} is on the Docker Engine"))
            } else {
                Err(format!("{tag} is not built"))
            }
        }
        Err(e) => Err(format!("{e:#}")),
    };
    Check {
        name: "agent image",
        outcome: outcome.map_err(|why| {
            (
                why,
                "`pincer image build` (offline, from Debian's busybox-static)".into(),
            )
        }),
        level: Level::Optional,
    }
}

/// Whether a workspace's container runs as a uid a host account has: its
/// files in bind mounts would be that person's, and an escape would land
/// as them.
fn container_user_check(ctx: &Context) -> Check {
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let account = |uid: u32| {
        passwd.lines().find_map(|line| {
            let mut fields = line.split(':');
            let name = fields.next()?;
            (fields.nth(1)?.parse::<u32>().ok()? == uid).then(|| name.to_owned())
        })
    };
    let mut users = std::collections::BTreeMap::<String, Vec<&str>>::new();
    if let Ok(catalog) = crate::policy::PolicyCatalog::load(&ctx.config.containers.policy_dirs) {
        for (name, ws) in &ctx.config.workspaces {
            if let Ok(policy) = catalog.effective(name, &ws.policies) {
                let mut user = policy.compile().user;
                if user == crate::policy::PER_WORKSPACE_USER {
                    // Allocated on the workspace's first start.
                    if let Ok(state) = ctx.state() {
                        user = crate::containers::allocated_user(&state, name).unwrap_or(user);
                    }
                }
                users.entry(user).or_default().push(name);
            }
        }
    }
    let shared: Vec<String> = users
        .iter()
        .filter_map(|(user, workspaces)| {
            let (uid, _) = crate::containers::parse_user(user)?;
            let account = account(uid)?;
            Some(format!(
                "workspace(s) {} run as uid {uid}, the host account `{account}`: the agent's files belong to it and an escape lands as it",
                workspaces.join(", ")
            ))
        })
        .collect();
    let outcome = if users.is_empty() {
        Ok("no workspace's policy could be read here (see `pincer policy audit`)".into())
    } else if shared.is_empty() {
        Ok(format!(
            "{}: no host account has that uid",
            users.keys().cloned().collect::<Vec<_>>().join(", ")
        ))
    } else {
        Err((
            shared.join("; "),
            "give those workspaces a uid no host account has (the baseline's `user: \"100000:100000\"`), or run Docker with userns-remap (docs/workspaces-and-policies.md)".into(),
        ))
    };
    Check {
        name: "container user",
        outcome,
        level: Level::Warning,
    }
}

fn busybox_check() -> Check {
    let path = crate::containers::BUSYBOX;
    let outcome = if std::path::Path::new(path).is_file() {
        Ok(format!("{path} (the default image's userland)"))
    } else {
        Err(format!("{path} is missing"))
    };
    Check {
        name: "busybox",
        outcome: outcome.map_err(|why| {
            (
                why,
                "`apt-get install busybox-static` (needed by `pincer image build`)".into(),
            )
        }),
        level: Level::Optional,
    }
}

fn wasm_target_check() -> Check {
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .any(|l| l.trim() == "wasm32-wasip2")
        });
    let outcome = match installed {
        Some(true) => Ok("installed (for building plugins)".into()),
        Some(false) => Err("the wasm32-wasip2 target is not installed".into()),
        None => Err("rustup not found".into()),
    };
    Check {
        name: "wasm32-wasip2",
        outcome: outcome.map_err(|why| {
            (
                why,
                "`rustup target add wasm32-wasip2` (only needed to build plugins)".into(),
            )
        }),
        level: Level::Optional,
    }
}
