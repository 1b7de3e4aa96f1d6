"""The extension in a real ComfyUI, driven in headless Chromium: a copy of the checkout (the
user's own is never touched) gets the pack through `vrambisect extension install` and the fault
node of tests/real-comfyui, starts on the CPU with the given frontend from an environment
without PYTORCH_CUDA_ALLOC_CONF, and tests/extension/browser.py does what a user does. The pack
is removed again with `vrambisect extension remove`.

The fault is an OOM while the process's own PYTORCH_CUDA_ALLOC_CONF holds cudaMallocAsync, which
ComfyUI's cuda_malloc step puts there (torch's CUDA build, even under --cpu) unless
--disable-cuda-malloc: so the verdict "fixed by --disable-cuda-malloc" needs runs that did not
inherit the variable from the server's process. Then, while the server runs, the environment
itself is checked: the server was started without the variable and its process has it (the
fault node prints both at import); each run of the diagnosis with --disable-cuda-malloc was
started without it and has none, the others got it from their own cuda_malloc step; the
downloaded bundle's environment.json names it in env_set_by_comfyui and not among the user's
variables, and its ISSUE.md has the row "Set by ComfyUI itself".

    python tests/extension/real.py --comfyui ComfyUI --python venv/bin/python \
        --tool target/debug/vrambisect --front-end-root FRONTEND/static --label 1.27.10 \
        --shots target/extension-shots --browser-python PY_WITH_PLAYWRIGHT
"""

import argparse
import glob
import json
import os
import re
import sys
import tempfile
import zipfile

from drive import add_arguments, drive

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "real-comfyui"))
from run import copy_checkout  # noqa: E402  (the real-ComfyUI tier's copy, with its fault node)

WORKFLOW = os.path.join(ROOT, "tests", "real-comfyui", "workflow_fault.json")
VAR = "PYTORCH_CUDA_ALLOC_CONF"
ASYNC = "backend:cudaMallocAsync"
FIX = "--disable-cuda-malloc"
LINE = re.compile(r"vrambisect_faults env " + VAR + r" start=(\S+) now=(.*)$", re.M)


def env_line(path):
    """(start, now) of the fault node's line in a ComfyUI log (JSON values: None is unset), or
    None where the node printed none."""
    with open(path, encoding="utf-8", errors="replace") as f:
        m = LINE.search(f.read())
    if m is None:
        return None
    return tuple(None if v == "unknown" else json.loads(v) for v in (m.group(1), m.group(2).strip()))


def environment_checks(a, comfyui):
    failures = []

    def check(ok, what, got=None):
        print(("ok   " if ok else "FAIL ") + what + ("" if ok or got is None else ": got %r" % (got,)))
        if not ok:
            failures.append(what)

    def after(server, log_path):
        with open("/proc/%d/environ" % server.pid, "rb") as f:
            started = [item.partition(b"=")[0] for item in f.read().split(b"\0")]
        check(VAR.encode() not in started, "the server was started without %s" % VAR)
        got = env_line(log_path)
        check(got == (None, ASYNC), "the server's own process has %s=%s (ComfyUI set it)" % (VAR, ASYNC), got)
        runs = []
        for record in sorted(glob.glob(os.path.join(comfyui, "user", "vrambisect", "diagnoses", "*", "session",
                                                    "runs", "*", "record.json"))):
            with open(record, encoding="utf-8") as f:
                rec = json.load(f)
            argv = rec.get("argv") or []
            runs.append((os.path.basename(os.path.dirname(record)), FIX in argv, rec.get("outcome"),
                         env_line(os.path.join(os.path.dirname(record), "comfyui.log"))))
        for name, fixed, outcome, got in runs:
            said = ("%s at start %s, in its process %s" % (VAR, "unset" if got[0] is None else repr(got[0]),
                                                          "unset" if got[1] is None else repr(got[1]))
                    if got else "the fault node was not imported (%s)" % outcome)
            print("     run %s %s: %s" % (name, ("with " if fixed else "without ") + FIX, said))
        # Runs that never imported custom nodes (--disable-all-custom-nodes, or a start that
        # failed first) say nothing about the environment.
        seen = [(name, fixed, got) for name, fixed, _, got in runs if got is not None]
        with_fix = [r for r in seen if r[1]]
        check(bool(with_fix), "the diagnosis had a run with %s that imported the fault node (%d runs)"
              % (FIX, len(runs)), runs)
        check(all(got == (None, None) for _, _, got in with_fix),
              "each run with %s was started without %s and has none" % (FIX, VAR), with_fix)
        check(any(not fixed for _, fixed, _ in seen)
              and all(got == (None, ASYNC) for _, fixed, got in seen if not fixed),
              "each run without it was started without %s and got %s from its own cuda_malloc step" % (VAR, ASYNC),
              seen)
        bundle = os.path.join(a.shots, "report-%s.zip" % a.label)
        with zipfile.ZipFile(bundle) as z:
            env = json.loads(z.read("environment.json"))
            issue = z.read("ISSUE.md").decode("utf-8")
        set_by = (env.get("env_set_by_comfyui") or {}).get("value")
        check(isinstance(set_by, dict) and set_by.get(VAR) == ASYNC,
              "the bundle's environment.json: env_set_by_comfyui has %s=%s (of %s)" % (VAR, ASYNC, sorted(set_by or {})),
              set_by)
        check(VAR not in ((env.get("env") or {}).get("value") or {}),
              "the bundle's environment.json: %s is not among the user's variables" % VAR, env.get("env"))
        row = next((ln for ln in issue.splitlines() if "Set by ComfyUI itself" in ln), None)
        check(row is not None and VAR in row, "the bundle's ISSUE.md: %s" % (row or "no row 'Set by ComfyUI itself'"))
        print("environment checks held" if not failures else "%d environment check(s) failed" % len(failures))
        return 1 if failures else 0

    return after


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--comfyui", required=True)
    add_arguments(ap)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="vb-ext-real-")
    comfyui = os.path.join(tmp, "ComfyUI")
    copy_checkout(os.path.abspath(a.comfyui), comfyui)
    with open(os.path.join(comfyui, "custom_nodes", "vrambisect_faults", "faults.json"), "w") as f:
        json.dump({"rules": [{"env_has": {VAR: "cudaMallocAsync"}, "effect": "oom"}]}, f)
    return drive(a, tmp, comfyui, ["--cpu"], WORKFLOW, FIX, after=environment_checks(a, comfyui))


if __name__ == "__main__":
    sys.exit(main())
