# shellcheck shell=bash
# Sourced by the Windows checks: what they share of wine.

# winepath -w, tried again: it fails now and then while a wineserver shuts down.
winpath() {
    local i
    for i in 1 2 3; do
        winepath -w "$1" 2>/dev/null && return 0
        sleep "$i"
    done
    echo "winepath -w $1 failed three times" >&2
    return 1
}
