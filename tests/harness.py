"""What tests import (not fixtures): an ASGI app served on loopback, and `accelerate launch` of a test worker.

They live here, not in conftest.py, because `notebooks/conftest.py` is a conftest too: with both directories
collected in one run, `from harness import ...` could find the notebooks' one."""
import contextlib
import os
import socket
import threading
import time


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
