"""Data parallel training on CPU: two gloo processes launched by accelerate with the repository's config, each
playing its own items; after one update both hold the same weights (and not the initial ones)."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.timeout(900)
def test_two_process_ddp_update_keeps_ranks_identical(tmp_path, nano_dir):
    accelerate = os.path.join(os.path.dirname(sys.executable), "accelerate")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "AGENTGYM_NB_PRESET": "smoke"}
    done = subprocess.run([accelerate, "launch", "--config_file", os.path.join(ROOT, "configs/accelerate/ddp_cpu_2proc.yaml"),
                           os.path.join(ROOT, "tests/ddp_worker.py"), str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=850)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.load(open(tmp_path / f"rank{r}.json")) for r in (0, 1)]
    assert [r["world"] for r in ranks] == [2, 2]
    assert set(ranks[0]["items"]).isdisjoint(ranks[1]["items"])       # each process played its own items
    assert ranks[0]["before"] == ranks[1]["before"]
    assert ranks[0]["after"] != ranks[0]["before"]                    # the update moved the weights ...
    assert ranks[0]["after"] == pytest.approx(ranks[1]["after"], rel=0, abs=0)   # ... identically on both
    assert ranks[0]["optimizer_steps"] == ranks[1]["optimizer_steps"] == 2
    metrics = [json.loads(x) for x in open(tmp_path / "runs" / "ddp" / "metrics.jsonl")]
    assert len(metrics) == 1 and metrics[0]["step"] == 1               # written once, by the main process
