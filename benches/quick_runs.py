#!/usr/bin/env python3
"""Wall clock to a bisect's verdict with shortened runs (--quick auto) and without (--quick off).

Every run is real: the bundled stand-in, copied per bisect, with the time shape of a heavy
workflow (a 1 s model load, 20 sampling steps of 0.3 s) and the failures of each row. Build
first:

    cargo build --release && benches/quick_runs.py [--seeds 3]

Prints one Markdown row per case: wall clock and runs of each kind for both modes, and whether
each verdict is right. With --on-record, the auto column's bisects are given the log of a run of
the workflow with the user's flags that failed (`--failed-log`, the failure on record as the
extension's Diagnose now gives it); that run is made first and not timed, as the user had it.
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
SIX = ["--disable-dynamic-vram", "--disable-pinned-memory", "--disable-async-offload",
       "--disable-nvml-pressure", "--disable-smart-memory", "--disable-mmap"]
EIGHT = SIX + ["--disable-cuda-graphs", "--fast-disk"]


def fixed_by(flags, failure):
    """Passes when every flag of `flags` is in force (never, for None), else `failure` (a
    rule's other keys)."""
    fails = dict({"effect": "oom", "node": "KSampler"}, **failure)
    if flags is None:
        return [], fails
    when = {"flags": {f: True for f in flags}}
    return [dict({"when": when, "effect": "pass"})], fails


FOUR = SIX[:4]

CASES = [
    # name, toggles, fixing flags, failure rule (besides "fails unless fixed"), --repeat
    # The stand-in's OOM matches cuda_oom_native, whose usual fixes that keep Dynamic VRAM
    # on start with --disable-pinned-memory: the prior.
    ("one culprit among 4, the prior points right", FOUR, ["--disable-pinned-memory"], {}, 1),
    ("one culprit among 6, the prior points wrong", SIX, ["--disable-async-offload"], {}, 1),
    ("one culprit among 8", EIGHT, ["--disable-mmap"], {}, 1),
    ("a pair among 6", SIX, ["--disable-pinned-memory", "--disable-smart-memory"], {}, 1),
    ("flaky, fails 70%, --repeat 3", SIX, ["--disable-dynamic-vram"],
     {"when": {"probability": 0.7}}, 3),
    ("OOM at VAE decode", SIX, ["--disable-smart-memory"], {"node": "VAEDecode"}, 1),
    ("OOM past step 10", SIX, ["--disable-dynamic-vram"], {"at_step": 12}, 1),
    # The default toggles of an install with Dynamic VRAM, and nothing fixes it.
    ("no fix, the default toggles", None, None, {}, 1),
    # Nothing fixes an OOM that strikes after sampling.
    ("no fix, OOM at VAE decode", SIX, None, {"node": "VAEDecode"}, 1),
]


def scenario(fix, failure, seed):
    passes, fails = fixed_by(fix, failure)
    return {"seed": seed, "timing": TIMING, "rules": passes + [fails]}


def bisect(case, quick, seed, on_record=False):
    name, toggles, fix, failure, repeat = case
    tmp = tempfile.mkdtemp(prefix="vrambisect-bench-")
    try:
        install = os.path.join(tmp, "ComfyUI")
        shutil.copytree(os.path.join(ROOT, "fixtures", "fake-comfyui"), install,
                        ignore=shutil.ignore_patterns("tests", "__pycache__"))
        with open(os.path.join(install, "scenario.json"), "w") as fh:
            json.dump(scenario(fix, failure, seed), fh)
        args = [BIN, "bisect", "--json", "--comfyui", install, "--workflow", WORKFLOW,
                "--output", os.path.join(tmp, "session"), "--quick", quick,
                "--repeat", str(repeat), "--no-custom-nodes-check"]
        for t in toggles or []:
            args += ["--toggle", t]
        # Value searches (the default toggles' --vram-headroom) end at a 24 GB card.
        env = dict(os.environ, VRAMBISECT_VALUE_CEILING_GB="24")
        env.pop("VRAMBISECT_NVML_LIB", None)
        if on_record:
            # The failure as the user met it (a flaky one may have passed: run until it fails).
            for i in range(20):
                run = os.path.join(tmp, "failed-%d" % i)
                p = subprocess.run([BIN, "run", "--json", "--comfyui", install, "--workflow", WORKFLOW,
                                    "--output", run], capture_output=True, text=True, env=env)
                if p.returncode == 1:
                    args += ["--failed-log", os.path.join(run, "comfyui.log")]
                    break
        t0 = time.monotonic()
        out = subprocess.run(args, capture_output=True, text=True, env=env)
        wall = time.monotonic() - t0
        doc = json.loads(out.stdout)
        if fix is None:
            right = doc["verdict"]["kind"] == "no_fix_found"
        else:
            right = doc["verdict"]["kind"] == "fixed_by" and sorted(doc["verdict"]["fixing_flags"]) == sorted(fix)
        return {
            "runs": doc["runs_total"],
            "wall": wall,
            "quick": doc["quick"]["runs_quick"],
            "full": doc["quick"]["runs_full"],
            "right": right,
            "state": doc["quick"]["state"],
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=1, help="seeds per flaky case (deterministic cases run once)")
    ap.add_argument("--only", help="run only the cases whose name contains this")
    ap.add_argument("--on-record", action="store_true",
                    help="give the auto bisects the log of a failed run (--failed-log)")
    args = ap.parse_args()
    if not os.path.exists(BIN):
        sys.exit("build first: cargo build --release")
    print("| case | auto: wall clock | auto: runs quick + full | off: wall clock | off: runs | speed-up | verdicts right (auto / off) |")
    print("|---|---|---|---|---|---|---|")
    for case in CASES:
        if args.only and args.only not in case[0]:
            continue
        seeds = range(args.seeds) if case[4] > 1 else [0]
        autos = [bisect(case, "auto", s, args.on_record) for s in seeds]
        offs = [bisect(case, "off", s) for s in seeds]
        mean = lambda rows, k: sum(r[k] for r in rows) / len(rows)
        print("| {} | {:.0f} s | {:.1f} + {:.1f} | {:.0f} s | {:.1f} | {:.1f}x | {}/{} / {}/{} |".format(
            case[0], mean(autos, "wall"), mean(autos, "quick"), mean(autos, "full"),
            mean(offs, "wall"), mean(offs, "full"), mean(offs, "wall") / mean(autos, "wall"),
            sum(r["right"] for r in autos), len(autos), sum(r["right"] for r in offs), len(offs)),
            flush=True)


if __name__ == "__main__":
    main()
