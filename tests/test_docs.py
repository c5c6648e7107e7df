"""docs/results.md stays a results page: short, and every link into it lands on a heading it has; the README's
tables are made from the JSON they quote."""
import glob
import json
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join("docs", "results.md")
MAX_LINES = 450   # the page holds current results only (~400 lines); superseded runs live in git history
# where links into the results page are written; notebooks are searched as raw JSON text
LINKING = ["README.md", "docs/**/*.md", "bench/**/*.md", "bench/**/*.py", "bench/**/*.sh", "agentgym_nb/**/*.py",
           "tests/**/*.py", "notebooks/*.ipynb"]
LINK_INTO_RESULTS = re.compile("results" + r"\.md#([\w-]+)")   # split so this file holds no such link itself
LINK_IN_PAGE = re.compile(r"\]\(#([\w-]+)\)")


def github_anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces -> hyphens.

    "Env server against AgentGym's server design" -> "env-server-against-agentgyms-server-design"."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """The anchors of a page's headings (outside code fences); a repeated heading gets -1, -2, ... as on GitHub."""
    found, count, fenced = set(), {}, False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,6} ", line):
            slug = github_anchor(line.lstrip("#"))
            found.add(slug if slug not in count else f"{slug}-{count[slug]}")
            count[slug] = count.get(slug, 0) + 1
    return found


def broken_links(root: str) -> list[str]:
    """`file: #anchor` for every link into docs/results.md, from the repository or from the page itself, whose
    anchor no heading of the page has."""
    page = open(os.path.join(root, RESULTS)).read()
    have = anchors(page)
    broken = [f"{RESULTS}: #{a}" for a in LINK_IN_PAGE.findall(page) if a not in have]
    files = sorted({f for pattern in LINKING for f in glob.glob(os.path.join(root, pattern), recursive=True)})
    for path in files:
        if os.sep + "_build" + os.sep in path:
            continue
        for a in LINK_INTO_RESULTS.findall(open(path, errors="replace").read()):
            if a not in have:
                broken.append(f"{os.path.relpath(path, root)}: #{a}")
    return broken


def test_github_anchor_matches_githubs_rule():
    assert github_anchor("Env server against AgentGym's server design") == "env-server-against-agentgyms-server-design"
    assert github_anchor("The paper preset on 8 GPUs: memory and bottleneck arithmetic") == \
        "the-paper-preset-on-8-gpus-memory-and-bottleneck-arithmetic"
    assert github_anchor("pass@k") == "passk"
    assert anchors("# A\n## A\n```\n# not a heading\n```\n") == {"a", "a-1"}


def test_every_link_into_the_results_page_lands_on_a_heading():
    broken = broken_links(ROOT)
    assert not broken, "links to headings docs/results.md does not have (keep the heading or fix the link): " \
                       + "; ".join(broken)


def test_a_link_to_a_missing_heading_is_caught(tmp_path):
    os.makedirs(tmp_path / "docs")
    (tmp_path / "docs" / "results.md").write_text("# Results\n\n## One RL step\n\nSee [above](#one-rl-step).\n")
    link = "docs/results" + ".md#"
    (tmp_path / "README.md").write_text(f"[ok]({link}one-rl-step) [gone]({link}two-rl-steps)")
    assert broken_links(str(tmp_path)) == ["README.md: #two-rl-steps"]
    (tmp_path / "docs" / "results.md").write_text("# Results\n\nSee [below](#nowhere).\n")
    assert "docs/results.md: #nowhere" in broken_links(str(tmp_path))


def test_the_results_page_is_a_page_not_a_diary():
    lines = open(os.path.join(ROOT, RESULTS)).read().count("\n")
    assert lines <= MAX_LINES, f"docs/results.md has {lines} lines (at most {MAX_LINES}): keep the current result " \
                               "of each measurement and let superseded runs go (git keeps them)"


def test_ci_runs_the_readmes_test_commands_which_together_run_every_test():
    """.ci/run runs the README's test command and nothing else, `make test test-long`: `make test` leaves out exactly
    the tests marked `long`, which `make test-long` runs; no test imports from a conftest (notebooks/ has one too)."""
    ci = [line.strip() for line in open(os.path.join(ROOT, ".ci", "run")) if line.startswith("make ")]
    assert ci == ["make test test-long"]
    readme = open(os.path.join(ROOT, "README.md")).read()
    assert re.search(r"^make test test-long +# .*CI runs exactly this", readme, re.MULTILINE)
    recipes = {m.group(1): m.group(2) for m in re.finditer(r"^([\w-]+):.*\n((?:\t.*\n)+)", open(
        os.path.join(ROOT, "Makefile")).read(), re.MULTILINE)}
    assert '-m "not long"' in recipes["test"] and "--nbmake notebooks" in recipes["test"]
    assert "-m long " in recipes["test-long"] and "--nbmake" not in recipes["test-long"]
    tests = os.path.join(ROOT, "tests")
    assert [name for name in os.listdir(tests) if name.endswith(".py")
            and re.search(r"^\s*from conftest import", open(os.path.join(tests, name)).read(), re.MULTILINE)] == []


def test_the_readmes_demo_table_is_made_from_demo_json_runs_of_the_commit_it_names():
    """The README quotes `make demo` from bench/results/demo.json: the commit it names has runs there, and its table is
    scripts/demo_table.py's for that commit, row for row (no number the JSON does not hold, no run of another commit)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("demo_table", os.path.join(ROOT, "scripts", "demo_table.py"))
    demo_table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo_table)
    readme = open(os.path.join(ROOT, "README.md")).read()
    section = readme[readme.index("## What `make demo` shows"):]
    section = section[:section.index("\n## ", 1)]
    [commit] = re.findall(r"Fresh-clone runs of commit ([0-9a-f]{7,40})\b", section)
    table = demo_table.table(commit)
    assert table in section, f"README's demo table is not scripts/demo_table.py's for {commit}:\n{table}"
    rows = [line for line in section.splitlines() if line.startswith("| ")]   # the header and the runs: no others
    assert len(rows) == table.count("\n"), rows


def horizon_table_in(readme: str) -> str | None:
    """What a README quotes between the horizon study's table markers (`bench/horizon.py --table` prints them around
    its table); None where it has no opening marker."""
    from agentgym_nb.study.report import TABLE_MARKERS
    opening, closing = TABLE_MARKERS
    if opening not in readme:
        return None
    after = readme.split(opening, 1)[1]
    if closing not in after:
        raise ValueError(f"README opens the horizon study's table with {opening} but never closes it with {closing}")
    return after.split(closing, 1)[0].strip("\n")


def test_the_readmes_horizon_study_table_is_made_from_the_committed_report():
    """Where README.md quotes the horizon study (between the markers), what it quotes is readme_table of the main
    study in bench/results/horizon_study.json, line for line: no number the JSON does not hold. Without the markers
    the table is made all the same, so the committed report always yields one."""
    from agentgym_nb.study.report import readme_table
    from agentgym_nb.study.settings import RESULT, Study, study_key
    with open(RESULT) as f:
        table = readme_table(json.load(f)["studies"][study_key(Study())])
    quoted = horizon_table_in(open(os.path.join(ROOT, "README.md")).read())
    assert quoted is None or quoted == table, \
        f"README.md's horizon-study table is not `bench/horizon.py --table`'s:\n{table}"


def test_a_readme_table_that_differs_from_the_report_is_caught():
    from agentgym_nb.study.report import TABLE_MARKERS
    opening, closing = TABLE_MARKERS
    assert horizon_table_in("# Results\n\nNo study yet.\n") is None
    assert horizon_table_in(f"# Results\n{opening}\n| a | 1 |\n{closing}\nmore") == "| a | 1 |"
    with pytest.raises(ValueError, match="never closes"):
        horizon_table_in(f"{opening}\n| a | 1 |\n")


def test_quote_table_replaces_what_stood_between_the_markers():
    from agentgym_nb.study.report import TABLE_MARKERS, quote_table
    opening, closing = TABLE_MARKERS
    text = f"# Study\n\n{opening}\n| old | 1 |\n{closing}\n\nmore\n"
    assert quote_table(text, "| new | 2 |") == f"# Study\n\n{opening}\n| new | 2 |\n{closing}\n\nmore\n"
    assert horizon_table_in(quote_table(text, "| new | 2 |")) == "| new | 2 |"
    with pytest.raises(ValueError, match="no <!-- horizon-study-table -->"):
        quote_table("# no markers\n", "| new | 2 |")


MD_LINK = re.compile(r"(?:\]\(|href=\")([^)\"\s]+)(?=[)\"])")   # a link's target, markdown or HTML


def broken_relative_links(root: str) -> list[str]:
    """`file: target` for every relative link of the README, the pages under docs/ (rendered lessons included) and
    the notebooks' markdown cells (written from notebooks/) whose file is missing, or whose #anchor a markdown
    target lacks."""
    pages = ["README.md"] + [os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "docs", "**", "*.md"),
                                                                          recursive=True)
                             if os.sep + "_build" + os.sep not in p]
    texts = {path: open(os.path.join(root, path)).read() for path in pages}
    for nb in glob.glob(os.path.join(root, "notebooks", "*.ipynb")):
        cells = [c for c in json.load(open(nb))["cells"] if c["cell_type"] == "markdown"]
        texts[os.path.relpath(nb, root)] = "\n".join("".join(c["source"]) for c in cells)
    broken = []
    for path, text in texts.items():
        fenced = re.sub(r"```.*?```", "", text, flags=re.S)   # code blocks hold no links
        for target in MD_LINK.findall(fenced):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            file, _, anchor = target.partition("#")
            where = os.path.normpath(os.path.join(root, os.path.dirname(path), file))
            if not os.path.exists(where):
                broken.append(f"{path}: {target}")
            elif anchor and where.endswith(".md") and anchor not in anchors(open(where).read()):
                broken.append(f"{path}: {target} (no such heading)")
    return broken


def test_every_relative_link_of_the_readme_the_docs_and_the_notebooks_resolves():
    broken = broken_relative_links(ROOT)
    assert not broken, "links to files or headings that do not exist: " + "; ".join(broken)
