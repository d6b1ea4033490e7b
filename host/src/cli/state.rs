//! `pincer state prune [--dry-run]`: one prune now ([`crate::daemon::prune`]);
//! `pincer state copy --from sqlite:PATH --to URL` (or back): a home's
//! state into an empty one on the other backend ([`crate::db::copy`]);
//! `pincer state migrate`: every store's tables made or brought forward.

use std::path::Path;

use anyhow::Context as _;

use crate::daemon::prune::{lines, prune};
use crate::db::Location;

pub fn run_prune(config_flag: Option<&Path>, dry_run: bool) -> anyhow::Result<()> {
    let ctx = super::Context::load(config_flag)?;
    let retention = ctx.config.state.retention;
    let report = prune(&ctx.state()?, &retention, crate::db::now_ms(), dry_run)?;
    for line in lines(&report, &retention, dry_run) {
        println!("{line}");
    }
    Ok(())
}

pub fn run_migrate(config_flag: Option<&Path>) -> anyhow::Result<()> {
    let ctx = super::Context::load(config_flag)?;
    let at = ctx.state()?;
    create_tables(&at).with_context(|| format!("bringing the tables of {at} forward"))?;
    println!(
        "{at}: every table of this release is there (schema version {})",
        crate::db::SCHEMA_VERSION
    );
    Ok(())
}

/// `sqlite:PATH` or a PostgreSQL connection string, as `--from`/`--to`
/// name them.
fn location(flag: &str, given: &str) -> anyhow::Result<Location> {
    if let Some(path) = given.strip_prefix("sqlite:") {
        return Ok(Location::Sqlite(path.into()));
    }
    let postgres = given.starts_with("postgres://")
        || given.starts_with("postgresql://")
        || given.contains('=');
    if !postgres {
        anyhow::bail!(
            "{flag} is `sqlite:PATH` (e.g. sqlite:~/.pincer/pincer.db) or a PostgreSQL \
             connection string (postgres://… or host=… dbname=…), not `{given}`"
        );
    }
    Ok(Location::Postgres(given.to_owned()))
}

pub fn run_copy(from: &str, to: &str) -> anyhow::Result<()> {
    let (from, to) = (location("--from", from)?, location("--to", to)?);
    match (&from, &to) {
        (Location::Sqlite(path), _) if !path.is_file() => {
            anyhow::bail!("--from: no SQLite file at {}", path.display())
        }
        (Location::Sqlite(_), Location::Sqlite(_)) => anyhow::bail!(
            "--from and --to are both SQLite files: copy one with `sqlite3 FROM \".backup TO\"`"
        ),
        (Location::Postgres(_), Location::Postgres(_)) => anyhow::bail!(
            "--from and --to are both PostgreSQL databases: copy one with pg_dump and pg_restore"
        ),
        (_, Location::Sqlite(path)) if path.exists() => anyhow::bail!(
            "--to: {} exists already; copy into a new file, so nothing there is mixed with or \
             overwritten by the copy",
            path.display()
        ),
        _ => {}
    }
    create_tables(&to).with_context(|| format!("creating pincer's tables in {to}"))?;
    println!("copying {from} to {to}");
    crate::db::copy::copy(&from, &to, &mut |done| {
        println!(
            "  {:<28} {:>9} row(s)  sha256 {}…  (same read back)",
            done.table, done.rows, done.checksum
        );
    })?;
    // The memory index was made empty with the tables; rebuilt now from
    // the copied memories (the store rebuilds an index of another version).
    let db = crate::db::Db::open(&to)?;
    db.run(|c| c.execute("DELETE FROM memory_meta WHERE key = 'index_version'", &[]))?;
    let memories = crate::memory::MemoryStore::open_at(&to, None)?;
    drop(memories);
    let spend: i64 = db.run(|c| {
        c.query_one("SELECT COUNT(*) FROM gateway_spend_by_day", &[])?
            .get(0)
    })?;
    let index = match db.dialect() {
        crate::db::Dialect::Sqlite => "SELECT COUNT(*) FROM memory_index",
        crate::db::Dialect::Postgres => "SELECT COUNT(*) FROM memory_index_docs",
    };
    let indexed: i64 = db.run(|c| c.query_one(index, &[])?.get(0))?;
    println!(
        "  rebuilt: gateway_spend_by_day ({spend} day(s)), the memory index ({indexed} memories)"
    );
    match &to {
        Location::Postgres(_) => println!(
            "done: set `state: {{backend: postgres, url: …}}` in pincer.yaml to use it; {from} is left as it was"
        ),
        Location::Sqlite(_) => println!(
            "done: a home uses it as $PINCER_HOME/{} with `state.backend: sqlite` (the default); \
             {from} is left as it was",
            crate::db::FILE_NAME
        ),
    }
    Ok(())
}

/// Every store's tables at `to`, made by the stores themselves.
fn create_tables(to: &Location) -> anyhow::Result<()> {
    crate::audit::AuditLog::open_at(to)?;
    crate::gateway::KeyStore::open_at(to)?;
    crate::gateway::Ledger::open_at(to, crate::db::now_ms)?.shutdown();
    crate::scheduler::Store::open_at(to)?;
    crate::approvals::ApprovalStore::open_at(to)?;
    crate::channels::ChannelStore::open_at(to)?;
    crate::pairing::PairingStore::open_at(to)?;
    crate::sessions::SessionStore::open_at(to)?;
    crate::memory::MemoryStore::open_at(to, None)?;
    crate::web::WebAuth::open_at(to)?;
    crate::plugins::KvStore::open_at(to)?;
    crate::containers::create_user_table(to)?;
    crate::cluster::Leases::open(to)?;
    crate::cluster::Members::open(to)?;
    Ok(())
}
