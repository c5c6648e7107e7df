"""The README's `make demo` table, made from bench/results/demo.json: every fresh-clone run of one commit.

    .venv/bin/python scripts/demo_table.py COMMIT        # prints the table's markdown

tests/test_docs.py holds the README to it: the commit the README names, and every row, must come from the JSON.
"""
from __future__ import annotations

import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO_JSON = os.path.join(ROOT, "bench", "results", "demo.json")
HEADER = ("| run | wall time (install, nano, notebook) | load before | held-out success before -> after | "
          "paired lift, 95% CI |\n|---|---|---|---|---|")


def runs_of(commit: str, path: str = DEMO_JSON) -> list[dict]:
    with open(path) as f:
        runs = [r for r in json.load(f)["runs"] if r["commit"] == commit]
    if not runs:
        raise ValueError(f"{path} holds no run of commit {commit}")
    return runs


def row(i: int, run: dict) -> str:
    s, t = run["summary"], run["seconds"]
    lo, hi = s["paired_lift_ci95"]
    return (f"| {i} | {t['total']:,} s ({t['install']}, {t['model_build']}, {t['notebook']}) | "
            f"{run['load_before']:.1f} | {100 * s['success_before']:.1f}% -> {100 * s['success_after']:.1f}% | "
            f"{100 * s['paired_lift']:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}] points |")


def table(commit: str, path: str = DEMO_JSON) -> str:
    return "\n".join([HEADER, *(row(i, r) for i, r in enumerate(runs_of(commit, path), start=1))])


if __name__ == "__main__":
    print(table(sys.argv[1]))
