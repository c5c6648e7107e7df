"""docs/results.md stays a results page: short, and every link into it lands on a heading it has."""
import glob
import os
import re

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
