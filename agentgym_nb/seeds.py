"""How every random draw of a run is seeded: one stream per purpose, each a pure function of the run's seed and an
index (a step, an epoch, an episode), so a resumed run draws exactly what an uninterrupted one would."""
from __future__ import annotations


def mix_seed(seed: int, index: int, stride: int = 1_000_003) -> int:
    """seed * stride + index: the seed of draw `index` (a step, an epoch, an iteration) of a stream seeded `seed`.
    Distinct (seed, index) pairs give distinct seeds while 0 <= index < stride; the stride is a prime, so that two
    streams of other strides do not fall into step."""
    return seed * stride + index
