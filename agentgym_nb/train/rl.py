"""Online RL for multi-turn agents (GRPO by default), one Accelerate process on a laptop, the same code on GPUs.

One training step:
    1. horizon   H = schedule.rounds_at(step)                    (ScalingInter-RL: short first, longer later)
    2. rollout   items_for_step(step) x n episodes, each at most H replies, sampled by the engine
                 (with filter_groups: oversampled items, then only groups whose scores differ are kept: a group
                 where every episode scored the same has zero advantage and would only dilute the update)
    3. credit    advantages from the episode scores (GRPO: score minus its group's mean, over the group's std;
                 RLOO: minus the mean of the others; REINFORCE++: whitened returns; GAE: a critic's values)
    4. update    PPO-clip loss on policy tokens + KL to the frozen reference (a loss term, or a per-token reward
                 penalty with kl_in_reward), ppo_epochs x mini_batches steps; GAE also fits the critic
    5. sync      the new weights go into the engine, so the next rollout samples from the updated policy
Everything that decides a step (its items, its horizon, its sampling seed, its mini-batch order) is a pure function
of the step number and the config, so a run resumed from a checkpoint continues exactly as if never stopped.
"""
from __future__ import annotations

import copy
import json
import os
import random
import shutil
import time
from dataclasses import asdict

import torch

from .. import envs, models
from ..algos import advantages as adv_fns
from ..algos.losses import aggregate, explained_variance, kl_penalty, policy_loss, value_loss
from ..algos.schedule import make_schedule
from ..config import RunConfig, item_pool
from ..rollout.engine import SamplingParams, make_engine
from ..rollout.runner import RolloutStats, run_episodes, write_rollout_log
from ..rollout.trajectory import ChatFormat, collate
from .common import add_lora, merged_state_dict, micro_batches, set_threads, token_logprobs, trim


class Critic(torch.nn.Module):
    """V(state before token t) for every position t: the policy's transformer body (a copy, trained separately)
    under a linear head that starts at zero. Aligned like token_logprobs: values[:, t] is read from the hidden state
    at t - 1, the state in which token t was sampled."""

    def __init__(self, model_dir: str):
        super().__init__()
        from transformers import AutoModel
        self.body = AutoModel.from_pretrained(model_dir, dtype=torch.float32)
        self.head = torch.nn.Linear(self.body.config.hidden_size, 1)
        torch.nn.init.zeros_(self.head.weight)
        torch.nn.init.zeros_(self.head.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        right_padded = bool((attention_mask[:, 1:] <= attention_mask[:, :-1]).all())
        hidden = self.body(input_ids=input_ids, attention_mask=None if right_padded else attention_mask)
        values = self.head(hidden.last_hidden_state).squeeze(-1).float()
        return torch.nn.functional.pad(values[:, :-1], (1, 0))


class Trainer:
    def __init__(self, cfg: RunConfig, *, log=print):
        from accelerate import Accelerator
        from transformers import AutoModelForCausalLM
        self.cfg, self.log = cfg, log
        set_threads(cfg.threads)
        self.model_dir = models.resolve_config(cfg, log=log)
        self.tokenizer = models.load_tokenizer(self.model_dir)
        self.chat = ChatFormat(self.tokenizer)
        model = AutoModelForCausalLM.from_pretrained(self.model_dir, dtype=torch.float32)
        self.ref = None
        if cfg.kl_coef > 0:
            self.ref = copy.deepcopy(model).eval().requires_grad_(False)
        if cfg.lora_rank:
            model = add_lora(model, r=cfg.lora_rank, alpha=2 * cfg.lora_rank)
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.lr,
                                      weight_decay=cfg.weight_decay)
        self.accelerator = Accelerator(cpu=not torch.cuda.is_available(),
                                       mixed_precision="bf16" if cfg.bf16 else "no")
        self.model, self.optimizer = self.accelerator.prepare(model, optimizer)
        self.critic = None
        if cfg.algorithm == "gae":
            critic = Critic(self.model_dir)
            critic_optimizer = torch.optim.AdamW(critic.parameters(), lr=cfg.critic_lr or cfg.lr,
                                                 weight_decay=cfg.weight_decay)
            self.critic, self.critic_optimizer = self.accelerator.prepare(critic, critic_optimizer)
        self.engine = make_engine(cfg.engine, self.model_dir, max_model_len=cfg.max_total_tokens + cfg.max_tokens,
                                  seed=cfg.seed, tokenizer=self.tokenizer)
        set_threads(cfg.threads)   # the engine may have changed torch's thread count
        self.schedule = make_schedule(cfg.schedule, cfg.rounds, every=cfg.rounds_every)
        self.step = 0
        self.history: list[dict] = []
        os.makedirs(cfg.run_dir, exist_ok=True)
        with open(os.path.join(cfg.run_dir, "config.json"), "w") as f:
            f.write(cfg.to_json())
        self._resume()

    # ------------------------------------------------------------------------------------------------ data
    def env_factory(self):
        if self.cfg.env_url:
            return envs.connect(self.cfg.env, self.cfg.env_url, timeout=self.cfg.env_timeout)
        return envs.make(self.cfg.env)

    def items_for_step(self, step: int) -> list[int]:
        """The prompts of training step `step` (1-based): consecutive slices of a per-epoch seeded shuffle."""
        pool, k = item_pool(self.cfg, "train"), self.cfg.prompts_per_step * self.cfg.oversample
        out = []
        for index in range((step - 1) * k, step * k):
            epoch, pos = divmod(index, len(pool))
            order = pool[:]
            random.Random(self.cfg.seed * 1_000_003 + epoch).shuffle(order)
            out.append(order[pos])
        return out

    def test_items(self) -> list[int]:
        return item_pool(self.cfg, "test")[: self.cfg.eval_items]

    def rounds_at(self, step: int) -> int:
        return self.schedule.rounds_at(step, self.history)

    # ------------------------------------------------------------------------------------------- training
    def train_step(self) -> dict:
        cfg, step = self.cfg, self.step + 1
        t0 = time.perf_counter()
        rounds = self.rounds_at(step)
        stats = RolloutStats()
        params = SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p, max_tokens=cfg.max_tokens,
                                seed=cfg.seed * 1_000_003 + step)
        trajs = run_episodes(self.engine, self.env_factory, self.items_for_step(step), self.chat,
                             n=cfg.samples_per_prompt, max_rounds=rounds, params=params,
                             max_total_tokens=cfg.max_total_tokens, env_timeout=cfg.env_timeout, stats=stats)
        write_rollout_log(os.path.join(cfg.run_dir, "rollouts", f"step_{step:05d}.jsonl"), trajs, step=step,
                          max_rounds=rounds)
        t_rollout = time.perf_counter() - t0
        failed = [t for t in trajs if t.failed]
        if failed:
            self.log(f"step {step}: {len(failed)} episode(s) failed in the env and are excluded: {failed[0].failed}")
        usable = [t for t in trajs if not t.failed and t.num_policy_tokens > 0]
        if not usable:
            raise RuntimeError(f"step {step}: no usable episode ({len(failed)} failed): check the env server")
        train_on = informative_groups(usable, cfg.prompts_per_step) if cfg.filter_groups else usable
        update = self._update(train_on or usable, step)
        t_sync = time.perf_counter()
        self.sync_engine()
        metrics = {
            "step": step, "max_rounds": rounds,
            "reward": _mean([t.reward for t in usable]),
            "success": _mean([float(t.success) for t in usable]),
            "turns": _mean([t.num_rounds for t in usable]),
            "done": _mean([float(t.done) for t in usable]),
            "cut_by_tokens": _mean([float(t.truncated) for t in usable]),
            "cut_by_horizon": _mean([float(not t.done and not t.truncated) for t in usable]),
            "cut_turns": _mean([t.cut_turns for t in usable]),
            "failed": len(failed), "episodes": len(usable),
            "zero_adv_groups": _share_constant_groups(torch.tensor([t.reward for t in usable]),
                                                      torch.tensor([t.group for t in usable])),
            "groups_trained": len({t.group for t in (train_on or usable)}),
            "policy_tokens": _mean([t.num_policy_tokens for t in usable]),
            "rollout_tokens_per_s": stats.tokens_per_s, "env_steps_per_s": stats.env_steps_per_s,
            "rollout_seconds": t_rollout, "sync_seconds": time.perf_counter() - t_sync,
            **update,
        }
        metrics["step_seconds"] = time.perf_counter() - t0
        self.step = step
        self.history.append(metrics)
        with open(os.path.join(cfg.run_dir, "metrics.jsonl"), "a") as f:
            f.write(json.dumps(metrics) + "\n")
        if step % cfg.save_every == 0 or step == cfg.steps:
            self.save_checkpoint()
        return metrics

    def _update(self, trajs, step: int) -> dict:
        cfg = self.cfg
        t0 = time.perf_counter()
        batch = collate(trajs, self.tokenizer.pad_token_id)
        scores = torch.tensor([t.reward for t in trajs])
        group = torch.tensor([t.group for t in trajs])
        mask = batch["loss_mask"]
        lengths = batch["attention_mask"].sum(-1).tolist()
        old_logp, ref_logp, old_values = self._no_grad_passes(batch, lengths)
        token_rewards = batch["rewards"]
        if cfg.kl_in_reward and self.ref is not None:   # r_t - beta * KL_t on every policy token
            token_rewards = token_rewards - cfg.kl_coef * kl_penalty(old_logp, ref_logp, cfg.kl_type) * mask
        returns = None
        if cfg.algorithm == "grpo":
            adv = adv_fns.grpo(scores, group, mask)
        elif cfg.algorithm == "rloo":
            adv = adv_fns.rloo(scores, group, mask)
        elif cfg.algorithm == "reinforce_plus_plus":
            adv, _ = adv_fns.reinforce_pp(token_rewards, mask, gamma=cfg.gamma)
        else:
            adv, returns = adv_fns.gae(token_rewards, old_values, mask, gamma=cfg.gamma, lam=cfg.lam)
        kl_as_loss = self.ref is not None and not cfg.kl_in_reward
        t_logprob = time.perf_counter() - t0
        rng = random.Random(cfg.seed * 7_919 + step)
        sums = {"pg_loss": 0.0, "kl": 0.0, "entropy": 0.0, "clip_frac": 0.0, "grad_norm": 0.0}
        if self.critic is not None:
            sums.update(value_loss=0.0, value_clip_frac=0.0)
        n_updates, tokens_seen = 0, 0
        self.model.train()
        for _ in range(cfg.ppo_epochs):
            groups = sorted(set(group.tolist()))
            rng.shuffle(groups)
            for mb_groups in _split(groups, cfg.mini_batches):   # mini-batches keep GRPO groups whole
                rows = [i for i, g in enumerate(group.tolist()) if g in set(mb_groups)]
                global_tokens = int(mask[rows].sum())
                global_seqs = int((mask[rows].sum(-1) > 0).sum())
                self.optimizer.zero_grad()
                if self.critic is not None:
                    self.critic_optimizer.zero_grad()
                for micro in micro_batches([lengths[i] for i in rows], cfg.micro_batch_tokens):
                    idx = [rows[i] for i in micro]
                    mb = trim(batch, idx)
                    T = mb["input_ids"].shape[1]
                    with self.accelerator.autocast():
                        logp, entropy = token_logprobs(self.model, mb["input_ids"], mb["attention_mask"],
                                                       temperature=cfg.temperature, with_entropy=True)
                    m = mb["loss_mask"]
                    pg, info = policy_loss(logp, old_logp[idx, :T], adv[idx, :T], m, clip_ratio=cfg.clip_ratio,
                                           agg=cfg.loss_agg, global_tokens=global_tokens, global_seqs=global_seqs)
                    loss = pg
                    kl_value = torch.zeros(())
                    if self.ref is not None:
                        kl_value = aggregate(kl_penalty(logp, ref_logp[idx, :T], cfg.kl_type), m, cfg.loss_agg,
                                             global_tokens=global_tokens, global_seqs=global_seqs)
                        if kl_as_loss:
                            loss = loss + cfg.kl_coef * kl_value
                    if self.critic is not None:   # separate parameters: one backward serves both
                        with self.accelerator.autocast():
                            values = self.critic(mb["input_ids"], mb["attention_mask"])
                        vf, vinfo = value_loss(values, old_values[idx, :T], returns[idx, :T], m,
                                               clip=cfg.value_clip, agg=cfg.loss_agg, global_tokens=global_tokens,
                                               global_seqs=global_seqs)
                        loss = loss + vf
                        sums["value_loss"] += vf.item()
                        sums["value_clip_frac"] += vinfo["clip_frac"] * int(m.sum()) / max(global_tokens, 1)
                    ent = aggregate(entropy, m, cfg.loss_agg, global_tokens=global_tokens, global_seqs=global_seqs)
                    if cfg.entropy_coef:
                        loss = loss - cfg.entropy_coef * ent
                    self.accelerator.backward(loss)
                    sums["pg_loss"] += pg.item()
                    sums["kl"] += kl_value.item()
                    sums["entropy"] += ent.item()
                    sums["clip_frac"] += info["clip_frac"] * int(m.sum()) / max(global_tokens, 1)
                    tokens_seen += int(mb["attention_mask"].sum())
                grad_norm = self.accelerator.clip_grad_norm_(self.model.parameters(), cfg.grad_clip)
                self.optimizer.step()
                if self.critic is not None:
                    self.accelerator.clip_grad_norm_(self.critic.parameters(), cfg.grad_clip)
                    self.critic_optimizer.step()
                sums["grad_norm"] += float(grad_norm)
                n_updates += 1
        self.model.eval()
        t_update = time.perf_counter() - t0 - t_logprob
        out = {k: v / n_updates for k, v in sums.items()}
        if returns is not None:
            out["explained_variance"] = explained_variance(old_values, returns, mask)
        out.update(optimizer_steps=n_updates, logprob_seconds=t_logprob,
                   update_seconds=t_update, train_tokens_per_s=tokens_seen / max(t_update, 1e-9))
        return out

    @torch.no_grad()
    def _no_grad_passes(self, batch, lengths):
        """Log-probs of the sampled tokens under the current policy (the PPO ratio's denominator) and under the
        frozen reference, and the critic's values: [B, T] each, zeros where a model is absent."""
        B, T = batch["input_ids"].shape
        old, ref, values = torch.zeros(B, T), torch.zeros(B, T), torch.zeros(B, T)
        self.model.eval()
        for rows in micro_batches(lengths, self.cfg.micro_batch_tokens):
            mb = trim(batch, rows)
            t = mb["input_ids"].shape[1]
            with self.accelerator.autocast():
                old[rows, :t] = token_logprobs(self.model, mb["input_ids"], mb["attention_mask"],
                                               temperature=self.cfg.temperature).float()
                if self.ref is not None:
                    ref[rows, :t] = token_logprobs(self.ref, mb["input_ids"], mb["attention_mask"],
                                                   temperature=self.cfg.temperature).float()
                if self.critic is not None:
                    values[rows, :t] = self.critic(mb["input_ids"], mb["attention_mask"]).float()
        return old, ref, values

    def sync_engine(self) -> None:
        self.engine.load_weights(merged_state_dict(self.accelerator.unwrap_model(self.model)).items())

    def fit(self, steps: int | None = None, callback=None) -> list[dict]:
        """Train until `steps` (default cfg.steps) steps are done in total; resumable."""
        steps = steps or self.cfg.steps
        while self.step < steps:
            metrics = self.train_step()
            if callback:
                callback(metrics)
        return self.history

    # ------------------------------------------------------------------------------------------- evaluation
    def evaluate(self, item_ids: list[int] | None = None, *, tag: str = "eval", n: int | None = None,
                 max_rounds: int | None = None) -> dict:
        from ..evaluate import evaluate
        cfg = self.cfg
        item_ids = item_ids if item_ids is not None else self.test_items()
        params = SamplingParams(temperature=cfg.eval_temperature, top_p=cfg.top_p, max_tokens=cfg.max_tokens,
                                seed=cfg.seed + 17)
        trajs_out: list = []
        result = evaluate(self.engine, self.env_factory, item_ids, self.chat, n=n or cfg.eval_samples,
                          max_rounds=max_rounds or cfg.eval_rounds, params=params,
                          max_total_tokens=cfg.max_total_tokens, env_timeout=cfg.env_timeout,
                          trajectories_out=trajs_out)
        write_rollout_log(os.path.join(cfg.run_dir, "rollouts", f"{tag}.jsonl"), trajs_out, tag=tag)
        return result

    # ------------------------------------------------------------------------------------------- checkpoints
    def checkpoint_dir(self, step: int) -> str:
        return os.path.join(self.cfg.run_dir, "ckpt", f"step_{step:05d}")

    def save_checkpoint(self) -> str:
        path = self.checkpoint_dir(self.step)
        tmp = path + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        self.accelerator.save_state(tmp)
        with open(os.path.join(tmp, "trainer_state.json"), "w") as f:
            json.dump({"step": self.step, "config": asdict(self.cfg)}, f)
        shutil.rmtree(path, ignore_errors=True)
        os.replace(tmp, path)   # a checkpoint is complete or absent, never half-written
        for old in sorted(os.listdir(os.path.dirname(path)))[:-2]:
            shutil.rmtree(os.path.join(os.path.dirname(path), old), ignore_errors=True)
        return path

    def _resume(self) -> None:
        ckpt_root = os.path.join(self.cfg.run_dir, "ckpt")
        done = sorted(d for d in os.listdir(ckpt_root) if not d.endswith(".tmp")) if os.path.isdir(ckpt_root) else []
        metrics_path = os.path.join(self.cfg.run_dir, "metrics.jsonl")
        if not done:
            if os.path.exists(metrics_path):
                os.remove(metrics_path)   # a fresh run: earlier metrics without a checkpoint are stale
            return
        path = os.path.join(ckpt_root, done[-1])
        self.accelerator.load_state(path)
        with open(os.path.join(path, "trainer_state.json")) as f:
            self.step = json.load(f)["step"]
        with open(metrics_path) as f:   # keep the metrics of the steps the checkpoint contains, drop the rest
            self.history = [m for m in map(json.loads, f) if m["step"] <= self.step]
        with open(metrics_path, "w") as f:
            f.writelines(json.dumps(m) + "\n" for m in self.history)
        self.sync_engine()
        self.log(f"resumed {self.cfg.name} from step {self.step} ({path})")

    def close(self) -> None:
        self.engine.close()


def informative_groups(trajs: list, limit: int) -> list:
    """The episodes of the first `limit` groups whose members did not all get the same score (DAPO's dynamic
    sampling). Groups are taken in item order, which is a seeded shuffle, so the choice is reproducible."""
    by_group: dict[int, list] = {}
    for t in trajs:
        by_group.setdefault(t.group, []).append(t)
    kept = [eps for eps in by_group.values() if len({t.reward for t in eps}) > 1][:limit]
    return [t for eps in kept for t in eps]


def _mean(xs) -> float:
    xs = list(xs)
    return float(sum(xs) / len(xs)) if xs else 0.0


def _split(xs: list, k: int) -> list[list]:
    k = min(k, len(xs))
    return [xs[i::k] for i in range(k)]


def _share_constant_groups(scores: torch.Tensor, group: torch.Tensor) -> float:
    """Share of groups whose members all got the same score (GRPO gives them zero advantage: no signal)."""
    ids = group.unique()
    constant = [bool((scores[group == g] == scores[group == g][0]).all()) for g in ids]
    return sum(constant) / len(constant)
