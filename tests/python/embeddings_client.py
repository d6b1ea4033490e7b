"""Drives pincer's /v1/embeddings with the official `openai` client.

Usage: embeddings_client.py BASE_URL API_KEY TEXTS_JSON
Embeds TEXTS_JSON (a JSON list of strings) with model `embed` as the client
does by default (base64), once as floats and once as passages, then sends
requests pincer must refuse. Prints one JSON object; the Rust test asserts.
"""

import json
import sys

import openai


def error(call):
    try:
        call()
    except openai.APIStatusError as e:
        body = e.body if isinstance(e.body, dict) else {}
        return {"status": e.status_code, "code": body.get("code"), "message": body.get("message")}
    return None


def main() -> None:
    base, key, texts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    client = openai.OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0)
    out = {}
    got = client.embeddings.create(model="embed", input=texts)
    out["vectors"] = [d.embedding for d in sorted(got.data, key=lambda d: d.index)]
    out["model"] = got.model
    out["usage"] = [got.usage.prompt_tokens, got.usage.total_tokens]
    one = client.embeddings.create(model="embed", input=texts[0], encoding_format="float")
    out["float"] = one.data[0].embedding
    passage = client.embeddings.create(
        model="embed", input=texts[0], extra_body={"input_type": "passage"}
    )
    out["passage"] = passage.data[0].embedding
    out["too_many"] = error(lambda: client.embeddings.create(model="embed", input=["x"] * 33))
    out["too_long"] = error(lambda: client.embeddings.create(model="embed", input="x" * 9000))
    # 32 inputs each within 8 KiB, over 8192 tokens together (CJK: about a
    # token a character).
    out["too_many_tokens"] = error(
        lambda: client.embeddings.create(model="embed", input=["磁盘快满了" * 400] * 32)
    )
    out["tokens"] = error(lambda: client.embeddings.create(model="embed", input=[[1, 2, 3]]))
    out["chat_model"] = error(lambda: client.embeddings.create(model="chat", input="x"))
    out["unknown_model"] = error(lambda: client.embeddings.create(model="nope", input="x"))
    bad = openai.OpenAI(base_url=f"{base}/v1", api_key="pk-wrong", max_retries=0)
    out["bad_key"] = error(lambda: bad.embeddings.create(model="embed", input="x"))
    out["embed_as_chat"] = error(
        lambda: client.chat.completions.create(
            model="embed", messages=[{"role": "user", "content": "x"}]
        )
    )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
