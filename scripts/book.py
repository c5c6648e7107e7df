"""`make book`: run the notebooks at a preset and render the executed copies as a static site with Jupyter Book.

    .venv/bin/python scripts/book.py                       # every notebook at the cpu preset (hours on 2 cores)
    .venv/bin/python scripts/book.py --preset smoke        # the same pipeline in minutes
    .venv/bin/python scripts/book.py --no-execute          # render the committed notebooks as they are (no outputs)

Executed copies go to docs/_build/notebooks/ (an existing copy made at the same preset is reused unless --fresh;
the notebooks reuse their finished training runs under outputs/runs/ too), the site to docs/_build/html/. With
--figures, the key figures of the run are copied to docs/figures/ and listed in docs/figures/README.md with the
commit, date and preset that made them (commit those; docs/_build/ is not committed).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, "docs", "_build")
# (figure file under the run's folder, its name under docs/figures/, what it shows) per notebook
KEY_FIGURES = {
    "05_scalinginter": [("scalinginter-babyai-long-{preset}/figures/training.png", "scalinginter_training.png",
                         "notebook 05: a ScalingInter-RL run on BabyAI's long track, step by step")],
    "04_fixed_horizon": [("fixed-horizon-babyai-long-{preset}/figures/verdicts.png", "fixed_horizon_verdicts.png",
                          "notebook 04: fixed H = 6 and H = 20, held-out success and the plateau / collapse tests")],
    "06_ablations": [("ablations-babyai-{preset}/figures/horizon_study_curves.png", "horizon_study_curves.png",
                      "notebook 06: the horizon study's held-out curves, 95% bands over seeds"),
                     ("ablations-babyai-{preset}/figures/horizon_study_forest_steps.png",
                      "horizon_study_forest_steps.png", "notebook 06: the horizon study's paired differences"),
                     ("ablations-babyai-{preset}/figures/horizon_study_lr_sweep.png", "horizon_study_lr_sweep.png",
                      "notebook 06: the collapse regime, held-out success and KL of fixed 20 and stepwise at each "
                      "learning rate")],
    "07_pass_at_k": [("pass-at-k-babyai-{preset}/figures/pass_at_k.png", "pass_at_k.png",
                      "notebook 07: pass@k and pass^k of the start and two trained policies")],
}


def execute(notebook: str, preset: str, fresh: bool) -> str:
    name = os.path.basename(notebook)
    out = os.path.join(BUILD, "notebooks", name)
    stamp = out + ".preset"
    if not fresh and os.path.exists(out) and os.path.exists(stamp) and open(stamp).read() == preset:
        print(f"book: {name} already executed at the {preset} preset", flush=True)
        return out
    os.makedirs(os.path.dirname(out), exist_ok=True)
    t0 = time.time()
    env = dict(os.environ, AGENTGYM_NB_PRESET=preset)
    subprocess.run([os.path.join(os.path.dirname(sys.executable), "papermill"), notebook, out, "--no-progress-bar",
                    "--cwd", os.path.dirname(notebook)], check=True, env=env)
    with open(stamp, "w") as f:
        f.write(preset)
    print(f"book: {name} executed in {time.time() - t0:.0f} s", flush=True)
    return out


def render(notebooks: list[str], note: str) -> str:
    """Jupyter Book over these notebooks (already executed, or stripped; `note` says which): docs/_build/html/."""
    book = os.path.join(BUILD, "book")
    shutil.rmtree(book, ignore_errors=True)
    os.makedirs(book)
    for nb in notebooks:
        shutil.copy(nb, book)
    names = [os.path.splitext(os.path.basename(nb))[0] for nb in notebooks]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    with open(os.path.join(book, "intro.md"), "w") as f:
        f.write(f"# agentgym-nb\n\nMulti-turn RL for LLM agents, lesson by lesson: {note}, built {time.strftime('%Y-%m-%d')} "
                f"from commit {commit.strip()}. The project's README and docs/results.md have the measured results.\n\n"
                + "".join(f"- [{n}]({n}.ipynb)\n" for n in names))
    with open(os.path.join(book, "_toc.yml"), "w") as f:
        f.write("format: jb-book\nroot: intro\nchapters:\n" + "".join(f"- file: {n}\n" for n in names))
    with open(os.path.join(book, "_config.yml"), "w") as f:
        f.write("title: agentgym-nb\nauthor: agentgym-nb\nexecute:\n  execute_notebooks: 'off'\n"
                "only_build_toc_files: true\nsphinx:\n  config:\n    html_show_copyright: false\n")
    html = os.path.join(BUILD, "html")
    subprocess.run([os.path.join(os.path.dirname(sys.executable), "jupyter-book"), "build", book, "--path-output",
                    os.path.join(BUILD, "site"), "--quiet"], check=True)
    shutil.rmtree(html, ignore_errors=True)
    shutil.copytree(os.path.join(BUILD, "site", "_build", "html"), html)
    return html


def copy_figures(preset: str, executed: list[str]) -> list[str]:
    """The key figures of this run into docs/figures/, listed with commit, date and preset in its README.md."""
    from agentgym_nb.paths import default_outputs_dir
    copied = []
    for nb in executed:
        for source, name, about in KEY_FIGURES.get(os.path.splitext(os.path.basename(nb))[0], []):
            path = os.path.join(default_outputs_dir(), "runs", source.format(preset=preset))
            if os.path.exists(path):
                record_figure(path, name, about, preset)
                copied.append(name)
    return copied


def record_figure(path: str, name: str, about: str, preset: str, commit: str | None = None) -> None:
    """Copy one figure to docs/figures/`name` and list it in docs/figures/README.md with the commit (this checkout's
    unless given), date and preset of the run that drew it (bench/demo_from_clone.sh records make demo's too)."""
    commit = commit or subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                      text=True).stdout.strip()
    target = os.path.join(ROOT, "docs", "figures")
    os.makedirs(target, exist_ok=True)
    shutil.copy(path, os.path.join(target, name))
    listing = os.path.join(target, "README.md")
    rows = json.load(open(listing + ".json")) if os.path.exists(listing + ".json") else {}
    rows[name] = {"about": about, "preset": preset, "commit": commit, "date": time.strftime("%Y-%m-%d")}
    with open(listing + ".json", "w") as f:
        json.dump(rows, f, indent=1)
    with open(listing, "w") as f:
        f.write("# Figures\n\nKey figures of executed notebooks and benchmark runs, each with the run that made it.\n\n"
                "| figure | what it shows | preset | commit | date |\n|---|---|---|---|---|\n")
        for name, r in sorted(rows.items()):
            f.write(f"| [{name}]({name}) | {r['about']} | {r['preset']} | {r['commit']} | {r['date']} |\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default=os.environ.get("PRESET", "cpu"), choices=("smoke", "cpu", "paper"))
    ap.add_argument("--no-execute", action="store_true", help="render the committed notebooks without running them")
    ap.add_argument("--fresh", action="store_true", help="execute again even where an executed copy exists")
    ap.add_argument("--figures", action="store_true", help="copy the run's key figures to docs/figures/")
    args = ap.parse_args()
    notebooks = sorted(glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb")))
    executed = notebooks if args.no_execute else [execute(nb, args.preset, args.fresh) for nb in notebooks]
    html = render(executed, "the notebooks as committed, not executed" if args.no_execute
                  else f"every notebook executed at the {args.preset} preset")
    print(f"book: {os.path.relpath(os.path.join(html, 'intro.html'), ROOT)}")
    if args.figures and not args.no_execute:
        print("book: figures copied to docs/figures/: " + ", ".join(copy_figures(args.preset, executed)))


if __name__ == "__main__":
    main()
