# shellcheck shell=bash
# Sourced by the wheel scripts: puts maturin (and zig, the linker of the Linux wheels) on PATH,
# from a venv of their own in target/py-tools, installed from PyPI the first time. Sets
# PY_TOOLS_SKIP to the reason when they cannot be had (no PyPI here, say).
MATURIN_VERSION=1.16.0
ZIGLANG_VERSION=0.17.1
py_tools="${CARGO_TARGET_DIR:-target}/py-tools"
PY_TOOLS_SKIP=""
py_tools_bin() {
    if [ -d "$py_tools/Scripts" ]; then echo "$py_tools/Scripts"; else echo "$py_tools/bin"; fi
}
if ! "$(py_tools_bin)/python" -c "import maturin, ziglang" >/dev/null 2>&1; then
    rm -rf "$py_tools"
    case "$(uname -s)" in
        # On Windows, python3 may be the Store's placeholder.
        MINGW*|MSYS*|CYGWIN*) host_python="$(command -v python || true)" ;;
        *) host_python="$(command -v python3 || command -v python || true)" ;;
    esac
    if [ -z "$host_python" ] || ! "$host_python" -m venv "$py_tools" \
        || ! "$(py_tools_bin)/python" -m pip install --quiet --disable-pip-version-check \
            "maturin==$MATURIN_VERSION" "ziglang==$ZIGLANG_VERSION"; then
        rm -rf "$py_tools"
        PY_TOOLS_SKIP="maturin $MATURIN_VERSION and ziglang $ZIGLANG_VERSION could not be installed from PyPI"
    fi
fi
if [ -z "$PY_TOOLS_SKIP" ]; then
    PATH="$(cd "$(py_tools_bin)" && pwd):$PATH"
    export PATH
fi
