"""`Trajectory` (AgentGym-RL's RolloutHandler): a multi-turn episode as one growing list of token ids with exact masks.

Why token ids and not text: the policy gradient needs log pi(sampled token), so the training sequence must hold
exactly the ids the engine sampled. Decoding a reply and re-encoding it can give different ids (BPE merges across
the boundary, special tokens dropped), which silently trains on tokens nobody sampled (AgentGym-RL's bug §2.3).
So the engine's prompt for every turn IS the trajectory's `input_ids` so far, and sampled ids are appended as is.

Token kinds (for masks and the coloured views):
    TEMPLATE  chat scaffolding: "<|im_start|>user\\n", "<|im_end|>\\n", the generation header, a closing "<|im_end|>"
              that we add when the model was cut off by max_tokens (it never sampled one, so it is not trained)
    PROMPT    the fixed instruction and its acknowledgement (the two opening turns)
    ENV       environment observations
    POLICY    ids the engine sampled: loss_mask = 1 exactly here
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

PAD, TEMPLATE, PROMPT, ENV, POLICY = 0, 1, 2, 3, 4


class ChatFormat:
    """Turns chat messages into token ids piece by piece, following the tokenizer's own chat template.

    The template is rendered once with sentinel contents; the text between sentinels is the scaffolding. Pieces are
    encoded separately, so we always know which id is scaffolding and which is content, and an env turn can be
    appended to a sequence without re-encoding what is already there.
    """

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        s = [f"\x00S{i}\x00" for i in range(5)]
        msgs = [{"role": "user", "content": s[0]}, {"role": "assistant", "content": s[1]},
                {"role": "user", "content": s[2]}, {"role": "assistant", "content": s[3]},
                {"role": "user", "content": s[4]}]
        text = tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
        parts = _split_on(text, s)
        # parts: [head, user->assistant, assistant->user, user->assistant, assistant->user, after last user]
        self.head = parts[0]                   # e.g. "<|im_start|>system\n...<|im_end|>\n<|im_start|>user\n"
        self.user_to_assistant = parts[1]      # "<|im_end|>\n<|im_start|>assistant\n"
        self.assistant_to_user = parts[2]      # "<|im_end|>\n<|im_start|>user\n"
        self.generation_header = parts[5]      # "<|im_end|>\n<|im_start|>assistant\n"
        if parts[3] != parts[1] or parts[4] != parts[2]:
            raise ValueError("chat template is not turn-regular (scaffolding differs between turns); "
                             "agentgym_nb needs a ChatML-like template")
        self.end_of_turn = _end_of_turn_token(tokenizer, self.assistant_to_user)
        self.end_of_turn_id = tokenizer.convert_tokens_to_ids(self.end_of_turn)
        eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
        self.stop_token_ids = sorted({self.end_of_turn_id, *eos})
        # after a reply that ended with the end-of-turn token, only the rest of the scaffolding is still missing
        self.after_reply = self.assistant_to_user[len(self.end_of_turn):]

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False) if text else []

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)


def _split_on(text: str, sentinels: list[str]) -> list[str]:
    parts, rest = [], text
    for s in sentinels:
        if s not in rest:
            raise ValueError("chat template dropped or rewrote a message's content; cannot build exact masks")
        before, rest = rest.split(s, 1)
        parts.append(before)
    parts.append(rest)
    return parts


def _end_of_turn_token(tokenizer, assistant_to_user: str) -> str:
    for tok in tokenizer.all_special_tokens:
        if tok and assistant_to_user.startswith(tok):
            return tok
    raise ValueError(f"chat template closes a turn with {assistant_to_user[:20]!r}, which is not a special token")


@dataclass
class Trajectory:
    """One episode. Build with `start`, then alternate `add_reply` and `add_observation`."""

    item_id: int
    group: int = 0
    input_ids: list[int] = field(default_factory=list)
    kinds: list[int] = field(default_factory=list)
    turn_ids: list[int] = field(default_factory=list)
    sampled_logprobs: list[float] = field(default_factory=list)   # engine log-probs, aligned with POLICY tokens
    messages: list[dict] = field(default_factory=list)             # the same episode as chat text, for logs
    episode: int = 0              # position in the run's episode order (it fixes the episode's random draws)
    anchors: list[str] = field(default_factory=list)   # digest of the env's state before each turn (runner.anchor_of):
                                                       # turn k acted in anchors[k - 1]
    reward: float = 0.0
    success: bool = False
    done: bool = False            # the env said the episode is over
    truncated: bool = False       # the token budget ran out before the env said done
    failed: str | None = None     # the env failed (error text); such episodes are excluded from updates
    num_rounds: int = 0           # assistant turns taken
    replies_cut_by_max_tokens: int = 0   # replies that reached max_tokens before an end-of-turn was sampled
    invalid_actions: int = 0      # turns the env judged invalid (Step.info["valid"] False)

    @classmethod
    def start(cls, chat: ChatFormat, instruction: list[dict], observation: str, item_id: int, group: int = 0):
        t = cls(item_id=item_id, group=group)
        t._extend(chat.encode(chat.head), TEMPLATE)
        t._extend(chat.encode(instruction[0]["content"]), PROMPT)
        t._extend(chat.encode(chat.user_to_assistant), TEMPLATE)
        t._extend(chat.encode(instruction[1]["content"]), PROMPT)
        t._extend(chat.encode(chat.assistant_to_user), TEMPLATE)
        t._extend(chat.encode(observation), ENV)
        t._extend(chat.encode(chat.generation_header), TEMPLATE)
        t.messages = [*instruction, {"role": "user", "content": observation}]
        return t

    def add_reply(self, chat: ChatFormat, token_ids: list[int], logprobs: list[float] | None = None) -> str:
        """Append the sampled ids (trained). A reply that did not end with the end-of-turn token (cut by
        max_tokens, or ended by another stop token such as the model's EOS) gets it appended as scaffolding (not
        trained: the model never sampled it), so the sequence is the chat template's."""
        self.num_rounds += 1
        self._extend(list(token_ids), POLICY)
        self.sampled_logprobs.extend(logprobs if logprobs is not None else [float("nan")] * len(token_ids))
        ended = bool(token_ids) and token_ids[-1] in chat.stop_token_ids
        if not ended:
            self.replies_cut_by_max_tokens += 1
        if not token_ids or token_ids[-1] != chat.end_of_turn_id:
            # cut, or closed by an EOS that is not the template's end-of-turn token: the template still closes it
            self._extend([chat.end_of_turn_id], TEMPLATE)
        text = chat.tokenizer.decode(token_ids, skip_special_tokens=True)
        self.messages.append({"role": "assistant", "content": text})
        return text

    def add_observation(self, chat: ChatFormat, observation: str, budget: int | None = None) -> bool:
        """Append an env turn: the rest of the scaffolding, the observation, and the next generation header.
        If that would make the sequence `budget` tokens or longer, only the chat text records it and False is
        returned (the episode cannot continue)."""
        self.messages.append({"role": "user", "content": observation})
        pieces = [(chat.encode(chat.after_reply), TEMPLATE), (chat.encode(observation), ENV),
                  (chat.encode(chat.generation_header), TEMPLATE)]
        if budget is not None and len(self.input_ids) + sum(len(ids) for ids, _ in pieces) >= budget:
            return False
        for ids, kind in pieces:
            self._extend(ids, kind)
        return True

    def _extend(self, ids: list[int], kind: int) -> None:
        self.input_ids.extend(ids)
        self.kinds.extend([kind] * len(ids))
        self.turn_ids.extend([self.num_rounds] * len(ids))

    @property
    def loss_mask(self) -> list[int]:
        return [int(k == POLICY) for k in self.kinds]

    @property
    def num_policy_tokens(self) -> int:
        return sum(k == POLICY for k in self.kinds)

    def to_tensors(self) -> dict[str, torch.Tensor]:
        """input_ids, attention_mask, loss_mask, position_ids, turn_ids, kinds, rewards (score on the last
        trainable token), all of shape [T]."""
        T = len(self.input_ids)
        loss_mask = torch.tensor(self.loss_mask, dtype=torch.long)
        rewards = torch.zeros(T)
        trainable = loss_mask.nonzero()
        if len(trainable):
            rewards[trainable[-1, 0]] = self.reward
        return {"input_ids": torch.tensor(self.input_ids, dtype=torch.long),
                "attention_mask": torch.ones(T, dtype=torch.long),
                "loss_mask": loss_mask,
                "position_ids": torch.arange(T),
                "turn_ids": torch.tensor(self.turn_ids, dtype=torch.long),
                "kinds": torch.tensor(self.kinds, dtype=torch.long),
                "rewards": rewards}

    def to_log(self) -> dict:
        """One JSONL record: AgentGym-RL's {item_id, conversations, reward} plus what a reader needs to audit it."""
        return {"item_id": self.item_id, "group": self.group, "episode": self.episode, "conversations": self.messages,
                "reward": self.reward, "success": self.success, "done": self.done, "truncated": self.truncated,
                "failed": self.failed, "num_rounds": self.num_rounds,
                "replies_cut_by_max_tokens": self.replies_cut_by_max_tokens, "invalid_actions": self.invalid_actions,
                "num_tokens": len(self.input_ids), "num_policy_tokens": self.num_policy_tokens}



@dataclass
class TrajectoryGroup:
    """The episodes of one prompt: an item played `n` times, GRPO's, RLOO's and GiGPO's unit of comparison.

    `id` is the group's number in its batch, the same on every process of a launch (a training step numbers its
    items 0, 1, ... and each process plays its share under those numbers), so groups can be chosen, split into
    mini-batches and matched across processes by id alone."""
    id: int
    item_id: int
    episodes: list[Trajectory]

    @classmethod
    def of(cls, trajectories: list[Trajectory]) -> list[TrajectoryGroup]:
        """The groups of a list of episodes (by `Trajectory.group`), in order of first appearance."""
        groups: dict[int, TrajectoryGroup] = {}
        for t in trajectories:
            if t.group not in groups:
                groups[t.group] = cls(t.group, t.item_id, [])
            elif groups[t.group].item_id != t.item_id:
                raise ValueError(f"group {t.group} holds episodes of items {groups[t.group].item_id} and {t.item_id}; "
                                 "a group is one item played several times")
            groups[t.group].episodes.append(t)
        return list(groups.values())

    @property
    def prompt_ids(self) -> list[int]:
        """The first prompt the engine got for this item: its episodes' tokens before their first reply."""
        first = self.episodes[0]
        return first.input_ids[:next((i for i, k in enumerate(first.kinds) if k == POLICY), len(first.kinds))]

    @property
    def scores(self) -> list[float]:
        return [t.reward for t in self.episodes]

    @property
    def informative(self) -> bool:
        """Whether its scores differ: a group that scored alike has zero group-relative advantage (no signal)."""
        return len(set(self.scores)) > 1


def collate(trajectories: list[Trajectory], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad a batch to [B, T_max]. Padding has attention 0, loss 0, kind PAD, turn -1."""
    items = [t.to_tensors() for t in trajectories]
    T = max(len(x["input_ids"]) for x in items)
    fill = {"input_ids": pad_id, "attention_mask": 0, "loss_mask": 0, "position_ids": 0, "turn_ids": -1,
            "kinds": PAD, "rewards": 0.0}
    out = {}
    for key, value in fill.items():
        rows = [torch.nn.functional.pad(x[key], (0, T - len(x[key])), value=value) for x in items]
        out[key] = torch.stack(rows)
    return out
