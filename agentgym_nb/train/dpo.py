"""DPO on trajectory pairs, multi-turn: the preference is over whole continuations of a shared prompt.

Pairs are built the way AgentGym builds them (`agentenv/examples/dpo/make_dpo_dataset.py`): an expert file and an
experience file are matched by item id, the better episode of a pair is `chosen` and the worse `rejected`:
    {"id": 12, "prompt": conversations[:3], "chosen": winner[3:], "rejected": loser[3:]}
(prompt = instruction, acknowledgement, first observation). The log-probability of a continuation is the sum over
its trainable tokens: the assistant turns (text + end-of-turn token), never the observations in between, so the
environment's text is context on both sides and only the agent's own actions are compared.
"""
from __future__ import annotations

import random
import time

import torch
import torch.nn.functional as F

from ..rollout.trajectory import ChatFormat, Trajectory, collate
from ..algos.losses import token_logprobs
from .common import autocast, micro_batches
from .sft import PROMPT_TURNS, check_record, item_index, to_trajectory


def make_dpo_pairs(expert: list[dict], experience: list[dict], *, reward_gap: float = 0.01,
                   winner_threshold: float = 0.7, prompt_length: int = PROMPT_TURNS) -> list[dict]:
    """AgentGym's pair construction. Each side keeps, per item, its lowest-reward record; items present on only one
    side are skipped. A pair is kept when the winner's reward beats the loser's by >= `reward_gap` and is itself
    >= `winner_threshold`; either side may win. An expert record without a reward counts as 1.0 (AgentTraj-L has
    none); an experience record must have one. Returns pairs sorted by id."""
    best = _lowest_reward(expert, "expert", default_reward=1.0)
    other = _lowest_reward(experience, "experience", default_reward=None)
    pairs = []
    for key in sorted(best.keys() & other.keys()):
        e, x = best[key], other[key]
        for winner, loser in ((e, x), (x, e)):
            if winner["reward"] - loser["reward"] >= reward_gap and winner["reward"] >= winner_threshold:
                conv_w, conv_l = winner["conversations"], loser["conversations"]
                pairs.append({"id": key, "prompt": conv_w[:prompt_length], "chosen": conv_w[prompt_length:],
                              "rejected": conv_l[prompt_length:]})
    return pairs


def _lowest_reward(records: list[dict], side: str, default_reward: float | None) -> dict[int, dict]:
    out: dict[int, dict] = {}
    for i, raw in enumerate(records):
        r = check_record(raw, where=f"{side} record {i}")
        if "reward" not in r:
            if default_reward is None:
                raise ValueError(f"{side} record {i} (item_id {r['item_id']!r}): missing field 'reward' "
                                 "(an experience record needs the reward its episode got)")
            r = {**r, "reward": default_reward}
        key = item_index(r["item_id"])
        if key not in out or r["reward"] < out[key]["reward"]:
            out[key] = r
    return out


def dpo_loss(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor, ref_chosen: torch.Tensor,
             ref_rejected: torch.Tensor, beta: float = 0.5):
    """Sigmoid DPO (Rafailov et al. 2023) on per-pair sequence log-probs [P]:

        r_c = beta * (log pi(y_c|x) - log pi_ref(y_c|x)),  r_r = beta * (log pi(y_r|x) - log pi_ref(y_r|x))
        loss = -log sigmoid(r_c - r_r)

    Returns (loss per pair [P], r_c [P], r_r [P]); the implicit rewards r are detached (for logging)."""
    chosen = policy_chosen - ref_chosen
    rejected = policy_rejected - ref_rejected
    losses = -F.logsigmoid(beta * (chosen - rejected))
    return losses, beta * chosen.detach(), beta * rejected.detach()


def pair_trajectories(chat: ChatFormat, pair: dict, where: str = "pair") -> tuple[Trajectory, Trajectory]:
    """(prompt + chosen, prompt + rejected) as token sequences with loss masks on their assistant turns."""
    for key in ("prompt", "chosen", "rejected"):
        if not isinstance(pair.get(key), list):
            raise ValueError(f"{where}: field {key!r} must be a list of turns (a pair is {{id, prompt, chosen, "
                             f"rejected}}), got {pair.get(key)!r}")
    out = []
    for side in ("chosen", "rejected"):
        record = check_record({"item_id": pair.get("id", 0), "conversations": pair["prompt"] + pair[side]},
                              where=f"{where} prompt + {side}")
        traj = to_trajectory(chat, record)
        if traj.num_policy_tokens == 0:
            raise ValueError(f"{where}: {side} has no trained assistant turn after the prompt")
        out.append(traj)
    return out[0], out[1]


def sequence_logprobs(model, batch: dict[str, torch.Tensor], *, bf16: bool | None = None) -> torch.Tensor:
    """sum_t loss_mask[b,t] * log pi(x[b,t] | x[b,<t]) for every row b: [B]."""
    device = next(model.parameters()).device
    batch = {k: v.to(device) for k, v in batch.items()}
    with autocast(device.type, bf16):
        logp = token_logprobs(model, batch["input_ids"], batch["attention_mask"])
    return (logp * batch["loss_mask"]).sum(-1)


def dpo(model, pairs: list[dict], chat: ChatFormat, *, ref_model=None, beta: float = 0.5, epochs: int = 3,
        batch_pairs: int = 64, micro_batch_tokens: int = 8192, lr: float = 5e-7, weight_decay: float = 0.1,
        grad_clip: float = 1.0, bf16: bool | None = None, seed: int = 0, log=print) -> list[dict]:
    """Train `model` (full, or its LoRA adapters after `common.add_lora`) with multi-turn DPO on `pairs`.

    The reference is `ref_model`, or by default the model itself as it is before training (AgentGym's reference is
    the BC model DPO starts from): its sequence log-probs are computed once up front, so no second copy of the
    weights is kept. Defaults are AgentGym's (beta 0.5, lr 5e-7, 3 epochs, 2 x 4 x 8 = 64 pairs a step, weight
    decay 0.1); a nano model wants lr ~1e-3. Returns one record per optimizer step: {step, epoch, loss, margin
    (mean r_c - r_r), accuracy (share with r_c > r_r), chosen_reward, rejected_reward, grad_norm, seconds}.
    """
    if not pairs:
        raise ValueError("dpo needs at least one pair")
    seqs = [pair_trajectories(chat, p, where=f"pair {i} (id {p.get('id')!r})") for i, p in enumerate(pairs)]
    pad = chat.tokenizer.pad_token_id
    ref = _reference_logprobs(ref_model if ref_model is not None else model, seqs, pad, micro_batch_tokens, bf16)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    rng = random.Random(seed)
    history, t0, step = [], time.time(), 0
    for epoch in range(epochs):
        order = list(range(len(seqs)))
        rng.shuffle(order)
        for start in range(0, len(order), batch_pairs):
            rows = order[start:start + batch_pairs]
            rows.sort(key=lambda i: max(len(seqs[i][0].input_ids), len(seqs[i][1].input_ids)))   # less padding
            model.train()
            opt.zero_grad()
            sums = {"loss": 0.0, "margin": 0.0, "accuracy": 0.0, "chosen_reward": 0.0, "rejected_reward": 0.0}
            longest = [max(len(seqs[i][0].input_ids), len(seqs[i][1].input_ids)) for i in rows]
            for micro in micro_batches(longest, micro_batch_tokens // 2):   # a pair is two rows
                idx = [rows[m] for m in micro]
                batch = collate([seqs[i][0] for i in idx] + [seqs[i][1] for i in idx], pad)
                logps = sequence_logprobs(model, batch, bf16=bf16)
                ref_c, ref_r = ref[idx, 0].to(logps.device), ref[idx, 1].to(logps.device)
                losses, r_c, r_r = dpo_loss(logps[:len(idx)], logps[len(idx):], ref_c, ref_r, beta)
                (losses.sum() / len(rows)).backward()
                for key, values in (("loss", losses.detach()), ("margin", r_c - r_r),
                                    ("accuracy", (r_c > r_r).float()), ("chosen_reward", r_c),
                                    ("rejected_reward", r_r)):
                    sums[key] += float(values.sum()) / len(rows)
            grad_norm = float(torch.nn.utils.clip_grad_norm_(params, grad_clip))
            opt.step()
            step += 1
            history.append({"step": step, "epoch": epoch, **sums, "grad_norm": grad_norm,
                            "seconds": round(time.time() - t0, 2)})
        last = [h for h in history if h["epoch"] == epoch]
        log(f"dpo epoch {epoch + 1}/{epochs}: loss {sum(h['loss'] for h in last) / len(last):.4f}, "
            f"margin {last[-1]['margin']:.3f}, accuracy {last[-1]['accuracy']:.2f} ({time.time() - t0:.0f}s)")
    model.eval()
    return history


@torch.no_grad()
def _reference_logprobs(model, seqs: list[tuple[Trajectory, Trajectory]], pad: int, micro_batch_tokens: int,
                        bf16: bool | None) -> torch.Tensor:
    """[P, 2]: the reference's sequence log-probs of (chosen, rejected) for every pair."""
    was_training = model.training
    model.eval()
    flat = [t for pair in seqs for t in pair]
    out = torch.zeros(len(flat))
    for rows in micro_batches([len(t.input_ids) for t in flat], micro_batch_tokens):
        out[rows] = sequence_logprobs(model, collate([flat[i] for i in rows], pad), bf16=bf16).float().cpu()
    model.train(was_training)
    return out.view(-1, 2)
