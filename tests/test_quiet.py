"""A quiet console: the harmless start-up notices of vLLM, torch and accelerate, and the model-loading bars of
transformers and vLLM, are dropped where they arise, and anything else still reaches stderr."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=ROOT)


def test_the_stderr_filter_drops_only_the_harmless_lines():
    done = run("import os\n"
               "from agentgym_nb.rollout.vllm import _stderr_without\n"
               "with _stderr_without('harmless notice'):\n"
               "    os.write(2, b'a harmless notice from C++\\n')\n"
               "    os.write(2, b'a real warning\\n')\n"
               "os.write(2, b'after: a harmless notice is shown again\\n')\n")
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == ["a real warning", "after: a harmless notice is shown again"]


def test_a_child_process_that_outlives_the_filter_keeps_its_stderr():
    """vLLM's tensor-parallel workers start inside the filter and inherit its pipe as their stderr: the block must not
    wait for them to end, and what they write later must still arrive (filtered), not break the pump. A burst of
    lines just before the child ends, and the parent's exit right after, must not cut them off."""
    done = run("import os, subprocess, sys\n"
               "from agentgym_nb.rollout.vllm import _stderr_without\n"
               "child = 'import os, time; time.sleep(3); os.write(2, b\"harmless notice\\\\n\"); "
               "[os.write(2, b\"late worker line %d\\\\n\" % i) for i in range(20000)]'\n"
               "with _stderr_without('harmless notice'):\n"
               "    worker = subprocess.Popen([sys.executable, '-c', child])\n"
               "print('worker running' if worker.poll() is None else 'worker ended', flush=True)\n"
               "worker.wait()\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "worker running"   # the block was left without waiting for the worker
    assert done.stderr.splitlines() == [f"late worker line {i}" for i in range(20000)], done.stderr[-3000:]


@pytest.mark.slow
def test_a_vllm_engine_and_a_checkpoint_print_no_notices(nano_dir, tmp_path):
    done = run("from agentgym_nb.config import make_config\n"
               "from agentgym_nb.train.rl import Trainer\n"
               f"cfg = make_config(preset='smoke', engine='vllm', steps=1, out_dir={str(tmp_path)!r}, trackers=[])\n"
               "t = Trainer(cfg, log=lambda *a: None)\n"
               "t.fit(); t.close(); print('trained')\n")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "trained" in done.stdout
    for notice in ("NUMA binding", "reduce_op", "Triton is installed", "Removed shared tensor", "Loading weights",
                   "Loading safetensors checkpoint shards"):
        assert notice not in done.stderr, f"{notice!r} in stderr:\n{done.stderr[-3000:]}"


def test_load_pretrained_hides_only_its_own_loading_bar(nano_dir):
    """The bar is off while load_pretrained loads and on again afterwards: a plain from_pretrained still draws it."""
    done = run("from transformers import AutoModelForCausalLM\n"
               "from transformers.utils import logging\n"
               "from agentgym_nb.pretrained import load_pretrained\n"
               f"load_pretrained(AutoModelForCausalLM, {str(nano_dir)!r})\n"
               "import sys; print('-- then plain --', file=sys.stderr, flush=True)\n"
               "assert logging.is_progress_bar_enabled()\n"
               f"AutoModelForCausalLM.from_pretrained({str(nano_dir)!r})\n")
    assert done.returncode == 0, done.stderr[-3000:]
    quiet, plain = done.stderr.split("-- then plain --")
    assert "Loading weights" not in quiet and "Loading weights" in plain
