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
        | MemoryCommand::Forget { workspace, .. } => Some(workspace.clone()),
        MemoryCommand::Reindex { workspace } => workspace.clone(),
    };
    if let Some(workspace) = &workspace {
        ctx.check_workspace(workspace)?;
    }
    let workspace = workspace.unwrap_or_default();
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
            if !json.json && store.embedder().is_none() {
                eprintln!("{}", words_only_note(&ctx));
            }
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
        MemoryCommand::Reindex { workspace: only } => reindex(&store, only.as_deref())?,
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
        crate::memory::MatchKind::Meaning => "meaning",
    }
}

/// Why recall is by words only.
fn words_only_note(ctx: &Context) -> String {
    if !ctx.config.memory.embeddings.is_on() {
        return "note: recall by words only (memory.embeddings: off)".to_owned();
    }
    format!(
        "note: recall by words only: no embedding model (`pincer model fetch {}` adds recall by meaning)",
        crate::gateway::model_fetch::E5_SMALL.name
    )
}

/// `memory reindex`: embeds what lacks a vector, one progress line per
/// batch (rewritten in place on a terminal).
fn reindex(store: &crate::memory::MemoryStore, workspace: Option<&str>) -> anyhow::Result<()> {
    use std::io::{IsTerminal as _, Write as _};
    let Some(embedder) = store.embedder() else {
        bail!(
            "no embedding model to reindex with: run `pincer model fetch {}` (and keep memory.embeddings on)",
            crate::gateway::model_fetch::E5_SMALL.name
        );
    };
    let pending = store.unembedded(workspace)?;
    if pending == 0 {
        println!("every memory has a vector of {}", embedder.model_id());
        return Ok(());
    }
    let terminal = std::io::stderr().is_terminal();
    let started = std::time::Instant::now();
    let mut stderr = std::io::stderr();
    let complete = store.catch_up(workspace, &mut |done, total| {
        let rate = done as f64 / started.elapsed().as_secs_f64().max(1e-3);
        let line = format!(
            "embedding {done}/{total} ({:.0} %, {rate:.0}/s)",
            done as f64 * 100.0 / total.max(1) as f64
        );
        let _ = if terminal {
            write!(stderr, "\r{line}")
        } else {
            writeln!(stderr, "{line}")
        };
    })?;
    if terminal {
        eprintln!();
    }
    if !complete {
        bail!("the embedding model could not embed (see the log above); memories are unchanged");
    }
    println!(
        "embedded {pending} memories with {} in {:.1} s",
        embedder.model_id(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
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
        "relevance by words = 1/({k} + word rank) + {w}/({k} + variant rank); recency and use only break ties",
        k = crate::memory::rank::K,
        w = crate::memory::rank::VARIANT_WEIGHT
    );
    if explained.results.iter().any(|r| {
        r.why
            .as_ref()
            .is_some_and(|w| w.lexical_rank.is_some() || w.vector_rank.is_some())
    }) {
        let h = crate::memory::rank::Hybrid::DEFAULT;
        println!(
            "with meaning: relevance = 1/({k} + words rank) + {w}/({k} + meaning rank)",
            k = h.k,
            w = h.meaning_weight
        );
    }
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
        if let Some(similarity) = why.similarity {
            println!(
                "   meaning:      #{} (similarity {similarity:.3})",
                why.vector_rank.unwrap_or_default()
            );
        } else if why.lexical_rank.is_some() {
            println!("   meaning:      not in it");
        }
        match (why.lexical_rank, r.matched_by) {
            (_, crate::memory::MatchKind::Meaning) => {
                println!(
                    "   relevance {:.4}, score {:.4}: found by meaning alone",
                    why.relevance, r.score
                );
                continue;
            }
            (Some(lexical), crate::memory::MatchKind::Substring) => {
                println!("   words:        #{lexical} (substring: the index had no match)");
                continue;
            }
            (Some(lexical), _) => {
                println!("   words:        #{lexical} (fused from the two lists below)")
            }
            (None, _) => {}
        }
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
