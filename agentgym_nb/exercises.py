"""The lessons' exercises: the learner writes a function (or a number), and a checker holds it against the package's
own computation on the lesson's real data (a real episode, a real batch, a real run's metrics).

    exercises.solutions_under_ci("03_advantage_estimators", globals())
    exercises.check_grpo(my_grpo, scores, group, loss_mask)

A check ends one of three ways:
* **not answered yet** (an answer left at None, a function that returns None or raises NotImplementedError): one
  line says what to write; no tick, and nothing is raised, so "Run All" and a papermill training job go on;
* **wrong**: AssertionError saying which case failed and what is wrong with it (the common mistake, when it is one
  the checker recognises), so "Run All" stops at the first wrong answer;
* **right**: a tick.

The reference solutions live outside the lessons, in notebooks/solutions/<lesson>.py. `solutions_under_ci` puts
them in place of the learner's answers only when AGENTGYM_NB_SOLUTIONS=1: `pytest --nbmake` sets it
(notebooks/conftest.py), and so does `make book`. In a kernel of your own it does nothing: a blank answer stays blank.
"""
from __future__ import annotations

import importlib.util
import math
import os
from pathlib import Path

import numpy as np
import torch

SOLUTIONS_ENV = "AGENTGYM_NB_SOLUTIONS"
SOLUTIONS_DIR = Path(__file__).resolve().parent.parent / "notebooks" / "solutions"
_reference_in_use: list[str] = []   # the answers the reference solutions stand in for, in this kernel


class NotAnswered(Exception):
    """The learner's function is still the blank it was handed out as."""


def solutions_under_ci(lesson: str, namespace: dict) -> list[str]:
    """With AGENTGYM_NB_SOLUTIONS=1, set every answer of notebooks/solutions/<lesson>.py (the names in its
    `__all__`) in `namespace` (the notebook's globals()) and return their names; otherwise do nothing."""
    if os.environ.get(SOLUTIONS_ENV) != "1":
        return []
    module = load_solutions(lesson)
    names = list(module.__all__)
    namespace.update({name: getattr(module, name) for name in names})
    _reference_in_use[:] = names
    print(f"{SOLUTIONS_ENV}=1: the reference answers of notebooks/solutions/{lesson}.py stand in for "
          f"{', '.join(names)}")
    return names


def load_solutions(lesson: str):
    """The module notebooks/solutions/<lesson>.py (its `__all__` lists the answers)."""
    path = SOLUTIONS_DIR / f"{lesson}.py"
    if not path.exists():
        have = sorted(p.stem for p in SOLUTIONS_DIR.glob("*.py")) if SOLUTIONS_DIR.exists() else []
        raise FileNotFoundError(f"no solutions for lesson {lesson!r} at {path}; lessons with solutions: {have}")
    spec = importlib.util.spec_from_file_location(f"agentgym_nb_solutions_{lesson}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not isinstance(getattr(module, "__all__", None), (list, tuple)):
        raise AttributeError(f"{path} must list its answers in __all__")
    return module


def check(what: str, answer, reference, *, tol: float = 1e-3) -> None:
    """An answer against the package's value: numbers (and arrays, lists of numbers) within `tol`, anything else
    exactly. Prints a tick when right and a reminder when not answered yet; raises when wrong, saying what was
    expected of its form, never the value."""
    if answer is None:
        return _not_answered(what, "replace the None above with your answer")
    if _numeric(reference):
        got, want = np.asarray(answer, dtype=float), np.asarray(reference, dtype=float)
        if got.shape != want.shape:
            raise AssertionError(f"{what}: expected {'a number' if want.ndim == 0 else f'shape {want.shape}'}, got "
                                 f"{'a number' if got.ndim == 0 else f'shape {got.shape}'}")
        if not np.allclose(got, want, atol=tol, rtol=0, equal_nan=True):
            raise AssertionError(f"{what}: not yet (off by up to {np.nanmax(np.abs(got - want)):.3g})")
    elif answer != reference:
        raise AssertionError(f"{what}: not yet")
    return _tick(what)


def check_function(what: str, fn, cases: list[tuple[str, tuple, object]]) -> None:
    """`fn(*args)` against the expected value of each (label, args, expected) case, exactly (numbers within 1e-6)."""
    try:
        for label, args, want in cases:
            got = _call(fn, *args)
            same = math.isclose(got, want, abs_tol=1e-6) if _numeric(want) and _numeric(got) else got == want
            if not same:
                raise AssertionError(f"{what}, {label}: expected {want!r}, got {got!r}")
    except NotAnswered:
        return _not_answered(what, f"fill in the body of {getattr(fn, '__name__', 'the function')} above")
    return _tick(f"{what} ({len(cases)} cases of the real data)")


# ---------------------------------------------------------------------------------------------------------- pass@k

def check_pass_at_k(fn, n: int, counts: list[int]) -> None:
    """`fn(n, c, k)` against `evaluate.pass_at_k` for every k = 1..n at the success counts `counts` (one per task,
    each out of `n` samples), at the edges (c = 0, c = n, n - c < k), and for k > n (it must raise ValueError)."""
    from agentgym_nb.evaluate import pass_at_k, pass_hat_k

    def mistake(n_, c, k, got):
        if math.isclose(got, 1 - (1 - c / n_) ** k, abs_tol=1e-9):
            return ("that is 1 - (1 - c/n)^k, the plug-in estimate, as if the k tries were drawn with replacement "
                    "from the n samples. It is biased low: count instead the k-subsets of the n samples that hold no "
                    "success, C(n - c, k) of C(n, k)")
        if math.isclose(got, pass_hat_k(n_, c, k), abs_tol=1e-9):
            return "that is pass^k, the chance that all k tries succeed; pass@k is the chance that at least one does"
        if math.isclose(got, c / n_, abs_tol=1e-9) and k > 1:
            return "that is pass@1 (c / n) whatever k is"
        if n_ - c < k:
            return "with fewer than k failures among the n samples, every k-subset holds a success, so pass@k is 1"
        return None

    _check_k_estimator(fn, n, counts, "pass@k", pass_at_k, {(5, 2, 4), (200, 7, 50)}, mistake)


def check_pass_hat_k(fn, n: int, counts: list[int]) -> None:
    """`fn(n, c, k)` against `evaluate.pass_hat_k` for every k = 1..n at the success counts `counts` (one per task,
    each out of `n` samples), at the edges (c = 0, c = n, c < k), and for k > n (it must raise ValueError)."""
    from agentgym_nb.evaluate import pass_at_k, pass_hat_k

    def mistake(n_, c, k, got):
        if math.isclose(got, (c / n_) ** k, abs_tol=1e-9):
            return ("that is (c/n)^k, as if the k tries were drawn with replacement from the n samples (a success "
                    "could be counted twice). Count the k-subsets of the n samples that are all successes: C(c, k) of "
                    "C(n, k)")
        if math.isclose(got, pass_at_k(n_, c, k), abs_tol=1e-9):
            return ("that is pass@k, the chance that at least one of k tries succeeds; pass^k is the chance that all k "
                    "do")
        if c < k:
            return "with fewer than k successes among the n samples, no k-subset is all successes, so pass^k is 0"
        return None

    _check_k_estimator(fn, n, counts, "pass^k", pass_hat_k, {(5, 3, 2), (200, 150, 10)}, mistake)


def _check_k_estimator(fn, n: int, counts: list[int], what: str, reference, edge_cases: set, mistake) -> None:
    """`fn(n, c, k)` against `reference` at every k = 1..n for each count, at c = 0, c = n and `edge_cases`; a wrong
    value is explained by `mistake(n, c, k, got)` where it recognises the error; for k > n fn must raise ValueError."""
    cases = sorted({(n, c, k) for c in counts for k in range(1, n + 1)} | {(n, 0, 1), (n, n, n)} | edge_cases)
    try:
        for n_, c, k in cases:
            got, want = _as_float(_call(fn, n_, c, k), f"{what}(n={n_}, c={c}, k={k})"), reference(n_, c, k)
            if math.isclose(got, want, abs_tol=1e-9):
                continue
            where = f"{what}(n={n_}, c={c}, k={k}) should be {want:.6f}, got {got:.6f}"
            why = mistake(n_, c, k, got)
            raise AssertionError(f"{where}: {why}" if why else where)
        try:
            got = fn(n, 1, n + 1)
        except ValueError:
            pass
        else:
            raise AssertionError(f"{what}(n={n}, c=1, k={n + 1}) returned {got!r}: k tries cannot be chosen from n < k "
                                 f"samples, so {what} is undefined there; raise ValueError saying so")
    except NotAnswered:
        return _not_answered(what, f"fill in the body of {getattr(fn, '__name__', 'the function')} above")
    return _tick(f"{what}: equal to evaluate.{reference.__name__} on {len(counts)} tasks x k = 1..{n}, the edges and "
                 "k > n")


# ------------------------------------------------------------------------------------------- intervals over seeds

def check_t_interval(fn, pairs: dict[str, dict]) -> None:
    """`fn(differences) -> (lo, hi)`: the 95% t-interval of the mean of per-seed differences, against
    `viz.plots.t_interval` on every paired difference of a horizon study report (`pairs`: the report's "pairs",
    each with its per-seed differences) that has two seeds or more."""
    from agentgym_nb.viz.plots import t_interval
    what = "the 95% t-interval over seeds"
    cases = [(name, list(d["per_seed"])) for name, d in pairs.items() if len(d.get("per_seed") or []) >= 2]
    if not cases:
        raise ValueError("check_t_interval needs a paired difference over two seeds or more")
    try:
        for name, diffs in cases:
            got = _call(fn, list(diffs))
            try:
                lo, hi = (float(x) for x in got)
            except (TypeError, ValueError):
                raise AssertionError(f"{what}: return two numbers, (lo, hi); got {got!r}") from None
            mean, want_lo, want_hi = t_interval(diffs)
            if math.isclose(lo, want_lo, abs_tol=1e-6) and math.isclose(hi, want_hi, abs_tol=1e-6):
                continue
            n, d = len(diffs), np.asarray(diffs, dtype=float)
            where = (f"{what} of {name} ({n} seeds: {', '.join(f'{x:+.4f}' for x in diffs)}) should be "
                     f"[{want_lo:+.4f}, {want_hi:+.4f}], got [{lo:+.4f}, {hi:+.4f}]")
            half = (hi - lo) / 2
            if not math.isclose((lo + hi) / 2, mean, abs_tol=1e-6):
                raise AssertionError(f"{where}: the interval is centred on the mean of the differences, "
                                     f"{mean:+.4f}")
            for guess, mistake in (
                    (1.96 * d.std(ddof=1) / math.sqrt(n), "that is the normal quantile 1.96; with a few seeds the "
                     f"mean's spread is estimated too, so use Student's t with n - 1 = {n - 1} degrees of freedom "
                     f"({_t975(n - 1)})"),
                    (_t975(n - 1) * d.std(ddof=0) / math.sqrt(n), "you used the population std (over n); use the "
                     "unbiased one, over n - 1 (np.std(..., ddof=1))"),
                    (_t975(n - 1) * d.std(ddof=1), "that is the spread of one seed's difference; the mean's is s / "
                     "sqrt(n)"),
                    (_t975(n) * d.std(ddof=1) / math.sqrt(n),
                     f"that is t with n = {n} degrees of freedom; the mean of n differences has n - 1")):
                if math.isclose(half, guess, abs_tol=1e-6):
                    raise AssertionError(f"{where}: {mistake}")
            raise AssertionError(where)
    except NotAnswered:
        return _not_answered(what, f"fill in the body of {getattr(fn, '__name__', 'the function')} above")
    return _tick(f"{what}: equal to viz.plots.t_interval on the study's {len(cases)} paired differences")


def check_seeds_needed(fn, cases: list[tuple[str, float, float]]) -> None:
    """`fn(mean, sd) -> n`: the fewest seeds whose 95% t-interval would exclude 0 at this mean and standard deviation
    of the per-seed differences, against `viz.plots.seeds_to_establish` on each (label, mean, sd) case."""
    from agentgym_nb.viz.plots import seeds_to_establish
    what = "seeds needed"
    try:
        for label, mean, sd in cases:
            got, want = _call(fn, mean, sd), seeds_to_establish(mean, sd)
            if got == want:
                continue
            where = f"{what} for {label} (mean {mean:+.4f}, sd {sd:.4f}): expected {want}, got {got}"
            if mean == 0:
                raise AssertionError(f"{where}: a mean of 0 is never established, however many seeds: return "
                                     "math.inf")
            if got == max(2, math.floor((1.96 * sd / abs(mean)) ** 2) + 1):
                raise AssertionError(f"{where}: you used 1.96 for every n; with n seeds the quantile is Student's t "
                                     "with n - 1 degrees of freedom (T975[n - 2]), larger for few seeds")
            if isinstance(got, (int, np.integer)) and 2 <= got < want:
                half = _t975(got - 1) * sd / math.sqrt(got)
                raise AssertionError(f"{where}: at n = {got} the half width t * sd / sqrt(n) = {half:.4f} is not below "
                                     f"|mean| = {abs(mean):.4f}: the interval still reaches 0")
            if isinstance(got, (int, float, np.number)) and want < got:
                half = _t975(want - 1) * sd / math.sqrt(want)
                raise AssertionError(f"{where}: at n = {want} the half width t * sd / sqrt(n) = {half:.4f} is already "
                                     f"below |mean| = {abs(mean):.4f}: ask for the fewest seeds")
            raise AssertionError(where)
    except NotAnswered:
        return _not_answered(what, f"fill in the body of {getattr(fn, '__name__', 'the function')} above")
    return _tick(f"{what}: equal to viz.plots.seeds_to_establish on {len(cases)} differences")


# --------------------------------------------------------------------------------------- a multi-turn sequence

def turn_record(traj, chat) -> dict:
    """What the engine and the environment exchanged in `traj`, as the ids a rollout has in hand: `prompt` (the ids
    of the first prompt: head, instruction, first observation, generation header) and per agent turn `sampled` (the
    ids the engine sampled) and `observation` (the text of the environment's answer, None where it was not
    appended: the episode ended, or the token budget ran out)."""
    from agentgym_nb.rollout.trajectory import POLICY
    first = next((i for i, k in enumerate(traj.kinds) if k == POLICY), len(traj.kinds))
    turns = []
    for k in range(1, traj.num_rounds + 1):
        positions = [i for i, (kind, turn) in enumerate(zip(traj.kinds, traj.turn_ids)) if turn == k]
        sampled = [traj.input_ids[i] for i in positions if traj.kinds[i] == POLICY]
        closing = int(not sampled or sampled[-1] != chat.end_of_turn_id)   # the <|im_end|> the template adds
        appended = len(positions) - len(sampled) - closing > 0
        reply = 3 + 2 * (k - 1)   # messages: instruction, acknowledgement, first observation, reply 1, answer 1, ...
        turns.append({"sampled": sampled,
                      "observation": traj.messages[reply + 1]["content"] if appended else None})
    return {"prompt": traj.input_ids[:first], "turns": turns}


def check_sequence(fn, chat, trajectories: list) -> None:
    """`fn(chat, turn_record(t, chat)) -> (input_ids, loss_mask)` against each trajectory's own ids and mask."""
    from agentgym_nb.rollout.trajectory import ENV, POLICY, TEMPLATE
    from agentgym_nb.viz.masks import KIND_NAMES
    what = "the multi-turn sequence and its loss mask"
    try:
        for e, t in enumerate(trajectories):
            out = _call(fn, chat, turn_record(t, chat))
            if not (isinstance(out, tuple) and len(out) == 2):
                raise AssertionError(f"{what}: return two lists, (input_ids, loss_mask); got {type(out).__name__}")
            ids, mask = (list(map(int, torch.as_tensor(x).flatten().tolist())) for x in out)
            where = f"episode {e} (task {t.item_id}, {t.num_rounds} turns)"

            def about(p):
                kind, turn = t.kinds[p], t.turn_ids[p]
                return f"a {KIND_NAMES[kind]} token of turn {turn}" if turn else f"a {KIND_NAMES[kind]} token"
            p = next((i for i, (a, b) in enumerate(zip(ids, t.input_ids)) if a != b), min(len(ids), len(t.input_ids)))
            if p < len(t.input_ids) or len(ids) != len(t.input_ids):
                if p >= len(t.input_ids):
                    raise AssertionError(f"{where}: your input_ids run on past the episode's {len(t.input_ids)} ids")
                hint = {ENV: "the environment's answer follows chat.after_reply",
                        TEMPLATE: "a reply that does not end with chat.end_of_turn_id is closed with one (the model "
                                  "never sampled it); then chat.after_reply, the observation, chat.generation_header"
                        }.get(t.kinds[p], "the sampled ids are appended as they are")
                got = f"got id {ids[p]}" if p < len(ids) else "your ids end there"
                raise AssertionError(f"{where}: your input_ids differ at position {p}: expected id {t.input_ids[p]}, "
                                     f"{about(p)}; {got}. Hint: {hint}")
            if len(mask) != len(ids):
                raise AssertionError(f"{where}: loss_mask has {len(mask)} entries for {len(ids)} ids: one per id")
            q = next((i for i, (a, b) in enumerate(zip(mask, t.loss_mask)) if a != b), None)
            if q is not None:
                if t.kinds[q] == POLICY:
                    raise AssertionError(f"{where}: loss_mask is {mask[q]} at position {q}, an id the engine sampled "
                                         f"in turn {t.turn_ids[q]}: every sampled id is trained (1)")
                closing = t.kinds[q] == TEMPLATE and t.input_ids[q] == chat.end_of_turn_id and t.kinds[q - 1] == POLICY
                why = ("the <|im_end|> added after a reply that did not end with one: the model never sampled it"
                       if closing else {ENV: "the agent is not trained to predict the environment",
                                        TEMPLATE: "chat scaffolding nobody sampled"}.get(t.kinds[q], "not sampled"))
                raise AssertionError(f"{where}: loss_mask is {mask[q]} at position {q}, {about(q)}: it must be 0 "
                                     f"({why})")
    except NotAnswered:
        return _not_answered(what, f"fill in the body of {getattr(fn, '__name__', 'the function')} above")
    return _tick(f"{what}: equal to Trajectory's on all {len(trajectories)} episodes")


# ------------------------------------------------------------------------------------------------------------ GRPO

def check_grpo(fn, scores, group, loss_mask, eps: float = 1e-6) -> None:
    """`fn(scores[B], group[B], loss_mask[B, T]) -> advantages[B, T]` against `algos.advantages.grpo` on the real
    batch, on the real batch's groups and masks with spread-out scores, and on a group of one and an all-equal group."""
    from agentgym_nb.algos.advantages import grpo
    what = "GRPO advantages"
    B = len(scores)
    spread = torch.tensor([(b * 7 % 11) / 10 for b in range(B)], dtype=torch.float32)   # 0, .7, .3, 1.0, ...
    cases = [("the real batch", scores.float(), group, loss_mask),
             ("the real batch's groups and masks, other scores", spread, group, loss_mask),
             ("a group of one and an all-equal group", torch.tensor([1.0, 0.0, 0.5, 0.5, 0.5, 1.0]),
              torch.tensor([0, 0, 1, 1, 1, 2]), torch.tensor([[1, 1, 0]] * 6))]
    try:
        for label, s, g, m in cases:
            want = grpo(s, g, m, eps)
            got = _as_tensor(_call(fn, s.clone(), g.clone(), m.clone()), what)
            if got.shape != want.shape:
                raise AssertionError(f"{what} on {label}: expected shape [B, T] = {list(want.shape)} (one advantage "
                                     f"per token), got {list(got.shape)}")
            bad = ~torch.isclose(got, want, atol=1e-4, rtol=1e-4)
            if not bad.any():
                continue
            b, t = bad.nonzero()[0].tolist()
            members = (g == g[b]).nonzero()[:, 0]
            if m[b, t] == 0:
                raise AssertionError(f"{what} on {label}: episode {b}, token {t} has loss_mask 0 but advantage "
                                     f"{got[b, t]:.4g}: only trainable tokens get an advantage (0 elsewhere)")
            if torch.isnan(got[b, t]):
                raise AssertionError(f"{what} on {label}: episode {b} gets nan. A group of one has no spread (the "
                                     "std of one number is nan) and an all-equal group has std 0: both get 0")
            group_scores = ", ".join(f"{x:.2f}" for x in s[members].tolist())
            where = (f"{what} on {label}: episode {b} (group {int(g[b])}, score {s[b]:.2f}; the group's scores: "
                     f"{group_scores}) should get {want[b, t]:.4f}, got {got[b, t]:.4f}")
            if len(members) == 1:
                raise AssertionError(f"{where}: an episode alone in its group has no baseline: it gets 0")
            mean, deviation = s[members].mean(), s[b] - s[members].mean()
            for guess, mistake in (
                    (deviation / (s[members].std(unbiased=False) + eps),
                     "you divided by the population std (over n); GRPO uses the unbiased std (over n - 1), "
                     "torch.std's default"),
                    (deviation, "you did not divide by the group's std (+ eps)"),
                    ((s[b] - s.mean()) / (s.std() + eps), "you normalised over the whole batch; GRPO compares an "
                                                          "episode with the other episodes of its group (its task)"),
                    (s[b] - mean, "you subtracted the mean but did not divide by the std")):
                if math.isclose(float(got[b, t]), float(guess), abs_tol=1e-4):
                    raise AssertionError(f"{where}: {mistake}")
            raise AssertionError(where)
    except NotAnswered:
        return _not_answered(what, f"fill in the body of {getattr(fn, '__name__', 'the function')} above")
    return _tick(f"{what}: equal to grpo on the real batch ({B} episodes), other scores, a group of one and an "
                 "all-equal group")


# ------------------------------------------------------------------------------------------------------- PPO-clip

def check_ppo_loss(fn, logp, old_logp, advantages, loss_mask, clip_ratio: float = 0.2) -> None:
    """`fn(logp, old_logp, advantages, loss_mask, clip_ratio) -> loss` (a 0-d tensor, token mean) against
    `algos.losses.policy_loss`, value and gradient with respect to logp, on the two tokens worked by hand, on the
    real batch as given, and on the real batch with its ratios pushed past the clip (with its advantages, then with
    advantages of both signs: a batch whose groups all scored alike has none)."""
    from agentgym_nb.algos.losses import policy_loss
    what = "the PPO-clip loss"
    m = loss_mask.float()
    push = 0.5 * torch.sin(torch.arange(logp.numel(), dtype=torch.float32)).reshape(logp.shape)   # -0.5 .. 0.5
    cases = [("the two tokens worked by hand", torch.log(torch.tensor([[0.6, 0.3]])), torch.log(torch.tensor(
                 [[0.4, 0.6]])), torch.tensor([[1.0, -1.0]]), torch.ones(1, 2), 0.2),
             ("the real batch", logp.detach().float(), old_logp.detach().float(), advantages.float(), m, clip_ratio),
             ("the real batch, ratios moved by up to e^0.5", logp.detach().float() + push, old_logp.detach().float(),
              advantages.float(), m, clip_ratio),
             ("the real batch, ratios moved, advantages of both signs", logp.detach().float() + push,
              old_logp.detach().float(), torch.cos(3 * torch.arange(logp.numel(), dtype=torch.float32)).reshape(
                  logp.shape) * m, m, clip_ratio)]
    try:
        for label, lp, old, adv, mask, eps in cases:
            mine, ref = lp.clone().requires_grad_(True), lp.clone().requires_grad_(True)
            want, _ = policy_loss(ref, old, adv, mask, clip_ratio=eps)
            want.backward()
            got = _call(fn, mine, old.clone(), adv.clone(), mask.clone(), eps)
            if not isinstance(got, torch.Tensor) or got.numel() != 1:
                kind = "a number" if isinstance(got, (int, float)) else type(got).__name__
                raise AssertionError(f"{what} on {label}: return the loss as a one-element torch tensor computed from "
                                     f"logp (so it has a gradient), not {kind}")
            where = f"{what} on {label}: should be {want.item():.5f}, got {got.item():.5f}"
            if not math.isclose(got.item(), want.item(), abs_tol=1e-5, rel_tol=1e-4):
                ratio = torch.exp(lp - old)
                unclipped, clipped = -adv * ratio, -adv * ratio.clamp(1 - eps, 1 + eps)
                on, mistakes = mask.bool(), []
                for guess, mistake in (
                        (torch.minimum(unclipped, clipped)[on].mean(), "you took the min of -A rho and "
                         "-A clip(rho); PPO takes the max of the two losses (the min of the two objectives)"),
                        (unclipped[on].mean(), "there is no clip: -A rho alone"),
                        (torch.maximum(unclipped, clipped).mean(), "you averaged over every position; average over "
                         "the trainable tokens only (loss_mask = 1)"),
                        (torch.maximum(-adv * lp / old, -adv * (lp / old).clamp(1 - eps, 1 + eps))[on].mean(),
                         "rho = pi / pi_old = exp(logp - old_logp), not logp / old_logp")):
                    if math.isclose(got.item(), float(guess), abs_tol=1e-5, rel_tol=1e-4):
                        mistakes.append(mistake)
                raise AssertionError(f"{where}: {'; or '.join(mistakes)}" if mistakes else where)
            if not got.requires_grad:
                raise AssertionError(f"{what} on {label}: the value is right but it has no gradient: keep it a torch "
                                     "expression of logp (no .item(), numpy or detach)")
            got.backward()
            if mine.grad is None or not torch.allclose(mine.grad, ref.grad, atol=1e-6, rtol=1e-4):
                raise AssertionError(f"{what} on {label}: the value is right but its gradient with respect to logp is "
                                     "not: where the clip wins the loss is a constant, with gradient 0")
    except NotAnswered:
        return _not_answered(what, f"fill in the body of {getattr(fn, '__name__', 'the function')} above")
    return _tick(f"{what}: value and gradient equal policy_loss's on the hand example and the real batch")


# ------------------------------------------------------------------------------------------- the horizon schedule

def check_horizon(fn, rounds: list[int], every: int, steps: int, history: list[dict] | None = None) -> None:
    """`fn(step, rounds, every) -> H` against the stepwise schedule (`algos.schedule`) at every step of this run's
    schedule and of the paper's BabyAI script (6 -> 13 -> 20 every 100 steps), and against the horizon each step of
    a stepwise run really played (`history`: its metrics, `max_rounds` per step)."""
    from agentgym_nb.algos.schedule import make_schedule
    what = "the horizon schedule"
    plans = [(list(rounds), int(every), int(steps)), ([6, 13, 20], 100, 350), ([4], 5, 12)]
    try:
        for r, e, n in plans:
            schedule = make_schedule("stepwise", r, every=e)
            for step in range(1, n + 1):
                where = f"{what}, rounds {r} every {e}, step {step}"
                try:
                    got = _call(fn, step, list(r), e)
                except IndexError as error:
                    raise AssertionError(f"{where}: IndexError ({error}): after the last stage the horizon stays at "
                                         "rounds[-1]; clamp the stage number with min(..., len(rounds) - 1)") from None
                want = schedule.rounds_at(step)
                if got == want:
                    continue
                if got == r[min(step // e, len(r) - 1)]:
                    raise AssertionError(f"{where}: expected H = {want}, got {got}. Steps count from 1: steps "
                                         f"1..{e} are the first stage, step {e + 1} starts the second; use "
                                         "(step - 1) // every")
                raise AssertionError(f"{where}: expected H = {want}, got {got}")
        for record in history or []:
            got = _call(fn, record["step"], list(rounds), every)
            if got != record["max_rounds"]:
                raise AssertionError(f"{what}: the run's metrics say step {record['step']} played at H = "
                                     f"{record['max_rounds']}; your function gives {got}")
    except NotAnswered:
        return _not_answered(what, f"fill in the body of {getattr(fn, '__name__', 'the function')} above")
    played = f" and the {len(history)} steps this run played" if history else ""
    return _tick(f"{what}: equal to the stepwise schedule at every step of three plans{played}")


# ---------------------------------------------------------------------------------------------------------- helpers

def _call(fn, *args):
    if fn is None:
        raise NotAnswered
    try:
        out = fn(*args)
    except NotImplementedError:
        raise NotAnswered from None
    if out is None or out is Ellipsis:
        raise NotAnswered
    return out


def _t975(dof: int) -> float:
    """Student's t two-sided 95% quantile with `dof` degrees of freedom (`viz.plots.T975`; past 30: 1.96)."""
    from agentgym_nb.viz.plots import T975
    return T975[dof - 1] if 1 <= dof <= len(T975) else 1.96


def _as_float(x, what: str) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        raise AssertionError(f"{what}: return a number, got {type(x).__name__}") from None


def _as_tensor(x, what: str) -> torch.Tensor:
    try:
        return torch.as_tensor(x, dtype=torch.float32)
    except (TypeError, ValueError, RuntimeError):
        raise AssertionError(f"{what}: return a tensor (or nested lists of numbers), got {type(x).__name__}") from None


def _not_answered(what: str, todo: str) -> None:
    print(f"… {what}: not answered yet: {todo}, then run this cell again")


def _tick(what: str) -> None:
    source = f" (the reference solution, {SOLUTIONS_ENV}=1)" if _reference_in_use else ""
    print(f"✓ {what}{source}")


def _numeric(x) -> bool:
    if isinstance(x, (str, bytes, bool)) or x is None:
        return False
    try:
        np.asarray(x, dtype=float)
        return True
    except (TypeError, ValueError):
        return False
