"""A run's checkpoints: saving and resuming the trainer's state (exactly: the run continues as if never stopped),
which folder is a run, its newest complete checkpoint, and a checkpoint's policy as a plain Hugging Face folder that
any engine loads.

    <run_dir>/ckpt/step_00040/   accelerate's save_state (models, optimizers, every process's random state),
                                 fsdp/ (the shards of FSDP-sharded models and optimizers), trainer_state.json
"""
from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import asdict

import torch
from safetensors.torch import load_file

from ..config import RunConfig
from ..pretrained import load_pretrained
from .common import add_lora


class _TiedHeadNotice(logging.Filter):
    """accelerate drops a tied lm_head from every checkpoint and says so each time; loading ties it again (the
    resume tests load such checkpoints), so that one notice is dropped. Other shared tensors are still reported."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Removed shared tensor {'lm_head.weight'}" not in record.getMessage()


logging.getLogger("accelerate.utils.other").addFilter(_TiedHeadNotice())


def checkpoint_dir(run_dir: str, step: int) -> str:
    return os.path.join(run_dir, "ckpt", f"step_{step:05d}")


def saved_checkpoints(run_dir: str) -> list[str]:
    """The complete checkpoints of a run, oldest first (half-written .tmp folders are not)."""
    root = os.path.join(run_dir, "ckpt")
    if not os.path.isdir(root):
        return []
    return [os.path.join(root, d) for d in sorted(os.listdir(root)) if d.startswith("step_") and not d.endswith(".tmp")]


def save(accelerator, cfg: RunConfig, step: int, sharded: dict | None = None) -> str:
    """Save the trainer's state after step `step`: accelerate's save_state of what it prepared, FSDP's shards of
    `sharded` ({name: (model, optimizer)}) and trainer_state.json (step, config). Only the two newest checkpoints are
    kept. Every process must call it."""
    path = checkpoint_dir(cfg.run_dir, step)
    tmp = path + ".tmp"
    main = accelerator.is_main_process
    if main:
        shutil.rmtree(tmp, ignore_errors=True)
    accelerator.wait_for_everyone()
    accelerator.save_state(tmp)   # every process: each saves its own random state
    if sharded:
        _fsdp_state(sharded, tmp, load=False)
    accelerator.wait_for_everyone()
    if main:
        with open(os.path.join(tmp, "trainer_state.json"), "w") as f:
            json.dump({"step": step, "config": asdict(cfg)}, f)
        shutil.rmtree(path, ignore_errors=True)
        os.replace(tmp, path)   # a checkpoint is complete or absent, never half-written
        for old in sorted(os.listdir(os.path.dirname(path)))[:-2]:
            shutil.rmtree(os.path.join(os.path.dirname(path), old), ignore_errors=True)
    accelerator.wait_for_everyone()
    return path


def resume(accelerator, run_dir: str, sharded: dict | None = None) -> tuple[int, list[dict], str] | None:
    """Load the run's newest complete checkpoint into what accelerate prepared (and into `sharded`) and cut
    metrics.jsonl to the steps it contains: (step, those metrics, the checkpoint). None for a fresh run, whose
    metrics.jsonl, if any, is stale and removed."""
    metrics_path = os.path.join(run_dir, "metrics.jsonl")
    saved = saved_checkpoints(run_dir)
    if not saved:
        if os.path.exists(metrics_path) and accelerator.is_main_process:
            os.remove(metrics_path)
        return None
    path = saved[-1]
    accelerator.load_state(path)
    if sharded:
        _fsdp_state(sharded, path, load=True)
    with open(os.path.join(path, "trainer_state.json")) as f:
        step = json.load(f)["step"]
    with open(metrics_path) as f:
        history = [m for m in map(json.loads, f) if m["step"] <= step]
    if accelerator.is_main_process:
        write_metrics(metrics_path, history)
    return step, history, path


def write_metrics(path: str, history: list[dict]) -> None:
    """Replace metrics.jsonl with `history` atomically: the other processes of a resumed run read it at the same
    moment, and a file truncated in place could give them a partial history; a renamed file gives each reader the
    old whole file or the new one."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.writelines(json.dumps(m) + "\n" for m in history)
    os.replace(tmp, path)


def _fsdp_state(sharded: dict, path: str, *, load: bool) -> None:
    """Save or load FSDP-sharded models and optimizers ({name: (model, optimizer)}), every process writing or
    reading its own shards (torch.distributed.checkpoint; accelerate's save_state only knows the models it prepared
    itself)."""
    import torch.distributed.checkpoint as dcp   # only FSDP runs need it, and importing it takes seconds
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    state = {name: dict(zip(("model", "optim"), get_state_dict(m, o))) for name, (m, o) in sharded.items()}
    if not load:
        dcp.save(state, checkpoint_id=os.path.join(path, "fsdp"))
        return
    dcp.load(state, checkpoint_id=os.path.join(path, "fsdp"))
    for name, (m, o) in sharded.items():
        set_state_dict(m, o, model_state_dict=state[name]["model"], optim_state_dict=state[name]["optim"])


def is_run_dir(path: str) -> bool:
    """A training run directory (outputs/runs/<name>): its config.json is a RunConfig, not an HF model config."""
    cfg = os.path.join(path, "config.json")
    if not os.path.isfile(cfg):
        return False
    with open(cfg) as f:
        keys = set(json.load(f))
    return {"model", "preset", "env", "algorithm"} <= keys and "model_type" not in keys


def latest_checkpoint(run_dir: str) -> str:
    """The newest complete checkpoint of a run (ckpt/step_00040 and so on)."""
    saved = saved_checkpoints(run_dir)
    if not saved:
        raise ValueError(f"run {run_dir} has no checkpoint under {os.path.join(run_dir, 'ckpt')}: train it until a "
                         "save (save_every) or evaluate its starting model by name instead")
    return saved[-1]


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
    model = load_pretrained(AutoModelForCausalLM, base_dir, dtype=torch.float32)
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
