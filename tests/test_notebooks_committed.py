"""The notebooks as committed: stripped of outputs, one `parameters` cell for papermill, the preset read from
AGENTGYM_NB_PRESET, and no text about how they were made."""
import glob
import json
import os
import re

import pytest

from harness import needs

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


@needs("papermill")
@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_papermill_reads_every_parameter(path):
    """papermill -p warns "Passed unknown parameter" for a line of the parameters cell it cannot parse (a comment
    with '=' in it is enough), and its --help-notebook hides it."""
    import papermill
    source = next("".join(c["source"]) for c in json.load(open(path))["cells"]
                  if "parameters" in c["metadata"].get("tags", []))
    names = [m.group(1) for m in re.finditer(r"^(\w+)\s*=", source, re.M)]
    assert list(papermill.inspect_notebook(path)) == names


def test_no_lesson_starts_the_long_tracks_two_hour_build_unasked(tmp_path, monkeypatch):
    """Notebooks 04 and 05 pick their track with train.runs.default_track: BabyAI's long track only when its nano is
    built (or cheap: smoke) or asked for; otherwise the one-room track, saying what the long build costs."""
    from agentgym_nb import models
    from agentgym_nb.config import make_config
    from agentgym_nb.train.runs import default_track
    monkeypatch.setattr(models, "MODELS_DIR", str(tmp_path))   # a models folder with nothing built
    said = []
    assert default_track("babyai", "cpu", None, log=said.append) == "one-room"
    assert len(said) == 1 and "about 2 hours" in said[0] and "make model TRACK=long" in said[0]
    committed = said[0].split("-p model ")[1].split(",")[0]   # the committed start it names, from notebooks/
    assert os.path.exists(os.path.join(ROOT, "notebooks", committed, "config.json")), committed
    assert default_track("babyai", "cpu", "long", log=said.append) == "long"   # asked for
    assert default_track("babyai", "smoke", None, log=said.append) == "long"   # a smoke build takes seconds
    assert default_track("textcraft", "cpu", None, log=said.append) is None    # its first track
    built = models.nano_dir(make_config(preset="cpu", env="babyai", track="long"))
    os.makedirs(built)
    open(os.path.join(built, "build.json"), "w").write("{}")
    assert default_track("babyai", "cpu", None, log=said.append) == "long" and len(said) == 1
    for name in ("04_fixed_horizon", "05_scalinginter"):
        nb = json.load(open(os.path.join(ROOT, "notebooks", f"{name}.ipynb")))
        assert any("default_track(env, preset_name, track)" in "".join(c["source"]) for c in nb["cells"]), name
