"""What every run of the horizon study shares: its arms, the rules its claims are judged by (fixed before the runs),
the GPU target, the `Study` (the settings and the start weights), and the start model itself (read, committed,
resolved)."""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time

from ..host import commit, machine
from ..train.runs import ADAPTIVE_IN_REACH, named

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # the repository
COMMAND = os.path.join(ROOT, "bench", "horizon.py")   # the study's command line; each run's process is one of it
RESULT = os.path.join(ROOT, "bench", "results", "horizon_study.json")
START_DIRS = {"cpu": os.path.join(ROOT, "models", "nano-babyai-long")}   # the committed start model per preset
START_FILES = (".json", ".jinja", ".safetensors", ".txt")   # what a model folder needs (no locks, no caches)

ARMS = {
    "fixed6": dict(schedule="fixed", rounds=[6]),
    "fixed20": dict(schedule="fixed", rounds=[20]),
    "stepwise": dict(schedule="stepwise", rounds=[6, 13, 20]),
    "adaptive": dict(schedule="adaptive", rounds=[6, 13, 20], **ADAPTIVE_IN_REACH),
    "fixed20-rpp": dict(schedule="fixed", rounds=[20], algorithm="reinforce_plus_plus"),
    "stepwise-rpp": dict(schedule="stepwise", rounds=[6, 13, 20], algorithm="reinforce_plus_plus"),
    # The two treatments of episodes cut by the horizon (RunConfig.cut_out_of_baseline, cut_turn_discount), each
    # against the default on fixed long, where 61-100% of training episodes per step are cut. Equal steps only; not
    # in the default --arms. The discount 0.9 was chosen before any run: turn 20 of a cut episode keeps 0.9^19 = 14%.
    "fixed20-cut-baseline": dict(schedule="fixed", rounds=[20], cut_out_of_baseline=True),
    "fixed20-cut-discount": dict(schedule="fixed", rounds=[20], cut_turn_discount=0.9),
}
CUT_ARMS = ("fixed20-cut-baseline", "fixed20-cut-discount")
MAIN_ARMS = [a for a in ARMS if a not in CUT_ARMS]
LONG = {"grpo": "fixed20", "reinforce_plus_plus": "fixed20-rpp"}   # the token budget's reference arm per estimator
EVAL_HORIZON = 20
SURFACE_SAMPLES = 16          # k = 1..16 of the pass@(k, T) surfaces
CUDA_EPISODES = 256           # episodes in flight in a cuda run's evaluations (a nano's KV cache is ~2 kB a token)
CURVE_KEYS = ("step", "max_rounds", "success", "success_in_reach", "reward", "turns", "cut_by_horizon",
              "zero_adv_groups", "groups_trained", "kl", "entropy", "clip_frac", "grad_norm", "pg_loss",
              "sampled_tokens", "policy_tokens", "step_seconds", "rollout_seconds", "update_seconds")

# How each claim is judged, fixed at 2026-11-27 before any run from the committed start weights (the 2026-11-26 runs
# were re-judged by them; their verdicts under the rules they were run with are in docs/results.md). The report
# carries this dict, and every verdict states its own rule in words.
RULES = {
    "interval": "a paired difference's 95% t-interval over seeds (of the per-seed differences) decides a verdict; "
                "its 95% percentile bootstrap over (seed, item) pairs (items resampled within each seed, 2,000 "
                "resamples) is reported beside it",
    "min_seeds": 3,   # two seeds that tie give a zero-width interval over seeds, which says nothing
    "established": "a difference is established above (below) 0 when its interval over seeds lies wholly above "
                   "(below) 0, over at least min_seeds seeds",
    "fall": 0.10,       # fixed long is unstable: it falls this far from its peak by the equal-steps point ...
    "fall_noise": 0.05,  # ... and the interval of the fall lies above this: the peak is the highest of ~7 noisy points
    "plateau": 0.03,    # fixed short plateaus: its gain over the second half of training stays below this
    "tokens_target": 0.8,   # stepwise needs fewer tokens: to reach this share of fixed long's mean final success
    "verdicts": "reproduced or not reproduced by the rules each claim states; inconclusive when neither rule holds, "
                "when an arm the claim needs has not run, or over fewer than min_seeds seeds",
}

# The study on one GPU (issue 40's target): 8 seeds of fixed 6, fixed 20, stepwise and adaptive at equal steps, and
# stepwise at fixed 20's policy tokens (fixed 20's own point at equal tokens is its equal-steps point), in two calls
# of at most 9 minutes on one H100 and 16 cores; each call runs 4 seeds whole (a second machine has no run folders,
# so no run is split between calls) and brings back the report it has written after every finished run.
GPU_TARGET = {
    "calls": ["bash bench/horizon_gpu.sh 0 1 2 3", "bash bench/horizon_gpu.sh 4 5 6 7"],
    "each_call": "timeout 530 python3 bench/horizon.py --device cuda --jobs 16 --seeds S S S S --arms fixed6 fixed20 "
                 "stepwise adaptive --tokens-arms stepwise --out $OUT/horizon_study.json, after the wheels a bare "
                 "machine lacks (.gpu-wheels/ from make gpu-wheels, carried) are installed and the committed report "
                 "copied to $OUT",
    "between_calls": "copy the returned horizon_study.json to bench/results/ (the second call continues it), and "
                     "commit it after each",
    "estimate": "7-12 minutes a call, not measured: the longest chain is fixed 20 (60 steps, 9 evaluations) then "
                "stepwise's equal-tokens phase (about 20 steps, 4 evaluations); 9 minutes hold if a fixed-20 step "
                "takes at most about 4 s with 16 runs on the card (bench/README.md has the arithmetic)",
}


@dataclasses.dataclass(frozen=True)
class Study:
    """What every run of a study shares (its settings), the start weights every run begins from, and where the runs
    go (device, threads: not settings, they change no number a run reports beyond its seconds). The smoke preset (a
    test of the study) divides every horizon by 10."""
    lr: float = 3e-4
    steps: int = 60              # the equal-steps budget; stepwise stages are steps // 3 long
    eval_every: int = 10         # held-out evaluations up to the equal-steps point, then every 2 x eval_every
    eval_items: int = 300        # held-out items, 20 per level of the track's 15
    max_steps: int = 240         # a cap on the compute-matched phase
    samples_per_prompt: int = 4  # episodes per task (AgentGym-RL's rollout n); the cpu preset's 8 doubles a step
    preset: str = "cpu"
    start_sha256: str = ""       # the start weights' digest: part of every run's name
    start_dir: str | None = None  # where they are on this machine (None: only reading a record)
    device: str = "cpu"
    threads: int = 1
    surface_items: int = 0       # pass@(k, T) on this many held-out items at each run's last point (0: none)

    def settings(self) -> dict:
        where = ("start_sha256", "start_dir", "device", "threads", "surface_items")
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in where}

    def horizon(self, rounds: int) -> int:
        return rounds if self.preset != "smoke" else max(1, round(rounds / 10))

    @property
    def eval_horizon(self) -> int:
        return self.horizon(EVAL_HORIZON)

    def config(self, arm: str, seed: int):
        """The named RunConfig of one run. Its name hashes the start weights' digest (not their folder), so runs
        from other weights never share a folder, and the engine (a cuda run samples with the HF engine)."""
        from ..config import make_config
        spec = dict(ARMS[arm])
        algorithm = spec.pop("algorithm", "grpo")
        spec["rounds"] = [self.horizon(r) for r in spec["rounds"]]
        # room for the 2x-horizon evaluation (40 turns); a training episode (<= 20 turns) stays far below it
        budget = (dict(max_total_tokens=7168, samples_per_prompt=self.samples_per_prompt) if self.preset != "smoke"
                  else dict(engine="hf"))   # hf: starts in 1 s
        if self.device == "cuda":
            budget["engine"] = "hf"   # the engine that shares the trainer's card (vLLM would take a card per run)
        # env_timeout: BabyAI runs in this process and answers in milliseconds; a long timeout lets the study be
        # paused (SIGSTOP) while the machine measures something else, without its waiting env calls timing out
        cfg = make_config(preset=self.preset, env="babyai", track="long", algorithm=algorithm, seed=seed, lr=self.lr,
                          steps=self.max_steps, rounds_every=max(1, self.steps // 3), save_every=5,
                          eval_items=self.eval_items, eval_rounds=self.eval_horizon, threads=self.threads,
                          env_timeout=7200.0, **budget, **spec)
        run = named(dataclasses.replace(cfg, model=f"sha256:{self.start_sha256[:16]}"), f"horizon-{arm}")
        return dataclasses.replace(run, model=self.start_dir or run.model)


def study_key(study: Study) -> str:
    return f"{study.preset}-lr{study.lr:g}-steps{study.steps}-n{study.samples_per_prompt}"


def write_json(path: str, obj: dict, indent: int | None = None) -> None:
    """Write whole or not at all: a process killed while writing leaves the previous file."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=indent)
    os.replace(tmp, path)


# --------------------------------------------------------------------------------------------- the start model

def track_nano(preset: str) -> str:
    """The long track's nano built from its recipe under outputs/models (built now if it is not there)."""
    from .. import models
    from ..config import make_config
    return models.resolve_config(make_config(preset=preset, env="babyai", track="long"))


def read_start(path: str) -> dict:
    """{"dir", "name", "sha256"} of a start model folder. A committed one (with start.json) must still hold the
    weights its start.json records."""
    from .. import models
    if not os.path.exists(os.path.join(path, "build.json")):
        raise SystemExit(f"{path} holds no built model (no build.json): name a model folder with --start, or build "
                         "the long track's nano with --rebuild-start")
    sha = models.weights_digest(path)
    record_path = os.path.join(path, "start.json")
    record = json.load(open(record_path)) if os.path.exists(record_path) else {}
    if record and record["sha256"] != sha:
        raise SystemExit(f"{path}: its weights' sha256 is {sha[:12]}..., but start.json records "
                         f"{record['sha256'][:12]}...: the folder's weights were changed after it was committed. "
                         "Restore them (git checkout), or commit the new ones with --commit-start.")
    return {"dir": os.path.abspath(path), "name": record.get("recipe", os.path.basename(os.path.normpath(path))),
            "sha256": sha}


def commit_start(source: str, dest: str) -> dict:
    """Copy a built model folder to `dest` (a path in the repository: a few MB) with start.json, the record of what
    it is: the recipe folder it was built as, its weights' sha256, its size, and where it was copied. An existing
    `dest` with other weights is refused: the runs recorded from it would lose their start."""
    from .. import models
    found = read_start(source)
    if os.path.exists(os.path.join(dest, "start.json")):
        there = read_start(dest)
        if there["sha256"] != found["sha256"]:
            raise SystemExit(f"{dest} already holds start weights {there['sha256'][:12]}...; runs recorded from them "
                             f"would lose their start. Remove the folder first to replace them with {source}'s.")
    os.makedirs(dest, exist_ok=True)
    for name in sorted(os.listdir(source)):
        if name.endswith(START_FILES) and name != "start.json" and os.path.isfile(os.path.join(source, name)):
            shutil.copyfile(os.path.join(source, name), os.path.join(dest, name))
    record = {"recipe": found["name"], "sha256": found["sha256"], "params": models.count_params(dest),
              "bytes": sum(os.path.getsize(os.path.join(dest, f)) for f in os.listdir(dest)),
              "copied": {"from": os.path.basename(os.path.abspath(source)), "date": time.strftime("%Y-%m-%d"),
                         "commit": commit(), "cpu": machine()["cpu_model"]}}
    write_json(os.path.join(dest, "start.json"), record, indent=2)
    if read_start(dest)["sha256"] != found["sha256"]:
        raise SystemExit(f"{dest}: the copy's weights differ from {source}'s")
    return record


def resolve_start(preset: str, start: str | None = None, rebuild: bool = False) -> dict:
    """The start of this call: the build of `rebuild` (--rebuild-start), the folder `start` (--start), or the preset's
    committed folder."""
    if rebuild:
        return read_start(track_nano(preset))
    path = start or START_DIRS.get(preset)
    if path is None or not os.path.exists(path):
        where = f"{path} does not exist" if path else f"the {preset} preset has no committed start model"
        raise SystemExit(f"no start model: {where}. Name a built model folder with --start DIR, build the long "
                         "track's nano here with --rebuild-start (other weights than a committed start: they start "
                         "a study of their own), or commit one with --commit-start.")
    return read_start(path)
