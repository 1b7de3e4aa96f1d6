#!/usr/bin/env python3
"""Runs and wall clock of `vrambisect regress` over 64 commits whose requirements.txt bumps
comfy-aimdo twice (0.5.4 at the good end, 0.5.5 from commit 20, 0.5.6 from commit 45), with
the user's Python holding 0.5.6 as it does after an update. Two regressions: the second bump
itself (the stand-in fails with 0.5.6), and a code change at commit 30 (fails whatever the
version). Each is searched three ways: skipping commits whose pins differ (`--no-install`,
what regress did before), with environments made by this session (an empty cache), and again
with the cache that session left.

Every run is real (the bundled stand-in); comfy-aimdo is a made-up wheel in a local index, so
pip reads no network. Build first:

    cargo build --release && benches/regress_pins.py
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "target", "release", "vrambisect")
WORKFLOW = os.path.join(ROOT, "fixtures", "workflows", "sd15_txt2img.json")
MAKE_WHEEL = os.path.join(ROOT, "tests", "support", "make_wheel.py")
N = 64
BUMPS = {20: "0.5.5", 45: "0.5.6"}


def git(repo, *args):
    subprocess.run(["git", "-C", repo, "-c", "user.email=b@b", "-c", "user.name=b", *args],
                   check=True, capture_output=True)


def history(tmp, code_regression_at):
    repo = os.path.join(tmp, "ComfyUI")
    shutil.copytree(os.path.join(ROOT, "fixtures", "fake-comfyui"), repo,
                    ignore=shutil.ignore_patterns("tests", "__pycache__"))
    failing = {"rules": [{"when": {"state": {"aimdo_version": "0.5.6"}}, "effect": "oom"}]}
    with open(os.path.join(repo, "scenario.json"), "w") as f:
        json.dump(failing if code_regression_at is None else {"rules": []}, f)
    with open(os.path.join(repo, "requirements.txt"), "w") as f:
        f.write("torch\ncomfy-aimdo==0.5.4\n")
    git(repo, "init", "-q", "-b", "master")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "commit 0")
    for i in range(1, N + 1):
        if i in BUMPS:
            with open(os.path.join(repo, "requirements.txt"), "w") as f:
                f.write("torch\ncomfy-aimdo=={}\n".format(BUMPS[i]))
        else:
            with open(os.path.join(repo, "CHANGES.txt"), "w") as f:
                f.write("{}\n".format(i))
        if i == code_regression_at:
            with open(os.path.join(repo, "scenario.json"), "w") as f:
                json.dump({"rules": [{"effect": "oom"}]}, f)
        git(repo, "add", "-A")
        git(repo, "commit", "-qm", "commit {}".format(i))
    return repo


def regress(repo, python, env, out, extra):
    started = time.monotonic()
    p = subprocess.run([BIN, "regress", "--json", "--comfyui", repo, "--python", python,
                        "--workflow", WORKFLOW, "--good", "HEAD~{}".format(N), "--output", out,
                        *extra], capture_output=True, text=True, env=env)
    wall = time.monotonic() - started
    doc = json.loads(p.stdout)
    return doc, wall


def main():
    tmp = tempfile.mkdtemp(prefix="vrambisect-bench-")
    index = os.path.join(tmp, "index")
    for v in ("0.5.4", "0.5.5", "0.5.6"):
        subprocess.run([sys.executable, MAKE_WHEEL, index, "comfy-aimdo", v], check=True,
                       capture_output=True)
    venv = os.path.join(tmp, "venv")
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    python = os.path.join(venv, "bin", "python")
    env = dict(os.environ, PIP_NO_INDEX="1", PIP_FIND_LINKS=index)
    subprocess.run([python, "-m", "pip", "install", "-q", "comfy-aimdo==0.5.6"], check=True,
                   env=env)
    print("| regression | mode | answer | runs | wall clock | environments installed |")
    print("|---|---|---|---|---|---|")
    for name, at in (("the bump to 0.5.6 (commit 45)", None), ("code at commit 30", 30)):
        work = tempfile.mkdtemp(dir=tmp)
        repo = history(work, at)
        cache = os.path.join(work, "cache")
        run_env = dict(env, VRAMBISECT_CACHE_DIR=cache)
        modes = (("skip (--no-install)", ["--no-install"]), ("environments, empty cache", []),
                 ("environments, cached", []))
        for i, (mode, extra) in enumerate(modes):
            doc, wall = regress(repo, python, run_env, os.path.join(work, "s{}".format(i)), extra)
            verdict = doc["verdict"]["kind"]
            if verdict == "first_bad_found" and not doc["could_be"]:
                answer = doc["first_bad"]["subject"]
            elif verdict == "first_bad_found":
                answer = "one of {} commits".format(len(doc["could_be"]))
            else:
                answer = verdict
            installed = sum(1 for e in doc.get("environments", []) if e["installed"])
            print("| {} | {} | {} | {} | {:.1f} s | {} |".format(
                name, mode, answer, doc["runs_total"], wall, installed))
            sys.stdout.flush()
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
