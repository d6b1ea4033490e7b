# Shared by scripts/run and scripts/test: paths and prerequisites.
# shellcheck shell=bash

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# One target dir for the host and (below it) the wasm plugins; the host's
# build.rs uses the same wasm-plugins folder, so nothing is built twice.
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
case "$TARGET_DIR" in /*) ;; *) TARGET_DIR="$ROOT/$TARGET_DIR" ;; esac
export CARGO_TARGET_DIR="$TARGET_DIR"
WASM_TARGET_DIR="$TARGET_DIR/wasm-plugins"

step() {
    local label="$1"
    shift
    printf '\n==> %s\n' "$label"
    local started=$SECONDS
    "$@"
    printf '    (%s: %ss)\n' "$label" "$((SECONDS - started))"
}

ensure_rust_targets() {
    if ! command -v cargo >/dev/null; then
        echo "cargo not found: install Rust with rustup (https://rustup.rs), then re-run" >&2
        exit 1
    fi
    # rust-toolchain.toml names the target too; this makes the step visible.
    if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip2; then
        step "rustup target add wasm32-wasip2" rustup target add wasm32-wasip2
    fi
}

build_plugins() {
    step "build WASM plugins (plugins/ -> wasm32-wasip2)" \
        cargo build --release --locked --workspace --target wasm32-wasip2 \
        --manifest-path plugins/Cargo.toml --target-dir "$WASM_TARGET_DIR"
}
