#!/usr/bin/env bash
# install-nvidia-userspace.sh - puts the real NVIDIA user-space libraries
# (libnvidia-ml.so.1 and libcuda.so.1 from Debian non-free, the 535 series on
# bookworm) into a private folder, without installing anything system-wide and
# without touching the machine's apt configuration. Without a driver they fail
# as on a machine whose driver is not loaded (a container without the GPU, or
# right after a driver update): the test of vrambisect's messages for that case
# (tests/cli/real_nvidia.rs, run by .ci/run) uses them.
#
#   scripts/install-nvidia-userspace.sh [DEST]
#       (default: $NVIDIA_ROOT, else target/nvidia-userspace, under $CARGO_TARGET_DIR if set)
#
# Afterwards the libraries are in DEST/lib (symlinks into the extracted tree):
#   DEST/lib/libnvidia-ml.so.1, DEST/lib/libcuda.so.1, DEST/lib/libcuda.so,
#   DEST/lib/libnvidia-ptxjitcompiler.so.1
# Use them with LD_LIBRARY_PATH=DEST/lib (cudarc looks for "libcuda.so" first)
# or by absolute path (nvml-wrapper's builder().lib_path(...)).
#
# How: a throw-away apt configuration (temporary lists/cache directories, the
# machine's own Debian mirror URIs from `apt-get indextargets`, with the
# non-free component added), `apt-get download`, `dpkg-deb -x`.
#
# Idempotent: if DEST/lib already holds both libraries it prints "ok: ..." and
# exits 0.  When apt, a Debian release, the mirror or the packages cannot be
# reached it prints ONE line "skip: <why>" and exits 0.  Any other failure:
# "error: <why>" and exit 1.
#
# Environment:
#   NVIDIA_ROOT        default DEST
#   NVIDIA_VERSION     exact Debian version to fetch (default: the candidate,
#                      e.g. 535.309.01-0+deb12u1 on bookworm)
#   NVIDIA_APT_TIMEOUT seconds for each apt step (default 180)
#
# WARNING for callers: the real libraries, when run as root without a driver,
# create /dev/nvidiactl (mknod c 195 255, mode 0666) on nvmlInit/cuInit.  Run
# test programs as non-root, or as root under
#   setpriv --bounding-set=-mknod --inh-caps=-mknod CMD
# or `unshare --user --map-root-user CMD` to keep the machine unchanged.
set -uo pipefail

skip() { echo "skip: $*"; exit 0; }
die() { echo "error: $*" >&2; exit 1; }

repo=$(cd "$(dirname "$0")/.." && pwd)
dest=${1:-${NVIDIA_ROOT:-${CARGO_TARGET_DIR:-$repo/target}/nvidia-userspace}}
case $dest in /*) ;; *) dest=$PWD/$dest ;; esac
tmo=${NVIDIA_APT_TIMEOUT:-180}
pkgs="libnvidia-ml1 libcuda1 libnvidia-ptxjitcompiler1"

# ---- already there? --------------------------------------------------------
if [ -e "$dest/lib/libnvidia-ml.so.1" ] && [ -e "$dest/lib/libcuda.so.1" ] && [ -e "$dest/lib/libcuda.so" ]; then
    echo "ok: already installed in $dest/lib ($(cat "$dest/VERSION" 2>/dev/null || echo 'version unknown'))"
    exit 0
fi

# ---- can we use apt at all? -------------------------------------------------
for c in apt-get apt-cache dpkg-deb dpkg timeout; do
    command -v "$c" >/dev/null 2>&1 || skip "no $c on this machine (not a Debian system?)"
done
[ -r /etc/os-release ] || skip "no /etc/os-release"
# shellcheck disable=SC1091
. /etc/os-release
[ "${ID:-}" = debian ] || skip "not Debian (ID=${ID:-?}); the package names below are Debian's"
codename=${VERSION_CODENAME:-}
[ -n "$codename" ] || skip "no VERSION_CODENAME in /etc/os-release"
arch=$(dpkg --print-architecture)
case $arch in amd64 | arm64 | ppc64el) ;; *) skip "no NVIDIA driver packages for architecture $arch" ;; esac

# The machine's own mirrors for this release (main archive, -updates, -security).
# shellcheck disable=SC2016 # $(...) here is apt's format syntax, not the shell's
mapfile -t targets < <(apt-get indextargets --no-release-info --format '$(REPO_URI) $(RELEASE)' \
    'Created-By: Packages' 2>/dev/null | sort -u)
[ "${#targets[@]}" -gt 0 ] || skip "apt has no configured sources"

work=$(mktemp -d "${TMPDIR:-/tmp}/nvidia-apt.XXXXXX") || die "mktemp failed"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/parts" "$work/debs" "$work/root"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
opt=""
[ -r "$keyring" ] && opt="[signed-by=$keyring] "
n=0
for t in "${targets[@]}"; do
    uri=${t%% *} suite=${t#* }
    case $suite in
    "$codename" | "$codename-updates" | "$codename-security")
        echo "deb ${opt}$uri $suite main contrib non-free non-free-firmware" >>"$work/sources.list"
        n=$((n + 1))
        ;;
    esac
done
[ "$n" -gt 0 ] || skip "no apt source for Debian $codename is configured"

apt_opts=(
    -o "Dir::Etc::sourcelist=$work/sources.list"
    -o "Dir::Etc::sourceparts=$work/parts"
    -o "Dir::State::lists=$work/lists"
    -o "Dir::Cache=$work/cache"
    -o "Dir::Cache::archives=$work/cache/archives"
    -o "Dir::Cache::pkgcache=" -o "Dir::Cache::srcpkgcache="
    -o "APT::Get::List-Cleanup=0"
    -o "Acquire::Retries=1"
)
[ "$(id -u)" = 0 ] && apt_opts+=(-o "APT::Sandbox::User=root")

if ! timeout "$tmo" apt-get "${apt_opts[@]}" -q update >"$work/update.log" 2>&1 ||
    grep -qE '^(E|Err):' "$work/update.log"; then
    skip "apt-get update failed for Debian $codename non-free ($(grep -m1 -E '^(E|Err|W):' "$work/update.log" | cut -c1-120))"
fi

version=${NVIDIA_VERSION:-}
if [ -z "$version" ]; then
    version=$(apt-cache "${apt_opts[@]}" policy libcuda1 2>/dev/null | awk '/Candidate:/ {print $2}')
fi
if [ -z "$version" ] || [ "$version" = "(none)" ]; then
    skip "libcuda1 is not available from Debian $codename non-free"
fi

spec=()
for p in $pkgs; do spec+=("$p=$version"); done
if ! (cd "$work/debs" && timeout "$tmo" apt-get "${apt_opts[@]}" -q download "${spec[@]}") >"$work/download.log" 2>&1; then
    skip "apt-get download of $pkgs ($version) failed ($(grep -m1 -E '^(E|Err|W):' "$work/download.log" | cut -c1-120))"
fi

for f in "$work"/debs/*.deb; do
    dpkg-deb -x "$f" "$work/root" || die "dpkg-deb -x $f failed"
done

# Where the libraries landed: usr/lib/<multiarch>/nvidia/current/ in Debian.
ml=$(find "$work/root" -name 'libnvidia-ml.so.1' | head -n1)
cu=$(find "$work/root" -name 'libcuda.so.1' | head -n1)
if [ -z "$ml" ] || [ -z "$cu" ]; then
    die "the packages did not contain libnvidia-ml.so.1 and libcuda.so.1"
fi
libdir=$(dirname "$cu")
rel=${libdir#"$work/root/"}
mkdir -p "$work/root/lib"
for name in libnvidia-ml.so.1 libcuda.so.1 libcuda.so libnvidia-ptxjitcompiler.so.1; do
    [ -e "$libdir/$name" ] && ln -sfn "../$rel/$name" "$work/root/lib/$name"
done
ln -sfn "../$rel/libnvidia-ml.so.1" "$work/root/lib/libnvidia-ml.so"
for f in "$work"/debs/*.deb; do basename "$f"; done >"$work/root/DEBS"
echo "$version" >"$work/root/VERSION"

# Replace DEST only once the new tree is complete.
mkdir -p "$(dirname "$dest")" || die "cannot create $(dirname "$dest")"
rm -rf "$dest.new"
cp -a "$work/root" "$dest.new" || die "cannot write $dest.new"
rm -rf "$dest"
mv "$dest.new" "$dest" || die "cannot move $dest.new to $dest"
echo "ok: NVIDIA user-space $version in $dest/lib ($(paste -sd " " "$dest/DEBS"))"
