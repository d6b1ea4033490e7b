//! The `local/` provider's speed next to llama.cpp (llama-cpp-python) on the
//! same GGUF, prompt, generated-token count and thread count.
//!
//!     bench/run-local-model.sh          (fetches the model, sets up the
//!                                        reference, then runs this)
//!     PINCER_BENCH_MODEL=…/SmolLM2-135M-Instruct.Q4_1.gguf \
//!         cargo bench -p pincer-infer --bench local_model
//!
//! Prints prompt tokens/s, generation tokens/s and time to first token of
//! each, their ratio, and whether the prompt's token ids agree. It lives in
//! pincer-infer (not the host) so that a release build of it takes seconds,
//! not a release build of wasmtime. Environment: `PINCER_BENCH_MODEL`
//! (required), `BENCH_THREADS` (2), `BENCH_GEN_TOKENS` (128),
//! `PINCER_BENCH_LLAMA_PYTHON` (the reference's python; skipped if unset).

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use pincer_infer::{Generator, GgufFile, Limits, Model, Sampling, Tokenizer, compute_pool};
use serde_json::Value;

const QUESTION: &str = "You are reviewing the design of a small steam engine for a museum \
exhibit. Explain, step by step, how the boiler, the piston, the valves and the flywheel work \
together, what limits the engine's efficiency, and which safety checks a volunteer should \
make before every demonstration. Keep the explanation accurate and friendly for visitors who \
have never seen an engine like this before, and finish with three short questions a child \
might ask about it, each with an answer.";

struct Figures {
    prompt_tokens: usize,
    prompt_secs: f64,
    gen_tokens: usize,
    gen_secs: f64,
    ttft: f64,
}

impl Figures {
    fn row(&self, name: &str) {
        println!(
            "{name:<28} {:>10.0} {:>10.1} {:>10.1}",
            self.prompt_tokens as f64 / self.prompt_secs,
            self.gen_tokens as f64 / self.gen_secs,
            self.ttft * 1000.0
        );
    }
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

type Error = Box<dyn std::error::Error>;

fn main() -> Result<(), Error> {
    let threads = env_usize("BENCH_THREADS", 2);
    let n_gen = env_usize("BENCH_GEN_TOKENS", 128);
    let path = PathBuf::from(std::env::var_os("PINCER_BENCH_MODEL").ok_or(
        "set PINCER_BENCH_MODEL to SmolLM2-135M-Instruct.Q4_1.gguf (bench/run-local-model.sh does)",
    )?);
    let loading = Instant::now();
    let file = GgufFile::open(&path, Some("smollm2"))?;
    let model = Model::load(&file)?;
    let tokenizer = Tokenizer::from_gguf(&file)?;
    drop(file);
    println!(
        "model: {} (loaded in {:.0} ms); {threads} threads; {n_gen} generated tokens, greedy",
        path.display(),
        loading.elapsed().as_secs_f64() * 1000.0
    );
    // SmolLM2's own chat template renders a lone user turn like this.
    let prompt_text = format!(
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging \
         Face<|im_end|>\n<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n"
    );
    let prompt = tokenizer.encode(&prompt_text);
    let pool = compute_pool(threads)?;
    let limits = Limits {
        max_tokens: n_gen,
        stop: Vec::new(),
        ignore_eos: true,
    };
    let sampling = Sampling {
        temperature: 0.0,
        top_p: 1.0,
        seed: 0,
    };
    let cancel = AtomicBool::new(false);
    let mut best: Option<Figures> = None;
    let mut text = String::new();
    for _ in 0..4 {
        let started = Instant::now();
        let mut first = None;
        text.clear();
        let generator = Generator {
            model: &model,
            tokenizer: &tokenizer,
            pool: &pool,
        };
        let done = generator.run(&prompt, &limits, &sampling, &cancel, |piece| {
            first.get_or_insert_with(|| started.elapsed().as_secs_f64());
            text.push_str(piece);
            true
        });
        let run = Figures {
            prompt_tokens: prompt.len(),
            prompt_secs: done.prompt_secs,
            gen_tokens: done.completion_tokens,
            gen_secs: done.generation_secs,
            ttft: first.unwrap_or(f64::NAN),
        };
        best = Some(match best {
            Some(b) => Figures {
                prompt_secs: b.prompt_secs.min(run.prompt_secs),
                gen_secs: b.gen_secs.min(run.gen_secs),
                ttft: b.ttft.min(run.ttft),
                ..run
            },
            None => run,
        });
    }
    let ours = best.ok_or("no run")?;
    println!("prompt: {} tokens\n", prompt.len());
    println!(
        "{:<28} {:>10} {:>10} {:>10}",
        "runtime (best of runs)", "prompt t/s", "gen t/s", "TTFT ms"
    );
    ours.row("pincer local/ (pure Rust)");

    let Ok(python) = std::env::var("PINCER_BENCH_LLAMA_PYTHON") else {
        println!("\n(reference skipped: run bench/run-local-model.sh to set up llama-cpp-python)");
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    let prompt_file = dir.path().join("prompt.txt");
    std::fs::write(&prompt_file, &prompt_text)?;
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../bench/local_model_reference.py");
    let out = std::process::Command::new(python)
        .arg(script)
        .arg(&path)
        .arg(&prompt_file)
        .arg(n_gen.to_string())
        .arg(threads.to_string())
        .output()?;
    if !out.status.success() {
        return Err(format!(
            "the reference failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    let reference: Value = serde_json::from_slice(&out.stdout)?;
    let number = |k: &str| reference[k].as_f64().unwrap_or(f64::NAN);
    let theirs = Figures {
        prompt_tokens: reference["prompt_tokens"].as_u64().unwrap_or(0) as usize,
        prompt_secs: number("prompt_secs"),
        gen_tokens: reference["gen_tokens"].as_u64().unwrap_or(0) as usize,
        gen_secs: number("gen_secs"),
        ttft: number("ttft"),
    };
    theirs.row("llama-cpp-python 0.3.36");
    let ratio = |a: f64, b: f64| a / b;
    println!(
        "\nllama.cpp / pincer: prompt {:.2}x, generation {:.2}x, TTFT {:.2}x (pincer's target: generation within 1.5x)",
        ratio(
            theirs.prompt_tokens as f64 / theirs.prompt_secs,
            ours.prompt_tokens as f64 / ours.prompt_secs
        ),
        ratio(
            theirs.gen_tokens as f64 / theirs.gen_secs,
            ours.gen_tokens as f64 / ours.gen_secs
        ),
        ratio(ours.ttft, theirs.ttft),
    );
    let ids: Vec<u32> = reference["token_ids"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_u64())
                .map(|v| v as u32)
                .collect()
        })
        .unwrap_or_default();
    if ids == prompt {
        println!("prompt token ids: identical ({} tokens)", ids.len());
    } else {
        let at = ids.iter().zip(&prompt).position(|(a, b)| a != b);
        println!(
            "prompt token ids DIFFER (ours {}, llama.cpp {}, first difference at {at:?})",
            prompt.len(),
            ids.len()
        );
    }
    let theirs_text = reference["text"].as_str().unwrap_or_default();
    let same = text
        .chars()
        .zip(theirs_text.chars())
        .take_while(|(a, b)| a == b)
        .count();
    println!(
        "greedy continuations agree on the first {same} characters (of {} / {})",
        text.chars().count(),
        theirs_text.chars().count()
    );
    Ok(())
}
