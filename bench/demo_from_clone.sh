#!/usr/bin/env bash
# Times `make demo` from a fresh clone of this repository (install + nano build + the ScalingInter-RL notebook) and
# writes bench/results/demo.json: wall seconds per phase and the run's summary.json.
#   bash bench/demo_from_clone.sh
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
git clone -q "$src" "$work/agentgym-nb"
cd "$work/agentgym-nb"
mkdir -p "$src/bench/results"
t0=$(date +%s); make install > "$src/bench/results/demo.log" 2>&1
t1=$(date +%s); make model >> "$src/bench/results/demo.log" 2>&1
t2=$(date +%s); make demo >> "$src/bench/results/demo.log" 2>&1
t3=$(date +%s)
python3 - "$src/bench/results/demo.json" "$t0" "$t1" "$t2" "$t3" outputs/runs/demo-babyai/summary.json \
  outputs/models/*/build.json <<'PY'
import json, os, platform, sys
out, t0, t1, t2, t3, summary, build = sys.argv[1], *map(int, sys.argv[2:6]), sys.argv[6], sys.argv[7]
json.dump({"benchmark": "make demo from a fresh clone", "machine": {"cpus": os.cpu_count(),
           "platform": platform.platform()},
           "seconds": {"install": t1 - t0, "model_build": t2 - t1, "notebook": t3 - t2, "total": t3 - t0},
           "summary": json.load(open(summary)), "nano_build": json.load(open(build))}, open(out, "w"), indent=2)
print(f"make demo: {t3 - t0} s total (install {t1 - t0}, model {t2 - t1}, notebook {t3 - t2}) -> {out}")
PY
