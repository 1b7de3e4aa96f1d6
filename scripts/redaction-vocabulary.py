#!/usr/bin/env python3
"""Writes src/report/vocabulary.txt: the words of ComfyUI's code and logs.

A user name that is one of them ("model", "max") is redacted only where it is a folder of a
path: replaced wherever it stands, it would turn `model_management` into `[user]_management`
and a JSON key "max" into "[user]", and a reader could not tell such a word is anybody's name
anyway. Of about 300 common first and last names, only those that are also words (mark, max,
white, green, long) are in the list; look through it after a new ComfyUI version.

    scripts/redaction-vocabulary.py --comfyui /path/to/ComfyUI

A word counts when it is in at least 3 of ComfyUI's Python files (comfy/, comfy_extras/,
comfy_execution/, comfy_api/, app/ and the top folder), or in 2 of the recorded logs under
fixtures/captures/logs; words of 3 letters or more, lower case.
"""
import argparse
import collections
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def words(text):
    for tok in re.findall(r"[A-Za-z][A-Za-z0-9]*", text):
        for w in re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])", tok):
            w = w.lower()
            if len(w) >= 3 and w.isalpha():
                yield w


def files_under(top, suffixes, recurse=True):
    if not recurse:
        return [os.path.join(top, f) for f in sorted(os.listdir(top)) if f.endswith(suffixes)]
    out = []
    for d, _, fs in os.walk(top):
        out += [os.path.join(d, f) for f in fs if f.endswith(suffixes)]
    return sorted(out)


def count(paths):
    c = collections.Counter()
    for p in paths:
        with open(p, encoding="utf-8", errors="ignore") as fh:
            c.update(set(words(fh.read())))
    return c


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--comfyui", required=True, help="a ComfyUI checkout")
    a = ap.parse_args()
    comfy = []
    for sub in ["comfy", "comfy_extras", "comfy_execution", "comfy_api", "app"]:
        comfy += files_under(os.path.join(a.comfyui, sub), (".py",))
    comfy += files_under(a.comfyui, (".py",), recurse=False)
    logs = files_under(os.path.join(ROOT, "fixtures", "captures", "logs"), (".log", ".txt"))
    vocab = {w for w, n in count(comfy).items() if n >= 3}
    vocab |= {w for w, n in count(logs).items() if n >= 2}
    out = os.path.join(ROOT, "src", "report", "vocabulary.txt")
    with open(out, "w", encoding="utf-8") as fh:
        fh.write("\n".join(sorted(vocab)) + "\n")
    print("{} words -> {}".format(len(vocab), os.path.relpath(out, ROOT)))


if __name__ == "__main__":
    main()
