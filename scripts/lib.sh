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
    # CI prints what each step left on the disk (a full disk failed a run once).
    if [ -n "${PINCER_CI_DISK_REPORT:-}" ]; then
        printf '    (disk: %s free; target %s)\n' \
            "$(df -h --output=avail "$TARGET_DIR" | tail -1 | tr -d ' ')" \
            "$(du -sh "$TARGET_DIR" 2>/dev/null | cut -f1)"
    fi
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

HOST_TRIPLE="$(rustc -vV | sed -n 's/^host: //p')"

# Static (crt-static) runner; host/build.rs builds the same, so this only
# makes the step visible.
build_agent() {
    step "build the static agent runner (images/agent)" \
        env CARGO_ENCODED_RUSTFLAGS=-Ctarget-feature=+crt-static \
        cargo build --release --locked -p pincer-agent --target "$HOST_TRIPLE" \
        --manifest-path images/Cargo.toml --target-dir "$TARGET_DIR/agent"
}

# The static MCP server the tests run in a container (host/build.rs builds
# it for test builds only); scripts/run does not need it.
build_test_mcp_server() {
    step "build the static test MCP server (images/mcp-sqlite)" \
        env CARGO_ENCODED_RUSTFLAGS=-Ctarget-feature=+crt-static \
        cargo build --release --locked -p pincer-mcp-sqlite --target "$HOST_TRIPLE" \
        --manifest-path images/Cargo.toml --target-dir "$TARGET_DIR/agent"
}

# Installs Debian packages PACKAGES... unless FILE exists.
ensure_debian_packages() {
    local file="$1"
    shift
    if [ -x "$file" ]; then
        return
    fi
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        step "apt-get install $*" sh -c "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $*"
    else
        echo "missing $file: install Debian's $* (sudo apt-get install $*)" >&2
        exit 1
    fi
}

# What the tests and the main job need besides Rust: Debian's static busybox (the default
# image's userland) and a reachable Docker Engine; the tests' registry and browser.
ensure_docker_prerequisites() {
    ensure_debian_packages /bin/busybox busybox-static
    # tests/e2e/registry.rs runs the CNCF distribution server from Debian.
    ensure_debian_packages /usr/bin/docker-registry docker-registry
    # tests/e2e/web.rs drives the console in a real headless browser.
    ensure_debian_packages /usr/bin/chromedriver chromium chromium-driver
    # The state stores' tests run on SQLite and on a private PostgreSQL
    # server each test process starts (host/src/db/testing.rs).
    ensure_debian_packages /usr/lib/postgresql/15/bin/postgres postgresql
    # ...which also listens on loopback with TLS, its certificates made by openssl.
    ensure_debian_packages /usr/bin/openssl openssl
    if ! docker info >/dev/null 2>&1; then
        echo "the Docker Engine is not reachable: install and start it (apt-get install docker.io; systemctl start docker)" >&2
        exit 1
    fi
}

# A virtualenv with the official Python clients the black-box tests drive
# (tests/python/requirements.txt); tests find it through PINCER_TEST_PYTHON.
ensure_python_clients() {
    local venv="$TARGET_DIR/pyenv"
    local stamp="$venv/.requirements"
    if ! cmp -s tests/python/requirements.txt "$stamp" 2>/dev/null; then
        step "python clients (tests/python/requirements.txt)" sh -c "
            python3 -m venv '$venv' &&
            '$venv/bin/python' -m pip install --quiet --disable-pip-version-check -r tests/python/requirements.txt &&
            cp tests/python/requirements.txt '$stamp'"
    fi
    export PINCER_TEST_PYTHON="$venv/bin/python"
    # `pincer model fetch` (the local-model tests) runs pip from the venv.
    export PINCER_PYTHON="$venv/bin/python"
}

build_plugins() {
    step "build WASM plugins (plugins/ -> wasm32-wasip2)" \
        cargo build --release --locked --workspace --target wasm32-wasip2 \
        --manifest-path plugins/Cargo.toml --target-dir "$WASM_TARGET_DIR"
}

# What needs no Docker: the docs' links, formatting, lints of the three
# workspaces, and the plugins' and the agent runner's unit tests. Shared by
# scripts/test and scripts/check.
static_checks() {
    step "docs: relative links (scripts/check-docs)" python3 scripts/check-docs
    step "cargo fmt --check" cargo fmt --all --check
    step "cargo fmt --check (plugins)" cargo fmt --all --check --manifest-path plugins/Cargo.toml
    step "cargo fmt --check (images)" cargo fmt --all --check --manifest-path images/Cargo.toml
    build_plugins
    build_agent
    build_test_mcp_server
    step "clippy (plugins, wasm32-wasip2)" \
        cargo clippy --release --locked --workspace --target wasm32-wasip2 \
        --manifest-path plugins/Cargo.toml --target-dir "$WASM_TARGET_DIR" -- -D warnings
    step "clippy (agent runner)" \
        cargo clippy --locked --workspace --all-targets --manifest-path images/Cargo.toml \
        --target-dir "$TARGET_DIR/images-native" -- -D warnings
    step "clippy (host, all targets)" cargo clippy --locked --workspace --all-targets -- -D warnings
    step "plugin unit tests (native)" \
        cargo test --locked --workspace --manifest-path plugins/Cargo.toml \
        --target "$HOST_TRIPLE" --target-dir "$TARGET_DIR/plugins-native"
    step "agent runner tests (native; Landlock, seccomp, PID 1)" \
        cargo test --locked --workspace --manifest-path images/Cargo.toml --target-dir "$TARGET_DIR/images-native"
}
