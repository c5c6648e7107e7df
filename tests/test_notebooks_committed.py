"""The notebooks as committed: stripped of outputs, one `parameters` cell for papermill, the preset read from
AGENTGYM_NB_PRESET, and no text about how they were made."""
import glob
import json
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb")))


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 9


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_a_notebook_is_committed_clean_with_one_parameters_cell(path):
    nb = json.load(open(path))
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert all(c["outputs"] == [] and c["execution_count"] is None for c in code), "outputs are not stripped"
    assert "widgets" not in nb["metadata"], "an executed copy's widget state is committed"
    tagged = [c for c in nb["cells"] if "parameters" in c["metadata"].get("tags", [])]
    assert len(tagged) == 1 and tagged[0]["cell_type"] == "code", "needs exactly one code cell tagged `parameters`"
    source = "".join("".join(c["source"]) for c in code)
    assert "AGENTGYM_NB_PRESET" in source, "the preset must follow $AGENTGYM_NB_PRESET (smoke in tests)"
    text = "".join("".join(c["source"]) for c in nb["cells"])
    assert not re.search(r"\bsession \d+|\bsession's\b", text), "the notebook speaks of a work session"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_a_notebook_opens_with_what_it_teaches_its_cost_per_preset_and_its_prerequisites(path):
    header = "".join(json.load(open(path))["cells"][0]["source"])
    assert "**What you will learn.**" in header
    cost = re.search(r"\*\*Cost on a 2-core CPU\.\*\*(.*?)(\n\n|$)", header, re.S)
    assert cost and "`smoke`" in cost.group(1) and "`cpu`" in cost.group(1), "one cost line per preset"
    assert "**Prerequisites.**" in header


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_no_code_cell_is_longer_than_40_lines(path):
    long = [(i, len("".join(c["source"]).splitlines())) for i, c in enumerate(json.load(open(path))["cells"])
            if c["cell_type"] == "code" and len("".join(c["source"]).splitlines()) > 40]
    assert not long, f"cells (index, lines) longer than 40 lines: {long}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_papermill_reads_every_parameter(path):
    """papermill -p warns "Passed unknown parameter" for a line of the parameters cell it cannot parse (a comment
    with '=' in it is enough), and its --help-notebook hides it."""
    import papermill
    source = next("".join(c["source"]) for c in json.load(open(path))["cells"]
                  if "parameters" in c["metadata"].get("tags", []))
    names = [m.group(1) for m in re.finditer(r"^(\w+)\s*=", source, re.M)]
    assert list(papermill.inspect_notebook(path)) == names
