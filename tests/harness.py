"""What tests import (not fixtures): skips for packages a machine lacks, an ASGI app served on loopback, and
`accelerate launch` of a test worker.

They live here, not in conftest.py, because `notebooks/conftest.py` is a conftest too: with both directories
collected in one run, `from harness import ...` could find the notebooks' one."""
import contextlib
import importlib.util
import os
import socket
import sys
import threading
import time

import pytest


# what each env's module imports that a GPU machine lacks (envs.env_class imports the module; miniwob's imports
# webarena's)
ENV_PACKAGES = {"textcraft": ("minecraft_data",), "sciworld": ("scienceworld", "py4j"), "webarena": ("playwright",),
                "miniwob": ("miniwob", "selenium", "playwright")}


def absent(*modules: str, envs: tuple[str, ...] = (), commands: tuple[str, ...] = ()) -> str | None:
    """Why a test cannot run here: "not installed here: papermill, nbformat" for the top-level `modules` (and those
    of `envs`) that are not installed and the `commands` not beside this Python (where scripts/book.py runs them
    from); None if nothing is missing.

    A GPU machine has only part of the install (reference/gpu.md), and its fast tier skips what needs the rest. A
    full install lacks nothing, so with AGENTGYM_NB_REQUIRE_ALL=1 (make test, test-long, test-fast) something
    missing fails the collection instead: on CI a skip would hide a broken install."""
    modules = dict.fromkeys(modules + tuple(m for env in envs for m in ENV_PACKAGES.get(env, ())))
    bin_dir = os.path.dirname(sys.executable)
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    missing += [f"{c} (the command)" for c in commands if not os.path.exists(os.path.join(bin_dir, c))]
    if not missing:
        return None
    reason = "not installed here: " + ", ".join(missing)
    if os.environ.get("AGENTGYM_NB_REQUIRE_ALL") == "1":
        pytest.fail(f"{reason} (AGENTGYM_NB_REQUIRE_ALL=1: the full install has it)", pytrace=False)
    return reason


def needs(*modules: str, envs: tuple[str, ...] = (), commands: tuple[str, ...] = ()) -> pytest.MarkDecorator:
    """A mark that skips a test (or a parameter, or as `pytestmark` a file) where `absent(...)` names something."""
    reason = absent(*modules, envs=envs, commands=commands)
    return pytest.mark.skipif(reason is not None, reason=reason or "")


def require(*modules: str, envs: tuple[str, ...] = ()) -> None:
    """Skip the rest of a test file (called before the imports that need `modules`), or of a test, where they are
    absent."""
    __tracebackhide__ = True   # the skip is reported at the test file's line, not here
    reason = absent(*modules, envs=envs)
    if reason:
        pytest.skip(reason, allow_module_level=True)


@contextlib.contextmanager
def loopback_server(app):
    """Serve an ASGI `app` (e.g. `envs.http.make_app(name)`) on a free 127.0.0.1 port in a thread; yields its URL."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        assert thread.is_alive(), "the server thread died during startup"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def accelerate_launch(config: str, worker: str, out_dir, timeout: float) -> None:
    """`accelerate launch --config_file configs/accelerate/<config>.yaml tests/<worker>.py <out_dir>` with one
    thread per process on the smoke preset; fails with the processes' stderr."""
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    accelerate = os.path.join(os.path.dirname(sys.executable), "accelerate")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "AGENTGYM_NB_PRESET": "smoke"}
    done = subprocess.run([accelerate, "launch", "--config_file", os.path.join(root, "configs", "accelerate", f"{config}.yaml"),
                           os.path.join(root, "tests", f"{worker}.py"), str(out_dir)],
                          env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
