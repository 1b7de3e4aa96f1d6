#!/usr/bin/env bash
# The plain program for the release page, taken out of a built wheel (so the archive holds the
# very binary the wheel does): target/dist/vrambisect-<version>-<platform>.tar.gz (.zip for
# Windows), with a .sha256 beside it.
#
#   scripts/archive.sh WHEEL PLATFORM     e.g. linux-x86_64, windows-x86_64, macos-arm64
set -euo pipefail
cd "$(dirname "$0")/.."
wheel="$1"
platform="$2"
case "$(uname -s)" in
    MINGW*|MSYS*|CYGWIN*) python="$(command -v python)" ;;
    *) python="$(command -v python3 || command -v python)" ;;
esac
"$python" - "$wheel" "$platform" <<'PY'
import hashlib, io, os, pathlib, stat, sys, tarfile, zipfile

wheel, platform = pathlib.Path(sys.argv[1]), sys.argv[2]
version = wheel.name.split("-")[1]
name = "vrambisect-%s-%s" % (version, platform)
dist = pathlib.Path("target/dist")
dist.mkdir(parents=True, exist_ok=True)
with zipfile.ZipFile(wheel) as z:
    (program,) = [i for i in z.infolist() if "/scripts/" in i.filename]
    data = z.read(program)
exe = os.path.basename(program.filename)
extra = {n: pathlib.Path(n).read_bytes() for n in ("README.md", "CHANGELOG.md", "LICENSE-MIT", "LICENSE-APACHE")}
if platform.startswith("windows"):
    out = dist / (name + ".zip")
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(name + "/" + exe, data)
        for n, b in extra.items():
            z.writestr(name + "/" + n, b)
else:
    out = dist / (name + ".tar.gz")
    with tarfile.open(out, "w:gz") as t:
        for n, b, mode in [(exe, data, 0o755)] + [(n, b, 0o644) for n, b in extra.items()]:
            info = tarfile.TarInfo(name + "/" + n)
            info.size, info.mode = len(b), mode
            t.addfile(info, io.BytesIO(b))
digest = hashlib.sha256(out.read_bytes()).hexdigest()
pathlib.Path(str(out) + ".sha256").write_text("%s  %s\n" % (digest, out.name))
print(out)
PY
