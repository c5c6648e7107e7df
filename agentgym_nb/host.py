"""The machine a measurement runs on: what its JSON records about it (cores, CPU, versions, the commit) and how
processes running side by side share its cores (pinning, the lowest priority). The horizon study and the bench
scripts (through bench/_common.py) use it."""
from __future__ import annotations

import os
import platform
import subprocess


def machine() -> dict:
    """Cores, CPU model and the flags that decide bf16 speed, RAM, platform, Python."""
    import psutil
    flags = _cpuinfo("flags").split()
    return {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
            "cpu_model": _cpuinfo("model name") or platform.processor(),
            "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
            "cpu_flags": [f for f in ("avx512f", "avx512_bf16", "amx_bf16") if f in flags]}


def versions(*distributions: str) -> dict:
    """Installed versions of these distributions (the ones not installed are left out, e.g. vllm on a CPU box)."""
    from importlib.metadata import PackageNotFoundError, version
    out = {}
    for name in distributions:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            pass
    return out


def commit() -> str:
    """The short commit of the checkout a benchmark runs from ("unknown" outside git)."""
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=os.path.dirname(os.path.abspath(__file__)),
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def priority() -> dict:
    """This process's nice value and its autogroup's (None without autogroup scheduling): on a shared machine a
    benchmark may run ahead of the other work (a negative autogroup nice), and its report should say so."""
    try:
        with open("/proc/self/autogroup") as f:
            autogroup = int(f.read().split("nice")[1])
    except (OSError, IndexError, ValueError):
        autogroup = None
    return {"nice": os.nice(0), "autogroup_nice": autogroup}


def _cpuinfo(field: str) -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith(field))
    except (OSError, StopIteration):
        return ""


def start_job(cmd: list[str], slot: int, jobs: int, **kw):
    """Start one of `jobs` benchmark processes running side by side. With more than one, job `slot` is pinned to
    core `slot` with one thread: its torch threads, and its vLLM engine's OpenMP threads, which vLLM would otherwise
    bind to the same core in every process (two such engines ran ~8x slower than one)."""
    if jobs == 1:
        return subprocess.Popen(cmd, **kw)
    cores = sorted(os.sched_getaffinity(0))
    core = cores[slot % len(cores)]
    env = dict(os.environ, OMP_NUM_THREADS="1", VLLM_CPU_OMP_THREADS_BIND=str(core))
    return subprocess.Popen(cmd, env=env, preexec_fn=lambda: os.sched_setaffinity(0, {core}), **kw)


def yield_cpu() -> str:
    """Give this process, and the processes it starts, the lowest CPU priority, so that hours of background runs take
    only the cores nothing else wants. `nice` alone is not enough on Linux: with autogroup scheduling (the default)
    every session gets an equal share of the CPU whatever its processes' nice values, so a niced study started from
    one shell still took half the machine from a test suite started from another. The autogroup is niced too, but
    only when this process leads its own session (started with `start_new_session=True`): an autogroup's nice
    applies to its whole session, which must not be the user's shell. Returns what was done, for the log."""
    os.nice(19 - os.nice(0))
    if os.getsid(0) != os.getpid():
        return "nice 19 (autogroup left alone: this process shares its session)"
    try:
        with open("/proc/self/autogroup", "w") as f:
            f.write("19")
        return "nice 19, autogroup nice 19"
    except OSError as e:   # no autogroup (kernel option off, or not Linux): the process nice is all there is
        return f"nice 19 (autogroup not set: {e.strerror})"
