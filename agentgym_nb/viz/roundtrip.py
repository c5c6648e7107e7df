"""AgentGym-RL's text round trip, measured on our trajectories (lesson 02).

AgentGym-RL keeps a conversation as text: after each generation it decodes the sampled ids
(`skip_special_tokens=True`), re-encodes the text to build the training sequence (appending `<|im_end|>`, trained),
and re-renders the whole chat through the template to build the next prompt. These functions rebuild one of our
episodes that way and say where and why the rebuilt ids differ from the ids the engine really sampled and was given.
"""
from __future__ import annotations

import pandas as pd

from ..rollout.trajectory import POLICY, TEMPLATE, ChatFormat, Trajectory


def agentgym_loss_mask(traj: Trajectory, chat: ChatFormat) -> list[int]:
    """AgentGym-RL's loss mask for our ids: the policy's tokens plus every `<|im_end|>` that closes an assistant turn,
    also the one the template adds after a reply cut by max_tokens (which nobody sampled)."""
    mask = list(traj.loss_mask)
    for i, (token, kind) in enumerate(zip(traj.input_ids, traj.kinds)):
        if kind == TEMPLATE and token == chat.end_of_turn_id and i > 0 and traj.kinds[i - 1] == POLICY:
            mask[i] = 1
    return mask


def agentgym_reply_ids(sampled: list[int], chat: ChatFormat) -> list[int]:
    """AgentGym-RL's training ids for one reply: encode(decode(sampled, skip_special_tokens=True)) + <|im_end|>."""
    return chat.encode(chat.tokenizer.decode(sampled, skip_special_tokens=True)) + [chat.end_of_turn_id]


def reply_reason(sampled: list[int], reencoded: list[int], chat: ChatFormat) -> str:
    """Why a reply's re-encoded ids differ from the sampled ones."""
    content = [i for i in sampled if i not in chat.stop_token_ids]
    if any(i in chat.tokenizer.all_special_ids for i in content):
        return "a special token was dropped"
    if "\ufffd" in chat.tokenizer.decode(content):
        return "bytes that are not text"
    if reencoded[:-1] != content:
        return "a different split"
    return "ended by another stop id: the template's <|im_end|> was added"


def prompt_reason(traj: Trajectory, prompt: list[int], rendered: list[int]) -> str:
    """Why a prompt re-rendered from the chat text differs from the prompt the engine was given."""
    first = next((i for i, (p, q) in enumerate(zip(prompt, rendered)) if p != q), min(len(prompt), len(rendered)))
    if first < len(prompt) and traj.kinds[first] == POLICY:
        return "an earlier reply re-encoded differently"
    return "a merge across a template boundary"


def roundtrip_mismatches(trajectories: list[Trajectory], chat: ChatFormat) -> list[dict]:
    """One row per reply whose AgentGym-RL rebuild (its trained ids, or the prompt it was sampled from) differs from
    ours: episode, task, turn, sampled, trained (the rebuilt ids), prompt, rendered, reply_differs, prompt_differs,
    reason, prompt_reason."""
    rows = []
    for e, t in enumerate(trajectories):
        for k in range(1, t.num_rounds + 1):
            positions = [i for i, (kind, turn) in enumerate(zip(t.kinds, t.turn_ids)) if kind == POLICY and turn == k]
            if not positions:
                continue
            sampled = [t.input_ids[i] for i in positions]
            trained = agentgym_reply_ids(sampled, chat)
            ours = sampled if sampled[-1] in chat.stop_token_ids else sampled + [chat.end_of_turn_id]
            prompt = t.input_ids[:positions[0]]
            rendered = chat.encode(chat.tokenizer.apply_chat_template(t.messages[:3 + 2 * (k - 1)], tokenize=False,
                                                                      add_generation_prompt=True))
            if trained != ours or rendered != prompt:
                rows.append(dict(episode=e, task=t.item_id, turn=k, sampled=sampled, trained=trained,
                                 reply_differs=trained != ours, prompt_differs=rendered != prompt,
                                 reason=reply_reason(sampled, trained, chat) if trained != ours else None,
                                 prompt_reason=prompt_reason(t, prompt, rendered) if rendered != prompt else None,
                                 prompt=prompt, rendered=rendered))
    return rows


def side_by_side(a: list[int], b: list[int], names: list[str], tokenizer) -> tuple[int, pd.DataFrame]:
    """(first differing position, a two-row table of `id:'token'` around it) for two id lists."""
    first = next((i for i, (p, q) in enumerate(zip(a, b)) if p != q), min(len(a), len(b)))
    lo, hi = max(first - 4, 0), max(first + 8, 12)
    rows = [[f"{i}:{tokenizer.decode([i])!r}" for i in ids[lo:hi]] for ids in (a, b)]
    width = max(map(len, rows))
    return first, pd.DataFrame([r + [""] * (width - len(r)) for r in rows], index=names, columns=range(lo, lo + width))
