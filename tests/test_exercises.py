import ast
import json
from pathlib import Path

import numpy as np
import pytest

from agentgym_nb.exercises import check


def test_check_accepts_the_reference_and_says_what_is_wrong_otherwise(capsys):
    check("a number", 0.5004, 0.5)
    check("an array", [[1.0, 0.0]], np.array([[1.0, 0.0]]))
    check("a set of tokens", {"go", "to"}, {"to", "go"})
    assert capsys.readouterr().out.count("✓") == 3
    with pytest.raises(AssertionError, match="no answer yet"):
        check("x", None, 1.0)
    with pytest.raises(AssertionError, match="not yet \\(off by up to 0.1"):
        check("x", 0.6, 0.5)
    with pytest.raises(AssertionError, match="expected shape \\(2,\\), got a number"):
        check("x", 1.0, [1.0, 2.0])
    with pytest.raises(AssertionError, match="x: not yet$"):
        check("x", {"go"}, {"go", "to"})


def _answers_left_at_none(source: str) -> set[str]:
    return {t.id for node in ast.parse(source).body if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant) and node.value.value is None for t in node.targets}


def test_a_solution_cell_fills_in_only_the_answers_still_none():
    """A learner's answer must reach the check as written: a solution cell sets each answer only under
    `if <answer> is None:`, so "Run all" checks what the learner wrote and fills in only what is missing."""
    seen = 0
    for path in sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb")):
        cells = [c for c in json.load(open(path))["cells"] if c["cell_type"] == "code"]
        for before, cell in zip(cells, cells[1:]):
            source = "".join(cell["source"])
            if not source.lstrip().startswith("# solution"):
                continue
            seen += 1
            answers = _answers_left_at_none("".join(before["source"]))
            assert answers, f"{path.name}: the cell before a solution holds the answers, each `= None`"
            guarded = set()
            for node in ast.parse(source).body:
                if isinstance(node, ast.Assign):
                    names = {t.id for t in node.targets if isinstance(t, ast.Name)}
                    assert not names & answers, f"{path.name}: the solution overwrites {names & answers}"
                elif isinstance(node, ast.If):
                    test = node.test
                    assert isinstance(test, ast.Compare) and isinstance(test.ops[0], ast.Is), ast.unparse(test)
                    guarded.add(test.left.id)
            assert guarded == answers, f"{path.name}: answers {answers}, filled in under `is None`: {guarded}"
    assert seen >= 8   # notebooks 01-07 and 03b each end with an exercise
