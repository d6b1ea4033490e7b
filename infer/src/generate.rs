//! One generation: prompt in, text pieces out, until an end-of-turn token, a
//! stop sequence, `max_tokens`, the context limit or cancellation.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::model::{Model, softmax};
use crate::tokenizer::Tokenizer;

#[derive(Debug, Clone)]
pub struct Sampling {
    /// 0 = greedy.
    pub temperature: f32,
    pub top_p: f32,
    pub seed: u64,
}

#[derive(Debug, Clone)]
pub struct Limits {
    pub max_tokens: usize,
    pub stop: Vec<String>,
    /// Keep going past end-of-turn tokens (benchmarks: a fixed token count).
    pub ignore_eos: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    Stop,
    Length,
    Cancelled,
}

impl FinishReason {
    pub fn openai(self) -> &'static str {
        match self {
            FinishReason::Stop | FinishReason::Cancelled => "stop",
            FinishReason::Length => "length",
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Finished {
    pub reason: FinishReason,
    pub completion_tokens: usize,
    /// Time spent on the prompt, and on the generated tokens after it.
    pub prompt_secs: f64,
    pub generation_secs: f64,
}

/// splitmix64: small, seedable, good enough for sampling.
struct Rng(u64);

impl Rng {
    fn next_f32(&mut self) -> f32 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 40) as f32 / (1u64 << 24) as f32
    }
}

fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, x) in v.iter().enumerate() {
        if *x > v[best] {
            best = i;
        }
    }
    best as u32
}

fn sample(logits: &mut [f32], s: &Sampling, rng: &mut Rng) -> u32 {
    if s.temperature <= 0.0 {
        return argmax(logits);
    }
    for l in logits.iter_mut() {
        *l /= s.temperature;
    }
    softmax(logits);
    let r = rng.next_f32();
    if s.top_p < 1.0 {
        // Candidates below 1e-7 carry at most 0.5 % of the mass on a 50k
        // vocabulary; skipping them keeps the sort short.
        let mut candidates: Vec<(u32, f32)> = logits
            .iter()
            .enumerate()
            .filter(|(_, p)| **p > 1e-7)
            .map(|(i, p)| (i as u32, *p))
            .collect();
        candidates.sort_by(|a, b| b.1.total_cmp(&a.1));
        let mut mass = 0.0;
        let mut keep = 0;
        for (_, p) in &candidates {
            mass += p;
            keep += 1;
            if mass >= s.top_p {
                break;
            }
        }
        candidates.truncate(keep.max(1));
        let total: f32 = candidates.iter().map(|c| c.1).sum();
        let mut acc = 0.0;
        for (id, p) in &candidates {
            acc += p / total;
            if r < acc {
                return *id;
            }
        }
        return candidates.last().map_or(0, |c| c.0);
    }
    let mut acc = 0.0;
    for (i, p) in logits.iter().enumerate() {
        acc += p;
        if r < acc {
            return i as u32;
        }
    }
    argmax(logits)
}

/// Text not yet sent: held back while it could be the start of a stop
/// sequence or an incomplete UTF-8 character.
struct Output<'a> {
    stops: &'a [String],
    bytes: Vec<u8>,
    text: String,
}

impl Output<'_> {
    /// Adds a token's bytes; returns what can be sent now and whether a stop
    /// sequence was found.
    fn push(&mut self, token: &[u8]) -> (String, bool) {
        self.bytes.extend_from_slice(token);
        let valid = match std::str::from_utf8(&self.bytes) {
            Ok(s) => s.len(),
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            // Invalid bytes: replace them rather than stall.
            Err(_) => {
                let lossy = String::from_utf8_lossy(&self.bytes).into_owned();
                self.bytes = lossy.into_bytes();
                self.bytes.len()
            }
        };
        let rest = self.bytes.split_off(valid);
        self.text.push_str(&String::from_utf8_lossy(&self.bytes));
        self.bytes = rest;
        if let Some(at) = self
            .stops
            .iter()
            .filter_map(|s| self.text.find(s.as_str()))
            .min()
        {
            self.text.truncate(at);
            return (std::mem::take(&mut self.text), true);
        }
        let hold = self
            .stops
            .iter()
            .map(|s| partial_suffix(&self.text, s))
            .max()
            .unwrap_or(0);
        let send_to = self.text.len() - hold;
        let rest = self.text.split_off(send_to);
        (std::mem::replace(&mut self.text, rest), false)
    }

    fn flush(&mut self) -> String {
        let mut out = std::mem::take(&mut self.text);
        out.push_str(&String::from_utf8_lossy(&std::mem::take(&mut self.bytes)));
        out
    }
}

/// Length of the longest suffix of `text` that is a proper prefix of `stop`
/// (on a char boundary).
fn partial_suffix(text: &str, stop: &str) -> usize {
    let max = text.len().min(stop.len().saturating_sub(1));
    (1..=max)
        .rev()
        .find(|n| {
            text.is_char_boundary(text.len() - n)
                && stop
                    .as_bytes()
                    .starts_with(&text.as_bytes()[text.len() - n..])
        })
        .unwrap_or(0)
}

/// What a generation runs on.
#[derive(Clone, Copy)]
pub struct Generator<'a> {
    pub model: &'a Model,
    pub tokenizer: &'a Tokenizer,
    pub pool: &'a rayon::ThreadPool,
}

impl Generator<'_> {
    /// Runs the prompt, then samples until done. `emit` gets each piece of
    /// text and returns false when nobody listens any more (treated as
    /// cancellation).
    pub fn run(
        &self,
        prompt: &[u32],
        limits: &Limits,
        sampling: &Sampling,
        cancel: &AtomicBool,
        mut emit: impl FnMut(&str) -> bool,
    ) -> Finished {
        let (model, tokenizer, pool) = (self.model, self.tokenizer, self.pool);
        let started = std::time::Instant::now();
        let mut cache = model.new_cache(prompt.len() + limits.max_tokens);
        let mut rng = Rng(sampling.seed);
        let mut out = Output {
            stops: &limits.stop,
            bytes: Vec::new(),
            text: String::new(),
        };
        let mut finished = Finished {
            reason: FinishReason::Length,
            completion_tokens: 0,
            prompt_secs: 0.0,
            generation_secs: 0.0,
        };
        if prompt.is_empty() || limits.max_tokens == 0 {
            return finished;
        }
        let mut logits = model.forward(pool, prompt, &mut cache);
        finished.prompt_secs = started.elapsed().as_secs_f64();
        let generating = std::time::Instant::now();
        let mut bytes = Vec::new();
        let mut by_sequence = false;
        loop {
            if cancel.load(Ordering::Relaxed) {
                finished.reason = FinishReason::Cancelled;
                break;
            }
            let next = sample(&mut logits, sampling, &mut rng);
            finished.completion_tokens += 1;
            if !limits.ignore_eos && (tokenizer.is_control(next) || Some(next) == tokenizer.eos) {
                finished.reason = FinishReason::Stop;
                break;
            }
            bytes.clear();
            tokenizer.token_bytes(next, &mut bytes);
            let (text, stopped) = out.push(&bytes);
            if !text.is_empty() && !emit(&text) {
                finished.reason = FinishReason::Cancelled;
                break;
            }
            if stopped {
                finished.reason = FinishReason::Stop;
                by_sequence = true;
                break;
            }
            if finished.completion_tokens >= limits.max_tokens {
                finished.reason = FinishReason::Length;
                break;
            }
            logits = model.forward(pool, &[next], &mut cache);
        }
        if finished.reason != FinishReason::Cancelled && !by_sequence {
            // Held back as a possible stop sequence that never completed.
            let rest = out.flush();
            if !rest.is_empty() {
                emit(&rest);
            }
        }
        finished.generation_secs = generating.elapsed().as_secs_f64();
        finished
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_sequences_are_held_back_and_cut() {
        let stops = vec!["END".to_owned()];
        let mut o = Output {
            stops: &stops,
            bytes: Vec::new(),
            text: String::new(),
        };
        assert_eq!(o.push(b"hello E"), ("hello ".to_owned(), false));
        assert_eq!(o.push(b"N"), (String::new(), false));
        assert_eq!(o.push(b"Dx"), (String::new(), true));
        let mut o = Output {
            stops: &stops,
            bytes: Vec::new(),
            text: String::new(),
        };
        assert_eq!(o.push(b"abc EN"), ("abc ".to_owned(), false));
        assert_eq!(o.flush(), "EN");
    }

    #[test]
    fn split_utf8_is_joined() {
        let mut o = Output {
            stops: &[],
            bytes: Vec::new(),
            text: String::new(),
        };
        let e = "é".as_bytes();
        assert_eq!(o.push(&e[..1]), (String::new(), false));
        assert_eq!(o.push(&e[1..]), ("é".to_owned(), false));
    }

    #[test]
    fn greedy_and_seeded_sampling() {
        let s = Sampling {
            temperature: 0.0,
            top_p: 1.0,
            seed: 1,
        };
        assert_eq!(sample(&mut [0.1, 3.0, 0.2], &s, &mut Rng(1)), 1);
        let s = Sampling {
            temperature: 1.0,
            top_p: 0.9,
            seed: 1,
        };
        let a: Vec<u32> = {
            let mut rng = Rng(42);
            (0..20)
                .map(|_| sample(&mut [1.0, 1.0, 1.0, -20.0], &s, &mut rng))
                .collect()
        };
        let b: Vec<u32> = {
            let mut rng = Rng(42);
            (0..20)
                .map(|_| sample(&mut [1.0, 1.0, 1.0, -20.0], &s, &mut rng))
                .collect()
        };
        assert_eq!(a, b);
        assert!(a.iter().all(|t| *t < 3));
    }
}
