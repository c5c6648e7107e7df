"""Advantage estimators for multi-turn sequences: GRPO, RLOO, REINFORCE++ and GAE, and their registry.

Shapes: ``B`` sequences of ``T`` tokens. ``loss_mask[b, t] = 1`` exactly on the tokens the policy sampled; template,
environment and padding tokens are 0. Environment tokens are *transparent*: "the next token" always means the next
token with ``loss_mask = 1``, so an observation between two assistant turns adds no reward, no TD error and no
discount. Every estimator returns 0 on untrainable tokens. The masks are read as booleans (``loss_mask != 0``).

``masked_mean`` and ``masked_whiten`` live here and are reused by ``losses.py``. With several processes, each holding
a share of the batch, the trainer whitens with ``masked_whiten(x, m, moments=<masked_moments summed over processes>)``
so that every share is whitened by the statistics of the whole batch.

``ESTIMATORS`` maps the config's names (verl's and AgentGym-RL's ``algorithm.adv_estimator``) to one calling
convention, ``estimator.compute(credit) -> (advantages, returns or None)``, with what each needs; the config's
validation, the trainer and the notebooks read it. Adding an estimator is its function, its line there and its test.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

import torch
from torch import Tensor


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """mean(x over mask != 0) = sum(x * m) / sum(m), along ``dim`` (all elements when None).

    A slice with no masked-in element gives 0, not NaN (AgentGym-RL's ``masked_mean`` divided 0 by 0). Values at
    masked-out positions are never read, so ``-inf`` or NaN there is harmless.
    """
    m = mask.bool()
    total = torch.where(m, x, torch.zeros_like(x)).sum(dim=dim)
    count = m.sum(dim=dim)
    return total / torch.where(count > 0, count, torch.ones_like(count))


def masked_moments(x: Tensor, mask: Tensor) -> Tensor:
    """[sum(x), sum(x^2), n] over the n elements with mask != 0, in float64.

    The mean and variance of the masked-in elements follow from these three numbers, and the numbers of several
    batches add up: summed over processes, they are those of the union of the batches.
    """
    v = x[mask.bool()].double()
    return torch.stack([v.sum(), (v * v).sum(), v.new_tensor(float(v.numel()))])


def masked_whiten(x: Tensor, mask: Tensor, eps: float = 1e-8, moments: Tensor | None = None) -> Tensor:
    """(x - mu) / sqrt(var + eps) on mask != 0, 0 elsewhere.

    From (s1, s2, n) = ``moments``, by default ``masked_moments(x, mask)``: mu = s1 / n and
    var = (s2 - n mu^2) / (n - 1), the unbiased variance over the n masked-in elements. Pass the moments summed over
    processes to whiten this process's share of a batch by the statistics of the whole batch.
    Raises ValueError when n < 2 (the variance is undefined).
    """
    m = mask.bool()
    s1, s2, n = (masked_moments(x, m) if moments is None else moments.double()).tolist()
    if n < 2:
        raise ValueError(f"masked_whiten needs at least 2 trainable tokens in the batch, got {int(n)}; "
                         "pass whiten=False for such a batch")
    mu = s1 / n
    var = max(s2 - n * mu * mu, 0.0) / (n - 1)   # (rounding can take a zero variance just below 0)
    return torch.where(m, (x.double() - mu) / math.sqrt(var + eps), 0.0).to(x.dtype)


@torch.no_grad()
def grpo(scores: Tensor, group: Tensor, loss_mask: Tensor, eps: float = 1e-6,
         in_baseline: Tensor | None = None) -> Tensor:
    """GRPO: A[b, t] = (s_b - mean_g) / (std_g + eps) * m[b, t], g = group[b].

    std_g is the unbiased standard deviation (N - 1, the ``torch.std`` default) of the scores in group g. A group
    with one member gets advantage 0; a group whose scores are all equal gets 0 too.
    ``in_baseline`` [B] (bool): only these members make mean_g (std_g stays over the whole group, so the scale is
    GRPO's); a group with none of them gets 0. Used to leave episodes cut by the horizon, whose score says nothing
    about how they would have ended, out of the baseline.
    """
    scores, m = _check_scores(scores, group, loss_mask)
    mean, count, inverse, alike = _group_mean(scores, group)
    dev = scores - mean[inverse]
    sq = torch.zeros_like(mean).index_add_(0, inverse, dev ** 2)
    std = torch.sqrt(sq / (count - 1).clamp(min=1))
    baseline, defined = _baseline(scores, inverse, mean, in_baseline)
    adv = torch.where((count[inverse] > 1) & ~alike & defined, (scores - baseline) / (std[inverse] + eps),
                      torch.zeros_like(dev))
    return _broadcast(adv, m)


@torch.no_grad()
def rloo(scores: Tensor, group: Tensor, loss_mask: Tensor, in_baseline: Tensor | None = None) -> Tensor:
    """RLOO: A[b, t] = (s_b - mean of the other members of b's group) * m[b, t].

    With n members and group sum S: s_b - (S - s_b) / (n - 1). A group with one member, or whose scores are all
    equal, gets 0. ``in_baseline`` [B] (bool): only these count as "the others"; a member with none gets 0.
    """
    scores, m = _check_scores(scores, group, loss_mask)
    mean, count, inverse, alike = _group_mean(scores, group)
    base = torch.ones_like(scores, dtype=torch.bool) if in_baseline is None else in_baseline.bool()
    n_base = torch.zeros_like(mean).index_add_(0, inverse, base.to(scores.dtype))[inverse]
    s_base = torch.zeros_like(mean).index_add_(0, inverse, torch.where(base, scores, 0.0))[inverse]
    n_others = n_base - base.to(scores.dtype)
    others = (s_base - torch.where(base, scores, 0.0)) / n_others.clamp(min=1)
    adv = torch.where((count[inverse] > 1) & ~alike & (n_others > 0), scores - others, torch.zeros_like(scores))
    return _broadcast(adv, m)


@torch.no_grad()
def reinforce_plus_plus(token_rewards: Tensor, loss_mask: Tensor, gamma: float = 1.0, whiten: bool = True,
                 eps: float = 1e-8) -> tuple[Tensor, Tensor]:
    """REINFORCE++: G_t = r_t + gamma * G_next over trainable tokens, G after the last trainable token = 0.

    gamma applies once per trainable token (environment tokens are skipped). returns = G, adv = G, then
    ``masked_whiten`` over all trainable tokens of the batch when ``whiten``. Both are 0 on untrainable tokens.
    """
    r, m = _check_rewards(token_rewards, loss_mask)
    returns = torch.zeros_like(r)
    g_next = r.new_zeros(r.shape[0])
    for t in reversed(range(r.shape[1])):
        g = r[:, t] + gamma * g_next
        g_next = torch.where(m[:, t], g, g_next)
        returns[:, t] = torch.where(m[:, t], g, 0.0)
    adv = masked_whiten(returns, m, eps) if whiten else returns.clone()
    return adv, returns


@torch.no_grad()
def gae(token_rewards: Tensor, values: Tensor, loss_mask: Tensor, gamma: float = 1.0, lam: float = 1.0,
        whiten: bool = True, eps: float = 1e-8) -> tuple[Tensor, Tensor]:
    """GAE over trainable tokens: delta_t = r_t + gamma * V_next - V_t,  A_t = delta_t + gamma * lam * A_next.

    "next" is the next trainable token; V_next and A_next after the last trainable token are 0, so with
    gamma = lam = 1, A_t = (sum of later rewards) - V_t, the Monte-Carlo advantage. Values at untrainable positions
    are never read. returns = A + V (before whitening); adv = A, whitened over all trainable tokens of the batch when
    ``whiten``. Both are 0 on untrainable tokens.
    """
    r, m = _check_rewards(token_rewards, loss_mask)
    if values.shape != r.shape:
        raise ValueError(f"values must have the shape of token_rewards {list(r.shape)}, got {list(values.shape)}")
    v = values.to(r.dtype)
    advantages = torch.zeros_like(r)
    v_next, a_next = r.new_zeros(r.shape[0]), r.new_zeros(r.shape[0])
    for t in reversed(range(r.shape[1])):
        a = r[:, t] + gamma * v_next - v[:, t] + gamma * lam * a_next
        a_next = torch.where(m[:, t], a, a_next)
        v_next = torch.where(m[:, t], v[:, t], v_next)
        advantages[:, t] = torch.where(m[:, t], a, 0.0)
    returns = torch.where(m, advantages + v, 0.0)
    adv = masked_whiten(advantages, m, eps) if whiten else advantages
    return adv, returns


GIGPO_MODES = ("mean_std_norm", "mean_norm")


@torch.no_grad()
def gigpo(scores: Tensor, group: Tensor, loss_mask: Tensor, turn_ids: Tensor, anchors: list[list],
          turn_rewards: list[list[float]] | None = None, gamma: float = 0.95, step_weight: float = 1.0,
          mode: str = "mean_std_norm", eps: float = 1e-6, in_baseline: Tensor | None = None) -> Tensor:
    """GiGPO (Feng et al. 2025, arXiv 2505.10978): A[b, t] = A^E_b + omega * A^S_{b,k} on the tokens of turn k.

    Episode level, as GRPO: A^E_b = (s_b - mean_g) / (std_g + eps) over b's group g ("mean_norm": s_b - mean_g).
    Step level: turn k of episode b acted in state anchors[b][k - 1] (turns are 1-based, as in turn_ids) and
    earned the discounted return R_{b,k} = sum_{j >= k} gamma^(j - k) r_{b,j}, r the turn rewards (default: the
    score on the episode's last turn, so R_{b,k} = gamma^(K_b - k) s_b). The turns of one group that acted in the
    same state form a step group G: A^S_{b,k} = (R_{b,k} - mean_G) / (std_G + eps) ("mean_norm": R_{b,k} - mean_G).
    Stds are unbiased; a group or step group of one member, or whose values are all equal, gives 0.
    ``in_baseline`` restricts the episode-level mean as in `grpo`.
    """
    if mode not in GIGPO_MODES:
        raise ValueError(f"gigpo mode {mode!r}: use one of {', '.join(GIGPO_MODES)}")
    scores, m = _check_scores(scores, group, loss_mask)
    if turn_ids.shape != m.shape or len(anchors) != m.shape[0]:
        raise ValueError(f"turn_ids must be [B, T] = {list(m.shape)} and anchors one list per episode ({m.shape[0]}), "
                         f"got {list(turn_ids.shape)} and {len(anchors)}")
    episode = grpo(scores, group, torch.ones_like(m[:, :1]), eps=eps, in_baseline=in_baseline)[:, 0]
    if mode == "mean_norm":
        mean, count, inverse, alike = _group_mean(scores, group)
        baseline, defined = _baseline(scores, inverse, mean, in_baseline)
        episode = torch.where(alike | ~defined | (count[inverse] < 2), 0.0, scores - baseline)
    returns: dict[tuple[int, int], float] = {}
    steps: dict[tuple, list[tuple[int, int]]] = {}
    for b, states in enumerate(anchors):
        rewards = turn_rewards[b] if turn_rewards is not None else [0.0] * (len(states) - 1) + [float(scores[b])]
        if len(rewards) != len(states):
            raise ValueError(f"episode {b}: {len(states)} anchor states but {len(rewards)} turn rewards")
        later = 0.0
        for k in range(len(states), 0, -1):
            later = rewards[k - 1] + gamma * later
            returns[b, k] = later
            steps.setdefault((int(group[b]), states[k - 1]), []).append((b, k))
    step_adv: dict[tuple[int, int], float] = {}
    for members in steps.values():
        values = torch.tensor([returns[x] for x in members], dtype=torch.float64)
        if len(members) < 2 or bool((values == values[0]).all()):
            centred = torch.zeros_like(values)
        else:
            centred = values - values.mean()
            if mode == "mean_std_norm":
                centred = centred / (values.std() + eps)
        step_adv.update(zip(members, centred.tolist()))
    per_turn = torch.zeros(m.shape[0], max((len(a) for a in anchors), default=0) + 1, dtype=scores.dtype)
    for (b, k), value in step_adv.items():
        per_turn[b, k] = value
    turn = turn_ids.clamp(0, per_turn.shape[1] - 1)
    return torch.where(m, episode[:, None] + step_weight * per_turn.gather(1, turn), 0.0)


@dataclass(frozen=True)
class Credit:
    """What an estimator may read about a batch of B episodes of T tokens."""
    scores: Tensor                 # [B] episode scores
    group: Tensor                  # [B] integer group ids: the episodes of one prompt
    loss_mask: Tensor              # [B, T] 1 on sampled tokens
    token_rewards: Tensor          # [B, T] each score on its row's last sampled token (minus a per-token KL penalty
                                   # when the KL is in the reward)
    values: Tensor | None = None   # [B, T] a critic's values, for estimators that need one
    turn_ids: Tensor | None = None  # [B, T] the turn (1, 2, ...) a reply token belongs to
    anchors: list | None = None    # per episode, the env's state key before each turn
    in_baseline: Tensor | None = None   # [B] episodes a group baseline is made of (None: all)
    gamma: float = 1.0
    lam: float = 1.0
    step_weight: float = 1.0       # GiGPO's omega
    mode: str = "mean_std_norm"    # GiGPO's normalisation


@dataclass(frozen=True)
class Estimator:
    """An advantage estimator under the common calling convention, and what it needs.

    ``token_level``: it reads ``token_rewards`` (so a KL penalty in the reward reaches it); otherwise it reads the
    episode scores. ``whiten``: its advantages are whitened over the whole batch (by the trainer, which sees every
    process's share). ``group_baseline``: it compares an episode with its group (so ``in_baseline`` applies)."""
    compute: Callable[[Credit], tuple[Tensor, Tensor | None]]
    needs_critic: bool = False
    token_level: bool = False
    whiten: bool = False
    group_baseline: bool = False


ESTIMATORS: dict[str, Estimator] = {
    "grpo": Estimator(lambda c: (grpo(c.scores, c.group, c.loss_mask, in_baseline=c.in_baseline), None),
                      group_baseline=True),
    "rloo": Estimator(lambda c: (rloo(c.scores, c.group, c.loss_mask, in_baseline=c.in_baseline), None),
                      group_baseline=True),
    "reinforce_plus_plus": Estimator(lambda c: (reinforce_plus_plus(c.token_rewards, c.loss_mask, c.gamma,
                                                                    whiten=False)[0], None),
                                     token_level=True, whiten=True),
    "gae": Estimator(lambda c: gae(c.token_rewards, c.values, c.loss_mask, c.gamma, c.lam, whiten=False),
                     needs_critic=True, token_level=True, whiten=True),
    "gigpo": Estimator(lambda c: (gigpo(c.scores, c.group, c.loss_mask, c.turn_ids, c.anchors, gamma=c.gamma,
                                        step_weight=c.step_weight, mode=c.mode, in_baseline=c.in_baseline), None),
                       group_baseline=True),
}



@torch.no_grad()
def assign_credit(estimator: str, credit: Credit, *, kl_penalty: Tensor | None = None, cut: Tensor | None = None,
                  cut_turn_discount: float = 1.0,
                  sum_over_processes: Callable[[Tensor], Tensor] | None = None) -> tuple[Tensor, Tensor | None]:
    """The advantages (and returns, for estimators that have them) one update trains on:

        1. r[b, t] <- r[b, t] - kl_penalty[b, t]       the KL as a reward penalty (beta * KL_t on policy tokens)
        2. A, R <- ESTIMATORS[estimator](credit)
        3. A <- (A - mu) / sigma                       estimators that whiten; mu, sigma over the trainable tokens of
                                                       every process's share (`sum_over_processes` adds this
                                                       process's masked_moments to the others')
        4. A[b, t] <- d^(k - 1) A[b, t]                on turn k of an episode b cut by the horizon (`cut[b]`),
                                                       d = cut_turn_discount: the turns that spent the horizon carry
                                                       more of the blame than the last ones, which it stopped
    """
    spec = ESTIMATORS[estimator]
    m = _mask_2d(credit.loss_mask)
    if kl_penalty is not None:
        credit = replace(credit, token_rewards=credit.token_rewards - torch.where(m, kl_penalty, 0.0))
    adv, returns = spec.compute(credit)
    if spec.whiten:
        moments = masked_moments(adv, m)
        adv = masked_whiten(adv, m, moments=sum_over_processes(moments) if sum_over_processes else moments)
    if cut is not None and cut_turn_discount < 1:
        later = cut_turn_discount ** (credit.turn_ids - 1).clamp(min=0)
        adv = torch.where(cut[:, None], adv * later, adv)
    return adv, returns


def _mask_2d(loss_mask: Tensor) -> Tensor:
    if loss_mask.dim() != 2:
        raise ValueError(f"loss_mask must be [B, T], got shape {list(loss_mask.shape)}")
    return loss_mask.bool()


def _check_scores(scores: Tensor, group: Tensor, loss_mask: Tensor) -> tuple[Tensor, Tensor]:
    scores, group, m = torch.as_tensor(scores), torch.as_tensor(group), _mask_2d(loss_mask)
    B = m.shape[0]
    if scores.shape != (B,) or group.shape != (B,):
        raise ValueError(f"scores and group must have shape [B] = [{B}], got {list(scores.shape)} and "
                         f"{list(group.shape)}")
    if group.is_floating_point() or group.dtype == torch.bool:
        raise ValueError(f"group must hold integer group ids (one per prompt), got dtype {group.dtype}")
    return (scores if scores.is_floating_point() else scores.float()), m


def _check_rewards(token_rewards: Tensor, loss_mask: Tensor) -> tuple[Tensor, Tensor]:
    m = _mask_2d(loss_mask)
    if token_rewards.shape != m.shape:
        raise ValueError(f"token_rewards must have the shape of loss_mask {list(m.shape)}, "
                         f"got {list(token_rewards.shape)}")
    if not token_rewards.is_floating_point():
        raise ValueError(f"token_rewards must be a float tensor, got dtype {token_rewards.dtype}")
    stray = (token_rewards != 0) & ~m
    if stray.any():  # the AgentGym-RL bug: a reward on an untrainable token is silently dropped
        b, t = stray.nonzero()[0].tolist()
        raise ValueError(f"token_rewards[{b}, {t}] is nonzero on a token with loss_mask = 0; rewards belong on "
                         "trainable tokens (Trajectory.to_tensors puts each score on its row's last one)")
    return token_rewards, m


def _group_mean(scores: Tensor, group: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Per-group mean and member count, each row's group index into them, and whether each row's group scored
    alike. Its advantage is then exactly 0: the mean of n equal floats can miss them by an ulp, which GRPO would
    divide by a std of about an ulp (+-0.06 for eight scores of 0.9 in float32)."""
    _, inverse, count = torch.unique(group, return_inverse=True, return_counts=True)
    total = torch.zeros(len(count), dtype=scores.dtype, device=scores.device).index_add_(0, inverse, scores)
    top = torch.full_like(total, -math.inf).scatter_reduce(0, inverse, scores, reduce="amax")
    bottom = torch.full_like(total, math.inf).scatter_reduce(0, inverse, scores, reduce="amin")
    return total / count, count, inverse, (top == bottom)[inverse]


def _baseline(scores: Tensor, inverse: Tensor, mean: Tensor, in_baseline: Tensor | None) -> tuple[Tensor, Tensor]:
    """Per row: the mean score of its group's baseline members (all members when `in_baseline` is None), and
    whether the group has any."""
    if in_baseline is None:
        return mean[inverse], torch.ones_like(scores, dtype=torch.bool)
    base = in_baseline.bool()
    n = torch.zeros_like(mean).index_add_(0, inverse, base.to(scores.dtype))
    total = torch.zeros_like(mean).index_add_(0, inverse, torch.where(base, scores, 0.0))
    return (total / n.clamp(min=1))[inverse], (n > 0)[inverse]


def _broadcast(per_seq: Tensor, m: Tensor) -> Tensor:
    return torch.where(m, per_seq[:, None], torch.zeros((), dtype=per_seq.dtype, device=per_seq.device))
