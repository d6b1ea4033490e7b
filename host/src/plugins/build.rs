//! `pincer plugin build`: turns a plugin project into a package (plugin.toml
//! and the component beside it, with the component's sha256), ready for
//! `plugin install DIR` or `plugin publish DIR REF`.
//!
//! Two toolchains: a Rust crate (`Cargo.toml`) built with cargo for
//! `wasm32-wasip2`, and a Python app (`app.py` and a `wit/` folder) built
//! with componentize-py. The caller checks the result the way an install
//! does (manifest, world, WIT version) before calling it done.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sha2::{Digest as _, Sha256};

use super::catalog::MANIFEST_FILE;
use super::manifest::Manifest;

/// The componentize-py release the recipe and the tests use; its output
/// loads in this host's wasmtime.
pub const COMPONENTIZE_PY_VERSION: &str = "0.25.1";

/// File beside the package's component, in `sha256sum` format.
pub const SUMS_FILE: &str = "SHA256SUMS";

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("{0} has no plugin.toml: is it a plugin project? (`pincer plugin new` makes one)")]
    NoManifest(PathBuf),
    #[error("{0}")]
    Manifest(String),
    #[error(
        "{0} holds neither Cargo.toml (a Rust plugin) nor app.py with a wit/ folder (a Python plugin)"
    )]
    UnknownProject(PathBuf),
    #[error("{tool} not found ({hint})")]
    ToolMissing { tool: String, hint: String },
    #[error("{tool} failed ({status}); its messages are above")]
    ToolFailed { tool: String, status: String },
    #[error("cargo built no .wasm component (is `crate-type = [\"cdylib\"]` in Cargo.toml?)")]
    NoArtifact,
    #[error("{0} exists and is not a package folder (no plugin.toml in it); choose another --out")]
    OutNotAPackage(PathBuf),
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BuildError + '_ {
    move |source| BuildError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// How a project is built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Toolchain {
    Cargo,
    /// componentize-py over `app.py` against the project's `wit/` folder.
    ComponentizePy,
}

impl Toolchain {
    pub fn detect(dir: &Path) -> Result<Self, BuildError> {
        if dir.join("Cargo.toml").is_file() {
            Ok(Self::Cargo)
        } else if dir.join("app.py").is_file() && dir.join("wit").is_dir() {
            Ok(Self::ComponentizePy)
        } else {
            Err(BuildError::UnknownProject(dir.to_path_buf()))
        }
    }
}

/// A package written by [`build`].
#[derive(Debug)]
pub struct Package {
    pub dir: PathBuf,
    pub manifest: Manifest,
    pub component: PathBuf,
    pub sha256: String,
    pub toolchain: Toolchain,
}

/// Builds the project in `dir` and writes its package to `out` (replacing
/// an earlier package there; a folder that is not one is refused). The
/// package is assembled beside `out` and moved in place, so a failed build
/// leaves the previous package whole.
pub fn build(dir: &Path, out: &Path) -> Result<Package, BuildError> {
    let manifest_path = dir.join(MANIFEST_FILE);
    if !manifest_path.is_file() {
        return Err(BuildError::NoManifest(dir.to_path_buf()));
    }
    let manifest_text = std::fs::read_to_string(&manifest_path).map_err(io(&manifest_path))?;
    let manifest = Manifest::parse(&manifest_text, &manifest_path.display().to_string())
        .map_err(|e| BuildError::Manifest(e.to_string()))?;
    if out.exists() && !out.join(MANIFEST_FILE).is_file() {
        return Err(BuildError::OutNotAPackage(out.to_path_buf()));
    }
    let toolchain = Toolchain::detect(dir)?;
    let parent = out.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(io(parent))?;
    let staging = tempfile::Builder::new()
        .prefix(".pincer-build-")
        .tempdir_in(parent)
        .map_err(io(parent))?;
    let component = staging.path().join(&manifest.plugin.component);
    match toolchain {
        Toolchain::Cargo => {
            let built = cargo_build(dir)?;
            std::fs::copy(&built, &component).map_err(io(&built))?;
        }
        Toolchain::ComponentizePy => componentize_py(dir, &manifest, &component)?,
    }
    let wasm = std::fs::read(&component).map_err(io(&component))?;
    let sha256 = hex::encode(Sha256::digest(&wasm));
    let staged_manifest = staging.path().join(MANIFEST_FILE);
    std::fs::write(&staged_manifest, &manifest_text).map_err(io(&staged_manifest))?;
    let sums = staging.path().join(SUMS_FILE);
    std::fs::write(&sums, format!("{sha256}  {}\n", manifest.plugin.component))
        .map_err(io(&sums))?;
    if out.exists() {
        std::fs::remove_dir_all(out).map_err(io(out))?;
    }
    let staged = staging.keep();
    std::fs::rename(&staged, out).map_err(io(out))?;
    Ok(Package {
        component: out.join(&manifest.plugin.component),
        dir: out.to_path_buf(),
        manifest,
        sha256,
        toolchain,
    })
}

/// `cargo build --release --target wasm32-wasip2` in `dir`, its progress on
/// stderr; returns the cdylib it produced.
fn cargo_build(dir: &Path) -> Result<PathBuf, BuildError> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(&cargo)
        .args([
            "build",
            "--release",
            "--target",
            "wasm32-wasip2",
            "--message-format=json-render-diagnostics",
        ])
        .current_dir(dir)
        // The project's own target folder, not one inherited from a caller.
        .env_remove("CARGO_TARGET_DIR")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| tool_missing("cargo", e, "install Rust with rustup: https://rustup.rs"))?;
    if !output.status.success() {
        return Err(BuildError::ToolFailed {
            tool: "cargo build".into(),
            status: output.status.to_string(),
        });
    }
    // The last cdylib artifact is the project's own crate.
    let mut found = None;
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if message["reason"] != "compiler-artifact" {
            continue;
        }
        let is_cdylib = message["target"]["kind"]
            .as_array()
            .is_some_and(|k| k.iter().any(|k| k == "cdylib"));
        let wasm = message["filenames"].as_array().and_then(|files| {
            files
                .iter()
                .filter_map(serde_json::Value::as_str)
                .find(|f| f.ends_with(".wasm"))
        });
        if let (true, Some(wasm)) = (is_cdylib, wasm) {
            found = Some(PathBuf::from(wasm));
        }
    }
    found.ok_or(BuildError::NoArtifact)
}

/// `componentize-py -d wit -w WORLD componentize app -o OUT` in `dir`. The
/// tool is `$PINCER_COMPONENTIZE_PY`, else `componentize-py` on PATH.
fn componentize_py(dir: &Path, manifest: &Manifest, out: &Path) -> Result<(), BuildError> {
    let tool =
        std::env::var_os("PINCER_COMPONENTIZE_PY").unwrap_or_else(|| "componentize-py".into());
    let world = manifest.kind().world();
    let status = Command::new(&tool)
        .arg("-d")
        .arg("wit")
        .arg("-w")
        .arg(world)
        .arg("componentize")
        .arg("app")
        .arg("-o")
        .arg(out)
        .current_dir(dir)
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .status()
        .map_err(|e| {
            tool_missing(
                &tool.to_string_lossy(),
                e,
                &format!(
                    "pip install componentize-py=={COMPONENTIZE_PY_VERSION}, or set PINCER_COMPONENTIZE_PY"
                ),
            )
        })?;
    if !status.success() {
        return Err(BuildError::ToolFailed {
            tool: "componentize-py".into(),
            status: status.to_string(),
        });
    }
    Ok(())
}

fn tool_missing(tool: &str, e: std::io::Error, hint: &str) -> BuildError {
    if e.kind() == std::io::ErrorKind::NotFound {
        BuildError::ToolMissing {
            tool: tool.to_string(),
            hint: hint.to_string(),
        }
    } else {
        BuildError::ToolFailed {
            tool: tool.to_string(),
            status: e.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn projects_are_told_apart_and_refused_when_neither() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            Toolchain::detect(dir.path()),
            Err(BuildError::UnknownProject(_))
        ));
        std::fs::write(dir.path().join("app.py"), "").unwrap();
        assert!(
            Toolchain::detect(dir.path()).is_err(),
            "app.py without wit/"
        );
        std::fs::create_dir(dir.path().join("wit")).unwrap();
        assert_eq!(
            Toolchain::detect(dir.path()).unwrap(),
            Toolchain::ComponentizePy
        );
        std::fs::write(dir.path().join("Cargo.toml"), "").unwrap();
        assert_eq!(Toolchain::detect(dir.path()).unwrap(), Toolchain::Cargo);
    }

    #[test]
    fn a_folder_that_is_not_a_package_is_never_replaced() {
        let project = tempfile::tempdir().unwrap();
        std::fs::write(
            project.path().join(MANIFEST_FILE),
            "[plugin]\nname = \"x\"\nkind = \"skill\"\nversion = \"0.1.0\"\nwit = \"0.3.0\"\n",
        )
        .unwrap();
        let out = tempfile::tempdir().unwrap();
        std::fs::write(out.path().join("precious.txt"), "keep").unwrap();
        let err = build(project.path(), out.path()).unwrap_err();
        assert!(matches!(err, BuildError::OutNotAPackage(_)), "{err}");
        assert!(out.path().join("precious.txt").is_file());
    }

    #[test]
    fn a_project_without_a_manifest_is_refused() {
        let project = tempfile::tempdir().unwrap();
        let err = build(project.path(), &project.path().join("dist")).unwrap_err();
        assert!(err.to_string().contains("no plugin.toml"), "{err}");
        assert!(!project.path().join("dist").exists());
    }
}
