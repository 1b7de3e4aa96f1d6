#!/usr/bin/env python3
"""vrambisect against a real ComfyUI, on the CPU: the checks the stand-in cannot make.

Given a ComfyUI checkout and a Python with torch and ComfyUI's requirements, this copies the
checkout to a temporary folder (yours is never touched), adds the fault-injecting custom
node beside this file (``vrambisect_faults``), and runs ``vrambisect run`` and ``bisect``
cases whose failures the real server decides from the flags it really parsed. Every case
says what it expected and what it got; the table at the end is what the docs record.

    python3 tests/real-comfyui/run.py --comfyui ~/ComfyUI --python ~/ComfyUI/venv/bin/python

Not part of ``cargo test``: it needs torch (several minutes to install) and a real ComfyUI.
Exit status: 0 when every case gave what it expected, 1 otherwise.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
WORKFLOW = os.path.join(HERE, "workflow_fault.json")

# (name, command, base flags, fault rules, extra arguments, what must hold)
CASES = [
    {
        "name": "run: passes with no fault",
        "command": "run",
        "flags": ["--cpu"],
        "rules": [],
        "expect": {"exit": 0, "outcome": "pass"},
    },
    {
        "name": "run: an out-of-memory error in a node",
        "command": "run",
        "flags": ["--cpu"],
        "rules": [{"when": {}, "effect": "oom"}],
        "expect": {"exit": 1, "outcome": "oom"},
    },
    {
        "name": "run: a node that hangs",
        "command": "run",
        "flags": ["--cpu"],
        "rules": [{"when": {}, "effect": "hang"}],
        "extra": ["--stall-timeout", "15s"],
        "expect": {"exit": 1, "outcome": "hang"},
    },
    {
        "name": "run: ComfyUI dies during the prompt",
        "command": "run",
        "flags": ["--cpu"],
        "rules": [{"when": {}, "effect": "crash"}],
        "expect": {"exit": 1, "outcome": "crash"},
    },
    {
        "name": "run: a flag this version lacks is untestable (git bisect skips it)",
        "command": "run",
        "flags": ["--cpu", "--disable-dynamic-vram"],
        "rules": [],
        "expect": {"exit": 125, "outcome": "flag_rejected", "min_version": None},
        "only_before": "0.15.0",
    },
    {
        "name": "bisect: a base flag the model once called a no-op is the culprit",
        "command": "bisect",
        "flags": ["--cpu", "--async-offload"],
        "rules": [{"when": {"async_offload": True}, "effect": "oom"}],
        "expect": {"exit": 0, "verdict": "caused_by", "culprit_flags": ["--async-offload"]},
    },
    {
        "name": "bisect: fixed by a flag of an install without Dynamic VRAM",
        "command": "bisect",
        "flags": ["--cpu"],
        "rules": [{"when": {"disable_smart_memory": False}, "effect": "oom"}],
        "expect": {"exit": 0, "verdict": "fixed_by", "fixing_flags": ["--disable-smart-memory"]},
    },
    {
        "name": "bisect: the least --reserve-vram that works",
        "command": "bisect",
        "flags": ["--cpu"],
        "rules": [
            {"when": {"reserve_vram": None}, "effect": "oom"},
            {"when": {"reserve_vram": 1.0}, "effect": "oom"},
        ],
        "extra": ["--toggle", "--reserve-vram=1", "--toggle", "--reserve-vram=2",
                  "--toggle", "--reserve-vram=4"],
        "expect": {"exit": 0, "verdict": "fixed_by", "fixing_flags": ["--reserve-vram 2"]},
    },
    {
        "name": "bisect: the least --reserve-vram searched without a value",
        "command": "bisect",
        "flags": ["--cpu"],
        "rules": [{"when": {"reserve_vram": {"<": 1.75}}, "effect": "oom"}],
        "extra": ["--toggle", "--reserve-vram"],
        "expect": {"exit": 0, "verdict": "fixed_by", "fixing_flags": ["--reserve-vram 1.75"]},
    },
    {
        "name": "bisect: a flag this version rejects is refused before any run",
        "command": "bisect",
        "flags": ["--cpu", "--no-such-flag"],
        "rules": [],
        "expect": {"exit": 2},
        # Refused for that flag, by argparse's words, before any folder or run.
        "stderr": "unrecognized arguments: --no-such-flag",
        "no_output": True,
    },
]


def version_of(comfyui):
    try:
        with open(os.path.join(comfyui, "comfyui_version.py"), encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("__version__"):
                    return line.split("=")[1].strip().strip("\"'")
    except OSError:
        pass
    return "unknown"


def older(a, b):
    def parts(v):
        return [int(x) for x in v.split(".") if x.isdigit()]
    return parts(a) < parts(b)


def copy_checkout(src, dst):
    top = {"output", "temp", "user", "input", "venv", ".venv", "models"}

    def ignore(folder, names):
        # The user's data and environments at the top only (comfy/ldm/models is code).
        skip = {".git", "__pycache__"}
        if os.path.samefile(folder, src):
            skip |= top
        return [n for n in names if n in skip]

    shutil.copytree(src, dst, ignore=ignore, symlinks=True)
    for folder in ("models", "input", "output", "user"):
        os.makedirs(os.path.join(dst, folder), exist_ok=True)
    shutil.copytree(os.path.join(HERE, "vrambisect_faults"),
                    os.path.join(dst, "custom_nodes", "vrambisect_faults"))


def run_case(case, exe, comfyui, python, tmp):
    with open(os.path.join(comfyui, "custom_nodes", "vrambisect_faults", "faults.json"), "w",
              encoding="utf-8") as fh:
        json.dump({"rules": case["rules"]}, fh)
    out_dir = os.path.join(tmp, "out-" + str(abs(hash(case["name"]))))
    argv = [exe, case["command"], "--json", "--comfyui", comfyui, "--python", python,
            "--workflow", WORKFLOW, "--output", out_dir, "--startup-timeout", "5m"]
    argv += case.get("extra", [])
    argv += ["--"] + case["flags"]
    started = time.time()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
    took = time.time() - started
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        doc = {}
    expect = case["expect"]
    got = {"exit": proc.returncode}
    if "outcome" in doc:
        got["outcome"] = doc["outcome"]
    verdict = doc.get("verdict") or {}
    if "kind" in verdict:
        got["verdict"] = verdict["kind"]
        got["fixing_flags"] = verdict.get("fixing_flags")
        got["culprit_flags"] = verdict.get("culprit_flags")
    ok = all(got.get(k) == v for k, v in expect.items() if v is not None and k != "min_version")
    if case.get("stderr") and case["stderr"] not in proc.stderr:
        ok = False
    if case.get("no_output") and os.path.exists(out_dir):
        ok = False
    detail = verdict.get("statement") or "; ".join(doc.get("evidence", [])[:1]) or \
        (proc.stderr.strip().splitlines() or [""])[-1]
    runs = doc.get("runs_total")
    return ok, got, detail, took, runs


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--comfyui", required=True, help="a ComfyUI checkout (left untouched)")
    parser.add_argument("--python", required=True, help="a Python with torch and its requirements")
    parser.add_argument("--vrambisect", default=os.path.join(REPO, "target", "release", "vrambisect"),
                        help="the vrambisect binary (default: target/release/vrambisect)")
    parser.add_argument("--only", help="run only the cases whose name contains this")
    opts = parser.parse_args()
    if opts.vrambisect == os.path.join(REPO, "target", "release", "vrambisect"):
        # Always the binary of this checkout as it is now, never a stale one.
        subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=REPO, check=True)
    version = version_of(opts.comfyui)
    tmp = tempfile.mkdtemp(prefix="vrambisect-real-")
    comfyui = os.path.join(tmp, "ComfyUI")
    try:
        copy_checkout(opts.comfyui, comfyui)
        rows = []
        for case in CASES:
            if opts.only and opts.only not in case["name"]:
                continue
            before = case.get("only_before")
            if before and not older(version, before):
                continue
            ok, got, detail, took, runs = run_case(case, opts.vrambisect, comfyui, opts.python, tmp)
            rows.append((case["name"], case["expect"], got, ok, took, runs, detail))
            print("{} {} ({:.0f} s): {}".format("ok  " if ok else "FAIL", case["name"], took, detail),
                  flush=True)
        print()
        print("ComfyUI {} (CPU, {}), {}:".format(version, python_torch(opts.python),
                                                time.strftime("%Y-%m-%d")))
        print()
        print("| case | expected | got | runs | result |")
        print("|---|---|---|---|---|")
        for name, expect, got, ok, took, runs, _ in rows:
            shown = {k: v for k, v in expect.items() if v is not None and k != "min_version"}
            print("| {} | {} | {} | {} | {} |".format(
                name, fmt(shown), fmt({k: got.get(k) for k in shown}),
                runs if runs is not None else "-", "ok" if ok else "**FAIL**"))
        failed = sum(1 for r in rows if not r[3])
        print()
        print("{} passed, {} failed".format(len(rows) - failed, failed))
        return 1 if failed else 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def fmt(d):
    return ", ".join("{}={}".format(k, json.dumps(v) if not isinstance(v, str) else v)
                     for k, v in d.items())


def python_torch(python):
    try:
        return "torch " + subprocess.run(
            [python, "-c", "import torch; print(torch.__version__)"],
            capture_output=True, text=True, timeout=120).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "torch unknown"


if __name__ == "__main__":
    sys.exit(main())
