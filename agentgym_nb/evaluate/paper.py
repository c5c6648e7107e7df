"""The paper's reported numbers as data: papers/*.csv, each row naming its source, model size and compute."""
from __future__ import annotations

import glob
import os

REPO_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAPERS_DIR = os.path.join(REPO_DIR, "papers")


def load_paper_results(table: str | None = None):
    """The paper's reported numbers (papers/<table>.csv) as one long pandas DataFrame, a `table` column added.
    Every row names its source (`source`: arXiv version or the talk slides; `source_ref`: table or slide) and the
    model size and compute behind it, so a plot can label "paper, 7B on GPUs" apart from "ours, nano on a CPU"."""
    import pandas as pd   # here, not at the top: every import of agentgym_nb.evaluate would pay for pandas
    files = {os.path.splitext(os.path.basename(p))[0]: p for p in glob.glob(os.path.join(PAPERS_DIR, "*.csv"))}
    if not files:
        raise FileNotFoundError(f"no paper results in {PAPERS_DIR} (they ship with the repository, not the package)")
    if table is not None and table not in files:
        raise ValueError(f"unknown paper table {table!r}; available: {', '.join(sorted(files))}")
    names = sorted(files) if table is None else [table]
    frames = [pd.read_csv(files[name]).assign(table=name) for name in names]
    return pd.concat(frames, ignore_index=True)
