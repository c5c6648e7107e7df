#!/usr/bin/env bash
# One call of a lent GPU machine (about 10 minutes, no network): `make gpu-check`'s parts, then one RL step at
# Qwen2.5-7B's shape, then the horizon study's pilot, each stopped by one shared deadline so that the call ends on time
# and keeps what finished. Bring `.gpu-wheels/` (make gpu-wheels) and the cpu preset's nano (outputs/models/, make
# model). Everything lands in $OUT (default bench/results): gpu_check.json, gpu_check_paper_7b.json,
# horizon_pilot.json and session.log.
#
#     bash scripts/gpu_session.sh [SECONDS]        # SECONDS: the whole session's budget (default 575)
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-bench/results}"
exec > >(tee "$OUT/session.log") 2>&1
T0=$(date +%s); LIMIT=${1:-575}
left() { echo $(( LIMIT - ($(date +%s) - T0) )); }
stop_parts() { pkill -9 -f "gpu_check.py --one"; sleep 1; }   # a part's process outlives a stopped parent
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -V; nproc; git rev-parse --short HEAD; git status --short | head -5
echo "== gpu_check ($(left) s left)"
timeout $(( $(left) - 30 )) python3 scripts/gpu_check.py $([ -d .gpu-wheels ] && echo --wheels .gpu-wheels) \
    --out "$OUT/gpu_check.json"
echo "== gpu_check rc=$? at $(( $(date +%s) - T0 )) s"; stop_parts
L=$(left); if [ "$L" -gt 60 ]; then
    echo "== paper_7b ($L s left)"
    timeout $(( L - 8 )) python3 scripts/gpu_check.py --parts paper_7b --out "$OUT/gpu_check_paper_7b.json"
    echo "== paper_7b rc=$? at $(( $(date +%s) - T0 )) s"; stop_parts
fi
L=$(left); if [ "$L" -gt 45 ]; then
    echo "== horizon pilot ($L s left)"
    timeout $(( L - 3 )) python3 bench/horizon.py --pilot --device cuda --out "$OUT/horizon_pilot.json"
    echo "== pilot rc=$? at $(( $(date +%s) - T0 )) s"
fi
