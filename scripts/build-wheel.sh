#!/usr/bin/env bash
# Builds vrambisect's wheel for one platform into target/wheels and prints its path.
#
#   scripts/build-wheel.sh [linux-x86_64|linux-aarch64|windows-x86_64|macos-arm64]
#
# Default: this machine's platform. Linux wheels are built with zig as the linker against
# glibc 2.17 (manylinux2014), the oldest glibc Rust supports: every distribution ComfyUI users
# run has a newer one (Ubuntu 20.04 under WSL has 2.31; the CUDA images on Ubuntu 20.04+ and
# Rocky/UBI 8 have 2.28 and later). The release workflow runs this same script.
set -euo pipefail
cd "$(dirname "$0")/.."
platform="${1:-}"
if [ -z "$platform" ]; then
    case "$(uname -s)-$(uname -m)" in
        Linux-x86_64) platform=linux-x86_64 ;;
        Linux-aarch64) platform=linux-aarch64 ;;
        Darwin-arm64) platform=macos-arm64 ;;
        MINGW*|MSYS*|CYGWIN*) platform=windows-x86_64 ;;
        *) echo "build-wheel: no wheel for $(uname -s) $(uname -m)" >&2; exit 2 ;;
    esac
fi
# shellcheck source=scripts/python-tools.sh
. scripts/python-tools.sh
if [ -n "$PY_TOOLS_SKIP" ]; then
    echo "build-wheel: $PY_TOOLS_SKIP" >&2
    exit 3
fi
zig=()
case "$platform" in
    linux-x86_64) triple=x86_64-unknown-linux-gnu; zig=(--zig --compatibility manylinux2014) ;;
    linux-aarch64) triple=aarch64-unknown-linux-gnu; zig=(--zig --compatibility manylinux2014) ;;
    windows-x86_64)
        # Native on Windows; cross-built with MinGW-w64 elsewhere.
        case "$(uname -s)" in
            MINGW*|MSYS*|CYGWIN*) triple=x86_64-pc-windows-msvc ;;
            *) triple=x86_64-pc-windows-gnu ;;
        esac ;;
    macos-arm64) triple=aarch64-apple-darwin ;;
    *) echo "build-wheel: unknown platform '$platform'" >&2; exit 2 ;;
esac
rustup target list --installed | grep -qx "$triple" || rustup target add "$triple"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
if ! maturin build --release --locked --out target/wheels --target "$triple" ${zig[@]+"${zig[@]}"} >"$log" 2>&1; then
    cat "$log" >&2
    exit 1
fi
# maturin's last line names the wheel: "📦 Built wheel to target/wheels/<name>.whl".
wheel="$(grep -o 'target/wheels/[^ ]*\.whl' "$log" | tail -n 1)"
[ -f "$wheel" ] || { cat "$log" >&2; echo "build-wheel: no wheel was written" >&2; exit 1; }
echo "$wheel"
