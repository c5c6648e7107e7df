"""A run's checkpoints: which folder is a run, its newest complete checkpoint, and a checkpoint's policy as a plain
Hugging Face folder that any engine loads."""
from __future__ import annotations

import json
import os
import shutil

import torch
from safetensors.torch import load_file

from .common import add_lora


def is_run_dir(path: str) -> bool:
    """A training run directory (outputs/runs/<name>): its config.json is a RunConfig, not an HF model config."""
    cfg = os.path.join(path, "config.json")
    if not os.path.isfile(cfg):
        return False
    with open(cfg) as f:
        keys = set(json.load(f))
    return {"model", "preset", "env", "algorithm"} <= keys and "model_type" not in keys


def latest_checkpoint(run_dir: str) -> str:
    """The newest complete checkpoint of a run (ckpt/step_00040 and so on; half-written .tmp folders are ignored)."""
    root = os.path.join(run_dir, "ckpt")
    steps = sorted(d for d in os.listdir(root) if d.startswith("step_") and not d.endswith(".tmp")) \
        if os.path.isdir(root) else []
    if not steps:
        raise ValueError(f"run {run_dir} has no checkpoint under {root}: train it until a save (save_every) or "
                         "evaluate its starting model by name instead")
    return os.path.join(root, steps[-1])


def checkpoint_model_dir(checkpoint: str, base_dir: str) -> str:
    """An HF folder (config, tokenizer, weights) holding a trainer checkpoint's policy, built once next to it
    (<checkpoint>/hf) so every engine can load it. The checkpoint's model.safetensors is accelerate's save of the
    policy; a tied lm_head is absent there and comes back through the tie. A LoRA run's policy is saved under peft's
    names (base_model.model.<name>, base_layer, lora_A/lora_B): the trainer's LoRA (`add_lora`, its rank read from
    the adapter shapes) is rebuilt around the base model, loaded, and merged into plain weights, W + (alpha / r) B A."""
    from transformers import AutoModelForCausalLM   # a model class: importing it takes seconds, only needed here
    out = os.path.join(checkpoint, "hf")
    if os.path.exists(os.path.join(out, "config.json")):
        return out
    weights = os.path.join(checkpoint, "model.safetensors")
    if not os.path.exists(weights):
        raise ValueError(f"checkpoint {checkpoint} has no model.safetensors (expected accelerate's save_state)")
    state = load_file(weights)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    ranks = {v.shape[0] for k, v in state.items() if ".lora_A." in k}
    if len(ranks) > 1:
        raise ValueError(f"checkpoint {checkpoint} has LoRA adapters of several ranks {sorted(ranks)}; the trainer "
                         "uses one rank (lora_rank)")
    if ranks:
        model = add_lora(model, r=ranks.pop())
        _check_fit(model.load_state_dict(state, strict=False), model, checkpoint, base_dir)
        model = model.merge_and_unload()
    else:
        _check_fit(model.load_state_dict(state, strict=False), model, checkpoint, base_dir)
    model.tie_weights()
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    for name in os.listdir(base_dir):   # tokenizer and generation files travel with the weights
        if name.startswith(("tokenizer", "special_tokens", "vocab", "merges", "added_tokens", "generation_config",
                            "chat_template")):
            shutil.copy(os.path.join(base_dir, name), tmp)
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    return out


def _check_fit(result, model, checkpoint: str, base_dir: str) -> None:
    tied = "lm_head.weight" if model.config.tie_word_embeddings else None
    missing = sorted(k for k in result.missing_keys if not (tied and k.endswith(tied)))
    unexpected = sorted(result.unexpected_keys)
    if missing or unexpected:
        raise ValueError(f"checkpoint {checkpoint} does not fit the model in {base_dir}: missing {missing[:5]}, "
                         f"unexpected {unexpected[:5]}")
