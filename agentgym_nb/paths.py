"""Where run artefacts, built models and generated data go."""
from __future__ import annotations

import os


def default_outputs_dir() -> str:
    """$AGENTGYM_NB_OUTPUTS, else <repo>/outputs for a source checkout, else ./outputs.

    Notebooks run with different working directories (papermill: the caller's, nbmake: the notebook's), so run
    artefacts and built models must not depend on it.
    """
    if os.environ.get("AGENTGYM_NB_OUTPUTS"):
        return os.environ["AGENTGYM_NB_OUTPUTS"]
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if os.path.exists(os.path.join(repo, "pyproject.toml")):
        return os.path.join(repo, "outputs")
    return os.path.abspath("outputs")
