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

import contextlib
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
        if self.accelerator.is_main_process:
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
        rank, world = self.accelerator.process_index, self.accelerator.num_processes
        mine = self.items_for_step(step)[rank::world]   # data parallel: each process plays its share of the items
        trajs = run_episodes(self.engine, self.env_factory, mine, self.chat, n=cfg.samples_per_prompt,
                             max_rounds=rounds, params=params, max_total_tokens=cfg.max_total_tokens,
                             env_timeout=cfg.env_timeout, max_concurrency=cfg.max_envs, stats=stats,
                             first_episode=rank * 1_000_000)
        suffix = "" if rank == 0 else f"-rank{rank}"
        write_rollout_log(os.path.join(cfg.run_dir, "rollouts", f"step_{step:05d}{suffix}.jsonl"), trajs, step=step,
                          max_rounds=rounds)
        t_rollout = time.perf_counter() - t0
        failed = [t for t in trajs if t.failed]
        if failed:
            self.log(f"step {step}: {len(failed)} episode(s) failed in the env and are excluded: {failed[0].failed}")
        usable = [t for t in trajs if not t.failed and t.num_policy_tokens > 0]
        if not usable:   # (with several processes this one would leave the others waiting: fail loudly)
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
        metrics = self._mean_over_processes(metrics)
        self.step = step
        self.history.append(metrics)
        if self.accelerator.is_main_process:
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
        per_token = {"old_logp": old_logp, "ref_logp": ref_logp, "adv": adv, "old_values": old_values,
                     "returns": returns if returns is not None else old_values}
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
                # token-mean over the mini-batch of ALL processes: their gradients are summed below
                global_tokens, global_seqs = self._sum_over_processes(int(mask[rows].sum()),
                                                                      int((mask[rows].sum(-1) > 0).sum()))
                if global_tokens == 0:
                    continue
                self.optimizer.zero_grad()
                if self.critic is not None:
                    self.critic_optimizer.zero_grad()
                for micro in micro_batches([lengths[i] for i in rows], cfg.micro_batch_tokens):
                    idx = [rows[i] for i in micro]
                    with self._no_sync():   # DDP must not average here: gradients are summed once, below
                        loss, parts = self._loss(trim(batch, idx), {k: v[idx] for k, v in per_token.items()},
                                                 global_tokens, global_seqs)
                        self.accelerator.backward(loss)
                    for k, v in parts.items():
                        sums[k] += v
                    tokens_seen += int(batch["attention_mask"][idx].sum())
                self._sum_gradients(self.model, self.critic)
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

    def _loss(self, mb: dict, per_token: dict, global_tokens: int, global_seqs: int) -> tuple[torch.Tensor, dict]:
        """The loss of one micro-batch: PPO-clip policy loss + kl_coef * KL (unless the KL is in the reward)
        - entropy_coef * entropy (+ the clipped value loss with a critic), each aggregated over the tokens of the
        whole mini-batch (global_tokens / global_seqs), so micro-batches add up to the mini-batch's loss."""
        cfg = self.cfg
        T, m = mb["input_ids"].shape[1], mb["loss_mask"]
        old_logp, ref_logp, adv, old_values, returns = (per_token[k][:, :T] for k in
                                                         ("old_logp", "ref_logp", "adv", "old_values", "returns"))
        agg = dict(agg=cfg.loss_agg, global_tokens=global_tokens, global_seqs=global_seqs)
        share = int(m.sum()) / max(global_tokens, 1)   # this micro-batch's share of the mini-batch's tokens
        with self.accelerator.autocast():
            logp, entropy = token_logprobs(self.model, mb["input_ids"], mb["attention_mask"],
                                           temperature=cfg.temperature, with_entropy=True)
        pg, info = policy_loss(logp, old_logp, adv, m, clip_ratio=cfg.clip_ratio, **agg)
        ent = aggregate(entropy, m, cfg.loss_agg, global_tokens=global_tokens, global_seqs=global_seqs)
        loss = pg - cfg.entropy_coef * ent
        parts = {"pg_loss": pg.item(), "entropy": ent.item(), "clip_frac": info["clip_frac"] * share, "kl": 0.0}
        if self.ref is not None:
            kl = aggregate(kl_penalty(logp, ref_logp, cfg.kl_type), m, cfg.loss_agg, global_tokens=global_tokens,
                           global_seqs=global_seqs)
            parts["kl"] = kl.item()
            if not cfg.kl_in_reward:
                loss = loss + cfg.kl_coef * kl
        if self.critic is not None:   # separate parameters: one backward serves both
            with self.accelerator.autocast():
                values = self.critic(mb["input_ids"], mb["attention_mask"])
            vf, vinfo = value_loss(values, old_values, returns, m, clip=cfg.value_clip, **agg)
            loss = loss + vf
            parts.update(value_loss=vf.item(), value_clip_frac=vinfo["clip_frac"] * share)
        return loss, parts

    # ------------------------------------------------------------------------------ several processes (DDP)
    # Every process plays its own items and computes gradients on them without communicating; once per mini-batch
    # the gradients are summed over processes (each loss was divided by the global token count), so the update is
    # exactly the one a single process would make on the union of the batches, and every process makes the same
    # number of collective calls however its episodes are split into micro-batches.
    @contextlib.contextmanager
    def _no_sync(self):
        with contextlib.ExitStack() as stack:
            for module in (self.model, self.critic):
                if module is not None:
                    stack.enter_context(self.accelerator.no_sync(module))
            yield

    def _sum_over_processes(self, *counts: int) -> list[int]:
        if self.accelerator.num_processes == 1:
            return list(counts)
        return [int(x) for x in self.accelerator.reduce(torch.tensor(counts, dtype=torch.float64), "sum")]

    def _sum_gradients(self, *modules) -> None:
        if self.accelerator.num_processes == 1:
            return
        for module in modules:
            for p in (module.parameters() if module is not None else ()):
                if p.requires_grad:
                    if p.grad is None:
                        p.grad = torch.zeros_like(p)
                    torch.distributed.all_reduce(p.grad)

    def _mean_over_processes(self, metrics: dict) -> dict:
        if self.accelerator.num_processes == 1:
            return metrics
        keys = sorted(k for k, v in metrics.items() if isinstance(v, (int, float)) and k != "step")
        means = self.accelerator.reduce(torch.tensor([float(metrics[k]) for k in keys], dtype=torch.float64), "mean")
        return {**metrics, **dict(zip(keys, means.tolist()))}

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
                          max_concurrency=cfg.max_envs, trajectories_out=trajs_out)
        write_rollout_log(os.path.join(cfg.run_dir, "rollouts", f"{tag}.jsonl"), trajs_out, tag=tag)
        return result

    # ------------------------------------------------------------------------------------------- checkpoints
    def checkpoint_dir(self, step: int) -> str:
        return os.path.join(self.cfg.run_dir, "ckpt", f"step_{step:05d}")

    def save_checkpoint(self) -> str:
        path = self.checkpoint_dir(self.step)
        tmp = path + ".tmp"
        main = self.accelerator.is_main_process
        if main:
            shutil.rmtree(tmp, ignore_errors=True)
        self.accelerator.wait_for_everyone()
        self.accelerator.save_state(tmp)   # every process: each saves its own random state
        self.accelerator.wait_for_everyone()
        if main:
            with open(os.path.join(tmp, "trainer_state.json"), "w") as f:
                json.dump({"step": self.step, "config": asdict(self.cfg)}, f)
            shutil.rmtree(path, ignore_errors=True)
            os.replace(tmp, path)   # a checkpoint is complete or absent, never half-written
            for old in sorted(os.listdir(os.path.dirname(path)))[:-2]:
                shutil.rmtree(os.path.join(os.path.dirname(path), old), ignore_errors=True)
        self.accelerator.wait_for_everyone()
        return path

    def _resume(self) -> None:
        ckpt_root = os.path.join(self.cfg.run_dir, "ckpt")
        done = sorted(d for d in os.listdir(ckpt_root) if not d.endswith(".tmp")) if os.path.isdir(ckpt_root) else []
        metrics_path = os.path.join(self.cfg.run_dir, "metrics.jsonl")
        if not done:
            if os.path.exists(metrics_path) and self.accelerator.is_main_process:
                os.remove(metrics_path)   # a fresh run: earlier metrics without a checkpoint are stale
            return
        path = os.path.join(ckpt_root, done[-1])
        self.accelerator.load_state(path)
        with open(os.path.join(path, "trainer_state.json")) as f:
            self.step = json.load(f)["step"]
        with open(metrics_path) as f:   # keep the metrics of the steps the checkpoint contains, drop the rest
            self.history = [m for m in map(json.loads, f) if m["step"] <= self.step]
        if self.accelerator.is_main_process:
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
    """Exactly k parts (some empty when len(xs) < k): every process must take the same number of steps."""
    return [xs[i::k] for i in range(k)]


def _share_constant_groups(scores: torch.Tensor, group: torch.Tensor) -> float:
    """Share of groups whose members all got the same score (GRPO gives them zero advantage: no signal)."""
    ids = group.unique()
    constant = [bool((scores[group == g] == scores[group == g][0]).all()) for g in ids]
    return sum(constant) / len(constant)


# ----------------------------------------------------------------------------------------------------- command line
def plan(cfg: RunConfig) -> str:
    """What a run of `cfg` will do, without building anything (the `--dry-run` / `dry_run=True` output)."""
    schedule = make_schedule(cfg.schedule, cfg.rounds, every=cfg.rounds_every)
    stages, start = [], 1
    for step in range(1, cfg.steps + 1):   # contiguous step ranges with the same horizon
        if step == cfg.steps or schedule.rounds_at(step + 1, []) != schedule.rounds_at(step, []):
            stages.append(f"steps {start}-{step}: H={schedule.rounds_at(step, [])}")
            start = step + 1
    train, test = item_pool(cfg, "train"), item_pool(cfg, "test")
    episodes = cfg.prompts_per_step * cfg.oversample * cfg.samples_per_prompt
    local = models.is_available(cfg.model)
    lines = [
        f"run {cfg.name!r}: {cfg.algorithm} on {cfg.env} with {cfg.model} ({cfg.preset} preset) -> {cfg.run_dir}",
        f"model: {'found locally' if local else 'NOT available offline: put it in the HF cache or pass a path'}",
        f"items: {len(train)} train, {len(test)} test (eval on {min(cfg.eval_items, len(test))}, H={cfg.eval_rounds})",
        f"each step: {cfg.prompts_per_step * cfg.oversample} prompts x {cfg.samples_per_prompt} episodes = "
        f"{episodes} episodes, <= {cfg.max_tokens} tokens per reply, <= {cfg.max_total_tokens} per trajectory",
        f"update: {cfg.ppo_epochs} epoch(s) x {cfg.mini_batches} mini-batches, lr {cfg.lr:g}, clip {cfg.clip_ratio}, "
        f"KL {cfg.kl_type} x {cfg.kl_coef:g} ({'in the reward' if cfg.kl_in_reward else 'loss'}), "
        f"entropy x {cfg.entropy_coef:g}, {'LoRA r=%d' % cfg.lora_rank if cfg.lora_rank else 'full fine-tuning'}, "
        f"{'bf16 autocast' if cfg.bf16 else 'fp32'}",
        f"horizon ({cfg.schedule}): " + "; ".join(stages),
        f"total: {cfg.steps} steps, {cfg.steps * episodes:,} episodes, checkpoint every {cfg.save_every} steps",
        f"engine: {cfg.engine}; env: {cfg.env_url or 'in-process'}",
    ]
    return "\n".join(lines)


def main(argv=None) -> None:
    """python -m agentgym_nb.train.rl --env babyai --preset cpu [--dry-run] [key=value ...]
    Under `accelerate launch --config_file configs/accelerate/ddp_cpu_2proc.yaml -m agentgym_nb.train.rl ...` every
    process plays its share of the items and the gradients are summed."""
    import argparse
    from ..config import make_config
    p = argparse.ArgumentParser(prog="python -m agentgym_nb.train.rl", description="Online RL for a multi-turn agent.")
    p.add_argument("--env", default="babyai")
    p.add_argument("--preset", default=None, help="smoke, cpu or paper (default: $AGENTGYM_NB_PRESET, else cpu)")
    p.add_argument("--name", default=None, help="run name: outputs/runs/<name> (default: <env>-<algorithm>)")
    p.add_argument("--dry-run", action="store_true", help="validate the config and print the plan; build nothing")
    p.add_argument("overrides", nargs="*", help="RunConfig fields or AgentGym-RL dotted keys, e.g. steps=10 "
                                                "algorithm.rounds_ctrl.rounds=[2,4,6]")
    args = p.parse_args(argv)
    try:
        cfg = make_config(preset=args.preset, env=args.env, overrides=args.overrides)
    except ValueError as e:
        p.error(str(e))
    if args.name or cfg.name == "run":
        cfg.name = args.name or f"{cfg.env}-{cfg.algorithm}"
    print(plan(cfg), flush=True)
    if args.dry_run:
        return
    trainer = Trainer(cfg)
    trainer.fit(callback=lambda m: trainer.accelerator.is_main_process and print(
        f"step {m['step']}: H={m['max_rounds']} reward {m['reward']:.3f} success {m['success']:.2f} "
        f"kl {m['kl']:.4f} ({m['step_seconds']:.1f}s)", flush=True))
    trainer.close()


if __name__ == "__main__":
    main()
