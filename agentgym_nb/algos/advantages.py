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
from dataclasses import dataclass
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


def token_rewards_from_scores(scores: Tensor, loss_mask: Tensor) -> Tensor:
    """[B, T] rewards: ``scores[b]`` on the last token of row b with loss_mask = 1, 0 everywhere else.

    This is the placement every estimator here expects (AgentGym-RL put the score on the last *attention* token, an
    environment observation, where GAE and REINFORCE++ never saw it). A row with no trainable token gets no reward
    at all: it contributes nothing to any loss, so there is nowhere meaningful to put it.
    """
    scores, m = torch.as_tensor(scores), _mask_2d(loss_mask)
    if scores.shape != m.shape[:1]:
        raise ValueError(f"scores must have shape [B] = {list(m.shape[:1])}, got {list(scores.shape)}")
    if not scores.is_floating_point():
        scores = scores.float()
    T = m.shape[1]
    last = T - 1 - m.flip(1).int().argmax(dim=1)  # index of the last True per row (0 for an all-False row)
    rewards = torch.zeros(m.shape, dtype=scores.dtype, device=scores.device)
    rewards[torch.arange(len(scores)), last] = torch.where(m.any(dim=1), scores, torch.zeros_like(scores))
    return rewards


@torch.no_grad()
def grpo(scores: Tensor, group: Tensor, loss_mask: Tensor, eps: float = 1e-6) -> Tensor:
    """GRPO: A[b, t] = (s_b - mean_g) / (std_g + eps) * m[b, t], g = group[b].

    std_g is the unbiased standard deviation (N - 1, the ``torch.std`` default) of the scores in group g. A group
    with one member gets advantage 0; a group whose scores are all equal gets 0 too.
    """
    scores, m = _check_scores(scores, group, loss_mask)
    mean, count, inverse, alike = _group_mean(scores, group)
    dev = scores - mean[inverse]
    sq = torch.zeros_like(mean).index_add_(0, inverse, dev ** 2)
    std = torch.sqrt(sq / (count - 1).clamp(min=1))
    adv = torch.where((count[inverse] > 1) & ~alike, dev / (std[inverse] + eps), torch.zeros_like(dev))
    return _broadcast(adv, m)


@torch.no_grad()
def rloo(scores: Tensor, group: Tensor, loss_mask: Tensor) -> Tensor:
    """RLOO: A[b, t] = (s_b - mean of the other members of b's group) * m[b, t].

    With n members and group sum S: s_b - (S - s_b) / (n - 1). A group with one member, or whose scores are all
    equal, gets 0.
    """
    scores, m = _check_scores(scores, group, loss_mask)
    mean, count, inverse, alike = _group_mean(scores, group)
    n = count[inverse]
    others = (mean[inverse] * n - scores) / (n - 1).clamp(min=1)
    adv = torch.where((n > 1) & ~alike, scores - others, torch.zeros_like(scores))
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


reinforce_pp = reinforce_plus_plus   # the name in DESIGN.md's contracts


@dataclass(frozen=True)
class Credit:
    """What an estimator may read about a batch of B episodes of T tokens."""
    scores: Tensor                 # [B] episode scores
    group: Tensor                  # [B] integer group ids: the episodes of one prompt
    loss_mask: Tensor              # [B, T] 1 on sampled tokens
    token_rewards: Tensor          # [B, T] each score on its row's last sampled token (minus a per-token KL penalty
                                   # when the KL is in the reward)
    values: Tensor | None = None   # [B, T] a critic's values, for estimators that need one
    gamma: float = 1.0
    lam: float = 1.0


@dataclass(frozen=True)
class Estimator:
    """An advantage estimator under the common calling convention, and what it needs.

    ``token_level``: it reads ``token_rewards`` (so a KL penalty in the reward reaches it); otherwise it reads the
    episode scores. ``whiten``: its advantages are whitened over the whole batch (by the trainer, which sees every
    process's share)."""
    compute: Callable[[Credit], tuple[Tensor, Tensor | None]]
    needs_critic: bool = False
    token_level: bool = False
    whiten: bool = False


ESTIMATORS: dict[str, Estimator] = {
    "grpo": Estimator(lambda c: (grpo(c.scores, c.group, c.loss_mask), None)),
    "rloo": Estimator(lambda c: (rloo(c.scores, c.group, c.loss_mask), None)),
    "reinforce_plus_plus": Estimator(lambda c: (reinforce_plus_plus(c.token_rewards, c.loss_mask, c.gamma,
                                                                    whiten=False)[0], None),
                                     token_level=True, whiten=True),
    "gae": Estimator(lambda c: gae(c.token_rewards, c.values, c.loss_mask, c.gamma, c.lam, whiten=False),
                     needs_critic=True, token_level=True, whiten=True),
}


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
                         "trainable tokens (see token_rewards_from_scores)")
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


def _broadcast(per_seq: Tensor, m: Tensor) -> Tensor:
    return torch.where(m, per_seq[:, None], torch.zeros((), dtype=per_seq.dtype, device=per_seq.device))
