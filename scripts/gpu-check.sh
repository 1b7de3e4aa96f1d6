#!/usr/bin/env bash
# The GPU check: what vrambisect records on a machine with an NVIDIA GPU, measured against a
# known load. Needs the vrambisect binary, the cuda_alloc example, python3 (standard library
# only) and this checkout's fixtures (the ComfyUI stand-in and a workflow). docs/gpu-check.md
# says how to run it on a lent machine; with the defaults it takes two to three minutes.
#
#   scripts/gpu-check.sh [--bin PATH] [--alloc PATH] [--size 4GiB] [--hold 3s]
#                        [--cpu-seconds 5] [--out FILE] [--work DIR] [--nvml-lib PATH]
#                        [--lib-dir DIR] [--comfyui DIR] [--workflow FILE]
#                        [--max-context SIZE] [--tolerance SIZE]
#
# One line per check (ok: / FAIL: / skip:), the figures in one JSON file (--out, default
# gpu-check.json), exit status 1 when a check failed (2 for bad arguments).
# The binaries can also come from VRAMBISECT_BIN and CUDA_ALLOC_BIN; --nvml-lib sets
# VRAMBISECT_NVML_LIB (the NVML to load) and --lib-dir puts a folder first on
# LD_LIBRARY_PATH (where libcuda is looked for), so the check also runs on other libraries.
set -uo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$here/target}
bin=${VRAMBISECT_BIN:-}
alloc=${CUDA_ALLOC_BIN:-}
size=4GiB
hold=3s
cpu_seconds=5
out=gpu-check.json
work=
comfyui=$here/fixtures/fake-comfyui
workflow=$here/fixtures/workflows/sd15_txt2img.json
max_context=2GiB
tolerance=64MiB

usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "gpu-check: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
    case $1 in
        --bin) bin=${2:?--bin needs a path}; shift ;;
        --alloc) alloc=${2:?--alloc needs a path}; shift ;;
        --size) size=${2:?--size needs a size}; shift ;;
        --hold) hold=${2:?--hold needs a duration}; shift ;;
        --cpu-seconds) cpu_seconds=${2:?--cpu-seconds needs a number}; shift ;;
        --out) out=${2:?--out needs a file}; shift ;;
        --work) work=${2:?--work needs a folder}; shift ;;
        --nvml-lib) export VRAMBISECT_NVML_LIB=${2:?--nvml-lib needs a path}; shift ;;
        --lib-dir) export LD_LIBRARY_PATH=${2:?--lib-dir needs a folder}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}; shift ;;
        --comfyui) comfyui=${2:?--comfyui needs a folder}; shift ;;
        --workflow) workflow=${2:?--workflow needs a file}; shift ;;
        --max-context) max_context=${2:?--max-context needs a size}; shift ;;
        --tolerance) tolerance=${2:?--tolerance needs a size}; shift ;;
        -h|--help) usage; exit 0 ;;
        *) die "unknown argument '$1' (see --help)" ;;
    esac
    shift
done

first_file() {
    for f in "$@"; do
        if [ -x "$f" ]; then echo "$f"; return 0; fi
    done
    return 1
}
[ -n "$bin" ] || bin=$(first_file "$here/vrambisect" "$target/release/vrambisect" "$target/debug/vrambisect") \
    || bin=$(command -v vrambisect) || die "no vrambisect binary: pass --bin PATH"
[ -n "$alloc" ] || alloc=$(first_file "$here/cuda_alloc" "$target/release/examples/cuda_alloc" "$target/debug/examples/cuda_alloc") \
    || die "no cuda_alloc program: build it with cargo build --release --example cuda_alloc, or pass --alloc PATH"
[ -x "$bin" ] || die "$bin is not an executable"
[ -x "$alloc" ] || die "$alloc is not an executable"
command -v python3 >/dev/null || die "python3 is needed (the ComfyUI stand-in and the JSON checks)"
if ! [[ $cpu_seconds =~ ^[1-9][0-9]*$ ]]; then
    die "--cpu-seconds takes a whole number above 0"
fi

if [ -z "$work" ]; then
    work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
else
    mkdir -p "$work" || die "cannot make $work"
fi
figures=$work/figures.jsonl
: >"$figures"
failed=0

# py ARGS... <<'PY' CODE: python3 with helpers: series(doc, name, field); put(key, value)
# records a figure; ok/fail/skip print the check's line (fail makes the script fail).
py_helpers=$(cat <<'PY'
import json, os, sys
def load(path):
    with open(path) as f:
        return json.load(f)
def series(doc, name, field):
    for s in doc.get("series", []):
        if s["name"] == name:
            return s[field]
    return None
def put(key, value):
    with open(os.environ["FIGURES"], "a") as f:
        f.write(json.dumps({"key": key, "value": value}) + "\n")
def line(kind, name, text):
    print(f"{kind}: {name}: {text}", flush=True)
    put("checks." + name, {"status": kind.lower(), "detail": text})
def ok(name, text): line("ok", name, text)
def fail(name, text):
    line("FAIL", name, text)
    sys.exit(1)
def skip(name, text): line("skip", name, text)
def unavailable(doc):
    return "; ".join(u["reason"] if u["probe"] in u["reason"] else u["probe"] + ": " + u["reason"]
                     for u in doc.get("unavailable", []))
MiB = 1 << 20
PY
)
py() {
    FIGURES=$figures python3 -c "$py_helpers"$'\n'"$(cat)" "$@"
}

# The first line of a command's stderr, for a failure message.
first_error() { grep -v '^ *$' "$1" 2>/dev/null | head -n 1; }

bytes_of() {
    python3 -c '
import sys
s = sys.argv[1].strip().lower()
for unit, f in (("tib", 1 << 40), ("gib", 1 << 30), ("mib", 1 << 20), ("kib", 1 << 10),
                ("t", 1 << 40), ("g", 1 << 30), ("m", 1 << 20), ("k", 1 << 10), ("b", 1), ("", 1)):
    if s.endswith(unit) and s[: len(s) - len(unit)].replace(".", "", 1).isdigit():
        print(int(float(s[: len(s) - len(unit)]) * f))
        break
else:
    sys.exit(1)' "$1"
}
size_bytes=$(bytes_of "$size") || die "--size $size is not a size"
max_context_bytes=$(bytes_of "$max_context") || die "--max-context $max_context is not a size"
tolerance_bytes=$(bytes_of "$tolerance") || die "--tolerance $tolerance is not a size"

echo "gpu-check: $bin, $alloc; work folder $work"

# --- 1. doctor ---------------------------------------------------------------------------
"$bin" doctor --json >"$work/doctor.json" 2>"$work/doctor.err"
py "$work/doctor.json" <<'PY' || failed=1
doc = load(sys.argv[1])
c = {x["id"]: x for x in doc["checks"]}
nv, cu = c.get("nvml"), c.get("cuda")
put("doctor", {k: {"status": v["status"], "summary": v["summary"]} for k, v in c.items()
               if k in ("nvml", "cuda", "gpus", "gpu_processes")})
bad = [x for x in (nv, cu) if x is None or x["status"] != "ok"]
if bad:
    fail("doctor", "; ".join(f"{x['title']}: {x['summary']}" for x in bad if x))
ok("doctor", f"{nv['summary']}; {c['gpus']['summary'] if 'gpus' in c else ''}".rstrip("; "))
PY

# NVML's used memory now, from a short sample: prints the bytes, or fails with NVML's line.
nvml_used_now() {
    local name=$1
    "$bin" sample --interval 10ms --duration 300ms --json >"$work/$name.json" 2>"$work/$name.err"
    py "$work/$name.json" <<'PY'
doc = load(sys.argv[1])
v = series(doc, "gpu0.nvml.used", "last")
if v is None:
    sys.exit(unavailable(doc) or "no NVML reading")
print(v)
PY
}

# --- 2. a known allocation -----------------------------------------------------------------
alloc_check() {
    local before after
    if ! before=$(nvml_used_now baseline 2>&1); then
        py "$before" <<'PY'
line("FAIL", "allocation", sys.argv[1])
skip("release", "nothing was allocated")
sys.exit(1)
PY
        return 1
    fi
    "$bin" sample --interval 10ms --json --output "$work/alloc.csv" -- "$alloc" "$size" "$hold" \
        >"$work/alloc.json" 2>"$work/alloc.err"
    local rc=$?
    after=$(nvml_used_now after 2>&1) || after=
    py "$work/alloc.json" "$size_bytes" "$before" "$rc" "$max_context_bytes" "$tolerance_bytes" "$after" "$(first_error "$work/alloc.err")" <<'PY'
def fail_alloc(text):
    line("FAIL", "allocation", text)
    skip("release", "the allocation check failed")
    sys.exit(1)
doc = load(sys.argv[1])
size, before, rc, max_ctx, tol = (int(a) for a in sys.argv[2:7])
after = int(sys.argv[7]) if sys.argv[7] else None
err = sys.argv[8]
cmd = doc.get("command") or {}
if rc != 0 or cmd.get("exit_code") != 0:
    fail_alloc(err or f"cuda_alloc exited with {cmd.get('exit_code')}")
peak = series(doc, "gpu0.nvml.used", "max")
tree = series(doc, "gpu0.tree.used", "max")
if peak is None:
    fail_alloc(unavailable(doc) or "no NVML reading while the memory was held")
rise = peak - before
context = rise - size
put("allocation", {"size_bytes": size, "nvml_used_before_bytes": before, "nvml_used_peak_bytes": peak,
                   "rise_bytes": rise, "context_bytes": context, "child_pid": cmd.get("pid"),
                   "child_peak_bytes": tree, "nvml_used_after_bytes": after,
                   "samples": doc["samples"], "missed_ticks": doc["missed_ticks"]})
if rise < size:
    fail_alloc(f"NVML used rose by {rise} bytes, less than the {size} allocated")
if context > max_ctx:
    fail_alloc(f"NVML used rose by {rise} bytes: {context} more than the {size} allocated")
if tree is None or tree < size:
    fail_alloc(f"the child (pid {cmd.get('pid')}) held {tree} bytes by NVML per process, not the {size} allocated")
ok("allocation", f"NVML used rose by {rise / MiB:.0f} MiB for {size / MiB:.0f} MiB: a CUDA context of {context / MiB:.0f} MiB; "
   f"the child (pid {cmd['pid']}) held {tree / MiB:.0f} MiB")
if after is None:
    fail("release", "no NVML reading after the child exited")
put("allocation.returned_within_bytes", abs(after - before))
if abs(after - before) > tol:
    fail("release", f"NVML used is {after - before:+d} bytes from where it started after the child exited")
ok("release", f"NVML used back to {after / MiB:.0f} MiB ({after - before:+d} bytes from the start)")
PY
}
alloc_check || failed=1

# --- 3. the sampler's CPU cost with this NVML ---------------------------------------------------
cpu_check() {
    local hz interval rc t status=0
    for hz in 10 100 1000; do
        interval=$((1000 / hz))ms
        TIMEFORMAT='%R %U %S'
        t=$( { time "$bin" sample --interval "$interval" --duration "${cpu_seconds}s" --json \
            >"$work/cpu-$hz.json" 2>"$work/cpu-$hz.err"; } 2>&1 )
        rc=$?
        py "$work/cpu-$hz.json" "$hz" "$cpu_seconds" "$rc" "$t" "$(first_error "$work/cpu-$hz.err")" <<'PY' || status=1
doc = load(sys.argv[1])
hz, seconds, rc = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
wall, user, system = (float(x) for x in sys.argv[5].split())
name = f"cpu_{hz}hz"
if rc != 0 or series(doc, "gpu0.nvml.used", "count") is None:
    fail(name, unavailable(doc) or sys.argv[6] or f"sample exited with {rc}")
count = series(doc, "gpu0.nvml.used", "count")
cpu = 100 * (user + system) / wall
put("cpu." + name, {"interval_ms": 1000 / hz, "seconds": wall, "cpu_percent": round(cpu, 2),
                    "user_s": user, "system_s": system, "samples": doc["samples"],
                    "nvml_samples": count, "missed_ticks": doc["missed_ticks"]})
if count < hz * seconds / 2:
    fail(name, f"only {count} NVML samples in {seconds} s at {hz} Hz")
ok(name, f"{cpu:.1f}% of a core at {hz} Hz ({count} NVML samples in {wall:.1f} s, {doc['missed_ticks']} ticks missed)")
PY
    done
    return "$status"
}
cpu_check || failed=1

# --- 4. vrambisect holds no VRAM of its own unless asked (--cuda) ------------------------------
# A sampler runs; a second one follows it by pid and reads NVML's per-process figure for it.
self_check() {
    local mode=$1 pid
    local -a extra=()
    [ "$mode" = cuda ] && extra=(--cuda)
    "$bin" sample "${extra[@]}" --interval 10ms --duration 2s --json >"$work/self-$mode-target.json" 2>"$work/self-$mode-target.err" &
    pid=$!
    sleep 0.5
    "$bin" sample --interval 10ms --pid "$pid" --json >"$work/self-$mode.json" 2>"$work/self-$mode.err"
    wait "$pid"
    py "$work/self-$mode.json" "$mode" "$pid" "$work/self-$mode-target.json" <<'PY'
mode, pid = sys.argv[2], int(sys.argv[3])
doc, target = load(sys.argv[1]), load(sys.argv[4])
held = series(doc, "gpu0.tree.used", "max")
if held is None:
    fail("own_vram_" + mode, unavailable(doc) or "no per-process reading")
if mode == "default":
    put("own_vram.default_bytes", held)
    if held != 0:
        fail("own_vram_default", f"vrambisect sample (pid {pid}) held {held} bytes of VRAM without --cuda")
    ok("own_vram_default", f"vrambisect sample (pid {pid}) never appeared in NVML's process list")
else:
    ctx = target.get("cuda_context_bytes")
    put("own_vram.cuda_bytes", held)
    put("own_vram.cuda_context_bytes_reported", ctx)
    if held == 0:
        fail("own_vram_cuda", unavailable(target) or f"vrambisect sample --cuda (pid {pid}) held no VRAM: the check above proves nothing")
    ok("own_vram_cuda", f"with --cuda it holds its context, {held / MiB:.0f} MiB (it reports {ctx})")
PY
}
self_check default || failed=1
self_check cuda || failed=1

# --- 5. run and bisect of the ComfyUI stand-in, and their bundles ------------------------------
comfy_check() {
    local kind=$1 rc
    local dir=$work/$kind
    rm -rf "$dir"
    if [ "$kind" = run ]; then
        "$bin" run --comfyui "$comfyui" --workflow "$workflow" --cuda --output "$dir" --json \
            >"$work/$kind.json" 2>"$work/$kind.err"
    else
        "$bin" bisect --comfyui "$comfyui" --workflow "$workflow" --toggle --disable-dynamic-vram \
            --output "$dir" --json >"$work/$kind.json" 2>"$work/$kind.err"
    fi
    rc=$?
    "$bin" report "$dir" --output "$work/$kind.zip" >"$work/$kind-report.out" 2>"$work/$kind-report.err"
    local rrc=$?
    py "$kind" "$dir" "$rc" "$rrc" "$(grep -v '^ *$' "$work/$kind.err")" "$work/$kind.zip" "$work/$kind.json" "$(first_error "$work/$kind-report.err")" <<'PY'
import csv, glob, zipfile
kind, dir, rc, rrc = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
err, zpath = sys.argv[5], sys.argv[6]
try:
    doc = load(sys.argv[7])
except ValueError:
    fail(kind, err.splitlines()[-1] if err else f"no JSON (exit {rc})")
if rc not in (0, 1):
    fail(kind, err or f"exit {rc}")
series_seen = set()
for path in glob.glob(os.path.join(dir, "**", "samples.csv"), recursive=True):
    with open(path) as f:
        series_seen.update(next(csv.reader(f), []))
want = ["gpu0.nvml.used"] + (["gpu0.cuda.used"] if kind == "run" else [])
missing = [s for s in want if s not in series_seen]
what = doc.get("outcome") or (doc.get("verdict") or {}).get("kind")
fig = {"exit": rc, "result": what, "series": sorted(s for s in series_seen if s.startswith("gpu")),
       "notes": list(dict.fromkeys(l for l in err.splitlines() if l.startswith("note:")))}
if kind == "run":
    fig["cuda_context_bytes"] = (doc.get("sampling_summary") or {}).get("cuda_context_bytes")
put(kind, fig)
if missing:
    why = "; ".join(doc.get("sampling") or fig["notes"]) or (err.splitlines() or ["no note"])[0]
    fail(kind, f"{what}, but no {', '.join(missing)} in its samples: {why}")
if rrc != 0:
    fail(kind + "_report", f"report failed: {sys.argv[8]}")
names = zipfile.ZipFile(zpath).namelist()
plots = [n for n in names if n.endswith("timeline.png")]
put(kind + ".bundle", {"zip": zpath, "plots": plots})
if not plots:
    fail(kind + "_report", "the bundle has no timeline.png")
ok(kind, f"{what}; samples with {', '.join(want)}; bundle {zpath} with {len(plots)} timeline plot(s)")
PY
}
if [ -f "$comfyui/main.py" ] && [ -f "$workflow" ]; then
    comfy_check run || failed=1
    comfy_check bisect || failed=1
else
    py "no ComfyUI stand-in at $comfyui or no workflow at $workflow" <<'PY'
skip("run", sys.argv[1]); skip("bisect", sys.argv[1])
PY
fi

# --- the figures ------------------------------------------------------------------------------
py "$out" "$bin" "$alloc" "$size" "$hold" "$work" "$failed" <<'PY'
figs = {"vrambisect": sys.argv[2], "alloc": sys.argv[3], "size": sys.argv[4], "hold": sys.argv[5],
        "nvml_lib": os.environ.get("VRAMBISECT_NVML_LIB"), "work": sys.argv[6]}
with open(os.environ["FIGURES"]) as f:
    for l in f:
        e = json.loads(l)
        *path, last = e["key"].split(".")
        d = figs
        for p in path:
            d = d.setdefault(p, {})
        if isinstance(d.get(last), dict) and isinstance(e["value"], dict):
            d[last].update(e["value"])
        else:
            d[last] = e["value"]
figs["failed"] = sys.argv[7] != "0"
with open(sys.argv[1], "w") as f:
    json.dump(figs, f, indent=2)
    f.write("\n")
PY
echo "gpu-check: figures in $out"
exit "$failed"
