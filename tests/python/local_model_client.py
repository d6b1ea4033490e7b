"""Drives a `local/` model through pincer's gateway with the official `openai` client.

Usage: local_model_client.py BASE_URL API_KEY MODEL
Prints one JSON object with what each call returned; the Rust test asserts on it.
"""

import json
import sys

import openai

# Greedy SmolLM2-135M Q4_1 answers the bare "What is the capital of France?"
# with French word salad (llama.cpp token for token the same); asked for one
# sentence, llama.cpp and pincer both answer "The capital of France is Paris."
QUESTION = [
    {"role": "user", "content": "What is the capital of France? Answer in one sentence."}
]


def main() -> None:
    base, key, model = sys.argv[1], sys.argv[2], sys.argv[3]
    client = openai.OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0)
    out = {}

    stream = client.chat.completions.create(
        model=model,
        messages=QUESTION,
        temperature=0,
        max_tokens=48,
        stream=True,
        stream_options={"include_usage": True},
    )
    text, chunks, usage, finish = "", 0, None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = [chunk.usage.prompt_tokens, chunk.usage.completion_tokens]
        for choice in chunk.choices:
            if choice.delta.content:
                text += choice.delta.content
                chunks += 1
            if choice.finish_reason:
                finish = choice.finish_reason
    out["stream"] = {"text": text, "chunks": chunks, "usage": usage, "finish": finish}

    whole = client.chat.completions.create(
        model=model, messages=QUESTION, temperature=0, max_tokens=48
    )
    out["complete"] = {
        "text": whole.choices[0].message.content,
        "usage": [whole.usage.prompt_tokens, whole.usage.completion_tokens],
        "finish": whole.choices[0].finish_reason,
        "model": whole.model,
    }

    short = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Write a long story about a dragon."}],
        temperature=0.8,
        top_p=0.9,
        seed=7,
        max_tokens=3,
    )
    out["short"] = {
        "finish": short.choices[0].finish_reason,
        "completion_tokens": short.usage.completion_tokens,
    }

    stopped = client.chat.completions.create(
        model=model, messages=QUESTION, temperature=0, max_tokens=48, stop=["Paris"]
    )
    out["stopped"] = {
        "text": stopped.choices[0].message.content,
        "finish": stopped.choices[0].finish_reason,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
