//! The one wasmtime engine of the process: pooling allocator, epoch ticker,
//! and an on-disk cache of compiled components.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

/// How often the epoch advances; deadlines are counted in these ticks.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Upper bound of any plugin's linear memory, whatever its configured limit.
pub const MAX_PLUGIN_MEMORY: usize = 4 << 30;

/// Instances that may be alive at once across all plugins.
const POOL_INSTANCES: u32 = 256;

/// Where a compiled component came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompileSource {
    Compiled,
    DiskCache,
}

#[derive(Clone)]
pub struct PluginEngine {
    inner: Arc<Inner>,
}

struct Inner {
    engine: Engine,
    cache_dir: Option<PathBuf>,
    /// Hex digest of everything besides the wasm bytes that a compiled
    /// artifact depends on (wasmtime version and engine settings).
    engine_key: String,
    ticker: Ticker,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.ticker.shared.stop.store(true, Ordering::Relaxed);
        self.ticker.thread.unpark();
    }
}

/// The epoch ticker thread. It ticks only while some guest may run (a
/// [`Running`] is alive) and sleeps otherwise: a daemon with nothing to do
/// should not wake a hundred times a second.
struct Ticker {
    shared: Arc<TickerShared>,
    thread: std::thread::Thread,
}

#[derive(Default)]
struct TickerShared {
    stop: AtomicBool,
    /// Calls into guests under way.
    running: AtomicUsize,
}

/// Keeps the epoch advancing while alive; see [`PluginEngine::running`].
pub struct Running {
    inner: Arc<Inner>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.inner
            .ticker
            .shared
            .running
            .fetch_sub(1, Ordering::AcqRel);
    }
}

impl PluginEngine {
    /// `cache_dir`: where compiled components are kept; `None` disables the cache.
    pub fn new(cache_dir: Option<PathBuf>) -> anyhow::Result<Self> {
        let engine = Engine::new(&engine_config())?;
        let engine_key = engine_key(&engine);
        let shared = Arc::new(TickerShared::default());
        // Without the ticker no deadline can fire: fail rather than run plugins unbounded.
        let thread = spawn_epoch_ticker(engine.weak(), shared.clone())
            .map_err(|e| anyhow::anyhow!("cannot start the plugin epoch ticker thread: {e}"))?;
        Ok(Self {
            inner: Arc::new(Inner {
                engine,
                cache_dir,
                engine_key,
                ticker: Ticker { shared, thread },
            }),
        })
    }

    /// Hold this while a store of this engine runs guest code: epoch
    /// deadlines only advance while one is held.
    pub fn running(&self) -> Running {
        let ticker = &self.inner.ticker;
        if ticker.shared.running.fetch_add(1, Ordering::AcqRel) == 0 {
            ticker.thread.unpark();
        }
        Running {
            inner: self.inner.clone(),
        }
    }

    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    /// Compiles `wasm`, or loads it from the disk cache when this exact
    /// content was compiled before by this wasmtime with these settings.
    /// `sha256` is the hex digest of `wasm` (the cache key).
    pub fn load(&self, wasm: &[u8], sha256: &str) -> anyhow::Result<(Component, CompileSource)> {
        let Some(path) = self.cache_path(sha256) else {
            return Ok((
                Component::new(self.engine(), wasm)?,
                CompileSource::Compiled,
            ));
        };
        // Read, not mmap: a cache file truncated or rewritten underneath a
        // mapped component would crash the host with SIGBUS.
        if let Ok(bytes) = std::fs::read(&path) {
            // SAFETY: the bytes come from pincer's own cache folder, written by
            // `Component::serialize` below under a key that includes the
            // wasmtime version and engine settings; wasmtime re-checks both
            // and refuses anything that is not its own artifact.
            match unsafe { Component::deserialize(self.engine(), &bytes) } {
                Ok(component) => return Ok((component, CompileSource::DiskCache)),
                Err(e) => {
                    tracing::warn!(path = %path.display(), "discarding cached component: {e:#}")
                }
            }
        }
        let component = Component::new(self.engine(), wasm)?;
        if let Err(e) = write_atomically(&path, &component.serialize()?) {
            tracing::warn!(path = %path.display(), "cannot cache compiled component: {e}");
        }
        Ok((component, CompileSource::Compiled))
    }

    fn cache_path(&self, sha256: &str) -> Option<PathBuf> {
        let dir = self.inner.cache_dir.as_ref()?;
        Some(dir.join(format!("{sha256}-{}.cwasm", self.inner.engine_key)))
    }
}

fn engine_config() -> Config {
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(POOL_INSTANCES)
        .total_core_instances(POOL_INSTANCES * 4)
        .total_memories(POOL_INSTANCES * 2)
        .total_tables(POOL_INSTANCES * 4)
        .total_stacks(POOL_INSTANCES)
        .max_memory_size(MAX_PLUGIN_MEMORY)
        // Reset the small, always-touched parts of a reused slot with memset
        // instead of returning pages to the kernel, so a fresh instance per
        // call pays no page faults there (measured: 11 -> 7 us per
        // instantiation). Linear memory is still decommitted: resetting
        // megabytes by memset costs more than it saves.
        .table_keep_resident(64 << 10)
        .async_stack_keep_resident(16 << 10);
    let mut config = Config::new();
    config
        .wasm_component_model(true)
        .epoch_interruption(true)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    config
}

fn engine_key(engine: &Engine) -> String {
    struct Sha(Sha256);
    impl Hasher for Sha {
        fn finish(&self) -> u64 {
            0
        }
        fn write(&mut self, bytes: &[u8]) {
            self.0.update(bytes);
        }
    }
    let mut hasher = Sha(Sha256::new());
    engine.precompile_compatibility_hash().hash(&mut hasher);
    hex::encode(&hasher.0.finalize()[..8])
}

fn spawn_epoch_ticker(
    engine: wasmtime::EngineWeak,
    shared: Arc<TickerShared>,
) -> std::io::Result<std::thread::Thread> {
    std::thread::Builder::new()
        .name("pincer-epoch".into())
        .spawn(move || {
            while !shared.stop.load(Ordering::Relaxed) {
                if shared.running.load(Ordering::Acquire) == 0 {
                    // Woken by the first `running()` (or at stop); an
                    // unpark that came first makes this return at once.
                    std::thread::park();
                    continue;
                }
                std::thread::sleep(EPOCH_TICK);
                match engine.upgrade() {
                    Some(engine) => engine.increment_epoch(),
                    None => break,
                }
            }
        })
        .map(|handle| handle.thread().clone())
}

/// Names a folder several homes share for their compiled plugins.
pub const SHARED_CACHE_ENV: &str = "PINCER_COMPILE_CACHE";

/// Where `home` keeps its compiled components: the folder
/// `$PINCER_COMPILE_CACHE` names (its real path, symlinks resolved), when
/// only this user can change it (homes on one machine then compile each
/// plugin once, as a CI's test homes do), else `home/cache/components`.
pub fn cache_dir_for(home: &Path) -> PathBuf {
    let own = home.join("cache").join("components");
    let Some(shared) = std::env::var_os(SHARED_CACHE_ENV).filter(|v| !v.is_empty()) else {
        return own;
    };
    let shared = PathBuf::from(shared);
    match private_folder(&shared) {
        Ok(real) => real,
        Err(why) => {
            tracing::warn!(
                "{SHARED_CACHE_ENV}={}: {why}; compiled plugins are kept in {} instead",
                shared.display(),
                own.display()
            );
            own
        }
    }
}

/// The cache holds native code the host runs: a folder another user can
/// change would run their code in pincer. Created (0700) when missing;
/// returns its real path. Another user must not be able to write the
/// folder, nor rename it (or a folder above it) away and put their own in
/// its place: every folder above must belong to this user or root and, if
/// others can write it, be sticky (as `/tmp` is). The real path is what is
/// used, so a symlink on the way, which its owner could re-point, is not
/// followed again.
fn private_folder(dir: &Path) -> Result<PathBuf, String> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    const STICKY: u32 = 0o1000;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("cannot create it: {e}"))?;
    let real = dir
        .canonicalize()
        .map_err(|e| format!("cannot resolve it: {e}"))?;
    let meta = std::fs::metadata(&real).map_err(|e| format!("cannot read it: {e}"))?;
    if !meta.is_dir() {
        return Err("not a folder".into());
    }
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Err(format!(
            "owned by uid {}, not by this user ({me})",
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "other users can write it (mode {:o})",
            meta.mode() & 0o777
        ));
    }
    for above in real.ancestors().skip(1) {
        let meta = std::fs::metadata(above)
            .map_err(|e| format!("cannot read {}: {e}", above.display()))?;
        let (owner, mode) = (meta.uid(), meta.mode());
        if owner != me && owner != 0 {
            return Err(format!(
                "the folder above it, {}, is owned by uid {owner} (neither this user, {me}, nor root), who could put another folder in its place",
                above.display()
            ));
        }
        if mode & 0o022 != 0 && mode & STICKY == 0 {
            return Err(format!(
                "other users can write the folder above it, {} (mode {:o}, not sticky), and so put another folder in its place",
                above.display(),
                mode & 0o777
            ));
        }
    }
    Ok(real)
}

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = tempfile::NamedTempFile::new_in(dir)?;
    std::fs::write(tmp.path(), bytes)?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    #[test]
    fn a_shared_cache_must_be_a_folder_only_this_user_can_write() {
        let dir = tempfile::tempdir().unwrap();
        let fresh = dir.path().join("a/b");
        assert_eq!(private_folder(&fresh), Ok(fresh.canonicalize().unwrap()));
        let mode = std::fs::metadata(&fresh).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700, "created private");

        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let refused = private_folder(&open).unwrap_err();
        assert!(
            refused.contains("other users can write it (mode 777)"),
            "{refused}"
        );
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o775)).unwrap();
        assert!(private_folder(&open).is_err(), "group-writable");

        let file = dir.path().join("file");
        std::fs::write(&file, b"").unwrap();
        assert!(private_folder(&file).is_err());
    }

    #[test]
    fn a_shared_cache_under_a_folder_others_can_write_is_refused_unless_sticky() {
        let dir = tempfile::tempdir().unwrap();
        let parent = dir.path().join("parent");
        let cache = parent.join("cache");
        std::fs::create_dir_all(&cache).unwrap();
        std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o700)).unwrap();
        for mode in [0o777, 0o775] {
            std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(mode)).unwrap();
            let refused = private_folder(&cache).unwrap_err();
            let real = parent.canonicalize().unwrap();
            assert_eq!(
                refused,
                format!(
                    "other users can write the folder above it, {} (mode {mode:o}, not sticky), and so put another folder in its place",
                    real.display()
                )
            );
        }
        // Others cannot rename what is not theirs out of a sticky folder.
        std::fs::set_permissions(&parent, std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert_eq!(private_folder(&cache), Ok(cache.canonicalize().unwrap()));

        // The real path is what is used: a symlink (in a folder others
        // could write, its owner could re-point it) is not followed again.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&cache, &link).unwrap();
        assert_eq!(private_folder(&link), Ok(cache.canonicalize().unwrap()));
    }

    /// The exploit: the cache folder is the user's and private, but the
    /// folder holding it belongs to another user, who renames it away and
    /// puts their own (with their compiled "plugins") in its place.
    #[test]
    fn a_shared_cache_in_another_users_folder_is_refused() {
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return; // only root can give a folder to another user
        }
        let other = 12_345;
        let dir = tempfile::tempdir().unwrap();
        let theirs = dir.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::chown(&theirs, Some(other), Some(other)).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let cache = theirs.join("cache");
        std::fs::create_dir(&cache).unwrap();
        std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o700)).unwrap();

        let as_other = |script: &str| {
            std::process::Command::new("setpriv")
                .args(["--reuid", "12345", "--regid", "12345", "--clear-groups"])
                .args(["sh", "-c", script])
                .current_dir(&theirs)
                .status()
                .expect("setpriv (util-linux)")
        };
        assert!(
            as_other("mv cache gone && mkdir -m 700 cache").success(),
            "the owner of the folder above can swap the cache"
        );
        assert_eq!(
            std::fs::metadata(&cache).unwrap().uid(),
            other,
            "the cache is now theirs"
        );
        std::fs::remove_dir(&cache).unwrap();
        std::fs::create_dir(&cache).unwrap();
        std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o700)).unwrap();

        let refused = private_folder(&cache).unwrap_err();
        assert_eq!(
            refused,
            format!(
                "the folder above it, {}, is owned by uid {other} (neither this user, 0, nor root), who could put another folder in its place",
                theirs.canonicalize().unwrap().display()
            )
        );
        let theirs_too = dir.path().join("theirs-too");
        std::fs::create_dir(&theirs_too).unwrap();
        std::os::unix::fs::chown(&theirs_too, Some(other), None).unwrap();
        let refused = private_folder(&theirs_too).unwrap_err();
        assert!(refused.contains("owned by uid 12345"), "{refused}");
    }
}
