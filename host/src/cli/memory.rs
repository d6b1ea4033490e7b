//! `pincer memory …`: add, search, list and forget a workspace's memories.

use std::path::Path;

use anyhow::{Context as _, bail};

use super::{Context, MemoryCommand};
use crate::memory::MemoryKind;

pub fn run(config_flag: Option<&Path>, command: MemoryCommand) -> anyhow::Result<()> {
    let ctx = Context::load(config_flag)?;
    let workspace = match &command {
        MemoryCommand::Add { workspace, .. }
        | MemoryCommand::Search { workspace, .. }
        | MemoryCommand::List { workspace, .. }
        | MemoryCommand::Forget { workspace, .. } => workspace.clone(),
    };
    ctx.check_workspace(&workspace)?;
    let store = ctx.memory_store()?;
    match command {
        MemoryCommand::Add { kind, text, .. } => {
            let kind: MemoryKind = kind.parse()?;
            let memory = store.add(&workspace, kind, &text.join(" "))?;
            println!("{}", memory.id);
        }
        MemoryCommand::Search {
            query,
            limit,
            json,
            explain,
            ..
        } => {
            let query = query.join(" ");
            if explain {
                let explained = store.explain(&workspace, &query, limit)?;
                if json.json {
                    println!("{}", serde_json::to_string_pretty(&explained.results)?);
                } else {
                    print_explained(&explained);
                }
                return Ok(());
            }
            let found = store.search(&workspace, &query, limit)?;
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
                    println!(
                        "{:>6}  {:<10}  {:>7.3}  {:<9}  {}",
                        r.memory.id,
                        r.memory.kind,
                        r.score,
                        matched(r.matched_by),
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

fn matched(kind: crate::memory::MatchKind) -> &'static str {
    match kind {
        crate::memory::MatchKind::Index => "index",
        crate::memory::MatchKind::Substring => "substring",
    }
}

/// `memory search --explain`: the query's terms, then each result with its
/// ranks, the terms it holds and how much recency and use moved it.
fn print_explained(explained: &crate::memory::Explained) {
    let list = |terms: &[String]| {
        if terms.is_empty() {
            "none".to_owned()
        } else {
            terms.join(" ")
        }
    };
    println!("query words:    {}", list(&explained.words));
    if !explained.common_words.is_empty() {
        println!("  too common, left out: {}", list(&explained.common_words));
    }
    println!("query variants: {}", list(&explained.variants));
    if !explained.common_variants.is_empty() {
        println!(
            "  too common, left out: {}",
            list(&explained.common_variants)
        );
    }
    println!(
        "relevance = 1/({k} + word rank) + {w}/({k} + variant rank); recency and use only break ties",
        k = crate::memory::rank::K,
        w = crate::memory::rank::VARIANT_WEIGHT
    );
    if explained.results.is_empty() {
        println!("\nno memories match");
    }
    for (i, r) in explained.results.iter().enumerate() {
        println!(
            "\n{}. #{} [{}] {}",
            i + 1,
            r.memory.id,
            r.memory.kind,
            one_line(&r.memory.text)
        );
        let Some(why) = &r.why else {
            println!(
                "   found by {} (the index had no match)",
                matched(r.matched_by)
            );
            continue;
        };
        let rank = |rank: Option<usize>, terms: &[String]| match rank {
            Some(rank) => format!("#{rank} (holds {})", list(terms)),
            None => "not in it".to_owned(),
        };
        println!("   word list:    {}", rank(why.word_rank, &why.words));
        println!("   variant list: {}", rank(why.variant_rank, &why.variants));
        println!(
            "   coverage:     {:.0} % of the query's variants",
            why.coverage * 100.0
        );
        let tie = if why.relevance > 0.0 {
            (r.score / why.relevance - 1.0) * 100.0
        } else {
            0.0
        };
        println!(
            "   relevance {:.4}, score {:.4} (recency and use {:+.3} %)",
            why.relevance, r.score, tie
        );
    }
}
