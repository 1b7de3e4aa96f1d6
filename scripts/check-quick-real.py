#!/usr/bin/env python3
"""Queues the shortened prompt of every recorded frontend workflow on a real ComfyUI.

Each shortened prompt (and, for comparison, the full one it came from) is POSTed to the real
server's /prompt: ComfyUI's own validation must accept it (HTTP 200). Model files and input
media are empty placeholders in a scratch --base-directory, which is all validation looks at;
the ComfyUI folder itself is not touched. Execution then fails at the first model load, which
is not what is checked here.

    VRAMBISECT_QUICK_OUT=/tmp/quick cargo test --lib workflow::quick::tests::the_recorded
    scripts/check-quick-real.py --comfyui ~/ComfyUI --python ~/ComfyUI/venv/bin/python \
        --quick /tmp/quick

Exit status 0 when every shortened prompt gets the answer its full prompt gets (accepted, or
refused with the same errors: some recorded workflows mute the nodes a sampler needs, which
ComfyUI refuses either way) and differs from it only in step inputs; 1 otherwise.
"""

import argparse
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAIRS = os.path.join(ROOT, "fixtures", "ui-workflows", "pairs")
MODEL_EXT = (".safetensors", ".ckpt", ".pt", ".pth", ".bin", ".gguf", ".sft", ".pkl")
MEDIA_EXT = (".png", ".jpg", ".jpeg", ".webp", ".mp3", ".wav", ".flac", ".ogg", ".mp4", ".webm", ".mov")
MODEL_FOLDERS = (
    "checkpoints", "loras", "vae", "text_encoders", "clip", "unet", "diffusion_models",
    "clip_vision", "style_models", "embeddings", "vae_approx", "controlnet", "gligen",
    "upscale_models", "hypernetworks", "photomaker", "model_patches", "audio_encoders",
)
STEP_INPUTS = {"steps", "start_at_step", "end_at_step", "step", "value"}


def png():
    """A 8x8 grey PNG."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    raw = b"".join(b"\x00" + b"\x80" * 24 for _ in range(8))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 8, 8, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def strings(prompt):
    for node in prompt.values():
        for value in node.get("inputs", {}).values():
            if isinstance(value, str):
                yield value


def placeholders(base, prompts):
    for folder in MODEL_FOLDERS:
        os.makedirs(os.path.join(base, "models", folder), exist_ok=True)
    os.makedirs(os.path.join(base, "input"), exist_ok=True)
    for prompt in prompts:
        for value in strings(prompt):
            low = value.lower()
            if low.endswith(MODEL_EXT):
                for folder in MODEL_FOLDERS:
                    path = os.path.join(base, "models", folder, value)
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    open(path, "ab").close()
            elif low.endswith(MEDIA_EXT):
                name = value.split(" [")[0]
                path = os.path.join(base, "input", name)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "wb") as fh:
                    fh.write(png() if low.endswith((".png", ".jpg", ".jpeg", ".webp")) else b"\0" * 64)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, prompt):
    body = json.dumps({"prompt": prompt, "client_id": "vrambisect-quick-check"}).encode()
    req = urllib.request.Request("http://127.0.0.1:{}/prompt".format(port), data=body,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def differences(full, quick):
    out = []
    for node_id, node in full.items():
        other = quick.get(node_id)
        if other is None or other.get("class_type") != node.get("class_type"):
            out.append("node {} differs".format(node_id))
            continue
        for k, v in node.get("inputs", {}).items():
            if other["inputs"].get(k) != v and k not in STEP_INPUTS:
                out.append("node {} input {}".format(node_id, k))
    if set(quick) != set(full):
        out.append("the node sets differ")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--comfyui", required=True)
    ap.add_argument("--python", required=True)
    ap.add_argument("--quick", required=True, help="the shortened prompts (VRAMBISECT_QUICK_OUT)")
    args = ap.parse_args()
    names = sorted(n for n in os.listdir(args.quick) if n.endswith(".api.json"))
    full = {n: json.load(open(os.path.join(PAIRS, n))) for n in names}
    quick = {n: json.load(open(os.path.join(args.quick, n))) for n in names}
    base = tempfile.mkdtemp(prefix="vrambisect-quick-")
    placeholders(base, list(full.values()))
    port = free_port()
    log = open(os.path.join(base, "comfyui.log"), "w")
    server = subprocess.Popen(
        [args.python, "main.py", "--cpu", "--port", str(port), "--base-directory", base,
         "--disable-all-custom-nodes"],
        cwd=args.comfyui, stdout=log, stderr=subprocess.STDOUT)
    failures = []
    counts = {True: 0, False: 0}
    try:
        deadline = time.time() + 300
        while True:
            try:
                urllib.request.urlopen("http://127.0.0.1:{}/system_stats".format(port), timeout=2)
                break
            except OSError:
                if server.poll() is not None or time.time() > deadline:
                    sys.exit("ComfyUI did not start: see {}".format(log.name))
                time.sleep(1)
        for n in names:
            diff = differences(full[n], quick[n])
            status_full, body_full = post(port, full[n])
            status, body = post(port, quick[n])
            same = status == status_full and (status == 200 or body == body_full)
            mark = "ok" if same and not diff else "FAIL"
            print("{:4} {} (full: {}, shortened: {})".format(mark, n, status_full, status))
            counts[status == 200] += 1
            if not same:
                failures.append("{}: {}".format(n, json.dumps(body)[:400]))
            if diff:
                failures.append("{}: changed beyond steps: {}".format(n, ", ".join(diff)))
            # Nothing needs to run: empty the queue and stop what started.
            for path in ("/queue", "/interrupt"):
                data = json.dumps({"clear": True}).encode() if path == "/queue" else b""
                req = urllib.request.Request("http://127.0.0.1:{}{}".format(port, path), data=data,
                                             headers={"Content-Type": "application/json"})
                try:
                    urllib.request.urlopen(req, timeout=10).read()
                except OSError:
                    pass
    finally:
        server.terminate()
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()
    print("{} shortened prompts: {} accepted, {} refused as their full prompts are; {} failures".format(
        len(names), counts[True], counts[False], len({f.split(":")[0] for f in failures})))
    for f in failures:
        print(f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
