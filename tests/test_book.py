"""make book's renderers: Jupyter Book turns the notebooks into a static site (here the committed ones, unexecuted:
the notebooks' execution is what `pytest --nbmake` tests), and each executed lesson becomes markdown that GitHub
shows (docs/lessons/), stamped with what made it so that a changed notebook is noticed."""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from harness import needs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@needs(commands=("jupyter-book",))
def test_the_book_renders_every_notebook_as_a_page():
    done = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "book.py"), "--no-execute"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    html = os.path.join(ROOT, "docs", "_build", "html")
    for notebook in sorted(glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb"))):
        page = os.path.join(html, os.path.basename(notebook).replace(".ipynb", ".html"))
        title = "".join(json.load(open(notebook))["cells"][0]["source"]).splitlines()[0].lstrip("# ")
        assert os.path.exists(page), page
        assert title.split(" · ")[1].split(":")[0] in open(page).read(), f"{page} lacks its title {title!r}"
    assert "the notebooks as committed, not executed" in open(os.path.join(html, "intro.html")).read()


def _book():
    import importlib.util
    spec = importlib.util.spec_from_file_location("book", os.path.join(ROOT, "scripts", "book.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_rendered_lesson_is_of_its_notebooks_current_source_and_linked_from_the_readme():
    book = _book()
    assert book.stale_renders() == []
    readme = open(os.path.join(ROOT, "README.md")).read()
    for path in sorted(glob.glob(os.path.join(ROOT, "docs", "lessons", "*.md"))):
        if os.path.basename(path) != "README.md":
            assert f"(docs/lessons/{os.path.basename(path)})" in readme, f"README's notebook table lacks {path}"


@pytest.mark.slow
def test_a_rendered_lesson_records_where_it_came_from_and_goes_stale_when_its_notebook_changes(tmp_path):
    """Lesson 00b (seconds, no model) executed at the smoke preset and rendered into a scratch copy of the layout:
    markdown with its figures and its exercise's tick, a first line saying what made it, and a check that notices
    when the notebook changes or goes."""
    book = _book()
    lesson = "00b_rl_in_one_page"
    (tmp_path / "notebooks").mkdir()
    notebook = tmp_path / "notebooks" / f"{lesson}.ipynb"
    shutil.copy(os.path.join(ROOT, "notebooks", f"{lesson}.ipynb"), notebook)
    executed = book.execute(str(notebook), "smoke", fresh=True, build=str(tmp_path / "build"))
    seconds = json.load(open(executed + ".json"))["seconds"]
    lessons = tmp_path / "docs" / "lessons"
    out = book.render_lesson(executed, str(notebook), str(lessons), root=str(tmp_path))
    made = book.rendered(out)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    assert made == {"notebook": f"notebooks/{lesson}.ipynb", "source_sha256": book.source_hash(str(notebook)),
                    "commit": commit.stdout.strip(), "date": time.strftime("%Y-%m-%d"), "machine": book.machine(),
                    "preset": "smoke", "seconds": seconds}
    text = open(out).read()
    figures = re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", text)
    assert len(figures) >= 2 and all((lessons / f).exists() for f in figures), figures
    assert sum((lessons / f).stat().st_size for f in figures) < 1_000_000
    assert "✓ RLOO advantages" in text and "(the reference solution, AGENTGYM_NB_SOLUTIONS=1)" in text
    assert "# 00b · RL for LLM agents in one page" in text
    assert book.stale_renders(str(lessons), str(tmp_path)) == []
    nb = json.load(open(notebook))
    nb["cells"][0]["source"].append("\nA sentence added after the render.")
    json.dump(nb, open(notebook, "w"))
    [stale] = book.stale_renders(str(lessons), str(tmp_path))
    assert f"notebooks/{lesson}.ipynb changed since it was rendered" in stale
    # a prose edit is rendered from the same execution: its outputs and stamp stay, its markdown is the new one
    outputs = [c["outputs"] for c in json.load(open(executed))["cells"] if c["cell_type"] == "code"]
    assert book.execute(str(notebook), "smoke", fresh=False, build=str(tmp_path / "build")) == executed
    assert json.load(open(executed + ".json"))["seconds"] == seconds
    assert [c["outputs"] for c in json.load(open(executed))["cells"] if c["cell_type"] == "code"] == outputs
    book.render_lesson(executed, str(notebook), str(lessons), root=str(tmp_path))
    assert "A sentence added after the render." in open(out).read()
    assert book.stale_renders(str(lessons), str(tmp_path)) == []
    code = next(c for c in nb["cells"] if c["cell_type"] == "code" and "parameters" not in c["metadata"].get("tags", []))
    code["source"].append("\nprint('a line of code added after the run')")
    json.dump(nb, open(notebook, "w"))
    assert not book.with_new_prose(str(notebook), executed)   # new code needs a new run
    notebook.unlink()
    assert "no longer exists" in book.stale_renders(str(lessons), str(tmp_path))[0]


@needs("nbformat", "playwright")   # the pictures are Chromium's
def test_coloured_html_outputs_are_rendered_as_pictures_and_tables_stay_tables(tmp_path):
    """GitHub drops inline styles, so a token strip's colours (what it teaches) would vanish from a rendered lesson:
    the book draws such outputs with Chromium instead. A plain table stays HTML, which GitHub shows."""
    import nbformat
    from PIL import Image
    from agentgym_nb.viz.masks import KIND_COLOURS, kind_legend_html
    book = _book()
    table = "<table><tr><th>k</th><th>pass@k</th></tr><tr><td>1</td><td>0.25</td></tr></table>"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("show()", outputs=[
        nbformat.v4.new_output("display_data", {"text/html": kind_legend_html(), "text/plain": "<HTML>"}),
        nbformat.v4.new_output("display_data", {"text/html": table, "text/plain": "<table>"})])])
    (tmp_path / "notebooks").mkdir()
    notebook = tmp_path / "notebooks" / "99_colours.ipynb"
    nbformat.write(nb, str(notebook))
    executed = str(tmp_path / "executed.ipynb")
    nbformat.write(nb, executed)
    json.dump({"preset": "smoke", "source_sha256": book.source_hash(str(notebook)), "seconds": 1,
               "commit": "abc1234", "date": "2026-01-02"}, open(executed + ".json", "w"))
    out = book.render_lesson(executed, str(notebook), str(tmp_path / "lessons"), root=str(tmp_path))
    text = open(out).read()
    assert "background" not in text and table in text
    [picture] = re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", text)
    colours = {rgb for _, rgb in Image.open(tmp_path / "lessons" / picture).convert("RGB").getcolors(1 << 16)}
    for kind, hex_colour in KIND_COLOURS.items():
        assert tuple(int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)) in colours, f"{kind}'s colour is not drawn"
    made = book.rendered(out)
    assert (made["commit"], made["date"], made["preset"]) == ("abc1234", "2026-01-02", "smoke")   # the execution's


def test_a_long_lessons_page_made_at_cpu_is_kept_until_its_notebook_changes(tmp_path):
    book = _book()
    notebook = tmp_path / "07_pass_at_k.ipynb"
    shutil.copy(os.path.join(ROOT, "notebooks", "07_pass_at_k.ipynb"), notebook)
    lessons = tmp_path / "lessons"
    lessons.mkdir()
    assert not book.page_made_at(str(notebook), "cpu", str(lessons))   # no page yet
    made = {"notebook": "notebooks/07_pass_at_k.ipynb", "source_sha256": book.source_hash(str(notebook)),
            "preset": "cpu"}
    (lessons / "07_pass_at_k.md").write_text(f"<!-- rendered lesson: {json.dumps(made)} -->\n\n# 07\n")
    assert book.page_made_at(str(notebook), "cpu", str(lessons))
    assert not book.page_made_at(str(notebook), "smoke", str(lessons))
    nb = json.load(open(notebook))
    nb["cells"][0]["source"].append("\nA sentence added after the render.")
    json.dump(nb, open(notebook, "w"))
    assert not book.page_made_at(str(notebook), "cpu", str(lessons))   # changed since: made again


def test_the_book_runs_the_long_lessons_at_smoke_unless_full_and_their_pages_say_so():
    book = _book()
    assert book.lesson_preset("notebooks/07_pass_at_k.ipynb", "cpu", full=False) == "smoke"
    assert book.lesson_preset("notebooks/07_pass_at_k.ipynb", "cpu", full=True) == "cpu"
    assert book.lesson_preset("notebooks/01_rollout_anatomy.ipynb", "cpu", full=False) == "cpu"
    assert book.lesson_preset("notebooks/01_rollout_anatomy.ipynb", "smoke", full=False) == "smoke"
    for path in sorted(glob.glob(os.path.join(ROOT, "docs", "lessons", "*.md"))):
        lesson = os.path.splitext(os.path.basename(path))[0]
        made = book.rendered(path)
        if made["preset"] == "smoke" and lesson in book.CPU_MINUTES:
            assert f"at the cpu preset it takes {book.CPU_MINUTES[lesson]}" in open(path).read(), path
        assert (book.PLACEHOLDERS in open(path).read()) == (made["preset"] == "smoke"), path
        assert ROOT not in open(path).read(), f"{path} prints a path of the machine that made it"


@needs("nbformat")
def test_a_page_drops_progress_bars_collapses_hidden_code_and_rebases_links(tmp_path):
    """What a rendered page shows of an executed lesson: no progress bar (a bar's frozen last state, often "0%",
    reads as a stalled run), hidden code behind <details>, links written from notebooks/ rebased to docs/lessons/
    (another lesson's notebook becomes its page), and no word of exercises for a lesson without them."""
    import nbformat
    book = _book()
    bar = "gae:   0%|          | 0/10 [00:00<?, ?it/s]"
    widget = nbformat.v4.new_output("display_data", {"application/vnd.jupyter.widget-view+json": {"model_id": "x"},
                                                     "text/plain": bar})
    stream = nbformat.v4.new_output("stream", name="stderr", text=f"\r{bar}\rgae:  50%|#####     | 5/10 [00:01<00:01]"
                                                                 "\nstep 1: reward 0.100\n")
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("See [the trainer](../agentgym_nb/train/rl.py), [the next lesson]"
                                      "(01_rollout_anatomy.ipynb), <a href=\"../README.md#start-here\">start</a> and "
                                      "[a paper](https://arxiv.org/abs/2509.08755)."),
        nbformat.v4.new_code_cell("train()", outputs=[widget, stream]),
        nbformat.v4.new_code_cell("plot_everything()", metadata={"jupyter": {"source_hidden": True}})])
    (tmp_path / "notebooks").mkdir()
    notebook = tmp_path / "notebooks" / "99_page.ipynb"
    nbformat.write(nb, str(notebook))
    executed = str(tmp_path / "executed.ipynb")
    nbformat.write(nb, executed)
    json.dump({"preset": "smoke", "source_sha256": book.source_hash(str(notebook)), "seconds": 1,
               "commit": "abc1234", "date": "2026-01-02"}, open(executed + ".json", "w"))
    out = book.render_lesson(executed, str(notebook), str(tmp_path / "docs" / "lessons"), root=str(tmp_path))
    text = open(out).read()
    assert "%|" not in text and "step 1: reward 0.100" in text
    assert "<details><summary>code</summary>\n\n```python\nplot_everything()\n```\n\n</details>" in text
    assert text.count("plot_everything()") == 1
    assert "(../../agentgym_nb/train/rl.py)" in text and "(01_rollout_anatomy.md)" in text
    assert 'href="../../README.md#start-here"' in text and "(https://arxiv.org/abs/2509.08755)" in text
    assert "exercises" not in text.split("\n\n")[1]
