#!/usr/bin/env bash
# One call of the horizon study's GPU target: 4 seeds of fixed 6, fixed 20, stepwise and adaptive at equal steps and
# stepwise at fixed 20's policy tokens, 16 runs sharing one GPU, stopped after 530 s (the report holds every run that
# finished by then).
#
#     bash bench/horizon_gpu.sh 0 1 2 3        # then, with the first call's report in bench/results/: 4 5 6 7
#
# Wheels in .whl/ (the packages a bare GPU machine lacks, bench/README.md) are installed first. The report is written
# to $OUT/horizon_study.json (a device machine's folder that comes back) after a copy of the committed one, else to
# bench/results/ itself; the runs' logs' last lines go beside it.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$#" -eq 0 ]; then echo "usage: bash bench/horizon_gpu.sh SEED [SEED ...]   (e.g. 0 1 2 3)" >&2; exit 2; fi
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
OUT="${OUT:-bench/results}"
if [ "$OUT" != bench/results ] && [ -f bench/results/horizon_study.json ]; then
    cp bench/results/horizon_study.json "$OUT/"
fi
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
status=0
timeout "${HORIZON_SECONDS:-530}" python3 bench/horizon.py --device cuda --jobs "${JOBS:-16}" --seeds "$@" \
    --arms fixed6 fixed20 stepwise adaptive --tokens-arms stepwise --out "$OUT/horizon_study.json" || status=$?
tail -n 5 outputs/runs/horizon-logs-*/*.log > "$OUT/horizon_logs.txt" 2>/dev/null || true
exit "$status"
