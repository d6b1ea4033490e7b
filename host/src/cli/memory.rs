//! `pincer memory …`: add, search, list and forget a workspace's memories.

use std::path::Path;

use anyhow::{Context as _, bail};

use super::{Context, MemoryCommand};
use crate::memory::{MemoryKind, MemoryStore};

pub fn run(config_flag: Option<&Path>, command: MemoryCommand) -> anyhow::Result<()> {
    let ctx = Context::load(config_flag)?;
    let workspace = match &command {
        MemoryCommand::Add { workspace, .. }
        | MemoryCommand::Search { workspace, .. }
        | MemoryCommand::List { workspace, .. }
        | MemoryCommand::Forget { workspace, .. } => workspace.clone(),
    };
    ctx.check_workspace(&workspace)?;
    let store = MemoryStore::open(&ctx.home)?;
    match command {
        MemoryCommand::Add { kind, text, .. } => {
            let kind: MemoryKind = kind.parse()?;
            let memory = store.add(&workspace, kind, &text.join(" "))?;
            println!("{}", memory.id);
        }
        MemoryCommand::Search {
            query, limit, json, ..
        } => {
            let found = store.search(&workspace, &query.join(" "), limit)?;
            if json.json {
                println!("{}", serde_json::to_string_pretty(&found)?);
            } else if found.is_empty() {
                println!("no memories match");
            } else {
                println!(
                    "{:>6}  {:<10}  {:>7}  {:<9}  TEXT",
                    "ID", "KIND", "SCORE", "MATCH"
                );
                for r in found {
                    let matched = match r.matched_by {
                        crate::memory::MatchKind::Index => "index",
                        crate::memory::MatchKind::Substring => "substring",
                    };
                    println!(
                        "{:>6}  {:<10}  {:>7.3}  {:<9}  {}",
                        r.memory.id,
                        r.memory.kind,
                        r.score,
                        matched,
                        one_line(&r.memory.text)
                    );
                }
            }
        }
        MemoryCommand::List { limit, json, .. } => {
            let memories = store.list(&workspace, limit)?;
            if json.json {
                println!("{}", serde_json::to_string_pretty(&memories)?);
            } else if memories.is_empty() {
                println!("no memories in workspace {workspace}");
            } else {
                println!("{:>6}  {:<10}  {:>5}  TEXT", "ID", "KIND", "USES");
                for m in memories {
                    println!(
                        "{:>6}  {:<10}  {:>5}  {}",
                        m.id,
                        m.kind,
                        m.use_count,
                        one_line(&m.text)
                    );
                }
            }
        }
        MemoryCommand::Forget { id, .. } => {
            if !store
                .forget(&workspace, id)
                .with_context(|| format!("forgetting memory #{id}"))?
            {
                bail!(
                    "workspace {workspace} has no memory #{id} (`pincer memory list --workspace {workspace}` shows the ids)"
                );
            }
            println!("forgot memory #{id}");
        }
    }
    Ok(())
}

/// Newlines shown as `⏎` so each memory stays on one row.
fn one_line(text: &str) -> String {
    text.replace("\r\n", "\n").replace('\n', " ⏎ ")
}
