#!/usr/bin/env bash
# One call of the horizon study's GPU target: 4 seeds of fixed 6, fixed 20, stepwise and adaptive at equal steps and
# stepwise at fixed 20's policy tokens, 16 runs sharing one GPU, stopped after 530 s (the report holds every run that
# finished by then).
#
#     bash bench/horizon_gpu.sh 0 1 2 3        # then, with the first call's report in bench/results/: 4 5 6 7
#
# The wheels a bare GPU machine lacks (.gpu-wheels/, made here by `make gpu-wheels` and carried) are installed first,
# as `make gpu-check` installs them (scripts/gpu_check.py: install_wheels). The report is written
# to $OUT/horizon_study.json (a device machine's folder that comes back) after a copy of the committed one, else to
# bench/results/ itself; the runs' logs' last lines go beside it.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$#" -eq 0 ]; then echo "usage: bash bench/horizon_gpu.sh SEED [SEED ...]   (e.g. 0 1 2 3)" >&2; exit 2; fi
WHEELS="${WHEELS:-.gpu-wheels}"
if [ -d "$WHEELS" ]; then
    python3 -c "import sys; sys.path.insert(0, 'scripts'); import gpu_check; print('installed:', gpu_check.install_wheels('$WHEELS'))"
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
