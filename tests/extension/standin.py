"""The extension in the stand-in ComfyUI (fixtures/fake-comfyui), driven in headless Chromium with
a real frontend package: a temporary copy of the stand-in (its demo scenario: Dynamic VRAM runs out
of memory in the KSampler, --disable-dynamic-vram fixes it) gets the pack through
`vrambisect extension install`, starts with the given Python (one with aiohttp) and
`--front-end-root`, and tests/extension/browser.py does what a user does; the Diagnose button
bisects that same copy. The pack is removed again with `vrambisect extension remove`.

    python tests/extension/standin.py --python target/extension-venv/bin/python \
        --tool target/debug/vrambisect --front-end-root FRONTEND/static --label standin-1.27.10 \
        --shots target/extension-shots [--browser-python PY_WITH_PLAYWRIGHT]

Exit status: browser.py's (0 when every check held); the copy is kept for a look otherwise.
"""

import argparse
import os
import shutil
import sys
import tempfile

from drive import add_arguments, drive

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FAKE = os.path.join(ROOT, "fixtures", "fake-comfyui")
WORKFLOW = os.path.join(ROOT, "fixtures", "workflows", "sd15_txt2img.json")


def ignore(directory, names):
    """The committed stand-in only: no tests, caches, or files an earlier run left in the checkout
    (the demo scenario.json stays)."""
    rel = os.path.relpath(directory, FAKE)
    skip = set()
    for name in names:
        if name in ("__pycache__", ".git") or name.endswith(".pyc"):
            skip.add(name)
        elif rel == "." and (name in ("tests", "run-counter.txt", "temp") or name.startswith("gpu-state.txt")):
            skip.add(name)
        elif rel in ("user", "output", "input") and name != ".gitkeep":
            skip.add(name)
    return skip


def main():
    ap = argparse.ArgumentParser()
    add_arguments(ap)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="vb-ext-standin-")
    comfyui = os.path.join(tmp, "ComfyUI")
    shutil.copytree(FAKE, comfyui, ignore=ignore)
    return drive(a, tmp, comfyui, [], WORKFLOW, "--disable-dynamic-vram")


if __name__ == "__main__":
    sys.exit(main())
