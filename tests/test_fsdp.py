"""Sharded training beyond one machine, checked on CPU.

FSDP2: two gloo processes launched by accelerate with configs/accelerate/fsdp_cpu_2proc.yaml (tests/fsdp_worker.py)
hold half of every parameter each; after a real training step they agree, their rollout engines hold the gathered
weights, a resumed trainer reads back the sharded checkpoint, and an update equals one process's update on the union
of the episodes (weights and gradient norm). The launch configs of the paper preset (fsdp_8gpu, deepspeed_zero3_8gpu)
are checked by the dry run: they parse, name only keys accelerate knows, agree with the run, and the memory estimate
adds up as worked out in their comments."""
import json
import os
import shutil

import pytest
from harness import accelerate_launch
import torch

from agentgym_nb.algos.losses import LOGITS_CHUNK_ELEMENTS
from agentgym_nb.config import PAPER_SCRIPTS, make_config
from agentgym_nb.rollout.trajectory import Trajectory, TrajectoryGroup
from agentgym_nb.train import launch, rl

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = os.path.join(ROOT, "configs", "accelerate")


@pytest.fixture(scope="module")
def fsdp_out(tmp_path_factory, nano_dir):
    """Slow but essential (~2 min of work; the two processes' imports take minutes more on a loaded machine)."""
    out = tmp_path_factory.mktemp("fsdp")
    accelerate_launch("fsdp_cpu_2proc", "fsdp_worker", out, timeout=1100)
    return out


@pytest.mark.timeout(1200)
def test_fsdp_step_shards_agrees_syncs_and_resumes(fsdp_out):
    ranks = [json.load(open(fsdp_out / f"fsdp_rank{r}.json")) for r in (0, 1)]
    assert [r["sharding"] for r in ranks] == ["fsdp", "fsdp"] and [r["world"] for r in ranks] == [2, 2]
    assert len(ranks[0]["items"]) == 2 and len(ranks[1]["items"]) == 1   # uneven shares: uneven passes
    # each process holds about half of every parameter
    assert ranks[0]["local_numel"] + ranks[1]["local_numel"] == ranks[0]["full_numel"]
    assert abs(ranks[0]["local_numel"] - ranks[1]["local_numel"]) < 0.01 * ranks[0]["full_numel"]
    sums = [torch.load(fsdp_out / f"sums{r}.pt") for r in (0, 1)]
    assert sums[0] == sums[1]                                           # the gathered weights agree exactly
    assert ranks[0]["optimizer_steps"] == ranks[1]["optimizer_steps"] == 2
    assert ranks[0]["rotary"] == ranks[1]["rotary"] > 0                # rank 1's non-persistent buffers are real
    for r in ranks:
        assert r["initial_gap"] == r["initial_ref_gap"] == 0.0          # both start from the checkpoint's weights
        assert r["engine_gap"] == 0.0                                   # the engine samples from the new weights
        assert r["resumed_step"] == 1
        assert r["resumed_gap"] == r["resumed_adam_gap"] == r["resumed_engine_gap"] == 0.0
    metrics = [json.loads(x) for x in open(fsdp_out / "runs" / "fsdp" / "metrics.jsonl")]
    assert len(metrics) == 1 and metrics[0]["step"] == 1               # written once, by the main process
    assert metrics[0]["episodes"] == 6                                  # 4 + 2: counts add up over processes
    # every process's engine sampled from the checkpoint's weights (transformers leaves zeros on process 1 for the
    # broadcast): the trainer's log-probs of the sampled tokens are the engine's
    assert metrics[0]["mismatch_max_abs"] < 1e-4


@pytest.mark.timeout(1200)
def test_fsdp_update_is_the_update_on_the_union(fsdp_out, tmp_path, nano_dir):
    from fsdp_worker import union_config

    from agentgym_nb.train.common import merged_state_dict
    shares = [json.load(open(fsdp_out / f"union_rank{r}.json")) for r in (0, 1)]
    after = torch.load(fsdp_out / "union_rank0.pt")
    assert all(torch.equal(after[k], v) for k, v in torch.load(fsdp_out / "union_rank1.pt").items())
    assert len(shares[0]["episodes"]) > len(shares[1]["episodes"])     # rank 1 made zero-weight extra passes

    # one process, no sharding, the same config and starting weights, the same update on the union of the episodes
    single = rl.Trainer(union_config(str(tmp_path)), log=lambda *a: None)
    assert single.parallel.kind == "none"
    model = single.accelerator.unwrap_model(single.model)
    before = {k: v.clone() for k, v in merged_state_dict(model).items()}
    out = single.update(TrajectoryGroup.of([Trajectory(**t) for s in shares for t in s["episodes"]]), 1)
    single.close()
    union = merged_state_dict(model)
    assert out["optimizer_steps"] == shares[0]["optimizer_steps"] == 2
    # Adam and the clip are blind to a gradient's scale (a mean over processes instead of the sum would move the
    # weights the same way): the gradient norm before clipping is not.
    assert shares[0]["grad_norm"] == pytest.approx(out["grad_norm"], rel=1e-4)
    # each process's loss terms are its share of the global mini-batch's: they add up to one process's
    assert shares[0]["kl"] + shares[1]["kl"] == pytest.approx(out["kl"], rel=1e-3, abs=1e-9)
    assert shares[0]["entropy"] + shares[1]["entropy"] == pytest.approx(out["entropy"], rel=1e-4)
    moved = max(float((after[k] - before[k]).abs().max()) for k in before)
    assert moved > 5e-3, moved   # Adam moves a weight by up to about lr = 1e-2 per step
    gap = _norm({k: after[k] - union[k] for k in before}) / _norm({k: union[k] - before[k] for k in before})
    assert gap < 1e-3, f"the two-process update is not the update on the union: they differ by {gap:.1e} of it"


def _norm(tensors: dict) -> float:
    return sum(float(v.double().norm()) ** 2 for v in tensors.values()) ** 0.5


# ------------------------------------------------------------------------------------- launch configs, dry run
@pytest.mark.timeout(60)
@pytest.mark.parametrize("env", sorted(PAPER_SCRIPTS))
def test_paper_dry_run_checks_both_8gpu_configs(env):
    for name, detail in (("fsdp_8gpu", "FSDP2 full shard"), ("deepspeed_zero3_8gpu", "DeepSpeed ZeRO-3")):
        text = launch.plan(make_config(preset="paper", env=env, overrides={"launch_config": name}))
        assert "--config_file " in text and f"{name}.yaml -m agentgym_nb.train.rl" in text
        assert "8 processes: " + detail in text and "tensor parallel 1" in text
        assert "memory per GPU" in text


@pytest.mark.timeout(60)
def test_memory_estimate_matches_the_arithmetic_in_the_configs():
    cfg = make_config(preset="paper", env="textcraft", overrides={"micro_batch_tokens": 4096})
    shape = launch.KNOWN_SHAPES["Qwen/Qwen2.5-7B-Instruct"]
    fsdp = launch.memory_per_gpu(cfg, shape, 8, "fsdp")
    assert fsdp["weights"] == pytest.approx(4 * 7.62e9 / 8 / 1e9)            # 3.8: fp32 master weights, sharded
    assert fsdp["Adam"] == pytest.approx(8 * 7.62e9 / 8 / 1e9)               # 7.6
    assert fsdp["update: gradients"] == pytest.approx(4 * 7.62e9 / 8 / 1e9)  # 3.8, during the update only
    assert fsdp["reference"] == pytest.approx(4 * 7.62e9 / 8 / 1e9)          # 3.8
    assert fsdp["rollout: engine weights"] == pytest.approx(15.24)           # bf16 vLLM, asleep in the update
    assert fsdp["rollout: KV cache"] == pytest.approx(22 * 2**30 / 1e9)      # 20 GiB + vLLM's own 2 GiB: 23.6
    assert fsdp["update: logits"] == pytest.approx(14 * 4096 * 152064 / 1e9)  # 8.7: sharded, not chunked
    rollout = 15.24 + 22 * 2**30 / 1e9
    assert launch.peak_gb(fsdp) == pytest.approx(3.81 + 7.62 + 3.81 + rollout, abs=0.05)   # 54.1
    ds = launch.memory_per_gpu(cfg, shape, 8, "deepspeed")
    assert ds["reference"] == pytest.approx(2 * 7.62e9 / 1e9)                 # a bf16 copy: 15.2
    ddp = launch.memory_per_gpu(cfg, shape, 8, "ddp")
    assert ddp["weights"] + ddp["Adam"] + ddp["update: gradients"] == pytest.approx(121.92)
    assert ddp["reference"] == pytest.approx(30.48)
    assert "fits" in launch.plan(cfg).splitlines()[-1]
    cfg.kv_cache_gib = 50
    assert "does NOT fit" in launch.plan(cfg).splitlines()[-1]


@pytest.mark.timeout(60)
def test_dry_run_command_line_prints_the_launch(capsys):
    rl.main(["--env", "babyai", "--preset", "paper", "--dry-run"])
    out = capsys.readouterr().out
    assert "accelerate launch --config_file" in out and "fsdp_8gpu.yaml" in out and "8 processes" in out


def _variant(tmp_path, name: str, replace: tuple[str, str], json_replace: tuple[str, str] | None = None) -> str:
    text = open(os.path.join(CONFIGS, name + ".yaml")).read()
    assert replace[0] in text
    path = tmp_path / f"{name}.yaml"
    if json_replace:
        ds = open(os.path.join(CONFIGS, "deepspeed_zero3.json")).read()
        assert json_replace[0] in ds
        (tmp_path / "ds.json").write_text(ds.replace(*json_replace))
        text = text.replace("configs/accelerate/deepspeed_zero3.json", str(tmp_path / "ds.json"))
    path.write_text(text.replace(*replace))
    return str(path)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name, replace, json_replace, message", [
    ("fsdp_8gpu", ("fsdp_reshard_after_forward:", "fsdp_reshard_after_forwad:"), None, "reshard_after_forwad"),
    ("fsdp_8gpu", ("num_machines:", "num_machine:"), None, "num_machine"),
    ("fsdp_8gpu", ("fsdp_version: 2", "fsdp_version: 1"), None, "fsdp_version must be 2"),
    ("fsdp_8gpu", ("fsdp_activation_checkpointing: false", "fsdp_activation_checkpointing: true"), None,
     "gradient_checkpointing"),
    ("fsdp_8gpu", ("num_processes: 8", "num_processes: 64"), None, "at least one"),
    ("deepspeed_zero3_8gpu", ("zero3_init_flag:", "zero3_init_flags:"), None, "zero3_init_flags"),
    ("deepspeed_zero3_8gpu", ("use_cpu", "use_cpu"), ('"gradient_clipping": 1.0', '"gradient_clipping": 0.5'),
     "gradient_clipping 0.5"),
    ("deepspeed_zero3_8gpu", ("use_cpu", "use_cpu"),
     ('"gradient_accumulation_steps": 1', '"gradient_accumulation_steps": 4'), "boundary"),
])
def test_a_wrong_launch_config_is_an_error_that_names_it(tmp_path, name, replace, json_replace, message):
    path = _variant(tmp_path, name, replace, json_replace)
    cfg = make_config(preset="paper", env="babyai", overrides={"launch_config": path})
    with pytest.raises(ValueError, match=message):
        launch.plan(cfg)


@pytest.mark.timeout(60)
def test_launch_config_by_name_or_path_and_rollout_tp_rules(tmp_path):
    assert launch.launch_config_path("fsdp_8gpu") == os.path.join(CONFIGS, "fsdp_8gpu.yaml")
    shutil.copy(os.path.join(CONFIGS, "cpu.yaml"), tmp_path / "mine.yaml")
    assert launch.launch_config_path(str(tmp_path / "mine.yaml")) == str(tmp_path / "mine.yaml")
    with pytest.raises(ValueError, match="fsdp_8gpu"):
        launch.launch_config_path("fsdp_16gpu")
    cfg = make_config(preset="paper", env="babyai")
    assert (cfg.rollout_tp, cfg.launch_config, cfg.gradient_checkpointing) == (1, "fsdp_8gpu", True)
    assert make_config(preset="smoke", overrides=["engine=vllm",
                       "actor_rollout_ref.rollout.tensor_model_parallel_size=2"]).rollout_tp == 2
    for bad in (0, -1, 1.5):
        with pytest.raises(ValueError, match="rollout_tp"):
            make_config(preset="smoke", overrides={"rollout_tp": bad})
    with pytest.raises(ValueError, match="hf engine"):
        make_config(preset="smoke", overrides={"rollout_tp": 2, "engine": "hf"})
    launch.check_rollout_tp(4, 1, 8)                      # one process, an engine over 4 of 8 GPUs
    with pytest.raises(ValueError, match="divide"):
        launch.check_rollout_tp(3, 1, 8)
    with pytest.raises(ValueError, match="one engine"):
        launch.check_rollout_tp(2, 8, 8)                  # 8 trainer processes each own an engine on their GPU
    with pytest.raises(ValueError, match="one engine"):
        launch.plan(make_config(preset="paper", env="babyai", overrides={"rollout_tp": 2}))


@pytest.mark.timeout(60)
def test_the_one_gpu_preset_plans_a_16_gb_and_an_80_gb_card():
    cfg = make_config(preset="gpu", env="babyai")
    assert (cfg.model, cfg.lora_rank, cfg.engine, cfg.bf16) == ("Qwen/Qwen2.5-0.5B-Instruct", 32, "vllm", True)
    shape = launch.KNOWN_SHAPES[cfg.model]
    lora = launch.memory_per_gpu(cfg, shape, 1, "none")
    assert lora["weights"] == pytest.approx(2 * 0.494)          # the frozen base in bf16; adapters negligible
    assert "reference" not in lora and "Adam" not in lora      # the reference is the base with the adapters off
    assert lora["rollout: engine weights"] == pytest.approx(2 * 0.494)    # the engine is bf16 like the run
    assert lora["rollout: sync copy"] == pytest.approx(4 * (0.494e9 - 151936 * 896) / 1e9)   # merged fp32 weights
    # chunked: 2,048 tokens x 151,936 = 3.1e8 logits exceed a chunk, so one chunk at a time
    assert lora["update: logits"] == pytest.approx(16 * LOGITS_CHUNK_ELEMENTS / 1e9)
    last = launch.plan(cfg).splitlines()[-1]
    assert "LoRA r=32" in last and "fits a 16 GB card" in last and "fits an 80 GB card" in last
    full = make_config(preset="gpu", env="babyai", overrides={"lora_rank": 0, "kv_cache_gib": 8})
    assert "does NOT fit a 16 GB card" in launch.plan(full).splitlines()[-1]
    assert "fits an 80 GB card" in launch.plan(full).splitlines()[-1]
    big = make_config(preset="gpu", env="babyai", overrides={"lora_rank": 0, "model": "Qwen/Qwen2.5-1.5B-Instruct"})
    assert "fits an 80 GB card" in launch.plan(big).splitlines()[-1]
    with pytest.raises(ValueError, match="gpu preset scales the paper's scripts down"):
        make_config(preset="gpu", env="miniwob")


@pytest.mark.timeout(60)
def test_two_machines_of_8_gpus_with_env_servers_on_their_own_hosts():
    cfg = make_config(preset="paper", env="babyai", overrides={
        "launch_config": "fsdp_2x8gpu", "env_url": "http://envs-a:36002,http://envs-b:36002"})
    text = launch.plan(cfg)
    # accelerate's num_processes counts the processes of all machines: 16, each playing 2 of the 32 prompts
    assert "16 processes: FSDP2 full shard" in text and "each plays ~2 prompts a step" in text
    assert "env: http://envs-a:36002, http://envs-b:36002" in text
    parts = launch.memory_per_gpu(cfg, launch.KNOWN_SHAPES[cfg.model], 16, "fsdp")
    assert parts["weights"] + parts["Adam"] + parts["update: gradients"] == pytest.approx(16 * 7.62e9 / 16 / 1e9)
    assert "fits an 80 GB card" in text.splitlines()[-1]
