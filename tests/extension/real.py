"""The extension in a real ComfyUI, driven in headless Chromium: a copy of the checkout (the
user's own is never touched) gets the pack through `vrambisect extension install` and the fault
node of tests/real-comfyui (an OOM unless --disable-smart-memory, decided from the flags the
real server parsed), starts on the CPU with the given frontend, and tests/extension/browser.py
does what a user does. The pack is removed again with `vrambisect extension remove`.

    python tests/extension/real.py --comfyui ComfyUI --python venv/bin/python \
        --tool target/debug/vrambisect --front-end-root FRONTEND/static --label 1.27.10 \
        --shots target/extension-shots --browser-python PY_WITH_PLAYWRIGHT
"""

import argparse
import json
import os
import sys
import tempfile

from drive import add_arguments, drive

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "real-comfyui"))
from run import copy_checkout  # noqa: E402  (the real-ComfyUI tier's copy, with its fault node)

WORKFLOW = os.path.join(ROOT, "tests", "real-comfyui", "workflow_fault.json")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--comfyui", required=True)
    add_arguments(ap)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="vb-ext-real-")
    comfyui = os.path.join(tmp, "ComfyUI")
    copy_checkout(os.path.abspath(a.comfyui), comfyui)
    with open(os.path.join(comfyui, "custom_nodes", "vrambisect_faults", "faults.json"), "w") as f:
        json.dump({"rules": [{"when": {"disable_smart_memory": False}, "effect": "oom"}]}, f)
    return drive(a, tmp, comfyui, ["--cpu"], WORKFLOW, "--disable-smart-memory")


if __name__ == "__main__":
    sys.exit(main())
