//! Builds what the `pincer` binary embeds:
//! - the first-party plugins in `plugins/`, for wasm32-wasip2, so `pincer`
//!   finds them with no install step;
//! - the agent runner in `images/agent`, statically linked, which pincer
//!   bind-mounts into workspace containers of any image;
//! - and, for test builds (the dev profile) only and not embedded, the static
//!   test MCP server `images/mcp-sqlite` (same target dir), whose path tests
//!   find through `env!("PINCER_TEST_MCP_SQLITE")`.
//!
//! Every plugin (test fixtures under `plugins/testing/` and examples under
//! `plugins/examples/` included) is staged as
//! `<wasm target dir>/staged/<name>/{plugin.toml,plugin.wasm}`; tests find
//! that folder through `env!("PINCER_STAGED_PLUGINS")`. Only plugins outside
//! `testing/` and `examples/` are embedded in the binary.
//!
//! It also embeds the sources of the plugin SDK (`plugins/sdk`, its `wit/`
//! link resolved to real files), which `pincer plugin new` writes out.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

fn main() -> Result<()> {
    let host_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let root = host_dir
        .parent()
        .context("host crate has no parent folder")?;
    let plugins_dir = root.join("plugins");
    let target_dir = wasm_target_dir(root);

    println!("cargo:rerun-if-env-changed=PINCER_WASM_TARGET_DIR");
    println!("cargo:rerun-if-env-changed=CARGO_TARGET_DIR");
    println!("cargo:rerun-if-changed={}", root.join("wit").display());
    println!(
        "cargo:rerun-if-changed={}",
        plugins_dir.join("Cargo.toml").display()
    );
    println!(
        "cargo:rerun-if-changed={}",
        plugins_dir.join("Cargo.lock").display()
    );

    let crates = plugin_crates(&plugins_dir)?;
    for dir in crates.iter().chain(support_crates(&plugins_dir).iter()) {
        // A path that does not exist would make cargo rebuild every time
        // (support crates have no plugin.toml).
        for watched in ["Cargo.toml", "plugin.toml", "build.rs", "src", "wit"] {
            let path = dir.join(watched);
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }

    build_plugins(&plugins_dir, &target_dir)?;
    embed_agent(root, &target_dir)?;

    let staged = target_dir.join("staged");
    let mut embedded = String::from("pub static PLUGINS: &[(&str, &str, &[u8])] = &[\n");
    for dir in &crates {
        let name = dir
            .file_name()
            .and_then(|n| n.to_str())
            .context("plugin folder name is not UTF-8")?;
        let wasm = target_dir
            .join("wasm32-wasip2/release")
            .join(format!("{}.wasm", name.replace('-', "_")));
        if !wasm.is_file() {
            bail!("building plugins produced no {}", wasm.display());
        }
        let stage = staged.join(name);
        std::fs::create_dir_all(&stage)?;
        copy_if_changed(&dir.join("plugin.toml"), &stage.join("plugin.toml"))?;
        copy_if_changed(&wasm, &stage.join("plugin.wasm"))?;
        if !dir.starts_with(plugins_dir.join("testing"))
            && !dir.starts_with(plugins_dir.join("examples"))
        {
            writeln!(
                embedded,
                "    ({name:?}, include_str!({:?}), include_bytes!({:?})),",
                stage.join("plugin.toml"),
                stage.join("plugin.wasm"),
            )?;
        }
    }
    embedded.push_str("];\n");
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("builtin_plugins.rs"), embedded)?;
    embed_sdk(&plugins_dir.join("sdk"), &out)?;
    println!("cargo:rustc-env=PINCER_STAGED_PLUGINS={}", staged.display());
    Ok(())
}

/// Copies `from` over `to` unless `to` already holds the same bytes. The
/// staged files are `include_bytes!`ed, and every build-script run (clippy's
/// check build, the dev build, the release build) stages them: a fresh copy's
/// new mtime would make each of those builds recompile the `pincer` crate.
fn copy_if_changed(from: &Path, to: &Path) -> Result<()> {
    let bytes = std::fs::read(from).with_context(|| format!("reading {}", from.display()))?;
    if std::fs::read(to).ok().as_deref() != Some(bytes.as_slice()) {
        std::fs::write(to, bytes).with_context(|| format!("writing {}", to.display()))?;
    }
    Ok(())
}

/// `SDK_FILES` (path inside the SDK crate, contents) and `SDK_WIT_VERSION`,
/// for `pincer plugin new`. `wit/` is read through its link, so what is
/// written out holds real WIT files of the release the SDK targets.
fn embed_sdk(sdk: &Path, out: &Path) -> Result<()> {
    let mut files = Vec::new();
    for name in ["Cargo.toml", "build.rs"] {
        files.push(name.to_string());
    }
    for folder in ["src", "wit"] {
        let mut names: Vec<String> = std::fs::read_dir(sdk.join(folder))
            .with_context(|| format!("reading {}", sdk.join(folder).display()))?
            .map(|e| Ok(e?.file_name().to_string_lossy().into_owned()))
            .collect::<Result<_>>()?;
        names.sort();
        files.extend(names.into_iter().map(|n| format!("{folder}/{n}")));
    }
    let worlds = std::fs::read_to_string(sdk.join("wit/worlds.wit"))
        .context("reading plugins/sdk/wit/worlds.wit")?;
    let version = worlds
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("package pincer:plugin@")?
                .strip_suffix(';')
        })
        .context("plugins/sdk/wit/worlds.wit has no `package pincer:plugin@X.Y.Z;` line")?;
    let mut code = format!(
        "pub const SDK_WIT_VERSION: &str = {version:?};
"
    );
    code.push_str("pub static SDK_FILES: &[(&str, &str)] = &[\n");
    for name in &files {
        let path = sdk.join(name).canonicalize()?;
        println!("cargo:rerun-if-changed={}", path.display());
        writeln!(code, "    ({name:?}, include_str!({path:?})),")?;
    }
    code.push_str("];\n");
    std::fs::write(out.join("sdk_files.rs"), code)?;
    Ok(())
}

/// Builds `images/agent` as a static binary (glibc with crt-static; the
/// explicit `--target` keeps the flag off build scripts and proc-macros).
fn embed_agent(root: &Path, wasm_target_dir: &Path) -> Result<()> {
    let images = root.join("images");
    for watched in [
        "Cargo.toml",
        "Cargo.lock",
        "agent/Cargo.toml",
        "agent/src",
        "protocol/Cargo.toml",
        "protocol/src",
        "mcp-sqlite/Cargo.toml",
        "mcp-sqlite/src",
    ] {
        println!("cargo:rerun-if-changed={}", images.join(watched).display());
    }
    let triple = std::env::var("TARGET")?;
    let target_dir = wasm_target_dir.with_file_name("agent");
    let mut command = nested_cargo();
    command
        .args([
            "build",
            "--release",
            "--locked",
            "-p",
            "pincer-agent",
            "--target",
            &triple,
        ])
        .arg("--manifest-path")
        .arg(images.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir)
        .env("CARGO_ENCODED_RUSTFLAGS", "-Ctarget-feature=+crt-static");
    run(command, "building images/agent (the static agent runner)")?;
    let test_server = target_dir.join(&triple).join("release/pincer-mcp-sqlite");
    println!(
        "cargo:rustc-env=PINCER_TEST_MCP_SQLITE={}",
        test_server.display()
    );
    // Only tests use the test server, and tests build in the dev profile: a
    // release build (`cargo build --release`, `scripts/run --release`) does
    // not wait for it.
    if std::env::var("PROFILE").as_deref() == Ok("debug") {
        build_test_server(&images, &triple, &target_dir)?;
    }
    let binary = target_dir.join(&triple).join("release/pincer-agent");
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("agent_binary.rs"),
        format!("pub static AGENT: &[u8] = include_bytes!({binary:?});\n"),
    )?;
    Ok(())
}

/// The static test MCP server `images/mcp-sqlite`, in a separate invocation
/// so its dependencies never change the runner's features.
fn build_test_server(images: &Path, triple: &str, target_dir: &Path) -> Result<()> {
    let mut command = nested_cargo();
    command
        .args([
            "build",
            "--release",
            "--locked",
            "-p",
            "pincer-mcp-sqlite",
            "--target",
            triple,
        ])
        .arg("--manifest-path")
        .arg(images.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(target_dir)
        .env("CARGO_ENCODED_RUSTFLAGS", "-Ctarget-feature=+crt-static");
    run(
        command,
        "building images/mcp-sqlite (the static test MCP server)",
    )
}

/// Where the wasm builds go: `$PINCER_WASM_TARGET_DIR`, else
/// `<cargo target dir>/wasm-plugins` (the README's scripts use the same).
fn wasm_target_dir(root: &Path) -> PathBuf {
    if let Some(dir) = std::env::var_os("PINCER_WASM_TARGET_DIR") {
        return PathBuf::from(dir);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let target = if target.is_relative() {
        root.join(target)
    } else {
        target
    };
    target.join("wasm-plugins")
}

/// Crates holding a `plugin.toml`: `plugins/*/`, `plugins/testing/*/` and
/// `plugins/examples/*/` (a plugin there that is not a Cargo crate is
/// built otherwise).
fn plugin_crates(plugins_dir: &Path) -> Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for parent in [
        plugins_dir.to_path_buf(),
        plugins_dir.join("testing"),
        plugins_dir.join("examples"),
    ] {
        if !parent.is_dir() {
            continue;
        }
        for entry in
            std::fs::read_dir(&parent).with_context(|| format!("reading {}", parent.display()))?
        {
            let path = entry?.path();
            if path.join("plugin.toml").is_file() && path.join("Cargo.toml").is_file() {
                found.push(path);
            }
        }
    }
    found.sort();
    Ok(found)
}

/// Library crates the plugins share (a Cargo.toml but no plugin.toml).
fn support_crates(plugins_dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(plugins_dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("Cargo.toml").is_file() && !p.join("plugin.toml").exists())
        .collect()
}

fn build_plugins(plugins_dir: &Path, target_dir: &Path) -> Result<()> {
    let mut command = nested_cargo();
    command
        .args([
            "build",
            "--release",
            "--locked",
            "--workspace",
            "--target",
            "wasm32-wasip2",
        ])
        .arg("--manifest-path")
        .arg(plugins_dir.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(target_dir);
    run(
        command,
        "building plugins/ for wasm32-wasip2 failed (is the target installed? `rustup target add wasm32-wasip2`)",
    )
}

/// A cargo command that inherits none of the outer build's settings
/// (clippy's wrapper, host rustflags, its target dir).
fn nested_cargo() -> Command {
    let mut command = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTC_WRAPPER",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_MANIFEST_DIR",
        "CARGO_PKG_NAME",
    ] {
        command.env_remove(var);
    }
    command
}

fn run(mut command: Command, what: &str) -> Result<()> {
    let output = command
        .output()
        .with_context(|| format!("running cargo: {what}"))?;
    if !output.status.success() {
        bail!("{what}:\n{}", String::from_utf8_lossy(&output.stderr));
    }
    Ok(())
}
