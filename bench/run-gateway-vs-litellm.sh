#!/usr/bin/env bash
# pincer's gateway next to LiteLLM's proxy, both in front of the same local
# fake OpenAI-protocol upstream, same load (loopback only). Sets up LiteLLM's
# venv at target/litellm-venv (from PyPI, pinned in
# bench/requirements-litellm.txt), then runs the Rust bench, which skips
# LiteLLM with a note when the venv is missing.
#
#   bench/run-gateway-vs-litellm.sh
#   BENCH_RATE=500 BENCH_SECS=10 BENCH_CONCURRENCY=16 BENCH_CLOSED_SECS=5 bench/run-gateway-vs-litellm.sh
#   SKIP_LITELLM=1 bench/run-gateway-vs-litellm.sh     # pincer only
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${PINCER_BENCH_LITELLM_VENV:-$root/target/litellm-venv}"
requirements="$root/bench/requirements-litellm.txt"

if [[ -z "${SKIP_LITELLM:-}" ]]; then
    stamp="$venv/.requirements.sha256"
    want="$(sha256sum "$requirements" | cut -d' ' -f1)"
    if [[ ! -x "$venv/bin/litellm" || "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
        echo "setting up LiteLLM in $venv" >&2
        python3 -m venv "$venv"
        "$venv/bin/pip" install --quiet --upgrade pip
        "$venv/bin/pip" install --quiet -r "$requirements"
        echo "$want" >"$stamp"
    fi
    export PINCER_BENCH_LITELLM_VENV="$venv"
else
    export PINCER_BENCH_LITELLM_VENV="$root/target/no-litellm-venv"
fi

cd "$root"
exec cargo bench -p pincer --bench gateway_vs_litellm
