"""A folder of wheels for a GPU machine that has torch, transformers, peft and accelerate but no network: what
`make gpu-check` (scripts/gpu_check.py --wheels DIR) installs from it. Run on a machine with the package registries:

    .venv/bin/python scripts/gpu_wheels.py --out .gpu-wheels --python-version 3.12

The wheels are this checkout's own versions (those installed in the running Python) of the packages the GPU path
imports and of everything they need, for the target Python on manylinux x86_64, downloaded one by one without their
dependencies (`pip download --no-deps`: a dependency on torch would otherwise pull gigabytes of CUDA wheels). What a
GPU machine brings itself is left out (PREINSTALLED). About 35 MB: it fits the 64 MiB a device call may carry.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, distribution

from packaging.markers import default_environment
from packaging.requirements import Requirement

# what the GPU path imports beyond what a GPU machine has (scripts/gpu_check.py NEEDED, at this checkout's versions)
TOP = ["minigrid", "pygame-ce", "fastapi", "uvicorn", "httpx", "bm25s", "PyStemmer", "pytest-timeout", "psutil",
       "transformers", "tokenizers", "huggingface-hub", "safetensors", "peft"]
# what a GPU machine with CUDA torch brings (and what must never be downloaded for it: torch's CUDA wheels)
PREINSTALLED = re.compile(r"^(torch|triton|nvidia-.*|numpy|scipy|jax|jaxlib|pandas|matplotlib|seaborn|pillow|"
                          r"setuptools|pip|wheel|accelerate|filelock|fsspec|jinja2|markupsafe|sympy|mpmath|networkx|"
                          r"packaging|pyyaml|requests|urllib3|charset-normalizer|pytest|pytest-xdist|execnet|"
                          r"iniconfig|pluggy|pygments|tqdm|tensorboard.*|protobuf)$")
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64",
             "linux_x86_64"]


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(top: list[str], python_version: str) -> dict[str, str]:
    """{distribution: installed version} of `top` and every requirement they have (no extras) on the target Python
    and platform, from the metadata of the running Python's installed distributions, minus PREINSTALLED."""
    env = {**default_environment(), "python_version": python_version, "python_full_version": python_version + ".0",
           "sys_platform": "linux", "platform_machine": "x86_64", "platform_system": "Linux"}
    found, todo = {}, list(top)
    while todo:
        name = canonical(todo.pop())
        if name in found or PREINSTALLED.match(name):
            continue
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            raise SystemExit(f"{name} is needed on the GPU machine but not installed here: install the project "
                             f"(make install) and run this with its Python") from None
        found[name] = dist.version
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({**env, "extra": ""}):
                todo.append(req.name)
    return found


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=".gpu-wheels")
    p.add_argument("--python-version", default="3.12", help="the GPU machine's Python (3.12 on the lent ones)")
    args = p.parse_args(argv)
    wanted = closure(TOP, args.python_version)
    os.makedirs(args.out, exist_ok=True)
    platforms = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    for name, version in sorted(wanted.items()):
        done = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                               "--python-version", args.python_version, "--implementation", "cp", *platforms,
                               "-d", args.out, f"{name}=={version}"], capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"pip download {name}=={version} failed:\n{done.stderr[-2000:]}")
    size = sum(os.path.getsize(os.path.join(args.out, f)) for f in os.listdir(args.out))
    print(f"gpu_wheels: {len(wanted)} distributions, {size / 2**20:.1f} MiB in {args.out}: "
          + ", ".join(f"{n}=={v}" for n, v in sorted(wanted.items())))


if __name__ == "__main__":
    main()
