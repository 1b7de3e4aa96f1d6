#!/usr/bin/env bash
# The ComfyUI extension (extension/): its server routes through a real aiohttp server with the
# vrambisect program diagnosing the stand-in (tests/extension/test_routes.py), the registry
# metadata by the registry's own validation (comfy-cli's `comfy node validate`), then the panel
# in headless Chromium with the real frontend packages (1.27.10, what ComfyUI 0.3.64 pins, and
# a current one) against the stand-in (tests/extension/standin.py), and against a real ComfyUI
# where one is given:
#
#   VRAMBISECT_REAL_COMFYUI=DIR VRAMBISECT_REAL_PYTHON=PY scripts/extension-check.sh
#
# (DIR a ComfyUI checkout, PY a Python with torch and its requirements; see
# docs/extension.md). Each part that lacks its tools says so in one line.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
# Absolute, so that paths made from it hold in other folders (CARGO_TARGET_DIR may be either).
case "$target" in /*) ;; *) target="$PWD/$target" ;; esac
venv="$target/extension-venv"
frontends=(1.27.10 1.58.1)

if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import aiohttp" 2>/dev/null; then
    rm -rf "$venv"
    if ! { python3 -m venv "$venv" >/dev/null 2>&1 \
        && timeout 300 "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
            aiohttp >/dev/null 2>&1; }; then
        echo "extension checks skipped: aiohttp could not be installed from PyPI"
        exit 0
    fi
fi

tool="$target/debug/vrambisect"
# Always (a no-op when up to date): the program embeds the pack it installs.
cargo build --locked --quiet
VRAMBISECT_EXTENSION_TOOL="$tool" "$venv/bin/python" -m unittest discover -s tests/extension -p 'test_*.py'

# The registry's validation (comfy-cli) reads pyproject.toml in the current folder.
if [ -x "$venv/bin/comfy" ] || timeout 300 "$venv/bin/python" -m pip install --quiet \
        --disable-pip-version-check comfy-cli ruff >/dev/null 2>&1; then
    (cd extension && "$venv/bin/comfy" --skip-prompt --no-enable-telemetry node validate)
else
    echo "extension registry validation skipped: comfy-cli could not be installed from PyPI"
fi

# The panel in headless Chromium: Debian's chromium (installed here where apt can), Playwright's
# driver from PyPI, the real frontend packages; against the stand-in always, and against a real
# ComfyUI where one is given.
if ! command -v chromium >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    { timeout 600 apt-get install -y -qq chromium >/dev/null 2>&1 \
        || { timeout 300 apt-get update -qq >/dev/null 2>&1 \
            && timeout 600 apt-get install -y -qq chromium >/dev/null 2>&1; }; } || true
fi
if ! command -v chromium >/dev/null; then
    echo "extension browser check skipped: needs Debian's chromium"
    exit 0
fi
if ! "$venv/bin/python" -c "import playwright" 2>/dev/null \
    && ! timeout 300 "$venv/bin/python" -m pip install --quiet --disable-pip-version-check playwright >/dev/null 2>&1; then
    echo "extension browser check skipped: playwright could not be installed from PyPI"
    exit 0
fi
shots="$target/extension-shots"
mkdir -p "$shots"
for fe in "${frontends[@]}"; do
    root="$target/frontends/$fe"
    if [ ! -f "$root/index.html" ]; then
        tmp="$(mktemp -d)"
        "$venv/bin/python" -m pip download --quiet --no-deps -d "$tmp" "comfyui-frontend-package==$fe" >/dev/null
        "$venv/bin/python" -m zipfile -e "$tmp"/*.whl "$tmp/x"
        mkdir -p "$root" && cp -r "$tmp/x/comfyui_frontend_package/static/." "$root/"
        rm -rf "$tmp"
    fi
    "$venv/bin/python" tests/extension/standin.py --python "$venv/bin/python" --tool "$tool" \
        --front-end-root "$root" --label "standin-$fe" --shots "$shots" --browser-python "$venv/bin/python"
    if [ -n "${VRAMBISECT_REAL_COMFYUI:-}" ] && [ -n "${VRAMBISECT_REAL_PYTHON:-}" ]; then
        "$venv/bin/python" tests/extension/real.py --comfyui "$VRAMBISECT_REAL_COMFYUI" \
            --python "$VRAMBISECT_REAL_PYTHON" --tool "$tool" --front-end-root "$root" \
            --label "$fe" --shots "$shots" --browser-python "$venv/bin/python"
    fi
done
if [ -z "${VRAMBISECT_REAL_COMFYUI:-}" ]; then
    echo "extension browser check against a real ComfyUI skipped: set VRAMBISECT_REAL_COMFYUI and VRAMBISECT_REAL_PYTHON"
fi
