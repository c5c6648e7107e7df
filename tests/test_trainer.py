"""The trainer: a step changes the weights and syncs them into vLLM (greedy ids and log-probs then match
transformers on the new weights); a run killed after a checkpoint resumes exactly (same items, same horizons, same
weights as an uninterrupted run)."""
import json
import os

import pytest
import torch

from agentgym_nb.config import make_config
from agentgym_nb.rollout.engine import HFEngine, SamplingParams
from agentgym_nb.rollout.trajectory import TrajectoryGroup
from agentgym_nb.train.rl import Trainer

pytestmark = pytest.mark.slow


def smoke_config(tmp_path, name, **kw):
    return make_config(preset="smoke", name=name, overrides={"out_dir": str(tmp_path), **kw})


def test_a_step_changes_the_weights_and_vllm_samples_from_them(tmp_path, nano_dir):
    trainer = Trainer(smoke_config(tmp_path, "sync", engine="vllm", lr=1e-3), log=lambda *a: None)
    try:
        model = trainer.accelerator.unwrap_model(trainer.model)
        before = {k: v.clone() for k, v in model.state_dict().items()}
        prompts = [trainer.items_for_step(1)[0], 12345]
        from agentgym_nb import envs
        from agentgym_nb.rollout.trajectory import Trajectory
        env = envs.make("babyai")
        ids = [Trajectory.start(trainer.chat, env.instruction, env.reset(i), i).input_ids for i in prompts]
        greedy = SamplingParams(temperature=0, max_tokens=12)
        old = trainer.engine.generate(ids, greedy)

        m = trainer.train_step()
        assert m["step"] == 1 and m["episodes"] > 0 and m["optimizer_steps"] >= 1
        changed = [k for k, v in model.state_dict().items() if not torch.equal(v, before[k])]
        assert changed, "a training step with lr 1e-3 must change the weights"

        new = trainer.engine.generate(ids, greedy)
        reference = HFEngine(model=model, tokenizer=trainer.tokenizer).generate(ids, greedy)
        for v, h in zip(new, reference):
            assert v.token_ids == h.token_ids
            assert max(abs(a - b) for a, b in zip(v.logprobs, h.logprobs)) < 1e-3
        assert any(o.logprobs != n.logprobs for o, n in zip(old, new)), "vLLM still samples from the old weights"
        logged = [json.loads(line) for line in open(os.path.join(trainer.cfg.run_dir, "metrics.jsonl"))]
        assert logged[0]["step"] == 1 and {"reward", "success", "kl", "max_rounds", "grad_norm"} <= set(logged[0])
        assert logged[0]["torch_threads"] == torch.get_num_threads()   # the thread count its seconds ran on
        rollout_log = os.path.join(trainer.cfg.run_dir, "rollouts", "step_00001.jsonl")
        records = [json.loads(line) for line in open(rollout_log)]
        assert {"item_id", "conversations", "reward"} <= set(records[0])
    finally:
        trainer.close()


def test_resume_continues_exactly(tmp_path, nano_dir):
    kw = dict(engine="hf", steps=3, save_every=1, rounds=[1, 2], rounds_every=2, lr=1e-3)
    straight = Trainer(smoke_config(tmp_path, "straight", **kw), log=lambda *a: None)
    straight.fit()

    first = Trainer(smoke_config(tmp_path, "killed", **kw), log=lambda *a: None)
    first.fit(steps=2)
    saved = {k: v.clone() for k, v in first.accelerator.unwrap_model(first.model).state_dict().items()}
    saved_opt = first.optimizer.state_dict()["state"]
    first.close()                                   # "killed" after step 2's checkpoint
    resumed = Trainer(smoke_config(tmp_path, "killed", **kw), log=lambda *a: None)
    assert resumed.step == 2 and [m["step"] for m in resumed.history] == [1, 2]
    weights = resumed.accelerator.unwrap_model(resumed.model).state_dict()
    assert all(torch.equal(weights[k], saved[k]) for k in saved)
    opt = resumed.optimizer.state_dict()["state"]
    assert all(torch.equal(opt[i]["exp_avg"], saved_opt[i]["exp_avg"]) for i in saved_opt)
    resumed.fit()

    assert [m["max_rounds"] for m in resumed.history] == [m["max_rounds"] for m in straight.history] == [1, 1, 2]
    for step in (1, 2, 3):
        assert resumed.items_for_step(step) == straight.items_for_step(step)
    lines = open(os.path.join(resumed.cfg.run_dir, "metrics.jsonl")).read().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [1, 2, 3]
    final = straight.accelerator.unwrap_model(straight.model).state_dict()
    resumed_final = resumed.accelerator.unwrap_model(resumed.model).state_dict()
    assert all(torch.equal(resumed_final[k], final[k]) for k in final), "the resumed run ends on other weights"


def test_items_for_step_is_a_pure_function(tmp_path, nano_dir):
    cfg = smoke_config(tmp_path, "items", engine="hf", train_items=[0, 10], prompts_per_step=4, levels=None)
    trainer = Trainer(cfg, log=lambda *a: None)
    seen = [i for step in (1, 2, 3) for i in trainer.items_for_step(step)]
    assert sorted(seen[:10]) == list(range(10))     # one epoch covers the pool once
    assert trainer.items_for_step(2) == Trainer(cfg, log=lambda *a: None).items_for_step(2)


def real_rollouts_with_known_scores(trainer):
    """Real episodes of the smoke model (2 items x 4 samples), re-scored 0/1 alternately so every group has signal;
    the winners count as finished, the others as cut by the horizon."""
    from agentgym_nb.rollout.runner import run_episodes
    cfg = trainer.cfg
    trajs = run_episodes(trainer.engine, trainer.env_factory, trainer.items_for_step(1), trainer.chat,
                         n=cfg.samples_per_prompt, max_rounds=2, max_total_tokens=cfg.max_total_tokens,
                         params=SamplingParams(temperature=1.0, max_tokens=cfg.max_tokens, seed=5))
    for i, t in enumerate(trajs):
        t.reward, t.done, t.truncated = float(i % 2), bool(i % 2), False
    return [t for t in trajs if t.num_policy_tokens > 0]


@pytest.mark.parametrize("algorithm,extra", [("grpo", {}), ("rloo", {}), ("reinforce_plus_plus", {}),
                                             ("reinforce_plus_plus", {"kl_in_reward": True, "kl_coef": 0.1}),
                                             ("gae", {"critic_lr": 1e-2}), ("gigpo", {"gamma": 0.95}),
                                             ("grpo", {"cut_out_of_baseline": True, "cut_turn_discount": 0.5})])
def test_every_estimator_updates_the_policy(tmp_path, nano_dir, algorithm, extra):
    cfg = smoke_config(tmp_path, algorithm, engine="hf", algorithm=algorithm, lr=1e-3, samples_per_prompt=4,
                       ppo_epochs=2, mini_batches=2, **extra)
    trainer = Trainer(cfg, log=lambda *a: None)
    model = trainer.accelerator.unwrap_model(trainer.model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trajs = real_rollouts_with_known_scores(trainer)
    out = trainer.update(TrajectoryGroup.of(trajs), 1)
    assert out["optimizer_steps"] == 4     # ppo_epochs x mini_batches are honoured
    assert any(not torch.equal(v, before[k]) for k, v in model.state_dict().items())
    if algorithm == "gae":
        losses = [out["value_loss"]] + [trainer.update(TrajectoryGroup.of(trajs), s)["value_loss"] for s in (2, 3, 4, 5)]
        # the same batch again and again (its returns move a little with the critic's values): the error falls
        assert min(losses[2:]) < 0.75 * losses[0], f"the critic does not fit the returns: {losses}"
        assert -1 <= trainer.update(TrajectoryGroup.of(trajs), 6)["explained_variance"] <= 1
    if extra.get("kl_in_reward"):
        assert trainer.update(TrajectoryGroup.of(trajs), 2)["kl"] > 0   # the policy moved away from the reference


def advantages_the_loss_gets(trainer):
    """Real rollouts with known scores through one update, recording what the real loss is given: (trajectories,
    (turn_ids, loss mask, advantages)), rows in trajectory order (the config must make one mini- and micro-batch)."""
    seen, real_loss = [], trainer._loss

    def recording_loss(mb, per_token, *args):
        seen.append((mb["turn_ids"], mb["loss_mask"].bool(), per_token.adv))
        return real_loss(mb, per_token, *args)

    trainer._loss = recording_loss
    trajs = real_rollouts_with_known_scores(trainer)
    trainer.update(TrajectoryGroup.of(trajs), 1)
    (recorded,) = seen
    return trajs, recorded


def test_gigpo_in_the_trainer_gives_the_first_turns_step_credit(tmp_path, nano_dir):
    """Every episode of a task starts in the same state, so GiGPO's turn 1 of a group is one step group whose returns
    gamma^(K_b - 1) s_b differ (winners and losers): its advantage there is GRPO's plus that step term."""
    from agentgym_nb.algos.advantages import grpo
    kw = dict(samples_per_prompt=4, ppo_epochs=1, mini_batches=1, micro_batch_tokens=1 << 20)
    trajs, (turn_ids, mask, adv) = advantages_the_loss_gets(Trainer(smoke_config(
        tmp_path, "gigpo", engine="hf", algorithm="gigpo", gamma=0.95, **kw), log=lambda *a: None))
    scores, group = torch.tensor([t.reward for t in trajs]), torch.tensor([t.group for t in trajs])
    episode = grpo(scores, group, torch.ones(len(trajs), 1))[:, 0]
    step_term = [adv[i][mask[i] & (turn_ids[i] == 1)] - episode[i] for i in range(len(trajs))]
    assert all(len(set(x.tolist())) == 1 for x in step_term)   # one value per turn
    assert any(abs(x[0].item()) > 1e-3 for x in step_term), "no turn got step credit: anchors did not reach GiGPO"
    for i, t in enumerate(trajs):   # a winner's return is above its step group's mean, a loser's below
        assert (step_term[i][0].item() > 0) == bool(t.reward) or abs(step_term[i][0].item()) < 1e-6


@pytest.mark.parametrize("left_out", [True, False])
def test_the_trainer_gives_cut_episodes_their_treatments(tmp_path, nano_dir, left_out):
    """The advantages the loss gets, with cut_turn_discount 0.5 (and the cut episodes out of the baseline or not).
    Each group: winners (score 1, finished) and losers (score 0, cut by the horizon); std_g over the whole group.
    - out of the baseline: the baseline is the winners' mean, 1: winners get 0, a loser's turn 1 gets -1 / std_g;
    - in it (GRPO's baseline): winners get +(1 - mean_g) / std_g on every turn (finished: no discount), a loser's
      turn 1 gets -mean_g / std_g;
    - a loser's turn 2 keeps 0.5 of its turn 1."""
    cfg = smoke_config(tmp_path, f"cut-{left_out}", engine="hf", algorithm="grpo", samples_per_prompt=4, ppo_epochs=1,
                       mini_batches=1, micro_batch_tokens=1 << 20, cut_out_of_baseline=left_out,
                       cut_turn_discount=0.5)
    trajs, (turn_ids, mask, adv) = advantages_the_loss_gets(Trainer(cfg, log=lambda *a: None))
    assert any(not t.done and (turn_ids[i][mask[i]] == 2).any() for i, t in enumerate(trajs))   # a cut second turn
    for i, t in enumerate(trajs):
        scores = torch.tensor([u.reward for u in trajs if u.group == t.group])
        mean, std = scores.mean().item(), scores.std().item()
        first, second = adv[i][mask[i] & (turn_ids[i] == 1)], adv[i][mask[i] & (turn_ids[i] == 2)]
        if len(set(scores.tolist())) == 1:   # a group left with one score (episodes without policy tokens dropped)
            assert not adv[i].any()
        elif t.done:
            expected = 0.0 if left_out else (1 - mean) / (std + 1e-6)
            assert torch.allclose(adv[i][mask[i]], torch.full_like(adv[i][mask[i]], expected), atol=1e-5), (i, t.group)
        else:
            expected = (-1.0 if left_out else -mean) / (std + 1e-6)
            assert torch.allclose(first, torch.full_like(first, expected), atol=1e-5), (i, t.group)
            assert torch.allclose(second, torch.full_like(second, 0.5 * expected), atol=1e-5), (i, t.group)


@pytest.mark.parametrize("algorithm, extra, steps", [
    ("grpo", {}, False), ("rloo", {}, False), ("reinforce_plus_plus", {}, False),
    ("reinforce_plus_plus", {"kl_in_reward": True, "kl_coef": 0.1}, True), ("gae", {}, True)])
def test_a_step_where_every_group_scored_alike_steps_only_where_an_advantage_is_nonzero(tmp_path, nano_dir,
                                                                                        algorithm, extra, steps):
    """filter_groups and no group whose scores differ: a one-token reply is never a valid BabyAI action, so every
    episode of the step scores 0. GRPO, RLOO, and REINFORCE++ with the KL as a loss: every advantage is exactly 0,
    so no optimizer step (Adam's momentum from the step before would move the weights with no signal), but the KL
    is measured. REINFORCE++ with the KL in the reward (-beta * KL per token: non-zero returns) and GAE
    (advantages from its critic, which learns too) still step."""
    trainer = Trainer(smoke_config(tmp_path, f"flat-{algorithm}", engine="hf", lr=1e-3, filter_groups=True,
                                   max_tokens=1, algorithm=algorithm, **extra), log=lambda *a: None)
    try:
        assert trainer.update(TrajectoryGroup.of(real_rollouts_with_known_scores(trainer)), 1)["optimizer_steps"] >= 1
        trainer.sync_engine()   # as a training step would (else the step's health check sees the stale engine)
        model = trainer.accelerator.unwrap_model(trainer.model)
        before = {k: v.clone() for k, v in model.state_dict().items()}
        m = trainer.train_step()
        assert m["success"] == 0 and m["zero_adv_groups"] == 1.0
        assert m["kl"] > 0   # the first update moved the policy from the reference
        unchanged = all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
        if steps:
            assert m["optimizer_steps"] >= 1 and m["groups_trained"] >= 1 and not unchanged
        else:
            assert m["optimizer_steps"] == m["groups_trained"] == 0 and m["grad_norm"] == 0 and unchanged
    finally:
        trainer.close()


def test_a_step_without_signal_measures_its_losses_on_no_more_groups_than_it_would_train(tmp_path, nano_dir):
    """filter_groups with oversampling plays prompts_per_step x oversample groups; when none of them carries a
    signal, the losses are measured on prompts_per_step groups (what a learning step trains on), not on all of
    them: on long episodes those passes cost more than the rollout."""
    trainer = Trainer(smoke_config(tmp_path, "flat-oversampled", engine="hf", filter_groups=True, oversample=2,
                                   max_tokens=1), log=lambda *a: None)
    measured, update = [], trainer.update
    trainer.update = lambda groups, step: measured.append({g.id for g in groups}) or update(groups, step)
    try:
        m = trainer.train_step()
        assert m["episodes"] == 2 * 2 * 2 and m["zero_adv_groups"] == 1.0 and m["optimizer_steps"] == 0
        assert measured == [{0, 1}]   # the first prompts_per_step = 2 of the 4 groups
    finally:
        trainer.close()


def test_the_trainer_loss_applies_the_configured_clip_and_dual_clip(tmp_path, nano_dir):
    """Every sampled token with ratio e^5 ~ 148.4 and advantage -1: PPO's per-token loss is max(148.4, 1.2) = 148.4;
    the dual clip bound c = 3 caps it at -A * c = 3 (Ye et al. 2020). With A = +1 the clipped term wins:
    -min(148.4, 1 + eps_high) = -(1 + eps_high), so clip_ratio_high = 0.28 gives -1.28."""
    from agentgym_nb.rollout.trajectory import collate
    from agentgym_nb.algos.losses import token_logprobs
    from agentgym_nb.train.rl import PerToken
    trainer = Trainer(smoke_config(tmp_path, "clip", engine="hf", clip_ratio_high=0.28, clip_ratio_c=3.0),
                      log=lambda *a: None)
    batch = trainer._on_device(collate(real_rollouts_with_known_scores(trainer), trainer.tokenizer.pad_token_id))
    mask = batch["loss_mask"]
    with torch.no_grad():
        logp = token_logprobs(trainer.model, batch["input_ids"], batch["attention_mask"])

    def pg_loss(adv_sign: float, **cfg_changes) -> dict:
        for k, v in cfg_changes.items():
            setattr(trainer.cfg, k, v)
        per_token = PerToken(old_logp=logp - 5.0, ref_logp=logp, adv=adv_sign * mask.float(),
                             old_values=torch.zeros_like(logp), returns=torch.zeros_like(logp))
        with torch.no_grad():
            return trainer._loss(batch, per_token, int(mask.sum()), int((mask.sum(-1) > 0).sum()))[1]

    dual = pg_loss(-1.0)
    assert dual["pg_loss"] == pytest.approx(3.0, rel=1e-4) and dual["dual_clip_frac"] == pytest.approx(1.0)
    assert pg_loss(-1.0, clip_ratio_c=None)["pg_loss"] == pytest.approx(float(torch.exp(torch.tensor(5.0))), rel=1e-4)
    assert pg_loss(+1.0)["pg_loss"] == pytest.approx(-1.28, rel=1e-4)
    assert pg_loss(+1.0, clip_ratio_high=None)["pg_loss"] == pytest.approx(-1.2, rel=1e-4)


def test_lora_trains_adapters_only_and_engines_sample_the_adapted_model(tmp_path, nano_dir):
    """The HF engine samples with the trainer's own (peft) model; an engine with its own copy, such as vLLM or an
    FSDP process's, gets the merged weights W + (alpha / r) B A at a sync, and samples the same."""
    trainer = Trainer(smoke_config(tmp_path, "lora", engine="hf", lora_rank=4, lr=5e-3), log=lambda *a: None)
    model = trainer.accelerator.unwrap_model(trainer.model)
    assert trainer.engine.shares_model and trainer.engine.model is model and trainer.ref is None
    frozen = {k: v.clone() for k, v in model.state_dict().items() if "lora_" not in k}
    trainer.update(TrajectoryGroup.of(real_rollouts_with_known_scores(trainer)), 1)
    state = model.state_dict()
    assert all(torch.equal(state[k], v) for k, v in frozen.items()), "LoRA must leave the base weights alone"
    assert any(not torch.equal(v, torch.zeros_like(v)) for k, v in state.items() if "lora_B" in k)
    from agentgym_nb import envs
    from agentgym_nb.rollout.trajectory import Trajectory
    env = envs.make("babyai")
    ids = [Trajectory.start(trainer.chat, env.instruction, env.reset(i), i).input_ids for i in (3, 45)]
    greedy = SamplingParams(temperature=0, max_tokens=10)
    engine_out = trainer.engine.generate(ids, greedy)
    copy = HFEngine(trainer.model_dir, tokenizer=trainer.tokenizer)
    copy.load_weights(trainer.parallel.engine_weights(trainer.model).items())
    merged_out = copy.generate(ids, greedy)
    assert [c.token_ids for c in engine_out] == [c.token_ids for c in merged_out]
    assert max(abs(a - b) for c, d in zip(engine_out, merged_out) for a, b in zip(c.logprobs, d.logprobs)) < 1e-4


def test_a_bf16_lora_run_holds_the_frozen_base_in_bf16_and_its_reference_is_the_base(tmp_path, nano_dir):
    """Under LoRA with bf16 the frozen base weights are bf16 (half the memory), the adapters fp32, and the KL's
    reference log-probs are the policy's with the adapters switched off: no copy of the model."""
    from agentgym_nb.algos.losses import token_logprobs
    from agentgym_nb.rollout.trajectory import collate
    trainer = Trainer(smoke_config(tmp_path, "lora-bf16", engine="hf", lora_rank=4, lr=5e-3, bf16=True, kl_coef=0.1),
                      log=lambda *a: None)
    model = trainer.accelerator.unwrap_model(trainer.model)
    dtypes = {("lora_" in n, p.dtype) for n, p in model.named_parameters()}
    assert dtypes == {(False, torch.bfloat16), (True, torch.float32)}
    assert trainer.ref is None
    groups = TrajectoryGroup.of(real_rollouts_with_known_scores(trainer))
    trainer.update(groups, 1)   # the adapters move away from zero
    batch = collate([t for g in groups for t in g.episodes], trainer.tokenizer.pad_token_id)
    lengths = batch["attention_mask"].sum(-1).tolist()
    old, ref, _ = trainer._score_tokens(batch, lengths)
    with torch.no_grad(), model.disable_adapter(), trainer.accelerator.autocast():
        base = token_logprobs(model, batch["input_ids"], batch["attention_mask"])
    m = batch["loss_mask"].bool()
    assert torch.allclose(ref[m], base.float()[m], atol=1e-5)
    assert not torch.allclose(old[m], ref[m], atol=1e-3)   # the adapters changed the policy, not the reference


def test_an_adaptive_schedule_watching_success_in_reach_gets_it_every_step(tmp_path, nano_dir, monkeypatch):
    """success_in_reach: success over the step's episodes whose item the expert solves within the horizon (the
    expert's turns, read from the table shipped with the item lists: nothing is played)."""
    monkeypatch.setenv("AGENTGYM_NB_OUTPUTS", str(tmp_path))
    from agentgym_nb import envs
    trainer = Trainer(smoke_config(tmp_path, "reach", engine="hf", schedule="adaptive", rounds=[1, 2],
                                   adaptive_metric="success_in_reach", adaptive_min_steps=1, adaptive_patience=1,
                                   track="one-room", train_items=[0, 13], prompts_per_step=4),   # 1-3 expert turns
                      log=lambda *a: None)
    try:
        m = trainer.train_step()
        items = trainer.items_for_step(1)
        reach = envs.expert_turns("babyai", items)
        assert not (tmp_path / "data" / "babyai" / "expert_turns.json").exists()
        played = [json.loads(line) for line in open(os.path.join(trainer.cfg.run_dir, "rollouts", "step_00001.jsonl"))]
        within = [e["success"] for e in played if reach[e["item_id"]] is not None and reach[e["item_id"]] <= 1]
        assert 0 < len(within) < len(played)   # some items are out of reach at H = 1: the filter is not a no-op
        assert m["success_in_reach"] == pytest.approx(sum(within) / len(within))
    finally:
        trainer.close()


def test_metrics_are_rewritten_atomically(tmp_path):
    """A process that opened metrics.jsonl before the main process cut it to the checkpoint's steps still reads a
    whole file (the old one), never a truncated one; a later reader sees the new one."""
    from agentgym_nb.train.checkpoint import write_metrics
    path = str(tmp_path / "metrics.jsonl")
    old = [{"step": s, "reward": 0.5} for s in (1, 2, 3)]
    write_metrics(path, old)
    with open(path) as reader:
        write_metrics(path, old[:2])
        assert [json.loads(line) for line in reader] == old
    assert [json.loads(line) for line in open(path)] == old[:2]


@pytest.mark.timeout(900)
def test_a_run_killed_mid_step_resumes_to_the_weights_of_an_uninterrupted_run(tmp_path, nano_dir):
    """`kill -9` during step 3 (its rollouts written, its update not saved), then the same command again: the run
    resumes from step 2's checkpoint, replays step 3 and ends with the weights, bit for bit, of a run never
    interrupted. HF engine: each episode samples with its own seeded generator, and episodes come back in the order
    played, so the replayed step sees the same episodes in the same order."""
    import signal
    import subprocess
    import sys
    import time
    from safetensors.torch import load_file

    def command(name):
        return [sys.executable, "-m", "agentgym_nb.train.rl", "--env", "babyai", "--preset", "smoke", "--name", name,
                f"out_dir={tmp_path}", "engine=hf", "steps=4", "save_every=1", "lr=1e-3", "threads=1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run(command("straight"), env=env, check=True, capture_output=True, timeout=400)
    run = tmp_path / "runs" / "killed"
    proc = subprocess.Popen(command("killed"), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 400
    while not (run / "rollouts" / "step_00003.jsonl").exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (run / "ckpt" / "step_00003").exists() and not (run / "ckpt" / "step_00004").exists()
    subprocess.run(command("killed"), env=env, check=True, capture_output=True, timeout=400)
    straight = load_file(str(tmp_path / "runs" / "straight" / "ckpt" / "step_00004" / "model.safetensors"))
    resumed = load_file(str(run / "ckpt" / "step_00004" / "model.safetensors"))
    assert straight.keys() == resumed.keys()
    assert all(torch.equal(straight[k], resumed[k]) for k in straight)
    lines = (run / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [1, 2, 3, 4]


def test_an_fp32_run_and_then_a_bf16_run_train_in_one_process(tmp_path, nano_dir):
    # a notebook may train both; Accelerate alone refuses a second mixed-precision setting in a process
    for name, bf16 in (("fp32", False), ("bf16", True)):
        trainer = Trainer(smoke_config(tmp_path, name, engine="hf", bf16=bf16, steps=1), log=lambda *a: None)
        try:
            assert trainer.accelerator.mixed_precision == ("bf16" if bf16 else "no")
            assert trainer.train_step()["optimizer_steps"] >= 1
        finally:
            trainer.close()


def test_truncated_importance_sampling_weights_reach_the_loss(tmp_path, nano_dir):
    """tis_cap: the loss gets w = min(exp(trainer - engine log-prob), cap) on every policy token. The engine's
    log-probs are moved by +-0.3 per token (as a bf16 engine's differ from an fp32 trainer's, only larger), so some
    weights are capped and some are below 1; the step reports their mean and the truncated share."""
    from agentgym_nb.algos.losses import truncated_is_weights
    cfg = smoke_config(tmp_path, "tis", engine="hf", tis_cap=1.2, samples_per_prompt=4, ppo_epochs=1, mini_batches=1,
                       micro_batch_tokens=1 << 20)
    trainer = Trainer(cfg, log=lambda *a: None)
    seen, real_loss = [], trainer._loss
    trainer._loss = lambda mb, per_token, *args: seen.append(per_token) or real_loss(mb, per_token, *args)
    trajs = real_rollouts_with_known_scores(trainer)
    for t in trajs:
        t.sampled_logprobs = [lp + (0.3 if i % 2 else -0.3) for i, lp in enumerate(t.sampled_logprobs)]
    out = trainer.update(TrajectoryGroup.of(trajs), 1)
    (per_token,) = seen
    from agentgym_nb.rollout.trajectory import collate
    batch = collate(trajs, trainer.tokenizer.pad_token_id)
    m = batch["loss_mask"].bool()
    engine = torch.full(m.shape, float("nan"))
    for b, t in enumerate(trajs):
        engine[b, m[b]] = torch.tensor(t.sampled_logprobs)
    expected = truncated_is_weights(per_token.old_logp, engine, 1.2)
    assert torch.allclose(per_token.is_weights[m], expected[m])
    w = per_token.is_weights[m]
    assert (w == 1.2).any() and (w < 0.9).any()
    assert out["tis_weight_mean"] == pytest.approx(float(w.mean())) and 0 < out["tis_truncated"] < 1
    trainer.close()
