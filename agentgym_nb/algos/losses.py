"""Losses: log-probs of the sampled tokens, the SFT loss, PPO clipped policy loss, KL estimators, entropy, clipped
value loss, and loss aggregation.

Every per-token loss is a [B, T] matrix reduced by ``aggregate`` over the tokens with ``loss_mask = 1``. Passing the
token (or sequence) count of the whole mini-batch as ``global_tokens`` (``global_seqs``) makes the sum of the
micro-batch losses equal the full mini-batch loss, so gradient accumulation does not depend on the micro-batch size.
"""
from __future__ import annotations

import torch
import torch.utils.checkpoint
from torch import Tensor

from agentgym_nb.algos.advantages import masked_mean

AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean")
KL_KINDS = {"k1": "kl", "kl": "kl", "abs": "abs", "k2": "mse", "mse": "mse", "k3": "low_var_kl",
            "low_var_kl": "low_var_kl"}


LOGITS_CHUNK_ELEMENTS = 1 << 27   # logits held at once when token_logprobs works in chunks (512 MB in fp32): chunks
                                 # of ~900 positions of a 150k vocabulary, large enough to keep a GPU busy


def causal_attention_mask(attention_mask: Tensor) -> Tensor | None:
    """The mask a causal model needs: None for right-padded rows (a token never attends to the padding after it, and
    without a mask SDPA takes its fused causal kernel instead of materialising a [B, heads, T, T] mask), else the
    mask itself (left padding, or gaps)."""
    right_padded = bool((attention_mask[:, 1:] <= attention_mask[:, :-1]).all())
    return None if right_padded else attention_mask


def token_logprobs(model, input_ids: Tensor, attention_mask: Tensor, *, temperature: float = 1.0,
                   with_entropy: bool = False, chunk_elements: int = LOGITS_CHUNK_ELEMENTS):
    """logp[b, t] = log pi(input_ids[b, t] | input_ids[b, :t]) for t >= 1; logp[b, 0] = 0 (nothing predicts it).

    Aligned with the token it scores, so `logp * loss_mask` picks exactly the sampled tokens. Logits are divided by
    the sampling temperature: the ratio must compare the same distribution the engine sampled from.
    With `with_entropy`, also returns the entropy of each predictive distribution (aligned the same way), with its
    gradient.

    When the batch's logits would exceed `chunk_elements` (B x T x vocabulary: 4 x 2048 tokens of a 150k vocabulary
    are 1.2e9, 5 GB in fp32 and as much again for their gradient), the output head runs over chunks of positions,
    each recomputed in the backward pass (activation checkpointing), so at most one chunk's logits exist at a time.
    """
    mask = causal_attention_mask(attention_mask)
    B, T = input_ids.shape
    parts = _causal_lm_parts(model)
    if parts is None or B * T * parts[1].out_features <= chunk_elements:
        logits = model(input_ids=input_ids, attention_mask=mask).logits[:, :-1]
        logp, entropy = _logp_and_entropy(logits, input_ids[:, 1:], temperature)
    else:
        body, head = parts
        hidden = body(input_ids=input_ids, attention_mask=mask).last_hidden_state[:, :-1]
        step = max(1, chunk_elements // (B * head.out_features))
        pieces = [torch.utils.checkpoint.checkpoint(_head_logp_and_entropy, head, hidden[:, i:i + step],
                                                    input_ids[:, i + 1:i + 1 + step], temperature, use_reentrant=False)
                  for i in range(0, T - 1, step)]
        logp, entropy = (torch.cat(x, dim=1) for x in zip(*pieces))
    logp = torch.nn.functional.pad(logp, (1, 0))
    return (logp, torch.nn.functional.pad(entropy, (1, 0))) if with_entropy else logp


def _logp_and_entropy(logits: Tensor, targets: Tensor, temperature: float) -> tuple[Tensor, Tensor]:
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    logz = torch.logsumexp(logits, dim=-1)
    picked = torch.gather(logits, -1, targets[..., None]).squeeze(-1)
    return picked - logz, entropy_from_logits(logits, logz)


def _head_logp_and_entropy(head, hidden: Tensor, targets: Tensor, temperature: float) -> tuple[Tensor, Tensor]:
    return _logp_and_entropy(head(hidden), targets, temperature)


def _causal_lm_parts(model):
    """(body, output head) of a Hugging Face causal LM, through a DDP wrapper and a peft model (whose adapters live
    inside the body's layers), or None where the head cannot be called on its own: a model sharded by FSDP (its
    head's weights are gathered by the whole model's forward only) or an unknown module."""
    model = getattr(model, "module", model)   # DDP
    if hasattr(model, "get_base_model"):   # peft
        model = model.get_base_model()
    if type(model).__name__.startswith("FSDP") or not hasattr(model, "get_output_embeddings"):
        return None
    head, body = model.get_output_embeddings(), getattr(model, "base_model", None)
    if not isinstance(head, torch.nn.Linear) or body is None or body is model:
        return None
    return body, head


def aggregate(loss_mat: Tensor, loss_mask: Tensor, mode: str = "token-mean", global_tokens: int | None = None,
              global_seqs: int | None = None) -> Tensor:
    """Reduce a [B, T] loss to a scalar over the tokens with loss_mask = 1.

    - ``token-mean``: sum_{b,t} m*L / N, N = global_tokens or the local number of trainable tokens.
    - ``seq-mean-token-sum``: sum_b (sum_t m*L) / S, S = global_seqs or the local number of rows with at least
      one trainable token.
    - ``seq-mean-token-mean``: sum_b (sum_t m*L / sum_t m) / S, same S.
    A row with no trainable token contributes 0 and is not counted; an all-empty batch gives 0 (never NaN).
    """
    m = loss_mask.bool()
    if loss_mat.shape != m.shape:
        raise ValueError(f"loss_mat {list(loss_mat.shape)} and loss_mask {list(m.shape)} must have the same shape")
    masked = torch.where(m, loss_mat, torch.zeros_like(loss_mat))
    if mode == "token-mean":
        return masked.sum() / _count(global_tokens, int(m.sum()), "global_tokens")
    if mode == "seq-mean-token-sum":
        seq = masked.sum(dim=-1)
    elif mode == "seq-mean-token-mean":
        seq = masked_mean(loss_mat, m, dim=-1)
    else:
        raise ValueError(f"unknown loss aggregation mode {mode!r}; valid: {', '.join(AGG_MODES)}")
    return seq.sum() / _count(global_seqs, int(m.any(dim=-1).sum()), "global_seqs")


def sft_loss(logp: Tensor, loss_mask: Tensor, num_tokens: int) -> Tensor:
    """- sum_{b,t} loss_mask[b,t] * logp[b,t] / num_tokens.

    `num_tokens` is the trainable-token count of the whole optimizer step, so the micro-batch losses of a step
    add up to its token mean whatever the micro-batch split."""
    return -(logp * loss_mask).sum() / max(num_tokens, 1)


def kl_penalty(logp: Tensor, ref_logp: Tensor, kind: str = "low_var_kl") -> Tensor:
    """Per-token KL(pi || pi_ref) estimate from sampled-token log-probs (verl's ``kl_penalty``), d = logp - ref_logp.

    - ``k1``/``kl``: d
    - ``abs``: |d|
    - ``k2``/``mse``: d^2 / 2
    - ``k3``/``low_var_kl`` (Schulman): exp(-d) + d - 1, clamped to [-10, 10]
    """
    if kind not in KL_KINDS:
        raise ValueError(f"unknown KL estimator {kind!r}; valid: {', '.join(KL_KINDS)}")
    d = logp - ref_logp
    kind = KL_KINDS[kind]
    if kind == "kl":
        return d
    if kind == "abs":
        return d.abs()
    if kind == "mse":
        return 0.5 * d ** 2
    d = d.clamp(-20, 20)  # keeps exp finite so the gradient cannot become inf * 0; the output is clamped anyway
    return (torch.exp(-d) + d - 1).clamp(-10, 10)


def truncated_is_weights(trainer_logp: Tensor, engine_logp: Tensor, cap: float) -> Tensor:
    """Truncated importance sampling (TIS; Yao et al. 2025, verl's token-level rollout correction):
    w_t = min(pi_trainer(y_t) / pi_engine(y_t), cap) = min(exp(trainer_logp - engine_logp), cap), no gradient.

    The PPO ratio compares the policy with its own log-probs of the sampled tokens (pi_old), but the tokens were
    drawn by the engine, whose numbers differ a little (another precision, other kernels); w reweights each token's
    loss from the engine's distribution to the trainer's, truncated at `cap` so that no token weighs without bound.
    Tokens whose engine log-prob is unknown (NaN) get w = 1."""
    w = torch.exp((trainer_logp - engine_logp).clamp(max=20)).clamp(max=cap)
    return torch.where(engine_logp.isnan(), torch.ones_like(w), w).detach()


def policy_loss(logp: Tensor, old_logp: Tensor, advantages: Tensor, loss_mask: Tensor, clip_ratio: float = 0.2,
                clip_ratio_high: float | None = None, dual_clip_c: float | None = None, agg: str = "token-mean",
                global_tokens: int | None = None, global_seqs: int | None = None,
                is_weights: Tensor | None = None) -> tuple[Tensor, dict[str, float]]:
    """PPO clipped surrogate, per token: L = max(-A * rho, -A * clip(rho, 1 - eps_low, 1 + eps_high)).

    rho = exp(logp - old_logp); eps_low = clip_ratio, eps_high = clip_ratio_high or clip_ratio. With dual clip
    (Ye et al. 2020), tokens with A < 0 use min(L, -A * c), c = dual_clip_c > 1, which bounds the loss when rho is
    huge. With ``is_weights`` (truncated_is_weights), each token's L is multiplied by its weight.
    Returns (aggregate(L), metrics): ``clip_frac`` (share of trainable tokens where the clipped term won),
    ``dual_clip_frac`` (where the dual clip bound won; 0 without dual clip), ``approx_kl`` = masked
    mean(old_logp - logp). Metrics are local to this micro-batch.
    """
    eps_high = clip_ratio if clip_ratio_high is None else clip_ratio_high
    if not 0 < clip_ratio < 1 or eps_high <= 0:
        raise ValueError(f"need 0 < clip_ratio < 1 and clip_ratio_high > 0, got {clip_ratio} and {eps_high}")
    if dual_clip_c is not None and dual_clip_c <= 1:
        raise ValueError(f"dual_clip_c must be > 1, got {dual_clip_c}")
    m = loss_mask.bool()
    log_ratio = (logp - old_logp).clamp(-20, 20)  # exp stays finite; such ratios are clipped either way
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1 - clip_ratio, 1 + eps_high)
    loss_mat = torch.maximum(unclipped, clipped)
    dual = torch.zeros_like(m)
    if dual_clip_c is not None:
        bound = -advantages * dual_clip_c
        dual = (advantages < 0) & (bound < loss_mat)
        loss_mat = torch.where(dual, bound, loss_mat)
    if is_weights is not None:
        loss_mat = loss_mat * is_weights
    metrics = {
        "clip_frac": masked_mean((clipped > unclipped).float(), m).item(),
        "dual_clip_frac": masked_mean(dual.float(), m).item(),
        "approx_kl": masked_mean(-log_ratio.detach(), m).item(),
    }
    return aggregate(loss_mat, m, agg, global_tokens, global_seqs), metrics


def value_loss(values: Tensor, old_values: Tensor, returns: Tensor, loss_mask: Tensor, clip: float = 0.5,
               agg: str = "token-mean", global_tokens: int | None = None,
               global_seqs: int | None = None) -> tuple[Tensor, dict[str, float]]:
    """Clipped value loss (verl): L = 0.5 * max((V - R)^2, (clip(V, V_old - c, V_old + c) - R)^2), aggregated.

    Returns (loss, {"clip_frac": share of trainable tokens where the clipped term was larger}).
    """
    if clip <= 0:
        raise ValueError(f"value clip must be > 0, got {clip}")
    m = loss_mask.bool()
    unclipped = (values - returns) ** 2
    clipped = (old_values + (values - old_values).clamp(-clip, clip) - returns) ** 2
    loss = 0.5 * aggregate(torch.maximum(unclipped, clipped), m, agg, global_tokens, global_seqs)
    return loss, {"clip_frac": masked_mean((clipped > unclipped).float(), m).item()}


def entropy_from_logits(logits: Tensor, logz: Tensor | None = None) -> Tensor:
    """H = logsumexp(z) - sum_v softmax(z)_v * z_v over the vocabulary: [..., V] -> [...]; `logz` is logsumexp(z)
    when already known."""
    logz = torch.logsumexp(logits, dim=-1) if logz is None else logz
    return logz - (torch.softmax(logits, dim=-1) * logits).sum(dim=-1)


@torch.no_grad()
def explained_variance(values: Tensor, returns: Tensor, mask: Tensor) -> float:
    """1 - Var[R - V] / Var[R] over mask != 0 (1 = perfect critic, 0 = no better than a constant). NaN if Var[R] = 0."""
    m = mask.bool()
    var_r = _masked_var(returns, m)
    return float("nan") if var_r == 0 else float(1 - _masked_var(returns - values, m) / var_r)


def _masked_var(x: Tensor, m: Tensor) -> Tensor:
    return masked_mean((x - masked_mean(x, m)) ** 2, m)


def _count(given: int | None, local: int, name: str) -> int:
    if given is None:
        return max(local, 1)
    if given < 1:
        raise ValueError(f"{name} must be >= 1 (the count over the whole mini-batch), got {given}")
    return given
