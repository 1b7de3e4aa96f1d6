#!/usr/bin/env bash
# The Windows build: lints and builds vrambisect.exe (x86_64-pc-windows-gnu), then runs the
# unit tests under wine.
#
# Needs the Rust target (`rustup target add x86_64-pc-windows-gnu`) and, from Debian's
# packages, the MinGW-w64 linker and wine: `apt-get install gcc-mingw-w64-x86-64 wine64`.
# Not part of `.ci/run`: installing those takes minutes and CI has them not.
set -euo pipefail
cd "$(dirname "$0")/.."
target=x86_64-pc-windows-gnu
rustup target list --installed | grep -qx "$target" || rustup target add "$target"
cargo clippy --target "$target" --lib --bins --locked -- -D warnings
cargo clippy --target "$target" --lib --profile test --locked -- -D warnings
cargo build --release --target "$target" --locked
echo "built target/$target/release/vrambisect.exe"
if ! command -v wine >/dev/null; then
    echo "wine not found: unit tests not run" >&2
    exit 0
fi
export WINEDEBUG=-all
export CARGO_TARGET_X86_64_PC_WINDOWS_GNU_RUNNER=wine
# Wine before 9 lacks bcryptprimitives.dll, which Rust's standard library loads at start.
cargo test --target "$target" --lib --locked --no-run
x86_64-w64-mingw32-gcc -shared -O2 -o "target/$target/debug/deps/bcryptprimitives.dll" \
    fixtures/wine/bcryptprimitives.c -ladvapi32
# Every unit test but those that need a Unix shell or python3 (marked #[cfg(unix)]); the
# process layer's own Windows tests drive cmd.exe.
cargo test --target "$target" --lib --locked -- "$@"
