"""The lessons' exercises: the learner writes a function, and a checker holds it against the package's own
computation on the lesson's real data (a real episode, a real batch, a real run's logged steps).

    exercises.solutions_under_ci("03_advantage_estimators", globals())
    exercises.check_grpo(my_grpo, scores, group, loss_mask)

A check ends one of three ways:
* **not answered yet** (a function that returns None or raises NotImplementedError): one
  line says what to write; no tick, and nothing is raised, so "Run All" and a papermill training job go on;
* **wrong**: AssertionError saying which case failed and what is wrong with it (the common mistake, when it is one
  the checker recognises), so "Run All" stops at the first wrong answer;
* **right**: a tick.

The reference solutions live outside the lessons, in notebooks/.solutions/<lesson>.py (a dot-folder: JupyterLab's
file browser does not show it). `solutions_under_ci` puts them in place of the learner's answers only when
AGENTGYM_NB_SOLUTIONS=1: `pytest --nbmake` sets it (notebooks/conftest.py), and so does `make book`. In a kernel of
your own it does nothing: a blank answer stays blank.
"""
from __future__ import annotations

import importlib.util
import math
import os
from pathlib import Path

import numpy as np
import torch

SOLUTIONS_ENV = "AGENTGYM_NB_SOLUTIONS"
SOLUTIONS_DIR = Path(__file__).resolve().parent.parent / "notebooks" / ".solutions"
_reference_in_use: list[str] = []   # the answers the reference solutions stand in for, in this kernel


class NotAnswered(Exception):
    """The learner's function is still the blank it was handed out as."""


def solutions_under_ci(lesson: str, namespace: dict) -> list[str]:
    """With AGENTGYM_NB_SOLUTIONS=1, set every answer of notebooks/.solutions/<lesson>.py (the names in its
    `__all__`) in `namespace` (the notebook's globals()) and return their names; otherwise do nothing."""
    if os.environ.get(SOLUTIONS_ENV) != "1":
        return []
    module = load_solutions(lesson)
    names = list(module.__all__)
    namespace.update({name: getattr(module, name) for name in names})
    _reference_in_use[:] = names
    print(f"{SOLUTIONS_ENV}=1: the reference answers of notebooks/.solutions/{lesson}.py stand in for "
          f"{', '.join(names)}")
    return names


def load_solutions(lesson: str):
    """The module notebooks/.solutions/<lesson>.py (its `__all__` lists the answers)."""
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


# ------------------------------------------------------------------------------------------------ token log-probs

def check_token_logprobs(fn, model, sequences: list[list[int]], temperatures=(1.0, 0.7)) -> None:
    """`fn(logits[T, V], input_ids[T], temperature) -> logp[T]`: the log-probability of each token given the tokens
    before it (logp[0] = 0: nothing predicts the first), against `algos.losses.token_logprobs` over `model`, on the
    lesson's real sequences at each temperature."""
    from agentgym_nb.algos.losses import token_logprobs
    what = "the log-probability of each token"
    try:
        for temperature in temperatures:
            for e, ids in enumerate(sequences):
                x = torch.as_tensor(ids)[None]
                with torch.no_grad():
                    logits = model(input_ids=x).logits[0].float()
                    want = token_logprobs(model, x, torch.ones_like(x), temperature=temperature)[0].float()
                got = _as_tensor(_call(fn, logits.clone(), x[0].clone(), temperature), what)
                where = f"{what}, sequence {e} ({len(ids)} tokens) at temperature {temperature}"
                if got.shape != want.shape:
                    raise AssertionError(f"{where}: expected shape [T] = {list(want.shape)}, one log-prob per position "
                                         f"(logp[0] = 0: nothing predicts the first token), got {list(got.shape)}")
                if torch.allclose(got, want, atol=1e-4, rtol=1e-4):
                    continue
                t = int((~torch.isclose(got, want, atol=1e-4, rtol=1e-4)).nonzero()[0])
                lp = torch.log_softmax(logits / temperature, -1)
                picked = lambda table: _shifted(table, x[0])   # noqa: E731
                for guess, mistake in (
                        (lp.gather(-1, x[0, :, None])[:, 0], "the logits at position t are the distribution of the "
                         "NEXT token: token t is scored by logits[t - 1] (shift by one)"),
                        (want.exp() * (torch.arange(len(want)) > 0), "those are probabilities; return their logs "
                         "(log_softmax, not softmax)"),
                        (picked(logits / temperature), "you picked the raw logit; normalise over the vocabulary "
                         "first: log_softmax(z)_v = z_v - logsumexp(z)"),
                        (picked(torch.log_softmax(logits, -1)), "divide the logits by the temperature before the "
                         "softmax: the engine sampled from softmax(logits / T), and the ratio must compare that"),
                        (picked(torch.log_softmax(logits, -1) / temperature), "divide the logits by T, not the "
                         "log-probs")):
                    if torch.allclose(got, guess, atol=1e-4, rtol=1e-4):
                        raise AssertionError(f"{where}: {mistake}")
                raise AssertionError(f"{where}: position {t} should be {want[t]:.4f}, got {got[t]:.4f}")
    except NotAnswered:
        return _not_answered(what, f"fill in the body of {getattr(fn, '__name__', 'the function')} above")
    return _tick(f"{what}: equal to token_logprobs on {len(sequences)} episodes at temperatures "
                 f"{', '.join(map(str, temperatures))}")


def _shifted(table, ids):
    """table[t - 1, ids[t]] at each position t >= 1 and 0 at t = 0: how the package aligns a log-prob with the token
    it scores."""
    return torch.cat([torch.zeros(1), table[:-1].gather(-1, ids[1:, None])[:, 0]])


# ---------------------------------------------------------------------------------------------------- GRPO, RLOO

def check_grpo(fn, scores, group, loss_mask, eps: float = 1e-6) -> None:
    """`fn(scores[B], group[B], loss_mask[B, T]) -> advantages[B, T]` against `algos.advantages.grpo` on the real
    batch, on the real batch's groups and masks with spread-out scores, and on a group of one and an all-equal group."""
    from agentgym_nb.algos.advantages import grpo

    def mistakes(s, members, b):
        deviation = s[b] - s[members].mean()
        return [(deviation / (s[members].std(unbiased=False) + eps),
                 "you divided by the population std (over n); GRPO uses the unbiased std (over n - 1), torch.std's "
                 "default"),
                (deviation, "you did not divide by the group's std (+ eps)"),
                ((s[b] - s.mean()) / (s.std() + eps), "you normalised over the whole batch; GRPO compares an episode "
                                                      "with the other episodes of its group (its task)")]

    _check_group_estimator(fn, "GRPO advantages", lambda s, g, m: grpo(s, g, m, eps), "grpo", scores, group,
                           loss_mask, mistakes, "A group of one has no spread (the std of one number is nan) and an "
                                                "all-equal group has std 0: both get 0")


def check_rloo(fn, scores, group, loss_mask) -> None:
    """`fn(scores[B], group[B], loss_mask[B, T]) -> advantages[B, T]` against `algos.advantages.rloo` on the real
    scores, on the same groups and masks with spread-out scores, and on a group of one and an all-equal group."""
    from agentgym_nb.algos.advantages import rloo

    def mistakes(s, members, b):
        n = len(members)
        return [(s[b] - s[members].mean(), f"you subtracted the group's mean, which holds the episode itself; RLOO's "
                 f"baseline is the mean of the OTHER {n - 1} members (the result is n / (n - 1) x (s - mean))"),
                ((s[b] - s[members].mean()) / (s[members].std() + 1e-6), "that is GRPO: RLOO does not divide by "
                                                                         "the group's std"),
                (s[b] - (s.sum() - s[b]) / (len(s) - 1), "you left the episode out of the whole batch; the baseline is "
                                                         "the other episodes of its group (its task)")]

    _check_group_estimator(fn, "RLOO advantages", rloo, "rloo", scores, group, loss_mask, mistakes,
                           "A group of one has no other member to average (0 / 0): it gets 0")


def _check_group_estimator(fn, what, reference, name, scores, group, loss_mask, mistakes, nan_why) -> None:
    """`fn(scores, group, loss_mask)` against `reference` with the same arguments, on three cases: the real batch,
    its groups and masks with spread-out scores, and a group of one beside an all-equal group. Where they differ,
    `mistakes(scores, members, b)` lists (value, why) pairs for episode b: the first value it matches explains it."""
    B = len(scores)
    spread = torch.tensor([(b * 7 % 11) / 10 for b in range(B)], dtype=torch.float32)   # 0, .7, .3, 1.0, ...
    cases = [("the real batch", scores.float(), group, loss_mask),
             ("the real batch's groups and masks, other scores", spread, group, loss_mask),
             ("a group of one and an all-equal group", torch.tensor([1.0, 0.0, 0.5, 0.5, 0.5, 1.0]),
              torch.tensor([0, 0, 1, 1, 1, 2]), torch.tensor([[1, 1, 0]] * 6))]
    try:
        for label, s, g, m in cases:
            want = reference(s, g, m)
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
            if not torch.isfinite(got[b, t]):
                raise AssertionError(f"{what} on {label}: episode {b} gets {got[b, t]}. {nan_why}")
            group_scores = ", ".join(f"{x:.2f}" for x in s[members].tolist())
            where = (f"{what} on {label}: episode {b} (group {int(g[b])}, score {s[b]:.2f}; the group's scores: "
                     f"{group_scores}) should get {want[b, t]:.4f}, got {got[b, t]:.4f}")
            if len(members) == 1:
                raise AssertionError(f"{where}: an episode alone in its group has no baseline: it gets 0")
            for guess, mistake in mistakes(s, members, b):
                if math.isclose(float(got[b, t]), float(guess), abs_tol=1e-4):
                    raise AssertionError(f"{where}: {mistake}")
            raise AssertionError(where)
    except NotAnswered:
        return _not_answered(what, f"fill in the body of {getattr(fn, '__name__', 'the function')} above")
    return _tick(f"{what}: equal to {name} on the real batch ({B} episodes), other scores, a group of one and an "
                 "all-equal group")


# ------------------------------------------------------------------------------------------------------------ GAE

def check_gae(fn, token_rewards, values, loss_mask, gamma: float = 1.0, lam: float = 1.0) -> None:
    """`fn(token_rewards[B, T], values[B, T], loss_mask[B, T], gamma, lam) -> advantages[B, T]` (before whitening)
    against `algos.advantages.gae(..., whiten=False)`: on the real batch with its critic's values, with gamma 0.9 and
    lambda 0.8, and with other scores and values that vary from token to token (where the common mistakes show)."""
    from agentgym_nb.algos.advantages import gae
    what = "GAE over the loss mask"
    r, v, m = token_rewards.float(), values.float(), loss_mask.bool()
    last = m.float().cumsum(-1).eq(m.sum(-1, keepdim=True)) & m   # each row's last trainable token
    spread = torch.tensor([(b * 7 % 11) / 10 for b in range(len(r))])[:, None] * last   # other scores, placed alike
    wobble = 0.3 + 0.2 * torch.sin(torch.arange(r.numel(), dtype=torch.float32)).reshape(r.shape)   # V in 0.1 .. 0.5
    cases = [("the real batch, its critic's values", r, v, gamma, lam),
             ("the real batch, gamma 0.9, lambda 0.8", r, v, 0.9, 0.8),
             ("the real masks, other scores, values that vary token by token, gamma 0.9, lambda 0.8", spread, wobble,
              0.9, 0.8)]
    try:
        for label, rewards, vals, g, lm in cases:
            want = gae(rewards, vals, m, gamma=g, lam=lm, whiten=False)[0]
            got = _as_tensor(_call(fn, rewards.clone(), vals.clone(), m.long(), g, lm), what)
            where = f"{what} on {label}"
            if got.shape != want.shape:
                raise AssertionError(f"{where}: expected shape [B, T] = {list(want.shape)}, got {list(got.shape)}")
            if (got[~m] != 0).any():
                b, t = (~m & (got != 0)).nonzero()[0].tolist()
                raise AssertionError(f"{where}: episode {b}, token {t} has loss_mask 0 but advantage {got[b, t]:.4g}: "
                                     "environment, template and padding tokens get 0")
            if torch.allclose(got, want, atol=1e-4, rtol=1e-4):
                continue
            for guess, mistake in (
                    (_gae_variant(rewards, vals, m, g, lm, "every"), "you stepped over every position: the "
                     "observation's tokens each discount the credit again and add a TD error of their own. 'next' is "
                     "the next TRAINABLE token: environment tokens are transparent"),
                    (_gae_variant(rewards, vals, m, g, lm, "reset"), "you reset V_next and A_next to 0 at untrainable "
                     "tokens, so no reply gets credit from the turns after the environment's answer; skip them "
                     "instead: keep V_next and A_next from the next trainable token"),
                    (gae(rewards, vals, m, gamma=g, lam=lm)[0], "those are whitened; return them before whitening "
                     "(the trainer whitens over the whole batch)"),
                    (gae(rewards, vals, m, gamma=g, lam=lm, whiten=False)[1], "that is the return A + V, the critic's "
                     "target; return the advantage A"),
                    (gae(rewards, vals, m, gamma=lm, lam=g, whiten=False)[0], "gamma and lambda are swapped: delta_t = "
                     "r_t + gamma V_next - V_t, then A_t = delta_t + gamma lambda A_next"),
                    (gae(rewards, vals, m, gamma=g, lam=1.0, whiten=False)[0], "lambda is missing: A_t = delta_t + "
                     "gamma lambda A_next")):
                if torch.allclose(got, guess, atol=1e-4, rtol=1e-4):
                    raise AssertionError(f"{where}: {mistake}")
            b, t = (~torch.isclose(got, want, atol=1e-4, rtol=1e-4)).nonzero()[0].tolist()
            raise AssertionError(f"{where}: episode {b}, token {t} should get {want[b, t]:.4f}, got {got[b, t]:.4f}")
    except NotAnswered:
        return _not_answered(what, f"fill in the body of {getattr(fn, '__name__', 'the function')} above")
    return _tick(f"{what}: equal to gae (before whitening) on the real batch ({len(r)} episodes) at three settings")


def _gae_variant(r, v, m, gamma, lam, kind):
    """GAE written with a common mistake: "every" position is a step, or V_next and A_next "reset" to 0 at
    untrainable tokens. Trainable tokens only (0 elsewhere), like the real one."""
    out = torch.zeros_like(r)
    v_next, a_next = torch.zeros(len(r)), torch.zeros(len(r))
    for t in reversed(range(r.shape[1])):
        a = r[:, t] + gamma * v_next - v[:, t] + gamma * lam * a_next
        out[:, t] = torch.where(m[:, t], a, 0.0)
        if kind == "every":
            v_next, a_next = v[:, t], a
        else:
            v_next, a_next = torch.where(m[:, t], v[:, t], 0.0), torch.where(m[:, t], a, 0.0)
    return out


# ------------------------------------------------------------------------------------------- GiGPO's step groups

def check_gigpo_steps(fn, scores, group, anchors: list[list], gamma: float = 0.95, eps: float = 1e-6) -> None:
    """`fn(scores[B], group[B], anchors, gamma) -> A^S`, one list per episode with one number per turn: GiGPO's
    step-level advantage, against `algos.advantages.gigpo`'s step part (its advantage at step weight 1 minus at step
    weight 0), on the real batch's anchor states at `gamma` and at 0.8, with other scores, and on a small batch in
    which two tasks pass through states of the same name."""
    what = "GiGPO's step-level advantages"
    B = len(scores)
    spread = torch.tensor([(b * 7 % 11) / 10 for b in range(B)], dtype=torch.float32)
    cases = [("the real batch", scores.float(), group, anchors, gamma),
             ("the real batch, gamma 0.8", scores.float(), group, anchors, 0.8),
             ("the real states, other scores", spread, group, anchors, gamma),
             ("two tasks whose states share names", torch.tensor([1.0, 0.0, 0.5, 0.9]), torch.tensor([0, 0, 1, 1]),
              [["start", "hall"], ["start", "wall", "hall"], ["start", "hall"], ["start", "key", "hall"]], 0.9)]
    try:
        for label, s, g, states, gm in cases:
            want = _step_advantages(s, g, states, gm, eps)
            got = _call(fn, s.clone(), g.clone(), [list(a) for a in states], gm)
            where = f"{what} on {label} (gamma {gm})"
            try:
                got = [[float(x) for x in row] for row in got]
            except (TypeError, ValueError):
                raise AssertionError(f"{where}: return one list of numbers per episode, got {type(got).__name__}") \
                    from None
            if [len(row) for row in got] != [len(row) for row in want]:
                raise AssertionError(f"{where}: return one number per turn of each episode (turns per episode: "
                                     f"{[len(a) for a in states][:8]} ...), got {[len(row) for row in got][:8]} ...")
            if all(math.isclose(x, y, abs_tol=1e-4) for gr, wr in zip(got, want) for x, y in zip(gr, wr)):
                continue
            b, k = next((b, k) for b, (gr, wr) in enumerate(zip(got, want)) for k, (x, y) in enumerate(zip(gr, wr))
                        if not math.isclose(x, y, abs_tol=1e-4))
            if not math.isfinite(got[b][k]):
                raise AssertionError(f"{where}: episode {b}, turn {k + 1} gets {got[b][k]}: a step group of one turn "
                                     "(or of equal returns) has nothing to compare with: it gets 0")
            for variant, mistake in (
                    (dict(discount="none"), "every turn got the whole score; turn k of an episode of K turns earns "
                     "gamma^(K - k) x the score (the score arrives at the last turn)"),
                    (dict(discount="start"), "you discounted from the first turn (gamma^(k - 1)); the score arrives at "
                     "the LAST turn K, so turn k earns gamma^(K - k) x the score"),
                    (dict(by_task=False), "you grouped turns by state alone; a step group is the turns of ONE group "
                     "(one task) that acted in the same state: key by (group, state)"),
                    (dict(ddof=0), "you divided by the population std (over n); use the unbiased one (over n - 1)"),
                    (dict(scale=False), "you centred the returns but did not divide by the step group's std (+ eps)")):
                guess = _step_advantages(s, g, states, gm, eps, **variant)
                if all(math.isclose(x, y, abs_tol=1e-4) for gr, wr in zip(got, guess) for x, y in zip(gr, wr)):
                    raise AssertionError(f"{where}: {mistake}")
            raise AssertionError(f"{where}: episode {b}, turn {k + 1} (state {str(states[b][k])[:12]}...) should get "
                                 f"{want[b][k]:.4f}, got {got[b][k]:.4f}")
    except NotAnswered:
        return _not_answered(what, f"fill in the body of {getattr(fn, '__name__', 'the function')} above")
    turns = sum(len(a) for a in anchors)
    return _tick(f"{what}: equal to gigpo's step part on the real batch ({turns} turns) at two gammas, other scores "
                 "and two tasks whose states share names")


def _step_advantages(scores, group, anchors, gamma, eps, *, discount="end", by_task=True, ddof=1, scale=True):
    """A^S per episode and turn. The reference (the defaults) is gigpo's: its advantage at step weight 1 minus at
    step weight 0, read on one token per turn; the other settings write a common mistake by hand."""
    if (discount, by_task, ddof, scale) == ("end", True, 1, True):
        from agentgym_nb.algos.advantages import gigpo
        K = max((len(a) for a in anchors), default=0)
        turn_ids = torch.tensor([[k + 1 if k < len(a) else 0 for k in range(K)] for a in anchors])
        turn_ids = turn_ids.reshape(len(anchors), K)
        mask = turn_ids > 0
        step = (gigpo(scores, group, mask, turn_ids, anchors, gamma=gamma, step_weight=1.0, eps=eps)
                - gigpo(scores, group, mask, turn_ids, anchors, gamma=gamma, step_weight=0.0, eps=eps))
        return [step[b, :len(a)].tolist() for b, a in enumerate(anchors)]
    returns, members = {}, {}
    for b, states in enumerate(anchors):
        K = len(states)
        for k in range(1, K + 1):
            power = {"end": K - k, "start": k - 1, "none": 0}[discount]
            returns[b, k] = gamma ** power * float(scores[b])
            members.setdefault((int(group[b]), states[k - 1]) if by_task else states[k - 1], []).append((b, k))
    out = {}
    for turns in members.values():
        values = np.array([returns[x] for x in turns])
        centred = values - values.mean() if len(turns) > 1 and np.ptp(values) > 0 else np.zeros(len(turns))
        if scale and len(turns) > 1 and np.ptp(values) > 0:
            centred = centred / (values.std(ddof=ddof) + eps)
        out.update(zip(turns, centred.tolist()))
    return [[out[b, k] for k in range(1, len(a) + 1)] for b, a in enumerate(anchors)]


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


# ---------------------------------------------------------------------------------------------- k3 and its gradient

def _kl_cases(logp, ref_logp):
    """The real batch (the policy after its update against the reference), and the same tokens with the policy
    moved by up to 3 nats each way, where k3's clamp at 10 binds (k3 > 10 for d below about -2.6)."""
    push = 3.0 * torch.sin(torch.arange(logp.numel(), dtype=torch.float32)).reshape(logp.shape)
    return [("the real batch: the updated policy against its reference", logp.detach().float(),
             ref_logp.detach().float()),
            ("the real tokens, the policy moved by up to 3 nats", logp.detach().float() + push,
             ref_logp.detach().float())]


def check_k3(fn, logp, ref_logp, loss_mask) -> None:
    """`fn(logp, ref_logp) -> k3[B, T]`, the per-token k3 estimate of KL(pi || pi_ref), against
    `algos.losses.kl_penalty(..., "k3")`: its value and its gradient with respect to logp, on the trained tokens of
    the real batch and of the same tokens with the policy moved far enough for the clamp at 10 to bind."""
    from agentgym_nb.algos.losses import kl_penalty
    what, on = "k3", loss_mask.bool()
    try:
        for label, lp, ref in _kl_cases(logp, ref_logp):
            mine, theirs = lp.clone().requires_grad_(True), lp.clone().requires_grad_(True)
            want = kl_penalty(theirs, ref, "k3")
            (want * on).sum().backward()
            got = _call(fn, mine, ref.clone())
            where = f"{what} on {label}"
            if not isinstance(got, torch.Tensor) or got.shape != want.shape:
                raise AssertionError(f"{where}: return one value per token, a torch tensor of shape {list(want.shape)} "
                                     f"computed from logp (so it has a gradient); got {_describe(got)}")
            if not torch.allclose(got[on], want[on], atol=1e-4, rtol=1e-4):
                d = lp - ref
                for guess, mistake in (
                        ((torch.exp(d) - d - 1).clamp(max=10), "you used d = ref_logp - logp; with d = logp - "
                         "ref_logp, k3 = exp(-d) + d - 1 estimates KL(pi || pi_ref) from tokens pi sampled"),
                        (torch.exp(-d) + d - 1, "k3 is clamped at 10 (as verl does): a token whose d is below about "
                         "-2.6 would otherwise weigh without bound"),
                        (d, "that is k1 (d itself)"), (0.5 * d ** 2, "that is k2 (d^2 / 2)")):
                    if torch.allclose(got[on], guess[on].float(), atol=1e-4, rtol=1e-4):
                        raise AssertionError(f"{where}: {mistake}")
                b, t = (on & ~torch.isclose(got, want, atol=1e-4, rtol=1e-4)).nonzero()[0].tolist()
                raise AssertionError(f"{where}: token ({b}, {t}), d = {float(lp[b, t] - ref[b, t]):+.3f}, should be "
                                     f"{want[b, t]:.4f}, got {float(got[b, t]):.4f}")
            if not got.requires_grad:
                raise AssertionError(f"{where}: the values are right but have no gradient: keep k3 a torch expression "
                                     "of logp (no .item(), numpy or detach)")
            (got * on).sum().backward()
            if mine.grad is None or not torch.allclose(mine.grad[on], theirs.grad[on], atol=1e-5, rtol=1e-4):
                raise AssertionError(f"{where}: the values are right but their gradient with respect to logp is not: "
                                     "where the clamp binds k3 is a constant, with gradient 0 (torch's clamp does "
                                     "that)")
    except NotAnswered:
        return _not_answered(what, f"fill in the body of {getattr(fn, '__name__', 'the function')} above")
    return _tick(f"{what}: value and gradient equal kl_penalty's on {int(on.sum())} trained tokens, as they are and "
                 "moved past the clamp")


def check_k3_grad(fn, logp, ref_logp, loss_mask) -> None:
    """`fn(logp, ref_logp) -> dk3/dlogp [B, T]` written in closed form (no autograd), against autograd through
    `algos.losses.kl_penalty(..., "k3")`, on the same cases as `check_k3`."""
    from agentgym_nb.algos.losses import kl_penalty
    what, on = "the gradient of k3", loss_mask.bool()
    try:
        for label, lp, ref in _kl_cases(logp, ref_logp):
            x = lp.clone().requires_grad_(True)
            kl_penalty(x, ref, "k3").sum().backward()
            want = x.grad
            got = _as_tensor(_call(fn, lp.clone(), ref.clone()), what)
            where = f"{what} on {label}"
            if got.shape != want.shape:
                raise AssertionError(f"{where}: expected one value per token, shape {list(want.shape)}, got "
                                     f"{list(got.shape)}")
            if torch.allclose(got[on], want[on], atol=1e-4, rtol=1e-4):
                continue
            d = lp - ref
            clamped = kl_penalty(lp, ref, "k3") >= 10
            for guess, mistake in (
                    (1 - torch.exp(-d), "right where k3 is below 10; where the clamp binds k3 is the constant 10, so "
                     "its gradient is 0 there"),
                    (torch.where(clamped, 0.0, torch.exp(-d) - 1), "the sign: d/dd (exp(-d) + d - 1) = 1 - exp(-d)"),
                    (torch.where(clamped, 0.0, -torch.exp(-d)), "the + d term has derivative 1: the gradient is "
                     "1 - exp(-d)"),
                    (d, "that is k2's gradient (d); k3's is 1 - exp(-d)"),
                    (torch.ones_like(d), "that is k1's gradient (1); k3's is 1 - exp(-d)")):
                if torch.allclose(got[on], guess[on].float(), atol=1e-4, rtol=1e-4):
                    raise AssertionError(f"{where}: {mistake}")
            b, t = (on & ~torch.isclose(got, want, atol=1e-4, rtol=1e-4)).nonzero()[0].tolist()
            raise AssertionError(f"{where}: token ({b}, {t}), d = {float(d[b, t]):+.3f}, should be "
                                 f"{want[b, t]:.4f}, got {got[b, t]:.4f}")
    except NotAnswered:
        return _not_answered(what, f"fill in the body of {getattr(fn, '__name__', 'the function')} above")
    return _tick(f"{what}: equal to autograd through kl_penalty on {int(on.sum())} trained tokens, as they are and "
                 "moved past the clamp")


# ----------------------------------------------------------------------------------------------------- TIS weights

def check_tis_weights(fn, trainer_logp, engine_logp, loss_mask, cap: float = 2.0) -> None:
    """`fn(trainer_logp, engine_logp, cap) -> weights` against `algos.losses.truncated_is_weights` on the sampled
    tokens of a real batch (a bf16 engine's log-probs beside the fp32 trainer's) at `cap` and at 1.01, and with the
    trainer's log-probs moved by up to 1 nat each way, where a cap of 2 binds."""
    from agentgym_nb.algos.losses import truncated_is_weights
    what, on = "the TIS weights", loss_mask.bool()
    push = torch.sin(torch.arange(trainer_logp.numel(), dtype=torch.float32)).reshape(trainer_logp.shape)
    trainer, engine = trainer_logp.detach().float(), engine_logp.detach().float()
    cases = [(f"the real batch, cap {cap:g}", trainer, engine, cap),
             ("the real batch, cap 1.01", trainer, engine, 1.01),
             ("the trainer's log-probs moved by up to 1 nat, cap 2", trainer + push, engine, 2.0)]
    try:
        for label, tr, en, c in cases:
            want = truncated_is_weights(tr, en, c)
            got = _as_tensor(_call(fn, tr.clone(), en.clone(), c), what)
            where = f"{what} on {label}"
            if got.shape != want.shape:
                raise AssertionError(f"{where}: expected one weight per token, shape {list(want.shape)}, got "
                                     f"{list(got.shape)}")
            if torch.allclose(got[on], want[on], atol=1e-5, rtol=1e-5):
                continue
            ratio = torch.exp(tr - en)
            for guess, mistake in (
                    ((1 / ratio).clamp(max=c), "the ratio is upside down: w = pi_trainer / pi_engine (from the "
                     "distribution that sampled to the one being trained), exp(trainer_logp - engine_logp)"),
                    (ratio, "the weights are not truncated: w = min(ratio, cap)"),
                    (ratio.clamp(1 / c, c), "only large weights are cut: a token the engine found more likely than "
                     "the trainer keeps its w < 1 (min(ratio, cap), no lower bound)"),
                    ((tr - en).clamp(max=math.log(c)), "those are log-weights; return exp of them")):
                if torch.allclose(got[on], guess[on], atol=1e-5, rtol=1e-5):
                    raise AssertionError(f"{where}: {mistake}")
            b, t = (on & ~torch.isclose(got, want, atol=1e-5, rtol=1e-5)).nonzero()[0].tolist()
            raise AssertionError(f"{where}: token ({b}, {t}) should weigh {want[b, t]:.6f}, got {got[b, t]:.6f}")
    except NotAnswered:
        return _not_answered(what, f"fill in the body of {getattr(fn, '__name__', 'the function')} above")
    return _tick(f"{what}: equal to truncated_is_weights on {int(on.sum())} sampled tokens at three settings")


# ----------------------------------------------------------------------------------------------- loss aggregation

def check_aggregation(fn, loss, loss_mask) -> None:
    """`fn(loss[B, T], loss_mask[B, T], mode) -> one number` for mode "token-mean" and "seq-mean-token-mean", against
    `algos.losses.aggregate` on a real per-token loss of the batch, and on the same batch with a row that has no
    trained token (as a mini-batch of a process may have)."""
    from agentgym_nb.algos.losses import aggregate
    what = "loss aggregation"
    x, m = loss.detach().float(), loss_mask.float()
    empty = (x.new_full((1, x.shape[1]), 5.0), m.new_zeros((1, x.shape[1])))   # a row nothing was sampled in
    cases = [("the real batch", x, m), ("the real batch and a row without a trained token",
                                        torch.cat([x, empty[0]]), torch.cat([m, empty[1]]))]
    try:
        for mode in ("token-mean", "seq-mean-token-mean"):
            for label, lx, lm in cases:
                want = float(aggregate(lx, lm, mode))
                got = _as_float(_call(fn, lx.clone(), lm.clone(), mode), f"{what} ({mode})")
                if math.isclose(got, want, abs_tol=1e-6, rel_tol=1e-5):
                    continue
                where = f"{what}, {mode}, on {label}: should be {want:.6f}, got {got:.6f}"
                if math.isnan(got):
                    raise AssertionError(f"{where}: a row without a trained token has no token mean (0 / 0); it "
                                         "contributes 0 and is not counted")
                rows = lm.sum(-1) > 0
                per_row = (lx * lm).sum(-1) / lm.sum(-1).clamp(min=1)
                for guess, mistake in (
                        (float(aggregate(lx, lm, "seq-mean-token-mean")), "that is seq-mean-token-mean (every episode "
                         "weighs the same); token-mean weighs every trained token the same: sum(m L) / sum(m)"),
                        (float(aggregate(lx, lm, "token-mean")), "that is token-mean (every trained token weighs the "
                         "same); seq-mean-token-mean averages each episode's trained tokens, then the episodes"),
                        (float(aggregate(lx, lm, "seq-mean-token-sum")), "that is seq-mean-token-sum: each episode's "
                         "tokens are summed, not averaged"),
                        (float(lx.mean()), "you averaged over every position; only trained tokens count (mask 1)"),
                        (float(lx.mean(-1).mean()), "you averaged each row over every position; only trained tokens "
                         "count (mask 1)"),
                        (float(per_row.sum() / len(lx)) if not rows.all() else math.nan, "a row without a trained "
                         "token is not counted: divide by the rows that have one")):
                    if math.isclose(got, guess, abs_tol=1e-6, rel_tol=1e-5):
                        raise AssertionError(f"{where}: {mistake}")
                raise AssertionError(where)
    except NotAnswered:
        return _not_answered(what, f"fill in the body of {getattr(fn, '__name__', 'the function')} above")
    return _tick(f"{what}: token-mean and seq-mean-token-mean equal aggregate's on the real batch ({len(x)} episodes), "
                 "with and without an empty row")


# ------------------------------------------------------------------------------- a training step's logged episodes

def step_episodes(run_dir: str) -> dict[int, list[dict]]:
    """The usable episodes of each training step of a run, as logged (rollouts/step_*.jsonl: one dict per episode
    with its group, reward, done, truncated, num_rounds, max_rounds, ...); usable: neither failed in the env nor
    without a sampled token, the episodes a step's metrics are means over."""
    import glob
    import json
    import re
    steps: dict[int, list[dict]] = {}
    for path in sorted(glob.glob(os.path.join(run_dir, "rollouts", "step_*.jsonl"))):
        step = int(re.match(r"step_(\d+)", os.path.basename(path)).group(1))
        with open(path) as f:
            records = [json.loads(line) for line in f]
        steps.setdefault(step, []).extend(r for r in records if not r["failed"] and r["num_policy_tokens"] > 0)
    return steps


def check_zero_adv_share(fn, runs: dict[str, str]) -> None:
    """`fn(episodes) -> share` of a step's groups whose episodes all scored the same (zero group-relative advantage),
    against the `zero_adv_groups` each step of each run logged (`runs`: label -> run folder), after a hand-made step
    with an all-success group, a group of one and groups of different sizes."""
    def mistakes(episodes, groups):
        return [(sum(all(e["reward"] == 0 for e in g) for g in groups) / len(groups), "you counted the groups that all "
                 "FAILED; a group that all succeeded with the same score has no spread either"),
                (sum(len(g) for g in groups if len({e["reward"] for e in g}) == 1) / len(episodes), "that is a share "
                 "of episodes; the metric is a share of groups")]

    hand = [{"group": g, "reward": r, "done": True, "truncated": False, "num_rounds": 2, "max_rounds": 6}
            for g, r in [(0, 0.9), (0, 0.9), (1, 0.0), (1, 0.5), (1, 0.0), (1, 0.0), (2, 0.0), (2, 0.0), (2, 0.0),
                         (3, 0.7)]]
    _check_step_metric(fn, runs, "zero_adv_groups", "the zero-advantage share", hand, mistakes)


def check_cut_share(fn, runs: dict[str, str]) -> None:
    """`fn(episodes) -> share` of a step's episodes cut by the horizon (neither done nor stopped by the token budget),
    against the `cut_by_horizon` each step of each run logged (`runs`: label -> run folder), after a hand-made step
    with an episode done on its last allowed turn, one stopped by the token budget and failures that ended."""
    def mistakes(episodes, groups):
        share = lambda test: sum(map(test, episodes)) / len(episodes)   # noqa: E731
        return [(share(lambda e: not e["done"]), "an episode stopped by the token budget (truncated) is not cut by "
                 "the horizon: count those neither done nor truncated"),
                (share(lambda e: e["reward"] == 0), "you counted failures; an episode that ended in failure is done, "
                 "not cut: cut means the horizon ran out first"),
                (share(lambda e: e["num_rounds"] >= e["max_rounds"]), "an episode that used every turn may still "
                 "have finished on its last one (done): count those neither done nor truncated")]

    hand = [{"group": 0, "reward": r, "done": d, "truncated": t, "num_rounds": k, "max_rounds": 3}
            for r, d, t, k in [(0.8, True, False, 2), (0.7, True, False, 3), (0.0, False, False, 3),
                               (0.0, False, True, 1), (0.0, True, False, 2), (0.0, True, False, 3)]]
    _check_step_metric(fn, runs, "cut_by_horizon", "the share cut by the horizon", hand, mistakes)


def _check_step_metric(fn, runs: dict[str, str], metric: str, what: str, hand: list[dict], mistakes) -> None:
    """`fn(episodes)` against `metric` on a hand-made step (computed by train.health.episode_metrics), then against
    the value each logged step of each run recorded; `mistakes(episodes, groups)` lists (value, why) pairs."""
    import json
    from types import SimpleNamespace
    from agentgym_nb.rollout.trajectory import TrajectoryGroup
    from agentgym_nb.train.health import episode_metrics

    def reference(episodes):   # the trainer's own computation, on the logged fields
        played = [SimpleNamespace(**{"item_id": e["group"], "success": e["reward"] > 0, "failed": None,
                                     "replies_cut_by_max_tokens": 0, "invalid_actions": 0, "num_policy_tokens": 1, **e})
                  for e in episodes]
        return episode_metrics(played, TrajectoryGroup.of(played))[metric]

    steps = [("a hand-made step", [dict(e) for e in hand], reference(hand))]
    for label, run_dir in runs.items():
        with open(os.path.join(run_dir, "metrics.jsonl")) as f:
            logged = {m["step"]: m[metric] for m in map(json.loads, f)}
        episodes = step_episodes(run_dir)
        steps += [(f"{label}, step {s}", episodes[s], value) for s, value in sorted(logged.items()) if episodes.get(s)]
    try:
        for label, episodes, want in steps:
            got = _as_float(_call(fn, [dict(e) for e in episodes]), what)
            if math.isclose(got, want, abs_tol=1e-6):
                continue
            where = f"{what} on {label} ({len(episodes)} episodes): should be {want:.4f}, got {got:.4f}"
            by_group: dict = {}
            for e in episodes:
                by_group.setdefault(e["group"], []).append(e)
            for guess, mistake in mistakes(episodes, list(by_group.values())):
                if math.isclose(got, guess, abs_tol=1e-6):
                    raise AssertionError(f"{where}: {mistake}")
            raise AssertionError(where)
    except NotAnswered:
        return _not_answered(what, f"fill in the body of {getattr(fn, '__name__', 'the function')} above")
    return _tick(f"{what}: equal to the trainer's {metric} on a hand-made step and {len(steps) - 1} logged steps")


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


def _describe(x) -> str:
    if isinstance(x, torch.Tensor):
        return f"a tensor of shape {list(x.shape)}"
    return "a number" if isinstance(x, (int, float)) else type(x).__name__
