#!/usr/bin/env bash
# Builds the agent runner as a fully static binary (glibc, +crt-static) and
# prints its path. It is bind-mounted read-only into arbitrary images
# (busybox-only, python:slim, ...), so it must not need a libc of theirs.
#
#   images/build-agent.sh [TARGET_DIR]     (default: images/target)
#
# No musl target needed: the host's own gnu target with crt-static. Passing
# --target explicitly keeps RUSTFLAGS off build scripts and proc-macros.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
target_dir="${1:-$here/target}"
triple="$(uname -m)-unknown-linux-gnu"

RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --release --locked \
    --manifest-path "$here/Cargo.toml" \
    --package pincer-agent \
    --target "$triple" \
    --target-dir "$target_dir" >&2

binary="$target_dir/$triple/release/pincer-agent"
# Refuse to hand out a binary that would need the image's libc.
if ! file -L "$binary" | grep -Eq 'statically linked|static-pie linked'; then
    echo "build-agent.sh: $binary is not static: $(file -L "$binary")" >&2
    exit 1
fi
echo "$binary"
