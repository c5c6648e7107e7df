"""Supervised fine-tuning (behaviour cloning) on multi-turn trajectories.

    L = - sum_{b,t} loss_mask[b,t] * log pi(x[b,t] | x[b,<t]) / sum_{b,t} loss_mask[b,t]

Data comes as AgentGym's ShareGPT-style records (AgentTraj-L, AgentEvol's kept explorations):
    {"item_id": "babyai_12", "conversations": [{"from": "human"|"gpt", "loss": true|false|null, "value": "..."}]}
where the first two turns are the env's instruction and the assistant's acknowledgement and the third is the first
observation; or as our own rollout logs (`runner.write_rollout_log`: {"item_id": 12, "conversations": [{"role",
"content"}], "reward", ...}), which load into the same form. Records become token ids through the model's own chat
template with the same `Trajectory` as RL rollouts, so the masks are identical: the model learns to produce exactly
what RL will later ask it to produce, in the same token layout. Trained: the assistant turns after the first
observation (their text and the end-of-turn token), except those marked `"loss": false`. Never trained: the
instruction, the acknowledgement, observations, and the template's scaffolding.
"""
from __future__ import annotations

import json
import os
import random
import time

import torch

from ..models import cloning_step
from ..rollout.trajectory import PROMPT, ChatFormat, Trajectory, collate
from .common import autocast, micro_batches, trim

SPEAKERS = {"human": "user", "gpt": "assistant"}     # AgentGym's `from` -> chat-template role
PROMPT_TURNS = 3                                      # instruction, acknowledgement, first observation


# ------------------------------------------------------------------------------------------------------- data

def load_records(path: str) -> list[dict]:
    """The conversation records of a .json file (a list, AgentGym's layout) or a .jsonl file (one per line, our
    rollout logs and AgentGym's inference outputs), checked and in ShareGPT form (see `check_record`)."""
    with open(path) as f:
        if path.endswith(".jsonl"):
            raw = [json.loads(line) for line in f if line.strip()]
        else:
            raw = json.load(f)
            if not isinstance(raw, list):
                raise ValueError(f"{path}: a .json trajectory file holds a list of records, got {type(raw).__name__}")
    return [check_record(r, where=f"{path} record {i}") for i, r in enumerate(raw)]


def write_records(path: str, records: list[dict]) -> None:
    """One JSON line per record."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)


def check_record(raw, where: str = "record") -> dict:
    """A conversation record in ShareGPT form, or ValueError naming `where`, the field and what is valid.

    Accepts AgentGym's turns `{from: human|gpt, loss: bool|null, value: str}` and our rollout logs' turns
    `{role: user|assistant, content: str}` (converted: acknowledgement `loss: false`, later assistant turns
    `loss: true`). Turns alternate human, gpt, human, ... and there are at least three (instruction, acknowledgement,
    first observation). Other fields (reward, success, ...) are kept.
    """
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: expected an object with item_id and conversations, got {type(raw).__name__}")
    for key in ("item_id", "conversations"):
        if key not in raw:
            raise ValueError(f"{where}: missing field {key!r} (a record is {{item_id, conversations, ...}})")
    item = raw["item_id"]
    if isinstance(item, bool) or not isinstance(item, (int, str)):
        raise ValueError(f"{where}: item_id must be a string like 'babyai_12' or an integer, got {item!r}")
    where = f"{where} (item_id {item!r})"
    conv = raw["conversations"]
    if not isinstance(conv, list) or len(conv) < PROMPT_TURNS:
        got = f"{len(conv)} turns" if isinstance(conv, list) else repr(conv)
        raise ValueError(f"{where}: conversations must be a list of at least {PROMPT_TURNS} turns (instruction, "
                         f"acknowledgement, first observation), got {got}")
    if "reward" in raw and (isinstance(raw["reward"], bool) or not isinstance(raw["reward"], (int, float))):
        raise ValueError(f"{where}: reward must be a number, got {raw['reward']!r}")
    turns = [_check_turn(turn, j, f"{where}: conversations[{j}]") for j, turn in enumerate(conv)]
    return {**raw, "conversations": turns}


def _check_turn(turn, j: int, where: str) -> dict:
    expected = "human" if j % 2 == 0 else "gpt"
    if not isinstance(turn, dict):
        raise ValueError(f"{where}: expected an object {{from, loss, value}}, got {type(turn).__name__}")
    if "from" in turn:
        speaker, value, loss = turn["from"], turn.get("value"), turn.get("loss")
        if speaker not in SPEAKERS:
            raise ValueError(f"{where}.from is {speaker!r}; valid: 'human', 'gpt'")
        if loss not in (True, False, None):
            raise ValueError(f"{where}.loss is {loss!r}; valid: true, false, null")
        value_field = "value"
    elif "role" in turn:
        roles = {v: k for k, v in SPEAKERS.items()}
        if turn["role"] not in roles:
            raise ValueError(f"{where}.role is {turn['role']!r}; valid: 'user', 'assistant'")
        speaker, value, value_field = roles[turn["role"]], turn.get("content"), "content"
        loss = None if speaker == "human" else j >= PROMPT_TURNS
    else:
        raise ValueError(f"{where}: has neither 'from' (AgentGym's turns) nor 'role' (rollout-log turns)")
    if speaker != expected:
        raise ValueError(f"{where} is a {speaker!r} turn where a {expected!r} turn belongs: turns alternate human, "
                         "gpt, human, ... starting with the instruction")
    if not isinstance(value, str):
        raise ValueError(f"{where}.{value_field} must be a string, got {value!r}")
    return {"from": speaker, "loss": loss, "value": value}


def is_trained(turn: dict, j: int) -> bool:
    """A gpt turn after the prompt turns, unless marked `loss: false` (null counts as trained)."""
    return j >= PROMPT_TURNS and turn["from"] == "gpt" and turn["loss"] is not False


def item_index(item_id) -> int:
    """'babyai_12' -> 12, 12 -> 12: AgentGym-RL's own reading of item ids (one env per file)."""
    if isinstance(item_id, int) and not isinstance(item_id, bool):
        return item_id
    try:
        return int(str(item_id).rsplit("_", 1)[-1])
    except ValueError:
        raise ValueError(f"item_id {item_id!r} does not end in an integer (expected 'name_<n>' or <n>)") from None


def to_trajectory(chat: ChatFormat, record: dict) -> Trajectory:
    """Token ids and masks of a checked record, built piece by piece through the chat template.

    Every assistant turn is encoded text + the end-of-turn token (what the policy must emit to end its turn). A
    trailing observation is dropped: nothing after it is trained."""
    conv = record["conversations"]
    prompt = [{"role": SPEAKERS[t["from"]], "content": t["value"]} for t in conv[:2]]
    traj = Trajectory.start(chat, prompt, conv[2]["value"], item_index(record["item_id"]))
    for j in range(PROMPT_TURNS, len(conv)):
        if conv[j]["from"] == "gpt":
            start = len(traj.input_ids)
            traj.add_reply(chat, chat.encode(conv[j]["value"]) + [chat.end_of_turn_id])
            if not is_trained(conv[j], j):   # context the model reads but is not taught to write
                traj.kinds[start:] = [PROMPT] * (len(traj.input_ids) - start)
        elif j + 1 < len(conv):
            traj.add_observation(chat, conv[j]["value"])
    traj.reward = float(record.get("reward", 0.0))
    return traj


def trajectory_record(traj: Trajectory, env: str) -> dict:
    """A rollout episode as an AgentGym inference-output record: {item_id: '<env>_<n>', conversations, reward,
    success}, the policy's replies with `loss: true`."""
    conv = []
    for j, m in enumerate(traj.messages):
        speaker = "human" if m["role"] == "user" else "gpt"
        conv.append({"from": speaker, "loss": None if speaker == "human" else j >= PROMPT_TURNS,
                     "value": m["content"]})
    return {"item_id": f"{env}_{traj.item_id}", "conversations": conv, "reward": traj.reward,
            "success": traj.success}


# --------------------------------------------------------------------------------------------------- training

def sft(model, trajectories: list[Trajectory], chat: ChatFormat, *, epochs: int = 1, batch_size: int = 32,
        micro_batch_tokens: int = 8192, lr: float = 1e-5, weight_decay: float = 0.0, grad_clip: float = 1.0,
        bf16: bool | None = None, seed: int = 0, log=print) -> list[dict]:
    """Fine-tune `model` (full, or only its LoRA adapters after `common.add_lora`: only parameters with
    requires_grad train) on `trajectories` for `epochs` shuffled passes of `batch_size` trajectories per optimizer
    step. Defaults are AgentGym's BC settings for 7B models (lr 1e-5, 32 sequences a step, clip 1); a nano model
    wants lr ~1e-3. Returns one record per step: {step, epoch, loss, tokens, grad_norm, seconds}."""
    data = [t for t in trajectories if t.num_policy_tokens > 0]
    if not data:
        raise ValueError(f"none of the {len(trajectories)} trajectories has a trainable (assistant) token")
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    rng = random.Random(seed)
    history, t0, step = [], time.time(), 0
    model.train()
    for epoch in range(epochs):
        order = list(range(len(data)))
        rng.shuffle(order)
        for start in range(0, len(order), batch_size):
            batch = collate([data[i] for i in order[start:start + batch_size]], chat.tokenizer.pad_token_id)
            loss, grad_norm = _sft_step(model, params, opt, batch, micro_batch_tokens, grad_clip, bf16)
            step += 1
            history.append({"step": step, "epoch": epoch, "loss": loss, "tokens": int(batch["loss_mask"].sum()),
                            "grad_norm": grad_norm, "seconds": round(time.time() - t0, 2)})
        if (epoch + 1) % max(1, epochs // 5) and epoch + 1 < epochs:
            continue   # about five lines per run
        epoch_losses = [h["loss"] for h in history if h["epoch"] == epoch]
        log(f"sft epoch {epoch + 1}/{epochs}: loss {sum(epoch_losses) / len(epoch_losses):.4f} "
            f"({step} steps, {time.time() - t0:.0f}s)")
    model.eval()
    return history


def _sft_step(model, params, opt, batch, micro_batch_tokens: int, grad_clip: float, bf16: bool | None):
    """`models.cloning_step` on `batch` split into micro-batches of at most `micro_batch_tokens` (rows x longest)."""
    device = params[0].device
    lengths = batch["attention_mask"].sum(-1).tolist()
    by_length = sorted(range(len(lengths)), key=lengths.__getitem__)   # similar lengths share a micro-batch
    split = ({k: v.to(device) for k, v in trim(batch, [by_length[i] for i in micro]).items()}
             for micro in micro_batches([lengths[i] for i in by_length], micro_batch_tokens))
    return cloning_step(model, opt, split, int(batch["loss_mask"].sum()), grad_clip=grad_clip,
                        autocast=lambda: autocast(device.type, bf16))
