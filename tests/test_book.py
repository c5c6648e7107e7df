"""make book's renderer: Jupyter Book turns the notebooks into a static site (here the committed ones, unexecuted:
the notebooks' execution is what `pytest --nbmake` tests)."""
import glob
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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
