#!/usr/bin/env bash
# Times `make demo` from a fresh clone of this repository (install + nano build + the ScalingInter-RL notebook) and
# adds the run to bench/results/demo.json: wall seconds per phase, the load, the machine, and the run's summary.json
# (held-out success before and after, the paired lift with its 95% interval, the health numbers); its training
# figure goes to docs/figures/demo_training.png.
#   bash bench/demo_from_clone.sh            # once; run it again for another fresh-clone run
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
git clone -q "$src" "$work/agentgym-nb"
cd "$work/agentgym-nb"
mkdir -p "$src/bench/results"
load=$(cut -d' ' -f1 /proc/loadavg)
t0=$(date +%s); make install > "$src/bench/results/demo.log" 2>&1
t1=$(date +%s); make model >> "$src/bench/results/demo.log" 2>&1
t2=$(date +%s); make demo >> "$src/bench/results/demo.log" 2>&1
t3=$(date +%s)
.venv/bin/python -c "import sys; sys.path.insert(0, '$src/scripts'); import book; book.record_figure(
  'outputs/runs/demo-babyai/figures/training.png', 'demo_training.png', 'make demo: a ScalingInter-RL run on \
BabyAI\'s one-room track, step by step', 'cpu', '$(git rev-parse --short HEAD)')"
python3 - "$src/bench/results/demo.json" "$t0" "$t1" "$t2" "$t3" "$load" "$(git rev-parse --short HEAD)" \
  outputs/runs/demo-babyai/summary.json outputs/models/*/build.json <<'PY'
import json, os, platform, sys, time
out, t0, t1, t2, t3, load, commit, summary, build = sys.argv[1], *map(int, sys.argv[2:6]), *sys.argv[6:10]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "")
record = json.load(open(out)) if os.path.exists(out) and "runs" in json.load(open(out)) else {
    "benchmark": "make demo from a fresh clone", "runs": []}
run = {"date": time.strftime("%Y-%m-%d %H:%M"), "commit": commit, "machine": {"cpus": os.cpu_count(), "cpu": cpu,
       "platform": platform.platform()}, "load_before": float(load), "load_after": os.getloadavg()[0],
       "seconds": {"install": t1 - t0, "model_build": t2 - t1, "notebook": t3 - t2, "total": t3 - t0},
       "summary": json.load(open(summary)), "nano_build_seconds": json.load(open(build))["seconds"]}
record["runs"].append(run)
json.dump(record, open(out, "w"), indent=2)
s = run["summary"]
print(f"make demo: {t3 - t0} s (install {t1 - t0}, model {t2 - t1}, notebook {t3 - t2}); held-out "
      f"{s['success_before']:.3f} -> {s['success_after']:.3f}, paired lift {s['paired_lift']:+.3f} "
      f"[{s['paired_lift_ci95'][0]:+.3f}, {s['paired_lift_ci95'][1]:+.3f}] -> {out}")
PY
