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
