"""`make book`: run the notebooks at a preset, render each executed lesson as markdown that GitHub displays
(docs/lessons/<lesson>.md with its figures), and the whole as a static site with Jupyter Book.

    .venv/bin/python scripts/book.py                       # the lessons at the cpu preset, the long ones at smoke
    .venv/bin/python scripts/book.py --full                # every lesson at the cpu preset (hours on 2 cores)
    .venv/bin/python scripts/book.py --only 07_pass_at_k   # one lesson (no site)
    .venv/bin/python scripts/book.py --preset smoke        # the same pipeline in minutes
    .venv/bin/python scripts/book.py --no-execute          # render the committed notebooks as they are (no outputs)
    .venv/bin/python scripts/book.py --check               # which rendered lessons are older than their notebooks

At the cpu preset, the lessons that take more than ~15 minutes there on 2 cores (CPU_MINUTES) run at the smoke
preset unless --full, and their rendered page says so and what the cpu run would cost; a page of theirs made at cpu by
--full is kept while its notebook's source is unchanged. Executed copies go to docs/_build/notebooks/ (an existing copy made at the same preset is reused unless --fresh;
the notebooks reuse their finished training runs under outputs/runs/ too), the site to docs/_build/html/. Each
lesson's exercises run with their reference solutions (AGENTGYM_NB_SOLUTIONS=1, agentgym_nb/exercises.py). The
rendered lessons go to docs/lessons/ (commit those; docs/_build/ is not), each opening with the commit, date,
machine and preset it was made at and a hash of its notebook's source, so `--check` (and tests/test_book.py) can
tell when a notebook has changed since. With --figures, the key figures of the run are copied to docs/figures/ and
listed in docs/figures/README.md with the commit, date and preset that made them.
"""
from __future__ import annotations

import argparse
import glob
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, "docs", "_build")
LESSONS = os.path.join(ROOT, "docs", "lessons")
PROVENANCE = re.compile(r"^<!-- rendered lesson: (\{.*\}) -->$", re.M)   # the first line of a rendered lesson
# (figure file under the run's folder, its name under docs/figures/, what it shows) per notebook
KEY_FIGURES = {
    "05_scalinginter": [("scalinginter-babyai-long-{preset}/figures/training.png", "scalinginter_training.png",
                         "notebook 05: a ScalingInter-RL run on BabyAI's long track, step by step")],
    "04_fixed_horizon": [("fixed-horizon-babyai-long-{preset}/figures/verdicts.png", "fixed_horizon_verdicts.png",
                          "notebook 04: fixed H = 6 and H = 20, held-out success and the plateau / collapse tests")],
    "06_ablations": [("horizon-study-{preset}/figures/horizon_study_curves.png", "horizon_study_curves.png",
                      "notebook 06: the horizon study's held-out curves, 95% bands over seeds"),
                     ("horizon-study-{preset}/figures/horizon_study_forest_steps.png",
                      "horizon_study_forest_steps.png", "notebook 06: the horizon study's paired differences"),
                     ("horizon-study-{preset}/figures/horizon_study_lr_sweep.png", "horizon_study_lr_sweep.png",
                      "notebook 06: the collapse regime, held-out success and KL of fixed 20 and stepwise at each "
                      "learning rate"),
                     ("horizon-study-{preset}/figures/horizon_study_pass_at_k_surface.png",
                      "horizon_study_pass_at_k_surface.png",
                      "notebook 06: pass@(k, T) of each arm's last policies at 0.5x, 1x, 2x their horizon and H = 20")],
    "07_pass_at_k": [("pass-at-k-babyai-{preset}/figures/pass_at_k.png", "pass_at_k.png",
                      "notebook 07: pass@k and pass^k of the start and two trained policies"),
                     ("pass-at-k-babyai-{preset}/figures/pass_at_k_surface.png", "pass_at_k_surface.png",
                      "notebook 07: pass@(k, T) of one trained policy at 0.5x, 1x and 2x the horizon it trained at")],
}


# the lessons whose cpu run takes more than ~15 minutes on 2 cores (the README's table): rendered at smoke unless --full
CPU_MINUTES = {"07_pass_at_k": "30-37 min"}


# what a page run at smoke says in a box of its own: a step or two on a few tasks teach the mechanics, not the results
PLACEHOLDERS = ("Its numbers are placeholders: at the smoke preset every run trains a step or two on a handful of "
                "tasks, so its tables, curves and intervals show how the lesson works, not what training achieves.")


def lesson_preset(notebook: str, preset: str, full: bool) -> str:
    """The preset `notebook` runs at when the book is made at `preset`: smoke for CPU_MINUTES's lessons unless `full`."""
    lesson = os.path.splitext(os.path.basename(notebook))[0]
    return "smoke" if preset == "cpu" and not full and lesson in CPU_MINUTES else preset


def execute(notebook: str, preset: str, fresh: bool, build: str = BUILD) -> str:
    """papermill `notebook` at `preset` into <build>/notebooks/, the exercises with their reference solutions; beside
    it a stamp records the preset, the source hash, the seconds it took, the commit and the date. A copy of the same
    source at the same preset is reused unless `fresh`, and so is one whose notebook has changed only in its prose
    (`with_new_prose`)."""
    name = os.path.basename(notebook)
    out = os.path.join(build, "notebooks", name)
    stamp = out + ".json"
    if not fresh and os.path.exists(out) and os.path.exists(stamp):
        with open(stamp) as f:
            made = json.load(f)
        if made["preset"] == preset and made["source_sha256"] == source_hash(notebook) and "commit" in made:
            print(f"book: {name} already executed at the {preset} preset", flush=True)
            return out
        if made["preset"] == preset and "commit" in made and with_new_prose(notebook, out):
            made["source_sha256"] = source_hash(notebook)
            with open(stamp, "w") as f:
                json.dump(made, f)
            print(f"book: {name} already executed at the {preset} preset; only its prose changed since", flush=True)
            return out
    os.makedirs(os.path.dirname(out), exist_ok=True)
    t0, source = time.time(), source_hash(notebook)   # of what papermill reads now, not of an edit made meanwhile
    env = dict(os.environ, AGENTGYM_NB_PRESET=preset, AGENTGYM_NB_SOLUTIONS="1")
    subprocess.run([os.path.join(os.path.dirname(sys.executable), "papermill"), notebook, out, "--no-progress-bar",
                    "--cwd", os.path.dirname(notebook)], check=True, env=env)
    with open(stamp, "w") as f:
        json.dump({"preset": preset, "source_sha256": source, "seconds": round(time.time() - t0),
                   "commit": _commit(ROOT), "date": time.strftime("%Y-%m-%d")}, f)
    print(f"book: {name} executed in {time.time() - t0:.0f} s", flush=True)
    return out


def with_new_prose(notebook: str, executed: str) -> bool:
    """Where `notebook` differs from its executed copy only in markdown cells, put its markdown into the copy (the
    code cells and their outputs stay) and say True; otherwise change nothing and say False. Outputs come from code
    alone, so a prose edit needs no new run."""
    with open(notebook) as f:
        source = json.load(f)
    with open(executed) as f:
        done = json.load(f)
    injected = [c for c in done["cells"] if "injected-parameters" in c.get("metadata", {}).get("tags", [])]
    ran = [c for c in done["cells"] if c["cell_type"] == "code" and c not in injected]

    def code(cells):
        return [(c.get("metadata", {}).get("tags", []), "".join(c["source"]))
                for c in cells if c["cell_type"] == "code"]
    if code(ran) != code(source["cells"]):
        return False
    outputs, cells = iter(ran), []
    for cell in source["cells"]:
        cells.append(next(outputs) if cell["cell_type"] == "code" else cell)
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            cells += injected
    done["cells"] = cells
    with open(executed, "w") as f:
        json.dump(done, f, indent=1)
    return True


def source_hash(notebook: str) -> str:
    """sha256 of what a notebook teaches and runs: each cell's type, tags and source (not outputs, ids or counts)."""
    with open(notebook) as f:
        cells = json.load(f)["cells"]
    text = json.dumps([[c["cell_type"], c.get("metadata", {}).get("tags", []), "".join(c["source"])] for c in cells])
    return hashlib.sha256(text.encode()).hexdigest()


def machine() -> str:
    """The machine in the words docs/results.md uses: cores, CPU model and vector width."""
    info = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
    model = re.search(r"model name\s*:\s*(.*)", info)
    width = "AVX-512" if " avx512f" in info else "AVX2" if " avx2" in info else "no AVX2"
    return f"{os.cpu_count()}-core {model.group(1).strip() if model else 'CPU'} ({width})"


def render_lesson(executed: str, notebook: str, out_dir: str = LESSONS, *, root: str = ROOT) -> str:
    """The executed copy of `notebook` as GitHub markdown: <out_dir>/<lesson>.md, its figures in
    <out_dir>/<lesson>_files/ (PNGs, reduced to 256 colours where that is smaller). The first line records, as
    JSON, the notebook's path and source hash, and the commit, date, machine, preset and seconds of the execution
    (from the executed copy's stamp). Coloured HTML outputs (token strips, replays) become pictures: GitHub drops
    inline styles, and their colours are what they teach."""
    import nbformat
    from nbconvert import MarkdownExporter
    lesson = os.path.splitext(os.path.basename(notebook))[0]
    files = f"{lesson}_files"
    with open(executed + ".json") as f:
        stamp = json.load(f)
    pictured = coloured_html_as_png(for_the_page(nbformat.read(executed, as_version=4), notebook, out_dir))
    body, resources = MarkdownExporter().from_notebook_node(pictured, resources={"output_files_dir": files})
    body = body.replace(os.path.abspath(root) + os.sep, "")   # paths the lesson printed, relative to the checkout
    shutil.rmtree(os.path.join(out_dir, files), ignore_errors=True)
    os.makedirs(os.path.join(out_dir, files), exist_ok=True)
    for path, data in resources.get("outputs", {}).items():
        with open(os.path.join(out_dir, path), "wb") as f:
            f.write(_lean_png(data) if path.endswith(".png") else data)
    preset, seconds = stamp["preset"], stamp["seconds"]
    made = {"notebook": os.path.relpath(notebook, root), "source_sha256": source_hash(notebook), "machine": machine(),
            "commit": stamp["commit"], "date": stamp["date"], "preset": preset, "seconds": seconds}
    link = os.path.relpath(os.path.abspath(notebook), os.path.abspath(out_dir))
    took = f" in {seconds:.0f} s"
    if preset == "smoke" and lesson in CPU_MINUTES:
        took += (f" (the small setting its tests use: at the cpu preset it takes {CPU_MINUTES[lesson]} on 2 cores; "
                 f"`scripts/book.py --full` renders it there)")
    with open(notebook) as f:   # a lesson without exercises says nothing about them
        solved = "solutions_under_ci(" in f.read()
    head = (f"<!-- rendered lesson: {json.dumps(made)} -->\n\n"
            f"> The lesson [`{made['notebook']}`]({link}) as it ran at the `{preset}` preset{took} on "
            f"{made['date']}, commit {made['commit']}, on a {made['machine']}"
            + ("; its exercises ran with their reference solutions" if solved else "")
            + ". The notebook itself is committed without outputs.\n\n"
            + (f"> **{PLACEHOLDERS}**\n\n" if preset == "smoke" else ""))
    target = os.path.join(out_dir, f"{lesson}.md")
    with open(target, "w") as f:
        f.write(head + body)
    return target


COLOURED = re.compile(r"style=\"[^\"]*background", re.I)   # an HTML output whose colours carry meaning
PROGRESS_BAR = re.compile(r"\d+%\|.*\|\s*\d+/\d+")   # a tqdm bar as text: "gae:  40%|####  | 4/10 [00:03<...]"
LINK = re.compile(r"(\]\(|href=\")([^)\"#:\s]+)(?=[)\"#])")   # a relative link's target, markdown or HTML


def for_the_page(nb, notebook: str, out_dir: str):
    """`nb` as a page shows it. Progress bars go: a bar's last state, frozen in the output (often "0%"), reads as
    a stalled run, and what it counted is printed beside it. Code cells collapsed in the notebook
    (metadata.jupyter.source_hidden: plotting and summary code) become a <details> block. Relative links of markdown
    cells, written from notebooks/, are rebased to `out_dir`, a link to another lesson going to its page."""
    import nbformat
    cells = []
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = [o for o in (_without_bars(o) for o in cell.get("outputs", [])) if o is not None]
            if cell.get("metadata", {}).get("jupyter", {}).get("source_hidden"):
                cells.append(nbformat.v4.new_markdown_cell(
                    f"<details><summary>code</summary>\n\n```python\n{cell.source}\n```\n\n</details>"))
                cell.metadata["transient"] = {"remove_source": True}
        elif cell.cell_type == "markdown":
            cell.source = LINK.sub(lambda m: m.group(1) + _rebased(m.group(2), notebook, out_dir), cell.source)
        cells.append(cell)
    nb.cells = cells
    nb.metadata.pop("widgets", None)
    return nb


def _without_bars(output):
    """An output without its progress bars: None for a widget (or text) that is only a bar, a stream without the
    lines that are."""
    if output.get("output_type") == "stream":
        lines = [line for line in re.split(r"(?<=\n)|\r", output.get("text", "")) if not PROGRESS_BAR.search(line)]
        output["text"] = "".join(lines)
        return output if output["text"].strip() else None
    data = output.get("data", {})
    plain = data.get("text/plain", "")
    if PROGRESS_BAR.search("".join(plain) if isinstance(plain, list) else plain) and not {
            "image/png", "text/html"} & set(data):
        return None
    return output


def _rebased(target: str, notebook: str, out_dir: str) -> str:
    """A link target written relative to the notebook's folder, relative to `out_dir` instead; another lesson's
    notebook becomes its page there (<out_dir>/<lesson>.md)."""
    here = os.path.dirname(os.path.abspath(notebook))
    path = os.path.normpath(os.path.join(here, target))
    if path.endswith(".ipynb") and os.path.dirname(path) == here:
        return os.path.splitext(os.path.basename(path))[0] + ".md"
    return os.path.relpath(path, os.path.abspath(out_dir))


def coloured_html_as_png(nb):
    """`nb` with each coloured HTML output (see COLOURED) replaced by its picture, drawn by Chromium at 1,000 px
    wide; tables and plain HTML stay HTML, which GitHub shows."""
    outputs = [o for cell in nb.cells for o in cell.get("outputs", [])
               if COLOURED.search(str(o.get("data", {}).get("text/html", "")))]
    if not outputs:
        return nb
    import base64
    from playwright.sync_api import sync_playwright
    from agentgym_nb.envs.webarena.browser import CHROMIUM_FLAGS, chromium_path
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_FLAGS)
        page = browser.new_page(viewport={"width": 1016, "height": 100}, device_scale_factor=1)
        for output in outputs:
            html = output["data"]["text/html"]
            page.set_content("<html><body style='margin:8px;font-family:sans-serif;background:#fff'>"
                             f"{''.join(html) if isinstance(html, list) else html}</body></html>")
            png = page.screenshot(full_page=True)
            output["data"] = {"image/png": base64.b64encode(png).decode(),
                              "text/plain": output["data"].get("text/plain", "")}
        browser.close()
    return nb


def page_of(notebook: str, lessons: str = LESSONS) -> str:
    return os.path.join(lessons, os.path.splitext(os.path.basename(notebook))[0] + ".md")


def page_made_at(notebook: str, preset: str, lessons: str = LESSONS) -> bool:
    """Whether `notebook`'s rendered page was made at `preset` from its current source: a long lesson rendered at cpu
    by --full keeps that page when the book is made again without --full."""
    page = page_of(notebook, lessons)
    if not os.path.exists(page):
        return False
    made = rendered(page)
    return made["preset"] == preset and made["source_sha256"] == source_hash(notebook)


def rendered(path: str) -> dict:
    """The provenance a rendered lesson's first line records."""
    with open(path) as f:
        found = PROVENANCE.match(f.readline().rstrip("\n"))
    if not found:
        raise ValueError(f"{path} does not open with its provenance (<!-- rendered lesson: {{...}} -->)")
    return json.loads(found.group(1))


def stale_renders(lessons: str = LESSONS, root: str = ROOT) -> list[str]:
    """Rendered lessons whose notebook is gone or has changed since (its source hash differs), one line each."""
    stale = []
    for path in sorted(glob.glob(os.path.join(lessons, "*.md"))):
        if os.path.basename(path) == "README.md":
            continue
        made = rendered(path)
        notebook = os.path.join(root, made["notebook"])
        if not os.path.exists(notebook):
            stale.append(f"{os.path.relpath(path, root)}: its notebook {made['notebook']} no longer exists")
        elif source_hash(notebook) != made["source_sha256"]:
            stale.append(f"{os.path.relpath(path, root)}: {made['notebook']} changed since it was rendered at "
                         f"{made['commit']} ({made['date']}); run `make book` again")
    return stale


def _lean_png(data: bytes) -> bytes:
    """The PNG reduced to a 256-colour palette when that makes it smaller (plots have few colours)."""
    from PIL import Image
    image = Image.open(io.BytesIO(data))
    out = io.BytesIO()
    image.convert("RGB").quantize(256).save(out, format="PNG", optimize=True)
    return out.getvalue() if out.tell() < len(data) else data


def _commit(root: str) -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
                          text=True).stdout.strip()


def render(notebooks: list[str], note: str) -> str:
    """Jupyter Book over these notebooks (already executed, or stripped; `note` says which): docs/_build/html/."""
    book = os.path.join(BUILD, "book")
    shutil.rmtree(book, ignore_errors=True)
    os.makedirs(book)
    for nb in notebooks:
        shutil.copy(nb, book)
    names = [os.path.splitext(os.path.basename(nb))[0] for nb in notebooks]
    commit = _commit(ROOT)
    with open(os.path.join(book, "intro.md"), "w") as f:
        f.write(f"# agentgym-nb\n\nMulti-turn RL for LLM agents, lesson by lesson: {note}, built {time.strftime('%Y-%m-%d')} "
                f"from commit {commit}. The project's README and docs/results.md have the measured results.\n\n"
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
    commit = commit or _commit(ROOT)
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
    ap.add_argument("--full", action="store_true", help="the long lessons at --preset too (hours at cpu on 2 cores)")
    ap.add_argument("--only", nargs="+", metavar="LESSON", help="these lessons (e.g. 07_pass_at_k), without the site")
    ap.add_argument("--figures", action="store_true", help="copy the run's key figures to docs/figures/")
    ap.add_argument("--check", action="store_true", help="list rendered lessons older than their notebooks; exit 1 "
                                                         "if there are any")
    args = ap.parse_args()
    if args.check:
        stale = stale_renders()
        print("\n".join(stale) or "book: every rendered lesson is of its notebook's current source")
        sys.exit(1 if stale else 0)
    notebooks = sorted(glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb")))
    if args.only:
        unknown = set(args.only) - {os.path.splitext(os.path.basename(nb))[0] for nb in notebooks}
        if unknown:
            sys.exit(f"book: no lesson {sorted(unknown)}; the lessons: "
                     + ", ".join(os.path.splitext(os.path.basename(nb))[0] for nb in notebooks))
        notebooks = [nb for nb in notebooks if os.path.splitext(os.path.basename(nb))[0] in args.only]
    presets = [lesson_preset(nb, args.preset, args.full) for nb in notebooks]
    executed = notebooks if args.no_execute else [execute(nb, p, args.fresh) for nb, p in zip(notebooks, presets)]
    if not args.no_execute:
        for nb, done, preset in zip(notebooks, executed, presets):
            if preset != args.preset and page_made_at(nb, args.preset):
                print(f"book: keeps {os.path.relpath(page_of(nb), ROOT)}, made at the {args.preset} preset (--full) "
                      f"from this notebook's source, not the {preset} run")
                continue
            print(f"book: {os.path.relpath(render_lesson(done, nb), ROOT)}")
    if not args.only:
        html = render(executed, "the notebooks as committed, not executed" if args.no_execute
                      else f"the notebooks executed at the {args.preset} preset"
                      + ("" if args.full or args.preset != "cpu" else ", the longest at smoke"))
        print(f"book: {os.path.relpath(os.path.join(html, 'intro.html'), ROOT)}")
    if args.figures and not args.no_execute:   # a lesson run smaller leaves the committed figures alone
        at_preset = [done for done, preset in zip(executed, presets) if preset == args.preset]
        print("book: figures copied to docs/figures/: " + ", ".join(copy_figures(args.preset, at_preset)))


if __name__ == "__main__":
    main()
