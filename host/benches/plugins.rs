//! Plugin host figures: cold load, load from the on-disk cache, fresh
//! instantiation, and a skill call round trip (fresh instance + JSON args).
//!
//!     cargo bench -p pincer --bench plugins
//!
//! Prints median and p99 of each; nothing is asserted here.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pincer::audit::AuditLog;
use pincer::plugins::CompileSource;
use pincer::plugins::{CallLimits, HostPaths, PluginHost, PluginPackage};

fn main() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run())
}

async fn run() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let package = PluginPackage::builtin()
        .into_iter()
        .find(|p| p.label() == "skill-calc")
        .ok_or_else(|| anyhow::anyhow!("skill-calc is not built in"))?;
    let limits = CallLimits::default();
    println!(
        "plugin: skill-calc ({} KiB component)",
        package.wasm.len() / 1024
    );

    let audit = Arc::new(AuditLog::open(&dir.path().join(pincer::db::FILE_NAME))?);
    let uncached = PluginHost::new(
        HostPaths {
            cache_dir: None,
            ..HostPaths::under(dir.path())
        },
        audit.clone(),
    )?;
    let cold = measure(10, || async {
        uncached.load(&package, None, limits)?;
        Ok(())
    })
    .await?;
    report("cold load (validate + compile + pre-instantiate)", &cold);

    let cached_host = PluginHost::new(HostPaths::under(dir.path()), audit)?;
    let warmup = cached_host.load(&package, None, limits)?;
    assert_eq!(warmup.compiled, CompileSource::Compiled);
    let cached = measure(50, || async {
        let plugin = cached_host.load(&package, None, limits)?;
        anyhow::ensure!(plugin.compiled == CompileSource::DiskCache, "cache miss");
        Ok(())
    })
    .await?;
    report("load from on-disk cache", &cached);
    println!(
        "  -> cache speed-up: {:.0}x (median cold / median cached)",
        median(&cold).as_secs_f64() / median(&cached).as_secs_f64()
    );

    let plugin = cached_host.load(&package, Some(&serde_json::json!({})), limits)?;
    let inst = measure(20_000, || async {
        cached_host
            .instantiate_only(&plugin)
            .await
            .map_err(Into::into)
    })
    .await?;
    report("instantiate (fresh store + WASI ctx + instance)", &inst);

    let args = r#"{"expression": "2 * (3 + 4)"}"#;
    let call = measure(20_000, || async {
        let out = cached_host.skill_invoke(&plugin, "evaluate", args).await?;
        anyhow::ensure!(out.is_ok(), "tool failed: {out:?}");
        Ok(())
    })
    .await?;
    report("skill call round trip (fresh instance + JSON args)", &call);
    Ok(())
}

async fn measure<F, Fut>(runs: usize, mut f: F) -> anyhow::Result<Vec<Duration>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    // Warm up allocator pools and caches before timing.
    for _ in 0..(runs / 10).max(1) {
        f().await?;
    }
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        let started = Instant::now();
        f().await?;
        samples.push(started.elapsed());
    }
    samples.sort();
    Ok(samples)
}

fn median(sorted: &[Duration]) -> Duration {
    sorted[sorted.len() / 2]
}

fn report(label: &str, sorted: &[Duration]) {
    let p99 = sorted[((sorted.len() * 99) / 100).min(sorted.len() - 1)];
    println!(
        "{label:<52} median {:>10}  p99 {:>10}  (n={})",
        fmt(median(sorted)),
        fmt(p99),
        sorted.len()
    );
}

fn fmt(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us >= 1000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{us:.1} µs")
    }
}
