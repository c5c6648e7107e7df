"""`make gpu-check` is run on a lent GPU machine, where a failure costs device time: every part of it runs here at
toy sizes on the CPU (scripts/gpu_check.py --smoke), and its JSON holds what the GPU run's report is read from."""
import json
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def test_gpu_check_runs_every_part_at_smoke_sizes(tmp_path, nano_dir):
    out = tmp_path / "gpu_check.json"
    done = subprocess.run([sys.executable, "scripts/gpu_check.py", "--smoke", "--device", "cpu", "--workers", "1",
                           "--parts", "tests", "cpu_rl", "gpu_rl", "engine", "train", "paper_7b", "--out", str(out)],
                          capture_output=True, text=True, timeout=880,
                          env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert {"date", "commit", "device", "versions", "machine", "seconds"} <= set(report)
    parts = report["parts"]
    assert set(parts) == {"tests", "cpu_rl", "gpu_rl", "engine", "train", "paper_7b"}
    assert not [name for name, part in parts.items() if "error" in part], parts
    assert parts["tests"]["returncode"] == 0 and parts["tests"]["passed"] > 10 and not parts["tests"]["failures"]
    assert parts["paper_7b"]["lora_rank"] == 32 and parts["paper_7b"]["gradient_checkpointing"]
    assert len(parts["paper_7b"]["steps"]) == 1
    for run in ("cpu_rl", "gpu_rl", "paper_7b"):
        steps = parts[run]["steps"]
        assert steps and all(s["episodes"] > 0 and s["sync_error"] < 0.1 for s in steps)
        assert parts[run]["engine_shares_model"]   # the HF engine samples with the policy: nothing to sync
    assert parts["engine"]["rollout"]["now/cpu"]["episodes"] == 8
    assert parts["engine"]["long_rollout"]["now/cpu"]["episodes"] == 4
    assert parts["engine"]["generate"]["nano/now/cpu"]["tokens_per_s"] > 0
    assert set(parts["train"]["results"]) == {"nano/fp32", "nano/fp32/lora"}
    for phase in ("rollout", "learn", "sync"):   # each RL phase's seconds are printed as it ends
        assert done.stdout.count(f"    {phase} ") == 2 + 1 + 1, phase   # cpu_rl's 2 smoke steps, gpu_rl's, paper_7b's


def test_a_part_past_its_cap_is_stopped_and_recorded(tmp_path, monkeypatch):
    """Each part runs in its own process; one that runs past its cap is killed and recorded as such in the JSON,
    which is written after every part, so a check cut short (or a part that hangs) keeps what was measured."""
    sys.path.insert(0, "scripts")
    import gpu_check
    monkeypatch.setattr(gpu_check, "CAP_SMOKE", 3)   # the engine part needs far more than 3 s on a CPU
    out = tmp_path / "gpu_check.json"
    result = gpu_check.main(["--smoke", "--device", "cpu", "--workers", "1", "--parts", "engine",
                             "--out", str(out)])
    assert result["parts"]["engine"]["error"] == "stopped at its cap of 3 s"
    assert result["parts"]["engine"]["part_seconds"] < 10 and isinstance(result["parts"]["engine"]["printed"], list)
    assert json.loads(out.read_text())["parts"] == result["parts"]


def test_a_process_past_its_cap_is_killed_and_keeps_what_it_printed():
    """What a part measured before its cap is in its printed lines (a part prints each figure as it measures it)."""
    sys.path.insert(0, "scripts")
    import gpu_check
    code = "import time; print('measured 1', flush=True); print('measured 2', flush=True); time.sleep(60)"
    returncode, printed = gpu_check.run_capped([sys.executable, "-c", code], cap=8)
    assert returncode is None and printed == ["measured 1", "measured 2"]
    returncode, printed = gpu_check.run_capped([sys.executable, "-c", "print('done'); raise SystemExit(3)"], cap=30)
    assert returncode == 3 and printed == ["done"]
