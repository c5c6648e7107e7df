"""The horizon study: the paper's question of short, long and growing interaction horizons, asked on BabyAI's long
track with several seeds, at equal training steps and at equal policy tokens. `bench/horizon.py` is its command line
(its docstring tells what a run does and what the report holds).

    settings   the arms, RULES (how each claim is judged, fixed before the runs), GPU_TARGET, `Study` (what every run
               shares) and the start model every run begins from
    runs       one run's process: train to a budget point with its held-out evaluations, or a pass@(k, T) surface
    scheduler  every (arm, seed) as processes of the command line, on CPU cores or sharing one GPU
    verdicts   each of the paper's claims judged by RULES, and the paired statistics they read
    report     the JSON that keeps every finished run whole: per-arm success, paired differences, verdicts, cost;
               the README's table made from it
    pilot      how many runs share one GPU well: step time against the runs on the card, and what fits a 9-minute call
"""
