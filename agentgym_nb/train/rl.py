"""Online RL for multi-turn agents (GRPO by default), one Accelerate process on a laptop, the same code on GPUs.

One training step:
    1. horizon   H = schedule.rounds_at(step)                    (ScalingInter-RL: short first, longer later)
    2. rollout   items_for_step(step) x n episodes, each at most H replies, sampled by the engine
                 (with filter_groups: oversampled items, then only groups whose scores differ are kept: a group
                 where every episode scored the same has zero advantage and would only dilute the update; when
                 no group is left and, without a critic, every advantage on every process is 0, the step measures
                 its losses and skips the optimizer)
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
from ..algos.losses import aggregate, explained_variance, kl_penalty, policy_loss, token_logprobs, value_loss
from ..config import RunConfig, item_pool, round_schedule
from ..evaluate.runner import evaluate
from ..rollout.engine import SamplingParams, make_engine
from ..rollout.runner import RolloutStats, run_episodes, write_rollout_log
from ..rollout.trajectory import ChatFormat, collate
from .common import (add_lora, full_state_dict, merged_state_dict, micro_batches, native_bf16, set_threads,
                     shard, trim)


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


SUMMED_METRICS = ("pg_loss", "kl", "entropy", "clip_frac", "value_loss", "value_clip_frac", "episodes", "failed",
                  "groups_trained", "sampled_tokens")


class Trainer:
    def __init__(self, cfg: RunConfig, *, log=print):
        from accelerate import Accelerator
        from transformers import AutoModelForCausalLM
        self.cfg, self.log = cfg, log
        set_threads(cfg.threads)
        self.model_dir = models.resolve_config(cfg, log=log)
        self.tokenizer = models.load_tokenizer(self.model_dir)
        self.chat = ChatFormat(self.tokenizer)
        self.accelerator = Accelerator(cpu=not torch.cuda.is_available(),
                                       mixed_precision="bf16" if cfg.bf16 else "no")
        if cfg.bf16 and not native_bf16():
            log("warning: bf16=True on hardware without bf16 kernels: autocast emulates it, several times slower "
                "than fp32 (bf16=False is faster here)")
        self.sharding = sharding_of(self.accelerator)
        check_rollout_tp(cfg.rollout_tp, self.accelerator.num_processes,
                         torch.cuda.device_count() if torch.cuda.is_available() else None)
        model = AutoModelForCausalLM.from_pretrained(self.model_dir, dtype=torch.float32)
        if cfg.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.ref = None
        if cfg.kl_coef > 0:
            self.ref = copy.deepcopy(model).eval().requires_grad_(False)
        if cfg.lora_rank:
            model = add_lora(model, r=cfg.lora_rank)
        self.estimator = adv_fns.ESTIMATORS[cfg.algorithm]
        critic = Critic(self.model_dir) if self.estimator.needs_critic else None
        self.model, self.optimizer, self.critic, self.critic_optimizer = self._place(model, critic)
        self.engine = make_engine(cfg.engine, self.model_dir, max_model_len=cfg.max_total_tokens + cfg.max_tokens,
                                  seed=cfg.seed, tokenizer=self.tokenizer, kv_cache_gib=cfg.kv_cache_gib,
                                  tensor_parallel_size=cfg.rollout_tp)
        set_threads(cfg.threads)   # the engine may have changed torch's thread count
        self.schedule = round_schedule(cfg)
        self.step = 0
        self.history: list[dict] = []
        os.makedirs(cfg.run_dir, exist_ok=True)
        if self.accelerator.is_main_process:
            with open(os.path.join(cfg.run_dir, "config.json"), "w") as f:
                f.write(cfg.to_json())
        self._resume()

    def _place(self, model, critic):
        """The models on this process's device, split as the launch config says (`sharding_of`), and their
        optimizers: (model, optimizer, critic, critic_optimizer). Under FSDP the optimizers are built over the
        shards, so each process keeps only its part of Adam's state; the frozen reference is sharded too (fp32,
        1/world of it per process). DeepSpeed shards only the model it drives: the reference is a bf16 copy."""
        cfg, acc = self.cfg, self.accelerator
        if self.sharding in ("fsdp", "deepspeed") and cfg.lora_rank:
            raise ValueError(f"LoRA (lora_rank={cfg.lora_rank}) with {self.sharding} sharding is not supported: the "
                             "adapters are small and the frozen base fits on each GPU; launch with a DDP config "
                             "(ddp_cpu_2proc.yaml, or distributed_type MULTI_GPU), or use lora_rank=0")
        if self.sharding == "deepspeed" and critic is not None:
            raise ValueError("algorithm gae trains a second model (the critic); accelerate drives one DeepSpeed "
                             "engine per Accelerator: launch with configs/accelerate/fsdp_8gpu.yaml instead")

        def adamw(module, lr):
            return torch.optim.AdamW([p for p in module.parameters() if p.requires_grad], lr=lr,
                                     weight_decay=cfg.weight_decay)

        critic_lr = cfg.critic_lr or cfg.lr
        if self.sharding == "fsdp":
            settings = fsdp_settings(acc)
            model = shard(model, **settings)
            if self.ref is not None:
                self.ref = shard(self.ref, **settings)
            if critic is None:
                return model, adamw(model, cfg.lr), None, None
            critic = shard(critic, **settings)
            return model, adamw(model, cfg.lr), critic, adamw(critic, critic_lr)
        if self.ref is not None:
            self.ref = self.ref.to(acc.device)
            if self.sharding == "deepspeed":
                self.ref = self.ref.to(torch.bfloat16)
        model, optimizer = acc.prepare(model, adamw(model, cfg.lr))
        if self.sharding == "deepspeed" and model.gradient_clipping() != cfg.grad_clip:
            raise ValueError(f"the DeepSpeed config clips gradients at {model.gradient_clipping()}, the run config "
                             f"at grad_clip={cfg.grad_clip}: set gradient_clipping to {cfg.grad_clip} in its JSON")
        if critic is None:
            return model, optimizer, None, None
        return (model, optimizer, *acc.prepare(critic, adamw(critic, critic_lr)))

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
        train_on = usable
        if cfg.filter_groups:
            # Only groups whose scores differ carry signal. With none, the step measures its losses (KL, entropy) on
            # as many groups as it would have trained on, and skips the optimizer.
            train_on = informative_groups(usable, cfg.prompts_per_step) or first_groups(usable, cfg.prompts_per_step)
        update = self._update(train_on, step)
        learn = update["optimizer_steps"] > 0
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
            "groups_trained": len({t.group for t in train_on}) if learn else 0,
            "policy_tokens": _mean([t.num_policy_tokens for t in usable]),
            "sampled_tokens": sum(t.num_policy_tokens for t in trajs),   # every episode played, kept or not
            "rollout_tokens_per_s": stats.tokens_per_s, "env_steps_per_s": stats.env_steps_per_s,
            "rollout_seconds": t_rollout, "sync_seconds": time.perf_counter() - t_sync,
            **update,
        }
        if cfg.schedule == "adaptive" and cfg.adaptive_metric == "success_in_reach":
            reach = envs.expert_turns(cfg.env, sorted({t.item_id for t in usable}))
            metrics["success_in_reach"] = _mean([float(t.success) for t in usable
                                                 if reach[t.item_id] is not None and reach[t.item_id] <= rounds])
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
        """PPO epochs over mini-batches of `trajs`. When dynamic sampling left no signal (every advantage 0, no
        critic), the same passes measure the losses without a backward pass or an optimizer step."""
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
        adv, returns = self.estimator.compute(adv_fns.Credit(scores, group, mask, token_rewards, old_values,
                                                             gamma=cfg.gamma, lam=cfg.lam))
        if self.estimator.whiten:
            adv = self._whiten(adv, mask)
        per_token = {"old_logp": old_logp, "ref_logp": ref_logp, "adv": adv, "old_values": old_values,
                     "returns": returns if returns is not None else old_values}
        if cfg.filter_groups and self.critic is None:
            # Dynamic sampling left no signal on any process: every advantage is 0 (GRPO and RLOO when no group's
            # scores differ; REINFORCE++ when every score is equal, gamma is 1 and no KL is in the reward). An
            # optimizer step would only replay Adam's momentum from earlier steps; the losses (KL, entropy) are
            # measured.
            learn = self._sum_over_processes(int(bool(adv.any())))[0] > 0
        else:
            learn = True
        t_logprob = time.perf_counter() - t0
        rng = random.Random(cfg.seed * 7_919 + step)
        sums = {"pg_loss": 0.0, "kl": 0.0, "entropy": 0.0, "clip_frac": 0.0, "dual_clip_frac": 0.0, "grad_norm": 0.0}
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
                micros = [[rows[i] for i in m] for m in micro_batches([lengths[i] for i in rows],
                                                                      cfg.micro_batch_tokens)]
                passes = self._passes(len(micros))
                for j in range(passes):
                    real = j < len(micros)   # past its own micro-batches a process repeats one, weighted 0
                    idx = micros[j] if real else micros[-1] if micros else [0]
                    # DDP must not average here: gradients are summed once, below
                    with self._no_sync(), torch.set_grad_enabled(learn):
                        loss, parts = self._loss(self._on_device(trim(batch, idx)),
                                                 self._on_device({k: v[idx] for k, v in per_token.items()}),
                                                 global_tokens, global_seqs)
                        if learn:
                            self._backward(loss if real else loss * 0.0, last=j == passes - 1)
                    if real:
                        for k, v in parts.items():
                            sums[k] += v
                        tokens_seen += int(batch["attention_mask"][idx].sum())
                if learn:
                    sums["grad_norm"] += self._optimizer_step()
                n_updates += 1
        self.model.eval()
        t_update = time.perf_counter() - t0 - t_logprob
        out = {k: v / n_updates for k, v in sums.items()}
        if returns is not None:
            out["explained_variance"] = explained_variance(old_values, returns, mask)
        out.update(optimizer_steps=n_updates if learn else 0, logprob_seconds=t_logprob,
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
        pg, info = policy_loss(logp, old_logp, adv, m, clip_ratio=cfg.clip_ratio, clip_ratio_high=cfg.clip_ratio_high,
                               dual_clip_c=cfg.clip_ratio_c, **agg)
        ent = aggregate(entropy, m, cfg.loss_agg, global_tokens=global_tokens, global_seqs=global_seqs)
        loss = pg - cfg.entropy_coef * ent
        parts = {"pg_loss": pg.item(), "entropy": ent.item(), "clip_frac": info["clip_frac"] * share, "kl": 0.0,
                 "dual_clip_frac": info["dual_clip_frac"] * share}
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

    # ------------------------------------------------------------------------ several processes (DDP, FSDP, ZeRO)
    # Every process plays its own items; each micro-batch's loss is divided by the token count of the mini-batch of
    # ALL processes, so the SUM of all processes' gradients is the gradient a single process would get on the union
    # of the batches. Where that sum is taken depends on the sharding:
    #   ddp        no communication during the micro-batches (no_sync); one all_reduce(sum) per mini-batch, so every
    #              process makes the same collective calls however its episodes are split into micro-batches.
    #   fsdp       each backward reduce-scatters every gradient into its owner's shard, as a sum (`shard` sets the
    #              divide factor to 1), so full-size gradients never accumulate on one device.
    #   deepspeed  ZeRO reduce-scatters the MEAN over processes: the loss is multiplied by the world size. The last
    #              micro-batch of a mini-batch is marked as the accumulation boundary, where the engine clips and steps.
    # Under fsdp and deepspeed every forward and backward also gathers parameters from all processes, so every
    # process makes as many passes as the busiest one (`_passes`): the extra ones repeat a micro-batch with weight 0.
    @contextlib.contextmanager
    def _no_sync(self):
        with contextlib.ExitStack() as stack:
            if self.sharding == "ddp":
                for module in (self.model, self.critic):
                    if module is not None:
                        stack.enter_context(self.accelerator.no_sync(module))
            yield

    def _passes(self, n: int) -> int:
        """How many forward (and backward) passes this process makes for its n micro-batches."""
        if self.sharding not in ("fsdp", "deepspeed"):
            return n
        most = torch.tensor([n], device=self.accelerator.device)
        torch.distributed.all_reduce(most, op=torch.distributed.ReduceOp.MAX)
        return int(most)

    def _backward(self, loss: torch.Tensor, *, last: bool) -> None:
        if self.sharding == "deepspeed":
            self.model.set_gradient_accumulation_boundary(last)
            self.model.backward(loss * self.accelerator.num_processes)
        else:
            self.accelerator.backward(loss)

    def _optimizer_step(self) -> float:
        """Sum the gradients over processes where no backward did (ddp), clip, step: the gradient norm before
        clipping. DeepSpeed's engine clips (at its config's gradient_clipping) and steps by itself."""
        if self.sharding == "deepspeed":
            self.model.step()
            return float(self.model.get_global_grad_norm())
        self._sum_gradients(self.model, self.critic)
        grad_norm = self._clip(self.model)
        self.optimizer.step()
        if self.critic is not None:
            self._clip(self.critic)
            self.critic_optimizer.step()
        return grad_norm

    def _clip(self, module) -> float:
        if self.sharding == "fsdp":   # DTensor gradients: torch's clip takes the norm over all shards
            return float(torch.nn.utils.clip_grad_norm_(module.parameters(), self.cfg.grad_clip).full_tensor())
        return float(self.accelerator.clip_grad_norm_(module.parameters(), self.cfg.grad_clip))

    def _on_device(self, tensors: dict) -> dict:
        return {k: v.to(self.accelerator.device) for k, v in tensors.items()}

    def _whiten(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """masked_whiten by the mean and variance over the trainable tokens of ALL processes (their sums, sums of
        squares and counts added up): each process's advantages are then those of the union of the batches."""
        moments = adv_fns.masked_moments(x, mask)
        if self.accelerator.num_processes > 1:
            moments = self.accelerator.reduce(moments.to(self.accelerator.device), "sum").cpu()
        return adv_fns.masked_whiten(x, mask, moments=moments)

    def _sum_over_processes(self, *counts: int) -> list[int]:
        if self.accelerator.num_processes == 1:
            return list(counts)
        counts = torch.tensor(counts, dtype=torch.float64, device=self.accelerator.device)
        return [int(x) for x in self.accelerator.reduce(counts, "sum")]

    def _sum_gradients(self, *modules) -> None:
        if self.sharding != "ddp":
            return
        for module in modules:
            for p in (module.parameters() if module is not None else ()):
                if p.requires_grad:
                    if p.grad is None:
                        p.grad = torch.zeros_like(p)
                    torch.distributed.all_reduce(p.grad)

    def _mean_over_processes(self, metrics: dict) -> dict:
        """The mean over processes of every number, except SUMMED_METRICS: a process's loss terms are its share of
        the global mini-batch's (divided by the token count of all processes), its counts its own part."""
        world = self.accelerator.num_processes
        if world == 1:
            return metrics
        keys = sorted(k for k, v in metrics.items() if isinstance(v, (int, float)) and k != "step")
        sums = self.accelerator.reduce(torch.tensor([float(metrics[k]) for k in keys], dtype=torch.float64,
                                                    device=self.accelerator.device), "sum")
        return {**metrics, **{k: v if k in SUMMED_METRICS else v / world for k, v in zip(keys, sums.tolist())}}

    @torch.no_grad()
    def _no_grad_passes(self, batch, lengths):
        """Log-probs of the sampled tokens under the current policy (the PPO ratio's denominator) and under the
        frozen reference, and the critic's values: [B, T] each, zeros where a model is absent."""
        B, T = batch["input_ids"].shape
        old, ref, values = torch.zeros(B, T), torch.zeros(B, T), torch.zeros(B, T)
        self.model.eval()
        groups = micro_batches(lengths, self.cfg.micro_batch_tokens)
        for j in range(self._passes(len(groups))):
            rows = groups[min(j, len(groups) - 1)]   # past its own, a process repeats its last (same result)
            mb = self._on_device(trim(batch, rows))
            t = mb["input_ids"].shape[1]
            with self.accelerator.autocast():
                old[rows, :t] = token_logprobs(self.model, mb["input_ids"], mb["attention_mask"],
                                               temperature=self.cfg.temperature).float().cpu()
                if self.ref is not None:
                    ref[rows, :t] = token_logprobs(self.ref, mb["input_ids"], mb["attention_mask"],
                                                   temperature=self.cfg.temperature).float().cpu()
                if self.critic is not None:
                    values[rows, :t] = self.critic(mb["input_ids"], mb["attention_mask"]).float().cpu()
        return old, ref, values

    def sync_engine(self) -> None:
        model = self.accelerator.unwrap_model(self.model)
        if self.sharding in ("fsdp", "deepspeed"):   # every process gathers the whole model for its own engine
            self.engine.load_weights(full_state_dict(model).items())
        else:
            self.engine.load_weights(merged_state_dict(model).items())

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
        cfg = self.cfg
        item_ids = item_ids if item_ids is not None else self.test_items()
        params = SamplingParams(temperature=cfg.eval_temperature, top_p=cfg.top_p, max_tokens=cfg.max_tokens,
                                seed=cfg.seed + 17)
        trajs_out: list = []
        result = evaluate(self.engine, self.env_factory, item_ids, self.chat, n=n or cfg.eval_samples,
                          max_rounds=max_rounds or cfg.eval_rounds, params=params,
                          max_total_tokens=cfg.max_total_tokens, env_timeout=cfg.env_timeout,
                          max_concurrency=cfg.max_envs, trajectories_out=trajs_out, desc=f"evaluate ({tag})")
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
        if self.sharding == "fsdp":
            self._fsdp_state(tmp, load=False)
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

    def _fsdp_state(self, path: str, *, load: bool) -> None:
        """Save or load the sharded models and optimizers, every process writing or reading its own shards
        (torch.distributed.checkpoint; accelerate's save_state only knows the models it prepared itself)."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
        pairs = {"policy": (self.model, self.optimizer)}
        if self.critic is not None:
            pairs["critic"] = (self.critic, self.critic_optimizer)
        state = {name: dict(zip(("model", "optim"), get_state_dict(m, o))) for name, (m, o) in pairs.items()}
        if not load:
            dcp.save(state, checkpoint_id=os.path.join(path, "fsdp"))
            return
        dcp.load(state, checkpoint_id=os.path.join(path, "fsdp"))
        for name, (m, o) in pairs.items():
            set_state_dict(m, o, model_state_dict=state[name]["model"], optim_state_dict=state[name]["optim"])

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
        if self.sharding == "fsdp":
            self._fsdp_state(path, load=True)
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


def first_groups(trajs: list, limit: int) -> list:
    """The episodes of the first `limit` groups, in item order."""
    keep = set(list(dict.fromkeys(t.group for t in trajs))[:limit])
    return [t for t in trajs if t.group in keep]


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


# ------------------------------------------------------------------------------------------ several processes
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAUNCH_CONFIGS = os.path.join(REPO, "configs", "accelerate")


def sharding_of(accelerator) -> str:
    """How the `accelerate launch` config splits the model over processes: "deepspeed" (ZeRO), "fsdp" (FSDP2),
    "ddp" (a whole replica per process) or "none" (one process). Accelerate turns an FSDP config into DDP when there
    is no GPU, but FSDP2 itself runs on gloo: the launcher's request (ACCELERATE_USE_FSDP) is honoured on CPUs too."""
    from accelerate.utils import DistributedType
    if accelerator.distributed_type == DistributedType.DEEPSPEED:
        return "deepspeed"
    if accelerator.distributed_type == DistributedType.FSDP or (
            accelerator.num_processes > 1 and os.environ.get("ACCELERATE_USE_FSDP", "").lower() == "true"):
        return "fsdp"
    return "ddp" if accelerator.num_processes > 1 else "none"


def fsdp_settings(accelerator) -> dict:
    """`shard`'s options from the launch config's fsdp_config (accelerate's own reading of it)."""
    from accelerate.utils import FullyShardedDataParallelPlugin
    plugin = getattr(accelerator.state, "fsdp_plugin", None) or FullyShardedDataParallelPlugin()
    if plugin.fsdp_version != 2:
        raise ValueError(f"fsdp_version {plugin.fsdp_version}: the trainer shards with FSDP2 (fully_shard); set "
                         "fsdp_version: 2 in the accelerate config")
    if plugin.activation_checkpointing:
        raise ValueError("fsdp_activation_checkpointing: set gradient_checkpointing=True in the run config instead "
                         "(it applies under every launch config) and fsdp_activation_checkpointing: false")
    return dict(reshard_after_forward=plugin.reshard_after_forward, offload_policy=plugin.cpu_offload)


def check_rollout_tp(tp: int, processes: int, gpus: int | None) -> None:
    """Every trainer process owns one engine on its own device, so a tensor-parallel engine (tp devices) needs a
    one-process launch, and tp must divide the GPUs the process sees (None: unknown or CPU)."""
    if tp == 1:
        return
    if processes > 1:
        raise ValueError(f"rollout_tp={tp} with {processes} trainer processes: each process owns one engine on its "
                         f"own GPU. Use rollout_tp=1 (as the paper's scripts do) or a one-process launch")
    if gpus is not None and gpus % tp:
        raise ValueError(f"rollout_tp={tp} must divide the number of GPUs ({gpus})")


def launch_config_path(name: str) -> str:
    """A launch config by path, or by name in configs/accelerate ("fsdp_8gpu")."""
    if os.path.isfile(name):
        return name
    path = os.path.join(LAUNCH_CONFIGS, name if name.endswith(".yaml") else name + ".yaml")
    if os.path.isfile(path):
        return path
    names = sorted(f[:-5] for f in os.listdir(LAUNCH_CONFIGS) if f.endswith(".yaml")) \
        if os.path.isdir(LAUNCH_CONFIGS) else []
    raise ValueError(f"launch_config {name!r} is neither a file nor one of {names} in {LAUNCH_CONFIGS}")


def check_launch(path: str, cfg: RunConfig) -> dict:
    """Read an accelerate launch config as `accelerate launch` does and check it against the run. Every key must be
    one accelerate knows (the launcher silently ignores a misspelt fsdp_config or deepspeed_config key); FSDP must
    be version 2; a DeepSpeed JSON must clip at grad_clip and leave the accumulation boundary to the trainer; every
    process needs a prompt per step. Returns processes, sharding and what the plan shows of it."""
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.commands.launch import launch_command_parser
    launch = load_config_from_file(path)   # raises on an unknown top-level key
    options = {action.dest for action in launch_command_parser()._actions}
    for section, prefix in (("fsdp_config", "fsdp_"), ("deepspeed_config", "")):
        for key in getattr(launch, section, None) or {}:
            if (key if key.startswith(prefix) else prefix + key) not in options:
                raise ValueError(f"{path}: {section}.{key} is not an accelerate option (see `accelerate launch "
                                 "--help`)")
    processes = launch.num_processes * launch.num_machines
    kind = getattr(launch.distributed_type, "value", str(launch.distributed_type))
    sharding = {"FSDP": "fsdp", "DEEPSPEED": "deepspeed"}.get(kind, "ddp" if processes > 1 else "none")
    out = dict(processes=processes, sharding=sharding, detail="")
    if sharding == "fsdp":
        fsdp = {k if k.startswith("fsdp_") else "fsdp_" + k: v for k, v in launch.fsdp_config.items()}
        if int(fsdp.get("fsdp_version", 1)) != 2:
            raise ValueError(f"{path}: fsdp_version must be 2 (the trainer shards with FSDP2's fully_shard)")
        if fsdp.get("fsdp_activation_checkpointing"):
            raise ValueError(f"{path}: fsdp_activation_checkpointing must be false: the run config's "
                             "gradient_checkpointing does it under every launch config")
        offload = " + parameters offloaded to the CPU" if fsdp.get("fsdp_offload_params") else ""
        out["detail"] = f"FSDP2 full shard{offload} (policy, its gradients and Adam state; the reference)"
    if sharding == "deepspeed":
        ds_file = (launch.deepspeed_config or {}).get("deepspeed_config_file")
        if not ds_file:
            raise ValueError(f"{path}: the trainer needs a deepspeed_config_file (it sets "
                             "train_micro_batch_size_per_gpu, which accelerate cannot infer without a dataloader)")
        with open(ds_file if os.path.isfile(ds_file) else os.path.join(REPO, ds_file)) as f:   # launched from REPO
            ds = json.load(f)
        if ds.get("gradient_clipping") != cfg.grad_clip:
            raise ValueError(f"{ds_file}: gradient_clipping {ds.get('gradient_clipping')} != grad_clip "
                             f"{cfg.grad_clip} of the run (DeepSpeed clips inside its engine)")
        if ds.get("gradient_accumulation_steps") not in (1, "auto"):
            raise ValueError(f"{ds_file}: gradient_accumulation_steps must be 1 or auto: the trainer marks the last "
                             "micro-batch of each mini-batch as the boundary itself")
        if not isinstance(ds.get("train_micro_batch_size_per_gpu"), int):
            raise ValueError(f"{ds_file}: train_micro_batch_size_per_gpu must be an integer")
        if ds.get("bf16", {}).get("enabled") not in ("auto", cfg.bf16):
            raise ValueError(f"{ds_file}: bf16.enabled must be 'auto' or {cfg.bf16} (the run's bf16)")
        zero = ds.get("zero_optimization", {})
        out["detail"] = (f"DeepSpeed ZeRO-{zero.get('stage', 0)} (policy, its gradients and Adam state); the "
                         f"reference a bf16 copy per GPU")
    if sharding == "ddp":
        out["detail"] = "DDP (a whole replica per process, gradients summed once per mini-batch)"
    if cfg.prompts_per_step * cfg.oversample < processes:
        raise ValueError(f"{processes} processes but {cfg.prompts_per_step * cfg.oversample} prompts per step: "
                         "every process plays its share of the prompts and needs at least one")
    check_rollout_tp(cfg.rollout_tp, processes, None)
    return out


# The paper's models, from their config.json, so a run can be planned without the weights.
KNOWN_SHAPES = {
    "Qwen/Qwen2.5-7B-Instruct": dict(params=7.62e9, embeddings=2 * 152064 * 3584, vocab=152064, hidden=3584,
                                     layers=28, kv_dim=4 * 128),
    "Qwen/Qwen2.5-3B-Instruct": dict(params=3.09e9, embeddings=151936 * 2048, vocab=151936, hidden=2048,
                                     layers=36, kv_dim=2 * 128),
}
GPU_GB = 80   # an A100/H100 80 GB, the GPUs of an 8-GPU AgentGym-RL run


def memory_per_gpu(cfg: RunConfig, shape: dict, processes: int, sharding: str) -> dict[str, float]:
    """Estimated GB (1e9 bytes) one process needs on its GPU, full fine-tuning, P parameters, t = micro_batch_tokens:
        policy       16 P: fp32 weights, gradients and Adam's two moments (/ processes under fsdp and deepspeed)
        reference    4 P fp32 (/ processes under fsdp); 2 P under deepspeed (a bf16 copy); 0 without KL
        gathered     the units in flight, two blocks and the root (embeddings and head): fp32 under fsdp, bf16
                     under deepspeed
        activations  with gradient checkpointing each block's bf16 input, 2 t h per block, plus one block's
                     internals, ~34 t h (Korthikanti et al. 2022, flash attention); without, 34 t h per block
        logits       14 t V: bf16 logits, their fp32 copy, the entropy's softmax and the fp32 gradient
        vllm         2 P / rollout_tp (bf16 weights), and its KV cache kv_cache_gib"""
    P, t, h, layers = shape["params"], cfg.micro_batch_tokens, shape["hidden"], shape["layers"]
    split = processes if sharding in ("fsdp", "deepspeed") else 1
    reference = 0 if cfg.kl_coef == 0 else 2 * P if sharding == "deepspeed" else 4 * P / (
        processes if sharding == "fsdp" else 1)
    block = (P - shape["embeddings"]) / layers
    act = 2 * t * h * layers + 34 * t * h if cfg.gradient_checkpointing else 34 * t * h * layers
    parts = {"policy": 16 * P / split, "reference": reference,
             "gathered": {"fsdp": 4, "deepspeed": 2}.get(sharding, 0) * (2 * block + shape["embeddings"]),
             "activations": act, "logits": 14 * t * shape["vocab"],
             "vLLM weights": 2 * P / cfg.rollout_tp, "KV cache": cfg.kv_cache_gib * 2**30}
    return {k: v / 1e9 for k, v in parts.items() if v}


def launch_plan(cfg: RunConfig) -> list[str]:
    """The plan's lines about processes, sharding, rollout engines and memory per GPU."""
    engines = f"vLLM tensor parallel {cfg.rollout_tp}, KV cache {cfg.kv_cache_gib:g} GiB"
    if cfg.launch_config is None:
        return [f"launch: one process (python -m agentgym_nb.train.rl), or any configs/accelerate/*.yaml ({engines})"]
    path = launch_config_path(cfg.launch_config)
    launch = check_launch(path, cfg)
    processes = launch["processes"]
    share = cfg.prompts_per_step * cfg.oversample / processes
    lines = [f"launch: accelerate launch --config_file {os.path.relpath(path)} -m agentgym_nb.train.rl --env "
             f"{cfg.env} --preset {cfg.preset}",
             f"  {processes} process{'es' if processes > 1 else ''}: {launch['detail'] or 'no sharding'}; each plays "
             f"~{share:g} prompts a step and runs its own engine ({engines})"]
    shape = KNOWN_SHAPES.get(cfg.model)
    if shape and not cfg.lora_rank:
        parts = memory_per_gpu(cfg, shape, processes, launch["sharding"])
        total = sum(parts.values())
        verdict = "fits" if total <= GPU_GB else "does NOT fit: shard, or lower micro_batch_tokens or kv_cache_gib"
        lines.append("  memory per GPU (estimate, GB): " + " + ".join(f"{k} {v:.1f}" for k, v in parts.items())
                     + f" = {total:.0f} of {GPU_GB}: {verdict}")
    return lines


# ----------------------------------------------------------------------------------------------------- command line
def plan(cfg: RunConfig) -> str:
    """What a run of `cfg` will do, without building anything (the `--dry-run` / `dry_run=True` output)."""
    schedule = round_schedule(cfg)
    stages, start = [], 1
    if cfg.schedule == "adaptive":   # its horizons follow the metrics the run will log
        stages.append(f"H={' -> '.join(map(str, cfg.rounds))}, the next one once the mean {cfg.adaptive_metric} of "
                      f"the last {cfg.adaptive_patience} steps is >= {cfg.adaptive_threshold:g}, after at least "
                      f"{max(cfg.adaptive_min_steps, cfg.adaptive_patience)} steps at the current one")
    else:
        for step in range(1, cfg.steps + 1):   # contiguous step ranges with the same horizon
            if step == cfg.steps or schedule.rounds_at(step + 1) != schedule.rounds_at(step):
                stages.append(f"steps {start}-{step}: H={schedule.rounds_at(step)}")
                start = step + 1
    train, test = item_pool(cfg, "train"), item_pool(cfg, "test")
    episodes = cfg.prompts_per_step * cfg.oversample * cfg.samples_per_prompt
    urls = [cfg.env_url] if isinstance(cfg.env_url, str) else cfg.env_url or []
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
        f"engine: {cfg.engine}; env: {', '.join(urls) or 'in-process'}",
        *launch_plan(cfg),
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
