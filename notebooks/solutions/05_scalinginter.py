"""Reference answers of notebooks/05_scalinginter.ipynb (used only under AGENTGYM_NB_SOLUTIONS=1)."""

__all__ = ["my_horizon"]


def my_horizon(step, rounds, every):
    """Steps count from 1: steps 1..every play rounds[0], the next `every` rounds[1], ...; after the last stage the
    horizon stays at rounds[-1]."""
    return rounds[min((step - 1) // every, len(rounds) - 1)]
