#!/usr/bin/env bash
# pincer's gateway next to LiteLLM's proxy, both in front of the same local
# fake OpenAI-protocol upstream, same load (loopback only). Sets up LiteLLM's
# venv at target/litellm-venv (from PyPI, pinned in
# bench/requirements-litellm.txt), then runs the Rust bench
# (host/benches/gateway_vs_litellm.rs), which prints one table for direct,
# pincer and LiteLLM: per scenario (rate, JSON or stream) the answered share,
# p50/p99, added p50/p99, gateway CPU per request, peak RSS and whether the
# rate was sustained; it skips LiteLLM with a note when the venv is missing.
#
#   bench/run-gateway-vs-litellm.sh
#   BENCH_SCENARIOS=50,200,1000,3000,s1000 BENCH_SECS=5 bench/run-gateway-vs-litellm.sh
#   BENCH_LITELLM_MAX_RATE=200     # LiteLLM above this rate is marked skipped
#   PINCER_BENCH_BIN=/path/to/pincer bench/run-gateway-vs-litellm.sh   # another build
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
        "$venv/bin/python" -m pip install --quiet --upgrade pip
        "$venv/bin/python" -m pip install --quiet -r "$requirements"
        echo "$want" >"$stamp"
    fi
    export PINCER_BENCH_LITELLM_VENV="$venv"
else
    export PINCER_BENCH_LITELLM_VENV="$root/target/no-litellm-venv"
fi

cd "$root"
exec cargo bench -p pincer --bench gateway_vs_litellm
