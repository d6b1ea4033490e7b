//! What one plugin call's store holds: WASI context, the capabilities granted
//! to the plugin, its memory limiter, and the tail of what it wrote to stderr.

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::capabilities::data::DataQuota;
use super::capabilities::http::{DenialSink, HttpEgress};
use super::capabilities::kv::KvNamespace;
use super::capabilities::secrets::{SecretError, Secrets};
use super::scope::Scope;

/// What the host grants one plugin in one scope, fixed at load time.
pub struct Grants {
    pub plugin: String,
    /// Whose kv namespace, `/data` and HTTP grant these are.
    pub scope: Scope,
    /// The plugin's config as a JSON object (secret keys included: plugins
    /// built against WIT 0.1.0 read them; newer ones get `public_config`).
    pub config: serde_json::Value,
    /// `config` without the keys the manifest marks secret.
    pub public_config: serde_json::Value,
    /// The secret keys' values and captured values, used by name.
    pub secrets: Secrets,
    pub kv: Option<KvNamespace>,
    pub http: Option<HttpEgress>,
    /// Host folder shown to the plugin as `/data`.
    pub data_dir: Option<std::path::PathBuf>,
    /// The quota of `data_dir`.
    pub data_quota: Option<Arc<DataQuota>>,
    pub memory_limit: usize,
    /// Logs and audits a refused capability use (`what`, e.g. "kv ...").
    pub on_denied: DenialSink,
    /// `PINCER_PLUGIN_TRACE`: what the host hands the component.
    pub trace: Option<super::trace::Trace>,
}

pub struct PluginState {
    pub grants: Arc<Grants>,
    pub limiter: MemoryLimiter,
    pub stderr: StderrTail,
    /// The file a `send-file` call sends (the body of `upload.send`).
    pub upload: Option<Arc<UploadFile>>,
    wasi: WasiCtx,
    table: ResourceTable,
}

impl PluginState {
    pub fn new(grants: Arc<Grants>) -> io::Result<Self> {
        let stderr = StderrTail::default();
        let mut wasi = WasiCtx::builder();
        wasi.stderr(stderr.clone());
        if let Some(dir) = &grants.data_dir {
            std::fs::create_dir_all(dir)?;
            wasi.preopened_dir(dir, "/data", wasmtime_wasi::FsPerms::ReadWrite)
                .map_err(|e| io::Error::other(format!("cannot open {}: {e}", dir.display())))?;
        }
        Ok(Self {
            limiter: MemoryLimiter::new(grants.memory_limit),
            grants,
            stderr,
            upload: None,
            wasi: wasi.build(),
            table: ResourceTable::new(),
        })
    }
}

/// A file the host read from a workspace to send: its bytes stay on the
/// host side of the component boundary.
#[derive(Debug)]
pub struct UploadFile {
    pub name: String,
    pub media_type: String,
    pub bytes: Vec<u8>,
}

impl PluginState {
    /// Logs and audits that `capability` was refused, with why.
    pub fn report_denial(&self, capability: &str, why: &str) {
        (self.grants.on_denied)(&format!("{capability} {why}"));
    }

    /// The plugin's kv namespace; without a `kv` grant, `None` and the
    /// denial reported.
    pub fn kv_grant(&self) -> Option<&KvNamespace> {
        let grant = self.grants.kv.as_ref();
        if grant.is_none() {
            self.report_denial("kv", "is not in this plugin's manifest capabilities");
        }
        grant
    }

    /// Reports a refused use of a secret that is a denial (a name that is
    /// not the plugin's, a place its binding does not allow).
    pub fn report_secret_refusal(&self, e: &SecretError) {
        match e {
            SecretError::Denied(name) => {
                self.report_denial("secret", &format!("`{name}`: not a secret of this plugin"));
            }
            SecretError::NotBound(why) => self.report_denial("secret", why),
            SecretError::Unknown(_) | SecretError::Invalid(_) | SecretError::Forged(_) => {}
        }
    }

    /// Records `value`, returned to the component by import `what`, in the
    /// trace (if there is one).
    pub fn traced(&self, what: &str, value: &dyn std::fmt::Debug) {
        if let Some(trace) = &self.grants.trace {
            trace.record(&self.grants.plugin, &format!("→ import {what}"), value);
        }
    }

    pub fn table(&mut self) -> &mut ResourceTable {
        &mut self.table
    }
}

impl WasiView for PluginState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// Refuses growth past the plugin's limit and remembers that it did, so a
/// resulting trap can be reported as what it is.
pub struct MemoryLimiter {
    limit: usize,
    pub exceeded: bool,
}

impl MemoryLimiter {
    fn new(limit: usize) -> Self {
        Self {
            limit,
            exceeded: false,
        }
    }
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.limit {
            self.exceeded = true;
            return Ok(false);
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 1_000_000)
    }
}

const STDERR_TAIL_BYTES: usize = 4096;

/// Keeps the last few KiB a plugin wrote to stderr (panic messages end up
/// there). Writes never fail, so a chatty plugin cannot trap by logging.
#[derive(Clone, Default)]
pub struct StderrTail {
    bytes: Arc<Mutex<VecDeque<u8>>>,
}

impl StderrTail {
    /// The last non-empty line written, if any.
    pub fn last_line(&self) -> Option<String> {
        let bytes = self.bytes.lock().ok()?;
        let text = String::from_utf8_lossy(bytes.iter().copied().collect::<Vec<_>>().as_slice())
            .into_owned();
        text.lines()
            .rev()
            .map(str::trim)
            .find(|l| !l.is_empty() && !l.starts_with("note:"))
            .map(str::to_string)
    }
}

impl IsTerminal for StderrTail {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for StderrTail {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl tokio::io::AsyncWrite for StderrTail {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if let Ok(mut bytes) = self.bytes.lock() {
            bytes.extend(buf.iter().rev().take(STDERR_TAIL_BYTES).rev());
            let excess = bytes.len().saturating_sub(STDERR_TAIL_BYTES);
            bytes.drain(..excess);
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
