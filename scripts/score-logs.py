#!/usr/bin/env python3
"""Scores `vrambisect logscan` on a folder of real log excerpts against its expected.json.

    scripts/score-logs.py DIR [--vrambisect PATH] [--json]

DIR holds the excerpts and an expected.json in the form of fixtures/logs/real/expected.json
(outcome, exit, known_issues_include, cut, startup). An entry is read right when every one of
those agrees, as the corpus test (src/logscan/corpus_tests.rs) holds it. Prints one line per
miss and the score; this is how a new batch's first reading is recorded, before any change
for it.
"""

import argparse
import json
import os
import subprocess
import sys


def problems(tool, path, entry):
    out = []
    proc = subprocess.run(
        [tool, "logscan", "--json", path], capture_output=True, timeout=120
    )
    want_exit = entry["exit"]
    try:
        doc = json.loads(proc.stdout) if proc.stdout.strip() else None
    except ValueError:
        return [f"no JSON (exit {proc.returncode}): {proc.stderr.decode()[:200]}"]
    # Refused (`{"error": …}` with --json): only the exit status can be compared.
    if doc is None or "error" in doc:
        if proc.returncode != want_exit:
            out.append(f"refused (exit {proc.returncode}), expected exit {want_exit}")
        return out
    if doc.get("outcome") != entry.get("outcome"):
        out.append(f"outcome {doc.get('outcome')}, expected {entry.get('outcome')}")
    if proc.returncode != want_exit:
        out.append(f"exit {proc.returncode}, expected {want_exit}")
    ids = {k["id"] for k in doc.get("known_issues", [])}
    for want in entry.get("known_issues_include", []):
        if want not in ids:
            out.append(f"known issue {want} not found")
    if "cut" in entry and doc.get("ends_mid_prompt") != entry["cut"]:
        out.append(f"ends_mid_prompt {doc.get('ends_mid_prompt')}, expected {entry['cut']}")
    startup = doc.get("startup") or {}
    for key, want in (entry.get("startup") or {}).items():
        got = startup.get(key)
        ok = (want in got) if key == "device" and isinstance(got, str) else got == want
        if not ok:
            out.append(f"startup.{key} {got!r}, expected {want!r}")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--vrambisect", default=os.environ.get("VRAMBISECT", "vrambisect"))
    ap.add_argument("--json", action="store_true", help="print the misses as JSON")
    args = ap.parse_args()
    with open(os.path.join(args.dir, "expected.json"), encoding="utf-8") as f:
        expected = json.load(f)
    misses = {}
    for name, entry in sorted(expected.items()):
        p = problems(args.vrambisect, os.path.join(args.dir, name), entry)
        if p:
            misses[name] = p
    right = len(expected) - len(misses)
    if args.json:
        json.dump({"right": right, "total": len(expected), "misses": misses}, sys.stdout, indent=1)
        print()
    else:
        for name, p in misses.items():
            print(f"{name}: {'; '.join(p)}")
        print(f"{right} of {len(expected)} read right ({100 * right / max(1, len(expected)):.0f}%)")
    return 0 if not misses else 1


if __name__ == "__main__":
    sys.exit(main())
