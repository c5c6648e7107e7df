"""Generation speed of HFEngine and VLLMEngine: vLLM init and weight-reload time, greedy tokens/s at batch 1 and 32.

    .venv/bin/python bench/engine_speed.py                      # the tiny test model, built in a temp dir
    .venv/bin/python bench/engine_speed.py --model-dir outputs/models/nano --threads 1 2
"""
import argparse
import importlib.util
import tempfile
import time
from pathlib import Path

import torch

from agentgym_nb.rollout.engine import HFEngine, SamplingParams, VLLMEngine


def tiny_model_dir() -> str:
    spec = importlib.util.spec_from_file_location("test_engine", Path(__file__).parents[1] / "tests/test_engine.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tempfile.mkdtemp(prefix="tiny_qwen2_")
    module.build_tiny_model(out)
    return out


def tokens_per_second(engine, batch: int, max_tokens: int) -> float:
    prompts = [[3 + (7 * i + b) % 300 for i in range(20)] for b in range(batch)]
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    engine.generate(prompts[:1], SamplingParams(temperature=0.0, max_tokens=2))  # warm-up
    start = time.perf_counter()
    completions = engine.generate(prompts, params)
    return sum(len(c.token_ids) for c in completions) / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", default=None, help="HF model folder (default: build the tiny test model)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="torch thread counts to try")
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args()
    model_dir = args.model_dir or tiny_model_dir()

    start = time.perf_counter()
    vllm_engine = VLLMEngine(model_dir, max_model_len=512, max_num_seqs=64, kv_cache_gib=0.5)
    print(f"vLLM import + init: {time.perf_counter() - start:.1f} s")
    hf_engine = HFEngine(model_dir, batch_size=32)
    state = list(hf_engine.model.state_dict().items())
    start = time.perf_counter()
    for _ in range(5):
        vllm_engine.load_weights(state)
    print(f"vLLM load_weights ({sum(t.numel() for _, t in state) / 1e6:.2f}M params): "
          f"{(time.perf_counter() - start) / 5 * 1000:.0f} ms")

    print("engine  threads  tok/s bs1  tok/s bs32")
    for threads in args.threads:
        torch.set_num_threads(threads)
        for name, engine in (("hf", hf_engine), ("vllm", vllm_engine)):
            bs1, bs32 = (tokens_per_second(engine, b, args.max_tokens) for b in (1, 32))
            print(f"{name:6s}  {threads:7d}  {bs1:9.0f}  {bs32:10.0f}")
    vllm_engine.close()


if __name__ == "__main__":
    main()
