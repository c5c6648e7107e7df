"""A quiet console: the harmless start-up notices of vLLM, torch and accelerate are dropped where they arise, and
anything else still reaches stderr."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=ROOT)


def test_the_stderr_filter_drops_only_the_harmless_lines():
    done = run("import os\n"
               "from agentgym_nb.rollout.engine import _stderr_without\n"
               "with _stderr_without('harmless notice'):\n"
               "    os.write(2, b'a harmless notice from C++\\n')\n"
               "    os.write(2, b'a real warning\\n')\n"
               "os.write(2, b'after: a harmless notice is shown again\\n')\n")
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == ["a real warning", "after: a harmless notice is shown again"]


@pytest.mark.slow
def test_a_vllm_engine_and_a_checkpoint_print_no_notices(nano_dir, tmp_path):
    done = run("from agentgym_nb.config import make_config\n"
               "from agentgym_nb.train.rl import Trainer\n"
               f"cfg = make_config(preset='smoke', engine='vllm', steps=1, out_dir={str(tmp_path)!r}, trackers=[])\n"
               "t = Trainer(cfg, log=lambda *a: None)\n"
               "t.fit(); t.close(); print('trained')\n")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "trained" in done.stdout
    for notice in ("NUMA binding", "reduce_op", "Triton is installed", "Removed shared tensor"):
        assert notice not in done.stderr, f"{notice!r} in stderr:\n{done.stderr[-3000:]}"
