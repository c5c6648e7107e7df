"""What every benchmark JSON records about where it ran (imported by the bench scripts as `from _common import ...`)."""
from __future__ import annotations

import os
import platform


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


def _cpuinfo(field: str) -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith(field))
    except (OSError, StopIteration):
        return ""
