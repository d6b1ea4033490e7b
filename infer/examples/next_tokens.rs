//! Prints the five likeliest next tokens of a raw prompt (a debugging aid).
//!
//!     cargo run --release -p pincer-infer --example next_tokens -- MODEL.gguf "The capital of France is"

type Error = Box<dyn std::error::Error>;

fn main() -> Result<(), Error> {
    let mut args = std::env::args().skip(1);
    let path = args.next().ok_or("usage: next_tokens MODEL PROMPT")?;
    let prompt = args.next().ok_or("usage: next_tokens MODEL PROMPT")?;
    let file = pincer_infer::GgufFile::open(std::path::Path::new(&path), None)?;
    let model = pincer_infer::Model::load(&file)?;
    let tokenizer = pincer_infer::Tokenizer::from_gguf(&file)?;
    let pool = pincer_infer::compute_pool(2)?;
    let ids = tokenizer.encode(&prompt);
    let mut cache = model.new_cache(ids.len() + 1);
    // ONE_BY_ONE=1 feeds the prompt token by token (checks batching).
    let logits = if std::env::var_os("ONE_BY_ONE").is_some() {
        let mut last = Vec::new();
        for id in &ids {
            last = model.forward(&pool, &[*id], &mut cache);
        }
        last
    } else {
        model.forward(&pool, &ids, &mut cache)
    };
    let mut ranked: Vec<(usize, f32)> = logits.iter().copied().enumerate().collect();
    ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
    println!("prompt ids: {ids:?}");
    for (id, logit) in ranked.iter().take(5) {
        println!("{logit:>8.3}  {:?}", tokenizer.decode(&[*id as u32]));
    }
    Ok(())
}
