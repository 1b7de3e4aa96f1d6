"""A ComfyUI custom node that fails on purpose, as a function of ComfyUI's own parsed flags.

vrambisect's real-ComfyUI tests put this folder into a copy of a ComfyUI checkout
(``custom_nodes/vrambisect_faults``) with a ``faults.json`` beside this file, then run
workflows that pass an image through ``VrambisectFault``. The node reads the flags ComfyUI
really parsed (``comfy.cli_args.args``), so what fails is decided by the real server, not by
vrambisect's model of it.

``faults.json``: ``{"rules": [{"when": {"FLAG_ATTR": VALUE, ...}, "effect": EFFECT}]}`` where
``FLAG_ATTR`` is an attribute of ``comfy.cli_args.args`` (``async_offload``,
(a VALUE may be ``{"<": N}`` or ``{">=": N}``: a comparison, an unset flag counting as 0)
``disable_smart_memory``, ``cpu``, ``reserve_vram``, ``disable_cuda_malloc``, ...) and
``EFFECT`` is ``oom`` (raise torch's out-of-memory error, as a CUDA allocation that fails),
``hang`` (block until the process ends), ``crash`` (end the process at once) or ``pass``.
A rule may also hold ``"env_has": {"NAME": "TEXT", ...}``: each variable's value in this
process now (after ComfyUI's own start-up steps changed it: its cuda_malloc step adds
``backend:cudaMallocAsync`` to ``PYTORCH_CUDA_ALLOC_CONF`` unless --disable-cuda-malloc) must
contain TEXT. The first rule whose conditions all hold decides; no rule means pass.

At import the node prints one line per variable it watches (``WATCHED``), with its value in the
environment the process was started with (``/proc/self/environ`` where the system keeps it)
and now, as JSON (null: unset), so that a test can tell what a run inherited from what
ComfyUI set itself::

    vrambisect_faults env PYTORCH_CUDA_ALLOC_CONF start=null now="backend:cudaMallocAsync"
"""

import json
import os
import time

import torch

from comfy.cli_args import args

HERE = os.path.dirname(os.path.abspath(__file__))
WATCHED = ("PYTORCH_CUDA_ALLOC_CONF",)


def _start_environment():
    """The environment this process was started with, or None where it cannot be read."""
    try:
        with open("/proc/self/environ", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    env = {}
    for item in raw.split(b"\0"):
        key, eq, value = item.partition(b"=")
        if eq and key:
            env.setdefault(os.fsdecode(key), os.fsdecode(value))
    return env


def _print_environment():
    start = _start_environment()
    for name in WATCHED:
        was = "unknown" if start is None else json.dumps(start.get(name))
        print("vrambisect_faults env %s start=%s now=%s" % (name, was, json.dumps(os.environ.get(name))),
              flush=True)


def _rules():
    path = os.path.join(HERE, "faults.json")
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as fh:
        return json.load(fh).get("rules", [])


def _holds(value, spec):
    """``spec`` is a value to equal, or ``{"<": N}`` / ``{">=": N}`` (an unset flag is 0)."""
    if isinstance(spec, dict):
        v = 0 if value is None else value
        ops = {"<": lambda a, b: a < b, "<=": lambda a, b: a <= b,
               ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}
        return all(ops[op](v, n) for op, n in spec.items())
    return value == spec


def _effect():
    for rule in _rules():
        if all(_holds(getattr(args, key, None), spec) for key, spec in rule.get("when", {}).items()) and all(
            text in os.environ.get(name, "") for name, text in rule.get("env_has", {}).items()
        ):
            return rule.get("effect", "pass")
    return "pass"


class VrambisectFault:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"image": ("IMAGE",)}}

    RETURN_TYPES = ("IMAGE",)
    FUNCTION = "run"
    CATEGORY = "testing"

    def run(self, image):
        effect = _effect()
        if effect == "oom":
            raise torch.OutOfMemoryError(
                "CUDA out of memory. Tried to allocate 1.14 GiB. GPU 0 has a total capacity of "
                "7.96 GiB of which 33.64 MiB is free. (raised by vrambisect_faults)"
            )
        if effect == "hang":
            while True:
                time.sleep(3600)
        if effect == "crash":
            os._exit(134)
        return (image,)


_print_environment()

NODE_CLASS_MAPPINGS = {"VrambisectFault": VrambisectFault}
