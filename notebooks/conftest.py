"""`pytest --nbmake notebooks` runs each lesson with its exercises' reference solutions in place of the blank answers
(agentgym_nb.exercises.solutions_under_ci reads AGENTGYM_NB_SOLUTIONS=1), and only the notebooks: the variable is
set while a notebook runs (its kernel starts then) and removed after it."""
import os

import pytest

from agentgym_nb.exercises import SOLUTIONS_ENV


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    if not str(item.fspath).endswith(".ipynb"):
        yield
        return
    before = os.environ.get(SOLUTIONS_ENV)
    os.environ[SOLUTIONS_ENV] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(SOLUTIONS_ENV, None)
        else:
            os.environ[SOLUTIONS_ENV] = before
