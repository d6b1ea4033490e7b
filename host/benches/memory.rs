//! Memory: index build and query latency at scale, segmentation throughput,
//! and recall quality against plain FTS5 tokenizers.
//!
//!     cargo bench -p pincer --bench memory                 # 100k and 1M
//!     cargo bench -p pincer --bench memory -- 10000        # other sizes (0: none)
//!     cargo bench -p pincer --bench memory -- --scale-only 1000000   # only the scale rows
//!     cargo bench -p pincer --bench memory -- --quality-only         # only the quality tables
//!     cargo bench -p pincer --bench memory -- --quality-only --postgres  # and pincer on PostgreSQL
//!     cargo bench -p pincer --bench memory -- --tune                 # the fusion grid, dev split only
//!     cargo bench -p pincer --bench memory -- --meaning 20000        # meaning at scale: other size
//!     cargo bench -p pincer --bench memory -- --scale-only 0 --keep DIR  # meaning at scale, written once into DIR
//!
//! 1. **Scale.** N synthetic mixed Chinese/English memories (Zipf-distributed
//!    words from a few hundred, plus numbers, identifiers and names that make
//!    rare terms, as real memories have) are added to one workspace through
//!    [`MemoryStore::add_many`] in batches of 10k; 2,000 queries then go
//!    through [`MemoryStore::search`] (the ranking `recall` uses) and 500
//!    through `recall` itself (which also writes the use count): one to three
//!    words, or a fragment of a stored memory. Median, p99 and max.
//! 2. **Segmentation.** jieba-rs `cut_for_search` and pincer's term
//!    extraction over 4 MB of the same text, in MB/s.
//! 3. **Quality.** `benches/data/memory_labelled.json`: 305 hand-written
//!    memories of a team assistant in Chinese, English and mixed text, and
//!    261 queries that paraphrase them (never substrings), each with its
//!    relevant memories and language, split into `dev` (tuned on) and
//!    `heldout` (scored only at the end). pincer's real [`MemoryStore`]
//!    against two baselines ranked by BM25: FTS5 over jieba-rs
//!    `cut_for_search` words with the query's words ORed, and FTS5
//!    `trigram` with the query's 3-character windows ORed. MRR@10 overall and
//!    per language, R@1, R@5 (the share of queries with a relevant memory in
//!    the top 1 or 5) and
//!    the queries with no relevant memory in the top 10. Queries carry a
//!    difficulty: `standard` (the paraphrases written first) and `hard`
//!    (vocabulary gaps: synonyms, colloquial wording, across languages),
//!    reported apart. pincer runs twice: by words only, and fused with the
//!    local embedding model (multilingual-e5-small, fetched like `pincer
//!    model fetch` into `$CARGO_TARGET_DIR/models`); "e5 alone" ranks by the
//!    model's similarity only. Queries with no relevant memory (`relevant:
//!    []`) count how often each system answers anyway.
//!
//! 4. **Meaning at scale.** `--meaning N` (default 100k; 0 skips): N
//!    synthetic memories written through `add_many` with embedding (the
//!    write rate includes it), then searches with the query embedding
//!    included, and the resident memory of the process.

use std::path::Path;
use std::time::{Duration, Instant};

use std::sync::Arc;

use pincer::db::Location;
use pincer::gateway::model_fetch::{self, E5_SMALL};
use pincer::memory::rank::Hybrid;
use pincer::memory::{Embedder, MatchKind, MemoryKind, MemoryStore, segment};
use rusqlite::Connection;
use serde::Deserialize;

const WORKSPACE: &str = "bench";
const BATCH: usize = 10_000;
const SEARCHES: usize = 2_000;
const RECALLS: usize = 500;
const LIMIT: usize = 5;

fn main() -> anyhow::Result<()> {
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .scan(false, |after_flag, a| {
            // `--meaning N` takes its number.
            let skip = *after_flag || a.starts_with('-');
            *after_flag = a == "--meaning" || a == "--keep";
            Some((!skip).then_some(a))
        })
        .flatten()
        .map(|a| a.parse())
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow::anyhow!("sizes are whole numbers of memories: {e}"))?;
    let sizes = if sizes.is_empty() {
        vec![100_000, 1_000_000]
    } else {
        sizes
    };

    let args: Vec<String> = std::env::args().collect();
    let flag = |name: &str| args.iter().any(|a| a == name);
    if flag("--tune") {
        return tune();
    }
    if !flag("--scale-only") {
        quality(flag("--postgres"))?;
        if flag("--quality-only") {
            return Ok(());
        }
        segmentation();
    }
    let meaning_size = args
        .iter()
        .position(|a| a == "--meaning")
        .and_then(|i| args.get(i + 1))
        .map(|n| n.parse::<usize>())
        .transpose()?
        .unwrap_or(100_000);

    println!("\n## Index build and query latency (one workspace, mixed Chinese/English)\n");
    println!(
        "| memories | build | build CPU | build rate | db size | search median | p99 | max | recall median | p99 |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut paths = Vec::new();
    for n in sizes.into_iter().filter(|n| *n > 0) {
        paths.push(scale(n)?);
    }
    println!(
        "\nsearches by how they were answered:\n{}",
        paths.join("\n")
    );
    let keep = args
        .iter()
        .position(|a| a == "--keep")
        .and_then(|i| args.get(i + 1))
        .map(Path::new);
    if meaning_size > 0 {
        meaning_scale(meaning_size, keep)?;
    }
    Ok(())
}

// ---------------------------------------------------------------- scale

/// Prints the size's row of the table; returns its searches by path.
fn scale(n: usize) -> anyhow::Result<String> {
    let home = tempfile::tempdir()?;
    // To look at the database afterwards: PINCER_BENCH_KEEP=DIR keeps each
    // size's database as DIR/<n>/pincer.db.
    let home = match std::env::var_os("PINCER_BENCH_KEEP") {
        Some(dir) => {
            let dir = Path::new(&dir).join(n.to_string());
            std::fs::create_dir_all(&dir)?;
            dir
        }
        None => home.path().to_path_buf(),
    };
    let store = MemoryStore::open(&home)?;
    let mut corpus = Corpus::new(0x5eed ^ n as u64);
    let started = Instant::now();
    let cpu_started = cpu_time();
    let mut kept = Vec::new();
    let mut added = 0;
    while added < n {
        let batch: Vec<String> = (0..BATCH.min(n - added)).map(|_| corpus.memory()).collect();
        // Keep one memory in 500 to quote fragments of in queries.
        kept.extend(batch.iter().step_by(500).cloned());
        store.add_many(WORKSPACE, MemoryKind::Fact, &batch)?;
        added += batch.len();
        eprint!("\r  built {added}/{n}");
    }
    let build = started.elapsed();
    let build_cpu = cpu_time().saturating_sub(cpu_started);
    eprintln!();
    let size = db_bytes(&home);

    let queries = corpus.queries(&kept, SEARCHES + RECALLS);
    // By how each search was answered: index or substring, quoted fragment
    // or free words.
    let mut by_path: [Vec<Duration>; 4] = Default::default();
    let mut searches = Vec::with_capacity(SEARCHES);
    for (i, q) in queries[..SEARCHES].iter().enumerate() {
        let started = Instant::now();
        let found = store.search(WORKSPACE, q, LIMIT)?;
        let took = started.elapsed();
        searches.push(took);
        let substring = found
            .first()
            .is_none_or(|r| r.matched_by == MatchKind::Substring);
        by_path[usize::from(substring) * 2 + usize::from(i % 5 == 0)].push(took);
    }
    let mut recalls = Vec::with_capacity(RECALLS);
    for q in &queries[SEARCHES..] {
        let started = Instant::now();
        store.recall(WORKSPACE, q, LIMIT)?;
        recalls.push(started.elapsed());
    }
    let s = Stats::of(&mut searches);
    let r = Stats::of(&mut recalls);
    println!(
        "| {n} | {:.1} s | {:.1} s | {:.0}/s | {:.0} MB | {:.2} ms | {:.2} ms | {:.1} ms | {:.2} ms | {:.2} ms |",
        build.as_secs_f64(),
        build_cpu.as_secs_f64(),
        n as f64 / build.as_secs_f64(),
        size as f64 / 1e6,
        ms(s.median),
        ms(s.p99),
        ms(s.max),
        ms(r.median),
        ms(r.p99),
    );
    let labels = [
        "index, words",
        "index, fragment",
        "substring, words",
        "substring, fragment",
    ];
    let parts: Vec<String> = labels
        .iter()
        .zip(&mut by_path)
        .filter(|(_, t)| !t.is_empty())
        .map(|(label, t)| {
            let count = t.len();
            let s = Stats::of(t);
            format!(
                "{label}: {count} searches, median {:.2} ms, p99 {:.2} ms",
                ms(s.median),
                ms(s.p99)
            )
        })
        .collect();
    Ok(format!("- {n}: {}", parts.join(" · ")))
}

/// Recall by meaning at `n` memories: the write rate with embedding, search
/// latency with the query's embedding, the query embedding alone, RSS.
fn meaning_scale(n: usize, keep: Option<&Path>) -> anyhow::Result<()> {
    let (embedder, model_kib) = embedder()?;
    let temp = tempfile::tempdir()?;
    let home = keep.unwrap_or(temp.path());
    std::fs::create_dir_all(home)?;
    // `--keep DIR`: the store written once is searched again by later runs
    // (the corpus is generated again, not stored, to rebuild the queries).
    let written = home.join(format!("bench-written-{n}"));
    let reuse = written.exists();
    let store = MemoryStore::open_with(home, Some(embedder.clone()))?;
    let mut corpus = Corpus::new(0x5eed ^ n as u64);
    let started = Instant::now();
    let mut kept = Vec::new();
    let mut added = 0;
    while added < n {
        let batch: Vec<String> = (0..1000.min(n - added)).map(|_| corpus.memory()).collect();
        kept.extend(batch.iter().step_by(500).cloned());
        if !reuse {
            store.add_many(WORKSPACE, MemoryKind::Fact, &batch)?;
        }
        added += batch.len();
        eprint!(
            "\r  embedded and stored {added}/{n} ({:.0}/s)",
            added as f64 / started.elapsed().as_secs_f64()
        );
    }
    let build = started.elapsed();
    eprintln!();
    if keep.is_some() && !reuse {
        std::fs::write(&written, b"")?;
    }
    let queries = corpus.queries(&kept, 300);
    let mut embeds = Vec::new();
    for q in &queries[..100] {
        let started = Instant::now();
        embedder.query(q).map_err(|why| anyhow::anyhow!("{why}"))?;
        embeds.push(started.elapsed());
    }
    // The first search loads the workspace's vectors.
    let started = Instant::now();
    store.search(WORKSPACE, &queries[0], LIMIT)?;
    let first = started.elapsed();
    let mut searches = Vec::new();
    for q in &queries {
        let started = Instant::now();
        store.search(WORKSPACE, q, LIMIT)?;
        searches.push(started.elapsed());
    }
    let s = Stats::of(&mut searches);
    let e = Stats::of(&mut embeds);
    println!(
        "\n## Recall by meaning at scale (one workspace, synthetic mixed text, multilingual-e5-small)\n"
    );
    println!(
        "| memories | write with embedding | rate | first search (loads vectors) | search median | p99 | query embedding median | model loaded (RSS added) | process RSS peak |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let (write, rate) = if reuse {
        ("kept from an earlier run".to_owned(), "-".to_owned())
    } else {
        (
            format!("{:.1} s", build.as_secs_f64()),
            format!("{:.0}/s", n as f64 / build.as_secs_f64()),
        )
    };
    println!(
        "| {n} | {write} | {rate} | {:.0} ms | {:.2} ms | {:.2} ms | {:.2} ms | {:.0} MB | {:.0} MB |",
        ms(first),
        ms(s.median),
        ms(s.p99),
        ms(e.median),
        model_kib as f64 / 1024.0,
        rss_kib("VmHWM") as f64 / 1024.0,
    );
    Ok(())
}

/// A line of `/proc/self/status`, in KiB (0 if unreadable).
fn rss_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// The process's CPU time so far (user + system, every thread): unlike the
/// wall clock, it hardly moves when other work shares the machine.
fn cpu_time() -> Duration {
    // SAFETY: getrusage only writes the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

fn db_bytes(home: &Path) -> u64 {
    std::fs::read_dir(home)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum()
}

struct Stats {
    median: Duration,
    p99: Duration,
    max: Duration,
}

impl Stats {
    fn of(samples: &mut [Duration]) -> Stats {
        samples.sort();
        let at = |q: f64| {
            samples
                .get(((samples.len().saturating_sub(1)) as f64 * q).round() as usize)
                .copied()
                .unwrap_or_default()
        };
        Stats {
            median: at(0.5),
            p99: at(0.99),
            max: at(1.0),
        }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

// ---------------------------------------------------------------- segmentation

fn segmentation() {
    let mut corpus = Corpus::new(7);
    let mut text = String::new();
    while text.len() < 4_000_000 {
        text.push_str(&corpus.memory());
        text.push('\n');
    }
    let lines: Vec<&str> = text.lines().collect();
    let jieba = segment::jieba();
    let started = Instant::now();
    let mut words = 0;
    for line in &lines {
        words += jieba.cut_for_search(line, true).len();
    }
    let cut = started.elapsed();
    let started = Instant::now();
    let mut terms = 0;
    for line in &lines {
        terms += segment::terms(line).len();
    }
    let pincer = started.elapsed();
    let mb = text.len() as f64 / 1e6;
    println!("\n## Segmentation ({mb:.1} MB of mixed text, one thread)\n");
    println!("| step | throughput | output |");
    println!("|---|---:|---:|");
    println!(
        "| jieba-rs cut_for_search | {:.1} MB/s | {words} words |",
        mb / cut.as_secs_f64()
    );
    println!(
        "| pincer index terms (cut + split + lowercase + stop words) | {:.1} MB/s | {terms} terms |",
        mb / pincer.as_secs_f64()
    );
}

// ---------------------------------------------------------------- quality

#[derive(Deserialize)]
struct Labelled {
    memories: Vec<LabelledMemory>,
    queries: Vec<Query>,
}

#[derive(Deserialize)]
struct LabelledMemory {
    id: usize,
    text: String,
}

#[derive(Deserialize)]
struct Query {
    q: String,
    lang: String,
    relevant: Vec<usize>,
    split: String,
    #[serde(default = "standard")]
    difficulty: String,
}

fn standard() -> String {
    "standard".into()
}

/// A ranking under test: the labelled ids of its top 10 for a query.
type Ranker<'a> = &'a dyn Fn(&str) -> anyhow::Result<Vec<usize>>;

const LANGS: [&str; 3] = ["zh", "en", "mixed"];
const DIFFICULTIES: [&str; 2] = ["standard", "hard"];

/// The embedding model, fetched once per machine as the tests do, loaded
/// once; and how much resident memory loading it added, in KiB.
fn embedder() -> anyhow::Result<(Arc<Embedder>, u64)> {
    static LOADED: std::sync::OnceLock<(Arc<Embedder>, u64)> = std::sync::OnceLock::new();
    if let Some(loaded) = LOADED.get() {
        return Ok(loaded.clone());
    }
    let path = model_fetch::ensure_model(
        &model_fetch::test_models_dir(),
        &E5_SMALL,
        None,
        &mut |_| {},
    )?;
    let embedder = Arc::new(Embedder::at(path, format!("{}@bench", E5_SMALL.name)));
    let before = rss_kib("VmRSS");
    embedder.encoder().map_err(|why| anyhow::anyhow!("{why}"))?;
    let added = rss_kib("VmRSS").saturating_sub(before);
    Ok(LOADED.get_or_init(|| (embedder, added)).clone())
}

/// The labelled set in a store ranking with `embedder`: the store, and the
/// labels of its memory ids.
struct LabelledStore {
    _home: tempfile::TempDir,
    store: MemoryStore,
    ids: Vec<i64>,
    labels: Vec<usize>,
}

impl LabelledStore {
    fn new(data: &Labelled, embedder: Option<Arc<Embedder>>) -> anyhow::Result<Self> {
        let home = tempfile::tempdir()?;
        let at = Location::Sqlite(home.path().join(pincer::db::FILE_NAME));
        Self::at(data, &at, home, embedder)
    }

    /// The same store on a fresh database of a private PostgreSQL server
    /// (`pincer::db::testing`).
    fn on_postgres(data: &Labelled, embedder: Option<Arc<Embedder>>) -> anyhow::Result<Self> {
        let at = pincer::db::testing::database();
        Self::at(data, &at, tempfile::tempdir()?, embedder)
    }

    fn at(
        data: &Labelled,
        at: &Location,
        home: tempfile::TempDir,
        embedder: Option<Arc<Embedder>>,
    ) -> anyhow::Result<Self> {
        let texts: Vec<&str> = data.memories.iter().map(|m| m.text.as_str()).collect();
        let store = MemoryStore::open_at(at, embedder)?;
        let ids = store
            .add_many(WORKSPACE, MemoryKind::Fact, &texts)?
            .iter()
            .map(|m| m.id)
            .collect();
        Ok(Self {
            _home: home,
            store,
            ids,
            labels: data.memories.iter().map(|m| m.id).collect(),
        })
    }

    /// The label of memory `id`.
    fn label(&self, id: i64) -> Option<usize> {
        let i = self.ids.iter().position(|stored| *stored == id)?;
        Some(self.labels[i])
    }

    /// The labels of `MemoryStore::search`'s top 10.
    fn search(&self, q: &str) -> anyhow::Result<Vec<usize>> {
        Ok(self
            .store
            .search(WORKSPACE, q, 10)?
            .iter()
            .filter_map(|r| self.label(r.memory.id))
            .collect())
    }

    /// The labels of the `n` memories nearest in meaning, with their
    /// similarity ("e5 alone"; empty without the model).
    fn nearest(&self, q: &str, n: usize) -> anyhow::Result<Vec<(usize, f32)>> {
        Ok(self
            .store
            .nearest(WORKSPACE, q, n)?
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(id, similarity)| Some((self.label(id)?, similarity)))
            .collect())
    }
}

/// `postgres`: the same store on PostgreSQL too, its rows beside SQLite's.
fn quality(postgres: bool) -> anyhow::Result<()> {
    let data: Labelled = serde_json::from_str(include_str!("data/memory_labelled.json"))?;
    let texts: Vec<String> = data.memories.iter().map(|m| m.text.clone()).collect();
    let labels: Vec<usize> = data.memories.iter().map(|m| m.id).collect();
    let words_only = LabelledStore::new(&data, None)?;
    let (embedder, _) = embedder()?;
    let started = Instant::now();
    let hybrid = LabelledStore::new(&data, Some(embedder.clone()))?;
    let on_postgres = if postgres {
        Some((
            LabelledStore::on_postgres(&data, Some(embedder))?,
            LabelledStore::on_postgres(&data, None)?,
        ))
    } else {
        None
    };
    eprintln!(
        "embedded {} memories in {:.1} s",
        texts.len(),
        started.elapsed().as_secs_f64()
    );
    let jieba_docs: Vec<String> = texts.iter().map(|t| jieba_words(t).join(" ")).collect();
    let jieba = PlainFts::new("ascii", &jieba_docs, &labels)?;
    let trigram = PlainFts::new("trigram", &texts, &labels)?;
    let sqlite_and_baselines: [(&str, Ranker); 5] = [
        (
            "pincer, words and meaning (`MemoryStore::search`)",
            &|q: &str| hybrid.search(q),
        ),
        ("pincer, words only (no embedding model)", &|q: &str| {
            words_only.search(q)
        }),
        ("e5 alone (multilingual-e5-small cosine)", &|q: &str| {
            Ok(hybrid.nearest(q, 10)?.into_iter().map(|n| n.0).collect())
        }),
        (
            "FTS5 + jieba `cut_for_search`, BM25, terms ORed",
            &|q: &str| jieba.search(&jieba_words(q)),
        ),
        ("FTS5 `trigram`, BM25", &|q: &str| {
            trigram.search(&trigrams(q))
        }),
    ];
    let postgres_hybrid = |q: &str| match &on_postgres {
        Some((hybrid, _)) => hybrid.search(q),
        None => Ok(Vec::new()),
    };
    let postgres_words_only = |q: &str| match &on_postgres {
        Some((_, words_only)) => words_only.search(q),
        None => Ok(Vec::new()),
    };
    let mut systems = sqlite_and_baselines.to_vec();
    if on_postgres.is_some() {
        systems.insert(
            2,
            (
                "pincer on PostgreSQL, words and meaning",
                &postgres_hybrid as Ranker,
            ),
        );
        systems.insert(
            3,
            (
                "pincer on PostgreSQL, words only",
                &postgres_words_only as Ranker,
            ),
        );
    }
    println!(
        "## Recall quality (`benches/data/memory_labelled.json`: {} memories; tune on dev, score held-out at the end)",
        data.memories.len()
    );
    for split in ["dev", "heldout"] {
        let queries: Vec<&Query> = data.queries.iter().filter(|q| q.split == split).collect();
        let answerable: Vec<&Query> = queries
            .iter()
            .copied()
            .filter(|q| !q.relevant.is_empty())
            .collect();
        let unanswerable = queries.len() - answerable.len();
        let count = |lang: &str| answerable.iter().filter(|q| q.lang == lang).count();
        let hard = answerable.iter().filter(|q| q.difficulty == "hard").count();
        println!(
            "\n### {split}: {} queries (zh {}, en {}, mixed {}; standard {}, hard {}) and {unanswerable} about nothing stored\n",
            answerable.len(),
            count("zh"),
            count("en"),
            count("mixed"),
            answerable.len() - hard,
            hard,
        );
        println!(
            "| system | MRR@10 all | zh | en | mixed | standard | hard | R@1 | R@5 | hard R@5 | no hit in the top 10 | answered with nothing stored |"
        );
        println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for (name, ranked) in &systems {
            let scores = Scores::of(&queries, ranked)?;
            println!("| {name} | {} |", scores.row());
            if name.starts_with("pincer, words and") && split == "dev" && !scores.misses.is_empty()
            {
                eprintln!("pincer missed on dev: {}", scores.misses.join(" · "));
            }
        }
    }
    Ok(())
}

/// MRR@10, R@1 and R@5 of one system over some queries.
#[derive(Default)]
struct Scores {
    rr: Vec<(String, String, f64)>,
    r1: f64,
    r5: f64,
    hard_r5: f64,
    hard: usize,
    misses: Vec<String>,
    /// Queries about nothing stored that got an answer.
    answered_unanswerable: usize,
}

impl Scores {
    fn of(queries: &[&Query], ranked: Ranker) -> anyhow::Result<Scores> {
        let mut s = Scores::default();
        for query in queries {
            let got = ranked(&query.q)?;
            if query.relevant.is_empty() {
                s.answered_unanswerable += usize::from(!got.is_empty());
                continue;
            }
            let first = got.iter().position(|i| query.relevant.contains(i));
            let rr = first.map_or(0.0, |rank| 1.0 / (rank + 1) as f64);
            if first.is_none() {
                s.misses.push(query.q.clone());
            }
            s.rr.push((query.lang.clone(), query.difficulty.clone(), rr));
            // A relevant memory in the top k (twins in both languages are
            // all relevant, and one is an answer).
            let recall = |k: usize| f64::from(u8::from(first.is_some_and(|rank| rank < k)));
            s.r1 += recall(1);
            s.r5 += recall(5);
            if query.difficulty == "hard" {
                s.hard += 1;
                s.hard_r5 += recall(5);
            }
        }
        Ok(s)
    }

    fn mrr(&self, keep: impl Fn(&str, &str) -> bool) -> f64 {
        let kept: Vec<f64> = self
            .rr
            .iter()
            .filter(|(lang, difficulty, _)| keep(lang, difficulty))
            .map(|r| r.2)
            .collect();
        kept.iter().sum::<f64>() / kept.len().max(1) as f64
    }

    fn row(&self) -> String {
        let n = self.rr.len().max(1) as f64;
        let mut cells = vec![format!("{:.3}", self.mrr(|_, _| true))];
        cells.extend(
            LANGS
                .iter()
                .map(|l| format!("{:.3}", self.mrr(|lang, _| lang == *l))),
        );
        cells.extend(
            DIFFICULTIES
                .iter()
                .map(|d| format!("{:.3}", self.mrr(|_, difficulty| difficulty == *d))),
        );
        cells.push(format!("{:.3}", self.r1 / n));
        cells.push(format!("{:.3}", self.r5 / n));
        cells.push(format!("{:.3}", self.hard_r5 / self.hard.max(1) as f64));
        cells.push(self.misses.len().to_string());
        cells.push(self.answered_unanswerable.to_string());
        cells.join(" | ")
    }
}

/// `--tune`: the fusion's parameters over a grid, scored on the dev split
/// only: MRR@10 (all, and hard) and how many queries about nothing stored
/// still get an answer. Each query's two lists are computed once
/// (`search` of a store without the model, `nearest` of one with it) and
/// fused here with the same `Hybrid::fuse` and `admits` the store uses.
fn tune() -> anyhow::Result<()> {
    let data: Labelled = serde_json::from_str(include_str!("data/memory_labelled.json"))?;
    let words = LabelledStore::new(&data, None)?;
    let meaning = LabelledStore::new(&data, Some(embedder()?.0))?;
    let dev: Vec<&Query> = data.queries.iter().filter(|q| q.split == "dev").collect();
    let mut lists = Vec::new();
    for q in &dev {
        lists.push((words.search(&q.q)?, meaning.nearest(&q.q, 32)?));
    }
    let mut nothing: Vec<f32> = Vec::new();
    let mut answer: Vec<f32> = Vec::new();
    for (q, (_, near)) in dev.iter().zip(&lists) {
        if q.relevant.is_empty() {
            nothing.extend(near.first().map(|n| n.1));
        } else if let Some(n) = near.iter().find(|n| q.relevant.contains(&n.0)) {
            answer.push(n.1);
        }
    }
    let quantiles = |v: &mut Vec<f32>| {
        v.sort_by(f32::total_cmp);
        [0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0]
            .iter()
            .map(|q| format!("{:.3}", v[((v.len() - 1) as f64 * q) as usize]))
            .collect::<Vec<_>>()
            .join(" ")
    };
    println!(
        "similarity quantiles (0 .1 .25 .5 .75 .9 1): best match of queries about nothing stored: {}; first relevant memory: {}\n",
        quantiles(&mut nothing),
        quantiles(&mut answer)
    );
    println!(
        "| k | meaning weight | floor | MRR@10 dev | standard | hard | answered with nothing stored |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    let mut rows = Vec::new();
    for k in [2.0, 5.0, 10.0, 20.0, 60.0] {
        for meaning_weight in [0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0, 5.0] {
            for floor in [0.0, 0.78, 0.80, 0.82, 0.84, 0.86, 0.88] {
                {
                    let hybrid = Hybrid {
                        k,
                        meaning_weight,
                        floor,
                    };
                    let fused = |q: &str| -> anyhow::Result<Vec<usize>> {
                        let i = dev.iter().position(|d| d.q == q).unwrap_or_default();
                        Ok(fuse_offline(&lists[i].0, &lists[i].1, hybrid))
                    };
                    let s = Scores::of(&dev, &fused)?;
                    rows.push((
                        hybrid,
                        s.mrr(|_, _| true),
                        s.mrr(|_, d| d == "standard"),
                        s.mrr(|_, d| d == "hard"),
                        s.answered_unanswerable,
                    ));
                }
            }
        }
    }
    rows.sort_by(|a, b| b.1.total_cmp(&a.1));
    for (h, all, standard, hard, answered) in rows.iter().take(40) {
        println!(
            "| {} | {} | {} | {all:.3} | {standard:.3} | {hard:.3} | {answered} |",
            h.k, h.meaning_weight, h.floor
        );
    }
    Ok(())
}

/// The store's fusion ([`MemoryStore::search`] with an embedder), on
/// precomputed lists of labels: top 10.
fn fuse_offline(lexical: &[usize], near: &[(usize, f32)], hybrid: Hybrid) -> Vec<usize> {
    let meaning_rank = |label: usize| near.iter().position(|n| n.0 == label).map(|i| i + 1);
    let mut scored: Vec<(usize, f64)> = lexical
        .iter()
        .enumerate()
        .map(|(i, &l)| (l, hybrid.fuse(Some(i + 1), meaning_rank(l))))
        .collect();
    for (i, &(l, similarity)) in near.iter().enumerate() {
        if !lexical.contains(&l) && hybrid.admits(similarity) {
            scored.push((l, hybrid.fuse(None, Some(i + 1))));
        }
    }
    scored.sort_by(|a, b| b.1.total_cmp(&a.1));
    scored.into_iter().take(10).map(|s| s.0).collect()
}

/// jieba-rs `cut_for_search` words, lowercased, without whitespace and
/// punctuation: the plain baseline's terms, no stop words, no stemming.
fn jieba_words(text: &str) -> Vec<String> {
    segment::jieba()
        .cut_for_search(text, true)
        .iter()
        .map(|t| t.word.to_lowercase())
        .filter(|w| w.chars().any(char::is_alphanumeric))
        .collect()
}

/// A baseline: the texts in an FTS5 table with one of SQLite's tokenizers.
struct PlainFts {
    conn: Connection,
    labels: Vec<usize>,
}

impl PlainFts {
    fn new(tokenizer: &str, texts: &[String], labels: &[usize]) -> anyhow::Result<Self> {
        let conn = Connection::open_in_memory()?;
        conn.execute_batch(&format!(
            "CREATE VIRTUAL TABLE t USING fts5(text, tokenize = '{tokenizer}')"
        ))?;
        for (i, text) in texts.iter().enumerate() {
            conn.execute(
                "INSERT INTO t (rowid, text) VALUES (?1, ?2)",
                rusqlite::params![i as i64, text],
            )?;
        }
        Ok(Self {
            conn,
            labels: labels.to_vec(),
        })
    }

    /// The labels of rows matching any of `tokens`, best BM25 first.
    fn search(&self, tokens: &[String]) -> anyhow::Result<Vec<usize>> {
        if tokens.is_empty() {
            return Ok(Vec::new());
        }
        let expression = tokens
            .iter()
            .map(|t| format!("\"{}\"", t.replace('"', "\"\"")))
            .collect::<Vec<_>>()
            .join(" OR ");
        let mut stmt = self
            .conn
            .prepare("SELECT rowid FROM t WHERE t MATCH ?1 ORDER BY bm25(t) LIMIT 10")?;
        let rows = stmt.query_map([expression], |r| r.get::<_, i64>(0))?;
        Ok(rows
            .filter_map(Result::ok)
            .filter_map(|row| self.labels.get(row.max(0) as usize).copied())
            .collect())
    }
}

/// Every 3-character window of each word: what a `trigram` index can match.
fn trigrams(q: &str) -> Vec<String> {
    let mut out = Vec::new();
    for word in q.split_whitespace() {
        let chars: Vec<char> = word.chars().collect();
        for window in chars.windows(3) {
            out.push(window.iter().collect());
        }
    }
    out
}

// ---------------------------------------------------------------- synthetic text

/// The word lists of `data/memory_vocabulary.txt`.
struct Vocabulary {
    zh: Vec<&'static str>,
    en: Vec<&'static str>,
    syllables: Vec<&'static str>,
    surnames: Vec<&'static str>,
    given: Vec<&'static str>,
}

impl Vocabulary {
    fn load() -> Self {
        let text = include_str!("data/memory_vocabulary.txt");
        let list = |name: &str| -> Vec<&'static str> {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(": "))
                .map(|words| words.split_whitespace().collect())
                .filter(|words: &Vec<&str>| !words.is_empty())
                .unwrap_or_else(|| panic!("memory_vocabulary.txt has no `{name}` list"))
        };
        Self {
            zh: list("zh"),
            en: list("en"),
            syllables: list("syllables"),
            surnames: list("surnames"),
            given: list("given"),
        }
    }
}

/// Deterministic pseudo-random text (splitmix64; Zipf over the word lists).
struct Corpus {
    state: u64,
    words: Vocabulary,
    zh: Vec<f64>,
    en: Vec<f64>,
}

fn zipf_cdf(n: usize) -> Vec<f64> {
    let mut acc = 0.0;
    let mut out: Vec<f64> = (1..=n)
        .map(|rank| {
            acc += 1.0 / rank as f64;
            acc
        })
        .collect();
    for x in &mut out {
        *x /= acc;
    }
    out
}

/// The word at quantile `u` of a Zipf distribution over `words`.
fn zipf<'a>(words: &[&'a str], cdf: &[f64], u: f64) -> &'a str {
    words[cdf.partition_point(|c| *c < u).min(words.len() - 1)]
}

impl Corpus {
    fn new(seed: u64) -> Self {
        let words = Vocabulary::load();
        Self {
            state: seed,
            zh: zipf_cdf(words.zh.len()),
            en: zipf_cdf(words.en.len()),
            words,
        }
    }

    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn any(&mut self, words: fn(&Vocabulary) -> &Vec<&'static str>) -> &'static str {
        let i = self.below(words(&self.words).len());
        words(&self.words)[i]
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// One piece of a memory: a Chinese or English word, a number, an
    /// identifier or a name.
    fn piece(&mut self) -> (bool, String) {
        match self.below(100) {
            0..=47 => {
                let u = self.unit();
                (true, zipf(&self.words.zh, &self.zh, u).to_string())
            }
            48..=87 => {
                let u = self.unit();
                (false, zipf(&self.words.en, &self.en, u).to_string())
            }
            88..=93 => (false, self.below(100_000).to_string()),
            94..=97 => {
                let a = self.any(|v| &v.syllables);
                let b = self.any(|v| &v.syllables);
                (false, format!("{a}{b}-{}", self.below(1000)))
            }
            _ => {
                let s = self.any(|v| &v.surnames);
                let g = self.any(|v| &v.given);
                (true, format!("{s}{g}"))
            }
        }
    }

    fn join(pieces: Vec<(bool, String)>) -> String {
        let mut out = String::new();
        let mut last_chinese = true;
        for (chinese, piece) in pieces {
            if !(out.is_empty() || (chinese && last_chinese)) {
                out.push(' ');
            }
            out.push_str(&piece);
            last_chinese = chinese;
        }
        out
    }

    /// A memory of 5 to 16 pieces.
    fn memory(&mut self) -> String {
        let n = 5 + self.below(12);
        let pieces = (0..n).map(|_| self.piece()).collect();
        Self::join(pieces)
    }

    /// A query of one to three pieces.
    fn query(&mut self) -> String {
        let n = 1 + self.below(3);
        let pieces = (0..n).map(|_| self.piece()).collect();
        Self::join(pieces)
    }

    /// `n` queries: every fifth a fragment of one of the `kept` memories
    /// (index `i` quotes `kept[i % len]`), the others free words.
    fn queries(&mut self, kept: &[String], n: usize) -> Vec<String> {
        (0..n)
            .map(|i| {
                if i % 5 == 0 {
                    self.fragment(&kept[i % kept.len()])
                } else {
                    self.query()
                }
            })
            .collect()
    }

    /// A few consecutive characters of `text`, as a user quoting it would.
    fn fragment(&mut self, text: &str) -> String {
        let chars: Vec<char> = text.chars().collect();
        let len = (4 + self.below(8)).min(chars.len());
        let start = self.below(chars.len() - len + 1);
        chars[start..start + len].iter().collect()
    }
}
