"""The reference runtime for benches/local_model.rs: llama-cpp-python on the same GGUF.

Usage: local_model_reference.py MODEL PROMPT_FILE GEN_TOKENS THREADS
Prints one JSON object: the prompt's token ids, prompt and generation timings
(greedy, end-of-turn ignored, same loop shape as pincer's), and the text.
"""

import json
import sys
import time

from llama_cpp import Llama, llama_cpp


def main() -> None:
    model, prompt_file, n_gen, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    with open(prompt_file, encoding="utf-8") as f:
        prompt = f.read()
    llm = Llama(
        model_path=model,
        n_ctx=2048,
        n_batch=512,
        n_threads=threads,
        n_threads_batch=threads,
        verbose=False,
    )
    tokens = llm.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)
    runs = []
    for _ in range(3):
        llm.reset()
        started = time.perf_counter()
        llm.eval(tokens)
        prompt_secs = time.perf_counter() - started
        generated = []
        first = None
        gen_started = time.perf_counter()
        for i in range(n_gen):
            tok = llm.sample(temp=0.0)
            if first is None:
                first = time.perf_counter() - started
            generated.append(tok)
            if i < n_gen - 1:
                llm.eval([tok])
        gen_secs = time.perf_counter() - gen_started
        runs.append({"prompt_secs": prompt_secs, "gen_secs": gen_secs, "ttft": first})
    best = min(runs, key=lambda r: r["gen_secs"])
    print(
        json.dumps(
            {
                "version": llama_cpp.__version__ if hasattr(llama_cpp, "__version__") else "",
                "token_ids": tokens,
                "prompt_tokens": len(tokens),
                "gen_tokens": n_gen,
                "prompt_secs": min(r["prompt_secs"] for r in runs),
                "gen_secs": best["gen_secs"],
                "ttft": min(r["ttft"] for r in runs),
                "text": llm.detokenize(generated).decode("utf-8", "replace"),
            }
        )
    )


if __name__ == "__main__":
    main()
