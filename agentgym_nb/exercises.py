"""The notebooks' exercises: `check` holds a learner's answer against the package's own reference computation.

    check("GRPO advantage of episode 0", my_value, grpo(scores, group, mask)[0, 3])

A match prints a tick; a wrong answer raises with what was expected of its form (never the answer), so "Run all"
stops at the first exercise answered wrongly. Each notebook's solution cell (collapsed) fills in only the answers
still None: a learner's own answers are checked as written, and a notebook run top to bottom without answers
(`pytest --nbmake`, a papermill training job) checks the solution against the package instead.
"""
from __future__ import annotations

import numpy as np


def check(what: str, answer, reference, *, tol: float = 1e-3) -> None:
    """Raise AssertionError unless `answer` equals `reference`: numbers (and arrays, lists of numbers) within `tol`,
    anything else exactly."""
    if answer is None:
        raise AssertionError(f"{what}: no answer yet (replace the None above, or open the solution cell)")
    if _numeric(reference):
        got, want = np.asarray(answer, dtype=float), np.asarray(reference, dtype=float)
        if got.shape != want.shape:
            raise AssertionError(f"{what}: expected {'a number' if want.ndim == 0 else f'shape {want.shape}'}, got "
                                 f"{'a number' if got.ndim == 0 else f'shape {got.shape}'}")
        if not np.allclose(got, want, atol=tol, rtol=0, equal_nan=True):
            raise AssertionError(f"{what}: not yet (off by up to {np.nanmax(np.abs(got - want)):.3g})")
    elif answer != reference:
        raise AssertionError(f"{what}: not yet")
    print(f"✓ {what}")


def _numeric(x) -> bool:
    try:
        np.asarray(x, dtype=float)
        return not isinstance(x, (str, bytes))
    except (TypeError, ValueError):
        return False
