#!/usr/bin/env python3
"""What the cheapest fix costs against the first one met: runs and wall clock of a bisect by
default (the search for a cheaper fix after the first) and with --first-fix, and the fix each
recommends.

Every run is real: the bundled stand-in, copied per bisect, with the time shape of a heavy
workflow (a 1 s model load, 20 sampling steps of 0.3 s) and, per row, which configurations
pass and how much slower each samples (a rule's `step_factor`: 1.7 is 1.7x per step). Value searches end at the stand-in's 24 GB card. Build
first:

    cargo build --release && benches/cheaper_fix.py

Prints one Markdown row per case.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "target", "release", "vrambisect")
WORKFLOW = os.path.join(ROOT, "fixtures", "workflows", "sd15_txt2img_20_steps.json")
TIMING = {"startup_delay": 0.2, "node_time": 0.05, "step_time": 0.3, "load_time": 1.0}
OFF_SLOW = {"when": {"state": {"dynamic_vram": False}}, "effect": "pass", "step_factor": 1.7}
OOM = {"when": {"state": {"dynamic_vram": True}}, "effect": "oom", "node": "KSampler"}

CASES = [
    # name, extra arguments, rules, the right recommendation
    ("a headroom keeps Dynamic VRAM; turning it off is 1.7x slower", [],
     [{"when": {"flags": {"--vram-headroom": {">=": 1.5}}}, "effect": "pass"}, OOM, OFF_SLOW],
     ["--vram-headroom 1.5"]),
    ("two fixes keep Dynamic VRAM; one is 1.5x slower",
     ["--toggle", "--disable-dynamic-vram", "--toggle", "--disable-pinned-memory",
      "--toggle", "--disable-async-offload"],
     [{"when": {"flags": {"--disable-async-offload": True}}, "effect": "pass", "step_factor": 1.5},
      {"when": {"flags": {"--disable-pinned-memory": True}}, "effect": "pass"}, OOM, OFF_SLOW],
     ["--disable-pinned-memory"]),
    ("only turning Dynamic VRAM off fixes it", [], [OOM, OFF_SLOW], ["--disable-dynamic-vram"]),
    ("a --reserve-vram value, none given",
     ["--toggle", "--disable-dynamic-vram", "--toggle", "--reserve-vram"],
     [{"when": {"flags": {"--reserve-vram": {">=": 2.75}}}, "effect": "pass"}, OOM, OFF_SLOW],
     ["--reserve-vram 2.75"]),
    # The OOM names 2.6 GiB; --reserve-vram replaces the 0.4 GB Linux default, so 3 GB
    # reserved leaves the room that was missing.
    ("a --reserve-vram value, none given; the OOM names the room missing",
     ["--toggle", "--disable-dynamic-vram", "--toggle", "--reserve-vram"],
     [{"when": {"flags": {"--reserve-vram": {">=": 3.0}}}, "effect": "pass"},
      dict(OOM, allocate_mb=2662), OFF_SLOW],
     ["--reserve-vram 3"]),
    ("no flag fixes it", [], [{"effect": "oom", "node": "KSampler"}], None),
]


def bisect(case, first_fix):
    name, extra, rules, _ = case
    tmp = tempfile.mkdtemp(prefix="vrambisect-bench-")
    try:
        install = os.path.join(tmp, "ComfyUI")
        shutil.copytree(os.path.join(ROOT, "fixtures", "fake-comfyui"), install,
                        ignore=shutil.ignore_patterns("tests", "__pycache__"))
        with open(os.path.join(install, "scenario.json"), "w") as fh:
            json.dump({"timing": TIMING, "rules": rules}, fh)
        args = [BIN, "bisect", "--json", "--comfyui", install, "--workflow", WORKFLOW,
                "--output", os.path.join(tmp, "session"), "--no-custom-nodes-check"] + extra
        if first_fix:
            args.append("--first-fix")
        env = dict(os.environ, VRAMBISECT_VALUE_CEILING_GB="24")
        env.pop("VRAMBISECT_NVML_LIB", None)
        t0 = time.monotonic()
        out = subprocess.run(args, capture_output=True, text=True, env=env)
        wall = time.monotonic() - t0
        doc = json.loads(out.stdout)
        v = doc["verdict"]
        return {"wall": wall, "runs": doc["runs_total"],
                "fix": v["fixing_flags"] if v["kind"] == "fixed_by" else None,
                "kind": v["kind"]}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", help="run only the cases whose name contains this")
    args = ap.parse_args()
    if not os.path.exists(BIN):
        sys.exit("build first: cargo build --release")
    print("| case | default: fix | runs | wall clock | --first-fix: fix | runs | wall clock | wall clock default / first fix | right |")
    print("|---|---|---|---|---|---|---|---|---|")
    for case in CASES:
        if args.only and args.only not in case[0]:
            continue
        d, f = bisect(case, False), bisect(case, True)
        show = lambda r: " ".join(r["fix"]) if r["fix"] else r["kind"]
        print("| {} | `{}` | {} | {:.0f} s | `{}` | {} | {:.0f} s | {:.2f}x | {} |".format(
            case[0], show(d), d["runs"], d["wall"], show(f), f["runs"], f["wall"],
            d["wall"] / f["wall"], "yes" if d["fix"] == case[3] else "no"), flush=True)


if __name__ == "__main__":
    main()
