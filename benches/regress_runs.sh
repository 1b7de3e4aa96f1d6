#!/bin/bash
# How many ComfyUI runs `vrambisect regress` needs: made-up histories of the bundled stand-in
# (N commits, the regression at commit K), run for real. Build first: cargo build --release
#   benches/regress_runs.sh
set -e
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$ROOT/target/release/vrambisect
WF=$ROOT/fixtures/workflows/sd15_txt2img.json
for n in 8 16 32; do
  for k in 1 $((n/2)) $n; do
    d=$(mktemp -d); r=$d/ComfyUI
    cp -r $ROOT/fixtures/fake-comfyui $r; rm -rf $r/tests
    echo '{"rules": []}' > $r/scenario.json
    git -C $r init -q -b master; git -C $r add -A; git -C $r -c user.email=a@b -c user.name=t commit -qm c0
    for i in $(seq 1 $n); do
      echo $i > $r/CHANGES.txt
      if [ $i = $k ]; then echo '{"rules": [{"effect": "oom"}]}' > $r/scenario.json; fi
      git -C $r add -A; git -C $r -c user.email=a@b -c user.name=t commit -qm "commit $i"
    done
    runs=$($BIN regress --json --comfyui $r --workflow $WF --good HEAD~$n --output $d/s 2>/dev/null | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['runs_total'], d['first_bad']['subject'])")
    echo "n=$n k=$k runs=$runs"
    rm -rf $d
  done
done
