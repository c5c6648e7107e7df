"""One GPU, one command (`make gpu-check`): does the GPU path run as a GPU path, and how fast. Writes
bench/results/gpu_check.json with the device, the versions, the commit and every figure:

  1. tests    the tests that touch devices, precision and memory (DEVICE_TESTS), with CUDA visible
  2. cpu_rl   an RL run of the cpu preset (BabyAI one-room, the nano, GRPO) on the GPU with the HF engine sampling
              with the policy: seconds per step, rollout and update shares, the sync and train/inference checks
  3. gpu_rl   the gpu preset at Qwen2.5-0.5B's shape (random weights, the preset's LoRA r = 32, bf16, gradient
              checkpointing, the HF engine) for two steps: the peak memory the card saw against the plan's
  4. engine   bench/engine_speed.py: the nano's 64-episode one-room rollout and the long track's 16 episodes at H = 20
              on the GPU and on this machine's CPU, and the 0.5B shape sampling 64 sequences of 256 tokens from
              512-token prompts
  5. train    bench/train_speed.py: an update of the 0.5B shape (4 x 2048 tokens), full fine-tuning and LoRA, MFU
  6. paper_7b (on request: --parts paper_7b) the paper preset at Qwen2.5-7B's shape for one step on one card

Where nothing but torch, transformers, peft and accelerate is installed (a lent GPU machine without a network), the
project's other packages come from a folder of wheels: `make gpu-wheels` (scripts/gpu_wheels.py, on a machine with
the package registries) downloads them; `--wheels .gpu-wheels` installs the missing ones before anything runs. The
cpu preset's nano is built on a CPU beforehand (`make model`) and travels in outputs/models/.

    python scripts/gpu_check.py [--wheels .gpu-wheels]          # on the GPU machine, <= 6 minutes
    python scripts/gpu_check.py --smoke --device cpu            # every part at toy sizes: a test of this script
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))


def install_wheels(folder: str) -> dict[str, str]:
    """Install every wheel of `folder` (scripts/gpu_wheels.py) at its version, from the folder only (no index): pip
    leaves what is already installed at that version alone and replaces other versions (an older transformers).
    Returns {distribution: version} of what changed."""
    from importlib.metadata import PackageNotFoundError, version
    wanted = {}
    for wheel in sorted(os.listdir(folder)):
        if wheel.endswith(".whl"):
            name, ver = wheel.split("-")[:2]
            wanted[name.replace("_", "-").lower()] = ver

    def installed(name):
        try:
            return version(name)
        except PackageNotFoundError:
            return None
    before = {name: installed(name) for name in wanted}
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--find-links", folder,
                    *(f"{name}=={ver}" for name, ver in wanted.items())], check=True)
    return {name: ver for name, ver in wanted.items() if before[name] != ver}


def run_tests(device: str, smoke: bool, workers: int) -> dict:
    """The tests that touch devices, precision and memory (DEVICE_TESTS; at --smoke two of them) with CUDA visible:
    the pytest summary line's counts and the ids of failing tests. The whole fast tier on a GPU took longer than a
    part's cap (424 tests in 74 s on 15 workers) and tests nothing else about the device."""
    selection = DEVICE_TESTS[:2] if smoke else DEVICE_TESTS
    cmd = [sys.executable, "-m", "pytest", *selection, "-q", "-p", "no:cacheprovider", "-rf",
           "-m", "not slow and not browser and not jvm and not notebook"]
    if workers > 1:
        cmd += ["-n", str(workers)]
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                          # "0": the machine lacks part of the install, and a test needing it skips (tests/harness.py)
                          env={**os.environ, "AGENTGYM_NB_PRESET": "smoke", "OMP_NUM_THREADS": "1",
                               "AGENTGYM_NB_REQUIRE_ALL": "0"})
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-500:]
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|skipped|errors?|xfailed)", summary)}
    return {"seconds": time.perf_counter() - start, "returncode": done.returncode, "summary": summary, **counts,
            "failures": re.findall(r"^FAILED (\S+)", done.stdout, flags=re.M)}


def train_run(cfg, steps: int) -> dict:
    """`steps` training steps of `cfg`: each step's metrics, and the card's peak memory against the plan's."""
    import torch

    from agentgym_nb.train.rl import Trainer
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    trainer = Trainer(cfg, log=lambda *a: None)
    setup = time.perf_counter() - start
    keys = ("step", "max_rounds", "episodes", "success", "sampled_tokens", "step_seconds", "rollout_seconds",
            "logprob_seconds", "update_seconds", "sync_seconds", "rollout_tokens_per_s", "train_tokens_per_s", "mfu",
            "sync_error", "mismatch_kl", "mismatch_max_abs", "kl", "grad_norm")
    print(f"  {cfg.name}: set up in {setup:.1f} s (planned peak {trainer.planned_peak_gb} GB)", flush=True)

    for phase in ("rollout", "learn", "sync"):   # its seconds as it ends: a part stopped at its cap shows where
        def timed(*a, _phase=phase, _method=getattr(trainer, phase), **k):
            t = time.perf_counter()
            out = _method(*a, **k)
            print(f"    {_phase} {time.perf_counter() - t:.1f} s", flush=True)
            return out
        setattr(trainer, phase, timed)

    def progress(m):   # as each step ends
        print(f"  step {m['step']}: {m['step_seconds']:.1f} s (rollout {m['rollout_seconds']:.1f}, log-probs "
              f"{m['logprob_seconds']:.1f}, update {m['update_seconds']:.1f}, sync {m['sync_seconds']:.1f}), "
              f"{m['sampled_tokens']:.0f} policy tokens", flush=True)
    history = [{k: m[k] for k in keys if k in m} for m in trainer.fit(steps, callback=progress)]
    out = {"setup_seconds": setup, "steps": history, "device": str(trainer.parallel.device),
           "engine_shares_model": bool(getattr(trainer.engine, "shares_model", False)),
           "planned_peak_gb": trainer.planned_peak_gb}
    if cuda:
        out["measured_peak_gb"] = torch.cuda.max_memory_allocated() / 1e9
        out["measured_peak_reserved_gb"] = torch.cuda.max_memory_reserved() / 1e9
        if out["planned_peak_gb"]:
            out["plan_over_measured"] = out["planned_peak_gb"] / out["measured_peak_gb"]
    trainer.close()
    return out


def shape_dir(tokenizer_dir: str, out: str, shape: dict, smoke: bool = False) -> str:
    """A model of Qwen2 `shape` (engine_speed.QWEN_05B, QWEN_7B) with random weights in bf16, made on the GPU when
    there is one (a 7B model's fp32 init on a CPU takes minutes and 30 GB), with a tokenizer whose ids it covers
    (the nano's): no checkpoint is carried to the machine, the shape alone decides memory and speed. At smoke
    sizes: its vocabulary on a body of two narrow layers."""
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    end_of_turn = tokenizer.convert_tokens_to_ids("<|im_end|>")
    torch.manual_seed(0)
    shape = {**shape, **(dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                              intermediate_size=128) if smoke else {})}
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = Qwen2ForCausalLM(Qwen2Config(**shape, eos_token_id=end_of_turn, pad_token_id=tokenizer.pad_token_id,
                                             bos_token_id=None, dtype=torch.bfloat16))
    model.to(torch.bfloat16).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


# Each part's cap (seconds) on a GPU: 300 s in all for the default parts, so that with the wheels' install (~45 s) and the machine's start a
# whole check fits one 10-minute call with room to run it again. A part past its cap is stopped and recorded as such;
# the parts after it still run. At --smoke (a CPU) every part may take CAP_SMOKE.
PART_SECONDS = {"tests": 45, "cpu_rl": 35, "gpu_rl": 65, "engine": 105, "train": 50, "paper_7b": 420}
DEFAULT_PARTS = ["tests", "cpu_rl", "gpu_rl", "engine", "train"]
CAP_SMOKE = 300
DEVICE_TESTS = ["tests/test_gpu_plan.py", "tests/test_losses.py", "tests/test_engine.py", "tests/test_episode_cache.py"]


def part_tests(args, work: str) -> dict:
    return run_tests(args.device, args.smoke, args.workers)


def part_cpu_rl(args, work: str) -> dict:
    cfg = make_cpu_cfg(args, work)
    return train_run(cfg, cfg.steps)


def make_cpu_cfg(args, work: str):
    from agentgym_nb.config import make_config
    track = {} if args.smoke else {"track": "one-room"}
    return make_config(preset="smoke" if args.smoke else "cpu", env="babyai", name="gpu-check-cpu-preset",
                       overrides={"out_dir": work, "engine": "hf", "steps": 2 if args.smoke else 3, "save_every": 100,
                                  **track})


def part_gpu_rl(args, work: str) -> dict:
    from agentgym_nb import models
    from agentgym_nb.config import make_config
    from engine_speed import QWEN_05B
    model_dir = shape_dir(models.resolve_config(make_cpu_cfg(args, work)), os.path.join(work, "qwen0.5b-shape"),
                          QWEN_05B, smoke=args.smoke)
    cfg = make_config(preset="gpu", env="babyai", name="gpu-check-gpu-preset", overrides={
        "out_dir": work, "model": model_dir, "engine": "hf", "steps": 2, "save_every": 100,
        # episodes as long as the run will make them (6 turns of <= 256 tokens), so the plan's worst case is
        # what the run reaches; at smoke sizes everything is cut down
        "max_total_tokens": 2560, **({"prompts_per_step": 2, "samples_per_prompt": 2, "max_tokens": 8,
                                      "rounds": [1, 2, 3], "micro_batch_tokens": 512,
                                      "bf16": False} if args.smoke else {})})   # (a CPU may emulate bf16)
    return train_run(cfg, 1 if args.smoke else 2)


def part_paper_7b(args, work: str) -> dict:
    """The paper preset at Qwen2.5-7B's shape (random weights, bf16 and gradient checkpointing as the preset has
    them) on one card: LoRA (rank 32, the gpu preset's) instead of the paper's full fine-tuning over 8 GPUs, the HF
    engine, one step, its rollout cut to 8 short episodes (a random model never stops: the paper's 512-token turns
    would be minutes of decoding): the plan against the card's measured peak, the update's tokens per second. Not in
    the default parts (its weights alone are 15 GB to make): `--parts paper_7b`."""
    from agentgym_nb import models
    from agentgym_nb.config import make_config
    from engine_speed import QWEN_7B
    t0 = time.perf_counter()
    model_dir = shape_dir(models.resolve_config(make_cpu_cfg(args, work)), os.path.join(work, "qwen7b-shape"),
                          QWEN_7B, smoke=args.smoke)
    made = time.perf_counter() - t0
    print(f"  the 7B shape made and saved in {made:.0f} s", flush=True)
    cfg = make_config(preset="paper", env="babyai", name="gpu-check-paper-7b", overrides={
        "out_dir": work, "model": model_dir, "engine": "hf", "steps": 1, "save_every": 100, "prompts_per_step": 2,
        "samples_per_prompt": 4, "mini_batches": 1, "max_tokens": 64, "rounds": [3], "max_total_tokens": 2048,
        "lora_rank": 32, "launch_config": None,
        **({"micro_batch_tokens": 512, "bf16": False} if args.smoke else {})})
    return {"shape_seconds": made, "lora_rank": cfg.lora_rank, "bf16": cfg.bf16,
            "gradient_checkpointing": cfg.gradient_checkpointing, **train_run(cfg, 1)}


def part_engine(args, work: str) -> dict:
    import engine_speed
    smoke = ["--preset", "smoke", "--batch", "4", "--new-tokens", "4", "--prompt-tokens", "16",
             "--rollout-tasks", "2", "--long-tasks", "1"] if args.smoke else ["--long-tasks", "4"]
    shapes = ["nano"] if args.smoke else ["nano", "qwen2.5-0.5b"]
    out = engine_speed.main(["--device", args.device, "--shapes", *shapes, "--repeats", "1", "--out",
                             os.path.join(work, "engine_speed.json"), *smoke])
    return out["results"]


def part_train(args, work: str) -> dict:
    import train_speed
    smoke = ["--preset", "smoke", "--models", "nano", "--precisions", "fp32", "--shape", "2", "64",
             "--matmul-n", "256", "--steps", "1"] if args.smoke else []
    out = train_speed.main(["--device", args.device, "--modes", "full", "lora", "--repeats", "1",
                            "--out", os.path.join(work, "train_speed.json"), *smoke])
    return {"results": out["results"]}


PARTS = {"tests": part_tests, "cpu_rl": part_cpu_rl, "gpu_rl": part_gpu_rl, "engine": part_engine,
         "train": part_train, "paper_7b": part_paper_7b}


def run_capped(cmd: list[str], cap: float, keep: int = 60) -> tuple[int | None, list[str]]:
    """Run `cmd` in a process group of its own, its output streaming through as it goes, killed after `cap`
    seconds: (its return code, None when it was stopped; its last `keep` lines of output). A part's figures are
    printed as each is measured, so the lines keep what a part stopped at its cap had measured."""
    proc = subprocess.Popen(cmd, cwd=ROOT, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, bufsize=1)
    lines: list[str] = []

    def pump():
        for line in proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            lines.append(line.rstrip("\n"))
    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    stopped = False
    try:
        proc.wait(timeout=cap)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.wait()
        stopped = True
    reader.join(timeout=5)
    return (None if stopped else proc.returncode), lines[-keep:]


def run_part(name: str, args, work: str) -> dict:
    """Part `name` in a process of its own, stopped at its cap: what it prints streams through as it goes, and what
    it measured comes back as JSON (a part that hangs or crashes the process is a finding, not the end); a part
    that did not finish keeps its printed lines."""
    out = os.path.join(work, f"{name}.json")
    cmd = [sys.executable, os.path.abspath(__file__), "--one", name, "--work", work, "--device", args.device,
           "--workers", str(args.workers), *(["--smoke"] if args.smoke else [])]
    cap = CAP_SMOKE if args.smoke else PART_SECONDS[name]
    start = time.perf_counter()
    returncode, printed = run_capped(cmd, cap)
    seconds = time.perf_counter() - start
    if returncode is None:
        return {"error": f"stopped at its cap of {cap} s", "part_seconds": seconds, "printed": printed}
    if returncode or not os.path.exists(out):
        return {"error": f"its process exited with {returncode} and no result", "part_seconds": seconds,
                "printed": printed}
    with open(out) as f:
        return {**json.load(f), "part_seconds": seconds}


def main(argv=None) -> dict:
    import torch
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="cpu: only with --smoke")
    p.add_argument("--smoke", action="store_true", help="every part at toy sizes (a test of this script)")
    p.add_argument("--wheels", default=None, help="a folder of wheels to install missing packages from")
    p.add_argument("--workers", type=int, default=8, help="pytest-xdist workers for the device tests")
    p.add_argument("--parts", nargs="+", default=DEFAULT_PARTS, choices=list(PARTS))
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "gpu_check.json"))
    p.add_argument("--one", choices=list(PARTS), help=argparse.SUPPRESS)   # a part's own process
    p.add_argument("--work", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.one:
        try:
            measured = PARTS[args.one](args, args.work)
        except Exception as e:   # one part's failure is a finding: the others still run and are recorded
            measured = {"error": f"{type(e).__name__}: {e}"}
        with open(os.path.join(args.work, f"{args.one}.json"), "w") as f:
            json.dump(measured, f)
        return measured
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("no CUDA device is visible: run on a GPU machine, or --smoke --device cpu to test the script")
    if args.device == "cpu" and not args.smoke:
        p.error("--device cpu checks the script, not a GPU: add --smoke")
    t0 = time.perf_counter()
    installed = install_wheels(args.wheels) if args.wheels else {}
    from _common import commit, machine, versions   # bench/_common.py (needs psutil: after the wheels)
    work = tempfile.mkdtemp(prefix="gpu_check_")
    result: dict = {"check": "gpu_check", "date": time.strftime("%Y-%m-%d"), "commit": commit(),
                    "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu", "smoke": args.smoke,
                    "machine": machine(), "versions": versions("torch", "transformers", "peft", "accelerate"),
                    "installed_from_wheels": installed, "install_seconds": time.perf_counter() - t0,
                    "part_caps": PART_SECONDS, "parts": {}}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    for name in args.parts:
        print(f"gpu_check {name}: starting ({time.perf_counter() - t0:.0f} s in)", flush=True)
        result["parts"][name] = run_part(name, args, work)
        result["seconds"] = time.perf_counter() - t0
        with open(args.out, "w") as f:   # after every part: a check cut short keeps what it measured
            json.dump(result, f, indent=2)
        print(f"gpu_check {name}: {json.dumps(result['parts'][name])[:400]}", flush=True)
    shutil.rmtree(work, ignore_errors=True)
    print(f"gpu_check: {result['seconds']:.0f} s -> {args.out}")
    return result


if __name__ == "__main__":
    main()
