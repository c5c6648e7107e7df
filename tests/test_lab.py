"""JupyterLab, the suite's first interface: `jupyter lab` from .venv serves the notebooks, and in real Chromium
(Playwright) notebook 01 runs top to bottom at the smoke preset and draws its ipywidgets replay viewer and its
token-mask view, and its exercise, left blank, says so without a tick (a learner's Run All: no reference solutions).
A screenshot is kept as evidence (outputs/runs/lab-test/notebook01.png)."""
import os
import shutil
import subprocess
import sys
import time

import pytest
import requests

from agentgym_nb.envs.http import free_ports
from agentgym_nb.exercises import SOLUTIONS_ENV
from agentgym_nb.paths import default_outputs_dir

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.timeout(600)]   # Debian's chromium: make install
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    port = free_ports()
    root = tmp_path_factory.mktemp("lab")   # a copy: JupyterLab's autosave must not write into the repo's notebook
    shutil.copy(os.path.join(ROOT, "notebooks", "01_rollout_anatomy.ipynb"), root)
    log_path = root / "jupyter.log"
    jupyter = os.path.join(os.path.dirname(sys.executable), "jupyter")
    proc = subprocess.Popen([jupyter, "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
                             "--IdentityProvider.token=", "--ServerApp.password=", f"--ServerApp.root_dir={root}",
                             "--LabApp.expose_app_in_browser=True", "--allow-root",    # CI runs as root
                             "--ServerApp.port_retries=0"],   # a taken port is an exit with its log, not another port
                            env={**{k: v for k, v in os.environ.items() if k != SOLUTIONS_ENV},   # a learner's kernel
                                 "AGENTGYM_NB_PRESET": "smoke"}, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=open(log_path, "w"))
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            if requests.get(f"{url}/api/status", timeout=2).ok:
                break
        except requests.ConnectionError:
            time.sleep(0.5)
        if proc.poll() is not None:
            raise RuntimeError(f"jupyter lab exited ({proc.returncode}): {log_path.read_text()[-2000:]}")
    else:
        proc.kill()
        raise RuntimeError("jupyter lab did not answer /api/status within 120 s")
    yield url
    proc.terminate()
    proc.wait(timeout=30)


def test_notebook_01_runs_in_jupyterlab_and_draws_its_widgets(lab):
    from playwright.sync_api import sync_playwright
    shot = os.path.join(default_outputs_dir(), "runs", "lab-test", "notebook01.png")
    os.makedirs(os.path.dirname(shot), exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), headless=True,
                                    args=["--no-sandbox", "--disable-dev-shm-usage"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{lab}/lab/tree/01_rollout_anatomy.ipynb")
            page.wait_for_function("window.jupyterapp && document.querySelector('.jp-Notebook .jp-Cell')",
                                   timeout=120_000)
            # the kernel is up once its status shows idle; then run every cell, as a learner's "Run All" does
            page.wait_for_selector(".jp-Notebook", timeout=60_000)
            page.wait_for_function("window.jupyterapp.shell.currentWidget?.sessionContext?.session?.kernel"
                                   "?.status === 'idle'", timeout=120_000)
            page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
            page.wait_for_function(
                "() => { const w = window.jupyterapp.shell.currentWidget;"
                " const cells = w.content.widgets.filter(c => c.model.type === 'code');"
                " return cells.every(c => c.model.executionCount !== null) &&"
                " w.sessionContext.session.kernel.status === 'idle'; }", timeout=420_000, polling=1000)
            errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr'] .ansi-red-fg,"
                                  " .jp-RenderedText[data-mime-type='application/vnd.jupyter.error']")
            assert errors.count() == 0, errors.first.inner_text()[:2000]
            widget = page.locator(".jupyter-widgets.widget-slider, .jupyter-widgets .widget-slider").first
            widget.wait_for(timeout=60_000)
            widget.scroll_into_view_if_needed()
            page.screenshot(path=shot, full_page=False)
            assert page.get_by_text("Error displaying widget").count() == 0
            assert page.locator(".jupyter-widgets button", has_text="next turn").count() >= 1   # the replay viewer
            assert page.locator("span.tok[data-kind]").count() > 50                              # the token-mask view
            # the exercise's check cell, read from the notebook's model (JupyterLab may not render cells out of view)
            [said] = page.evaluate(
                "() => window.jupyterapp.shell.currentWidget.content.widgets"
                ".filter(c => c.model.type === 'code'"
                " && c.model.sharedModel.getSource().includes('check_token_logprobs'))"
                ".map(c => c.model.outputs.toJSON().map(o => [].concat(o.text || '').join('')).join(''))")
            assert "the log-probability of each token: not answered yet" in said, said
            assert "✓" not in said and "reference solution" not in said, said
        finally:
            browser.close()
    assert os.path.getsize(shot) > 10_000
