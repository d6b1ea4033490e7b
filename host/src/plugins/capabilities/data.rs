//! The `data_dir` capability's disk quota: every WASI filesystem call that
//! can grow a file under `/data` (positional writes, `set-size`, and the
//! output streams of `write-via-stream` / `append-via-stream`) reserves the
//! bytes first, and is refused with `insufficient-space` past the quota.
//!
//! The host functions are shadowed in the linker ([`add_to_linker`]): each
//! wrapper reserves, then calls wasmtime-wasi's own implementation. Usage is
//! kept as a running upper bound, shared by every call of one (scope,
//! plugin), and measured again (sizes of the files under the folder) only
//! when a reservation would pass the quota, so overwrites are not counted
//! twice and a plugin writing in small chunks costs no directory walk.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::filesystem::WasiFilesystemView;
use wasmtime_wasi::p2::bindings::filesystem::types::{Descriptor, ErrorCode, HostDescriptor as _};
use wasmtime_wasi::p2::{
    DynOutputStream, FsError, OutputStream, Pollable, StreamError, StreamResult,
};

use crate::plugins::capabilities::http::DenialSink;
use crate::plugins::state::PluginState;

/// The WASI filesystem interface version wasmtime-wasi serves.
const FILESYSTEM_TYPES: &str = "wasi:filesystem/types@0.2.12";

/// One (scope, plugin)'s `/data` quota.
#[derive(Debug)]
pub struct DataQuota {
    dir: PathBuf,
    limit: u64,
    /// Upper bound of the bytes used; `None` until first measured.
    used: Mutex<Option<u64>>,
    /// A refusal was reported since the last reservation that succeeded
    /// (a plugin retrying in a loop is audited once, not per write).
    reported: AtomicBool,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the /data quota of {limit_mb} MiB is used up ({used} bytes used, {wanted} more wanted)")]
pub struct QuotaExceeded {
    pub limit_mb: u64,
    pub used: u64,
    pub wanted: u64,
}

impl DataQuota {
    pub fn new(dir: PathBuf, limit: u64) -> Self {
        Self {
            dir,
            limit,
            used: Mutex::new(None),
            reported: AtomicBool::new(false),
        }
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Reserves `bytes` of growth, measuring the folder again before refusing.
    pub fn reserve(&self, bytes: u64) -> Result<(), QuotaExceeded> {
        let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        let mut current = match *used {
            Some(u) => u,
            None => usage(&self.dir),
        };
        if current.saturating_add(bytes) > self.limit {
            current = usage(&self.dir);
        }
        if current.saturating_add(bytes) > self.limit {
            *used = Some(current);
            return Err(QuotaExceeded {
                limit_mb: self.limit >> 20,
                used: current,
                wanted: bytes,
            });
        }
        *used = Some(current + bytes);
        self.reported.store(false, Ordering::Relaxed);
        Ok(())
    }

    /// Whether this refusal is the first since the last success.
    fn first_refusal(&self) -> bool {
        !self.reported.swap(true, Ordering::Relaxed)
    }
}

/// Bytes of the regular files under `dir` (apparent sizes, so a sparse file
/// counts in full); symlinks are not followed.
pub fn usage(dir: &Path) -> u64 {
    let mut total = 0u64;
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.path().symlink_metadata() else {
                continue;
            };
            if meta.is_dir() {
                pending.push(entry.path());
            } else if meta.is_file() {
                total = total.saturating_add(meta.len());
            }
        }
    }
    total
}

/// An output stream onto a `/data` file that reserves before each write.
struct QuotaStream {
    inner: DynOutputStream,
    quota: std::sync::Arc<DataQuota>,
    on_denied: DenialSink,
}

impl QuotaStream {
    fn reserve(&self, bytes: u64) -> StreamResult<()> {
        self.quota.reserve(bytes).map_err(|e| {
            if self.quota.first_refusal() {
                (self.on_denied)(&format!("data {e}"));
            }
            StreamError::LastOperationFailed(wasmtime::Error::new(std::io::Error::new(
                std::io::ErrorKind::StorageFull,
                e.to_string(),
            )))
        })
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for QuotaStream {
    async fn ready(&mut self) {
        self.inner.ready().await
    }
}

#[wasmtime_wasi::async_trait]
impl OutputStream for QuotaStream {
    fn write(&mut self, bytes: bytes::Bytes) -> StreamResult<()> {
        self.reserve(bytes.len() as u64)?;
        self.inner.write(bytes)
    }

    fn flush(&mut self) -> StreamResult<()> {
        self.inner.flush()
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        self.inner.check_write()
    }

    fn write_zeroes(&mut self, nelem: usize) -> StreamResult<()> {
        self.reserve(nelem as u64)?;
        self.inner.write_zeroes(nelem)
    }

    async fn cancel(&mut self) {
        self.inner.cancel().await
    }
}

type WasiResult<T> = wasmtime::Result<(Result<T, ErrorCode>,)>;

fn error_code(e: FsError) -> wasmtime::Result<ErrorCode> {
    e.downcast()
}

/// The size of the file behind `fd`, if it is one.
async fn file_size(state: &mut PluginState, fd: &Resource<Descriptor>) -> Option<u64> {
    let borrowed = Resource::<Descriptor>::new_borrow(fd.rep());
    state.filesystem().stat(borrowed).await.ok().map(|s| s.size)
}

/// Reserves `bytes` in `state`'s quota (no quota: no `/data`, nothing to do).
fn reserve(state: &PluginState, bytes: u64) -> Result<(), ErrorCode> {
    match &state.grants.data_quota {
        Some(quota) => quota.reserve(bytes).map_err(|e| {
            if quota.first_refusal() {
                state.report_denial("data", &e.to_string());
            }
            ErrorCode::InsufficientSpace
        }),
        None => Ok(()),
    }
}

/// Shadows the filesystem functions that grow files with quota-checked ones.
/// Call after wasmtime-wasi's own `add_to_linker`.
pub fn add_to_linker(linker: &mut Linker<PluginState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    shadow(linker)?;
    linker.allow_shadowing(false);
    Ok(())
}

fn shadow(linker: &mut Linker<PluginState>) -> wasmtime::Result<()> {
    let mut types = linker.instance(FILESYSTEM_TYPES)?;
    types.func_wrap_async(
        "[method]descriptor.write",
        |mut store, (fd, buf, offset): (Resource<Descriptor>, Vec<u8>, u64)| {
            Box::new(async move {
                let state = store.data_mut();
                let end = offset.saturating_add(buf.len() as u64);
                let size = file_size(state, &fd).await.unwrap_or(0);
                let growth = end.saturating_sub(size).max(buf.len() as u64);
                if let Err(code) = reserve(state, growth) {
                    return Ok((Err(code),)) as WasiResult<u64>;
                }
                match state.filesystem().write(fd, buf, offset).await {
                    Ok(n) => Ok((Ok(n),)),
                    Err(e) => Ok((Err(error_code(e)?),)),
                }
            })
        },
    )?;
    types.func_wrap_async(
        "[method]descriptor.set-size",
        |mut store, (fd, size): (Resource<Descriptor>, u64)| {
            Box::new(async move {
                let state = store.data_mut();
                let current = file_size(state, &fd).await.unwrap_or(0);
                if let Err(code) = reserve(state, size.saturating_sub(current)) {
                    return Ok((Err(code),)) as WasiResult<()>;
                }
                match state.filesystem().set_size(fd, size).await {
                    Ok(()) => Ok((Ok(()),)),
                    Err(e) => Ok((Err(error_code(e)?),)),
                }
            })
        },
    )?;
    types.func_wrap(
        "[method]descriptor.write-via-stream",
        |mut store, (fd, offset): (Resource<Descriptor>, u64)| {
            let state = store.data_mut();
            let stream = state.filesystem().write_via_stream(fd, offset);
            wrap_stream(state, stream)
        },
    )?;
    types.func_wrap(
        "[method]descriptor.append-via-stream",
        |mut store, (fd,): (Resource<Descriptor>,)| {
            let state = store.data_mut();
            let stream = state.filesystem().append_via_stream(fd);
            wrap_stream(state, stream)
        },
    )?;
    Ok(())
}

/// Replaces a file output stream in the table by a quota-checked one.
fn wrap_stream(
    state: &mut PluginState,
    stream: Result<Resource<DynOutputStream>, FsError>,
) -> WasiResult<Resource<DynOutputStream>> {
    let stream = match stream {
        Ok(s) => s,
        Err(e) => return Ok((Err(error_code(e)?),)),
    };
    let Some(quota) = state.grants.data_quota.clone() else {
        return Ok((Ok(stream),));
    };
    let on_denied = state.grants.on_denied.clone();
    let table = state.table();
    let inner = table.delete(stream)?;
    let wrapped: DynOutputStream = Box::new(QuotaStream {
        inner,
        quota,
        on_denied,
    });
    Ok((Ok(table.push(wrapped)?),))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_stop_at_the_quota_and_remeasure() {
        let dir = tempfile::tempdir().unwrap();
        let quota = DataQuota::new(dir.path().to_path_buf(), 1000);
        quota.reserve(600).unwrap();
        // Nothing was written: measuring again frees the reservation.
        quota.reserve(600).unwrap();
        std::fs::write(dir.path().join("f"), vec![0u8; 900]).unwrap();
        let err = quota.reserve(500).unwrap_err();
        assert_eq!((err.used, err.wanted), (900, 500));
        quota.reserve(100).unwrap();
    }
}
