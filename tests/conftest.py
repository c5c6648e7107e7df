"""Shared fixtures: the smoke-sized nano model (built once, cached under outputs/models) and engines on it."""
import os

import pytest

os.environ.setdefault("PYTHONHASHSEED", "0")


# The longest groups of `make test` (its --durations on 2 cores), longest first; the rest follow in file order.
LONGEST_FIRST = ["test_models.py", "test_pretrained_rl.py", "test_install.py", "notebooks", "test_webarena.py",
                 "test_bench_horizon.py", "test_miniwob.py", "test_notebook_envs.py", "test_bench_algorithms.py",
                 "test_vllm_launch.py"]


@pytest.hookimpl(tryfirst=True)   # before pytest-xdist's own hook, which reads the groups into the test ids
def pytest_collection_modifyitems(items):
    """Notebooks (collected by nbmake) carry the `notebook` marker, so `-m "not notebook"` leaves them out.

    `make test` runs two pytest-xdist workers (`--dist loadgroup`), each handed whole groups in the order of
    `items`. A test file is one group, so its module fixtures (a vLLM engine, a browser) start once. The notebooks
    and test_lab.py (which runs notebook 01 in JupyterLab, into the run folder of nbmake's notebook 01) are one
    group. The longest groups go first, so that none starts last and runs on alone."""
    group = {}
    for item in items:
        path = str(item.fspath)
        group[item] = "notebooks" if path.endswith((".ipynb", "test_lab.py")) else os.path.basename(path)
        if path.endswith(".ipynb"):
            item.add_marker(pytest.mark.notebook)
        item.add_marker(pytest.mark.xdist_group(group[item]))
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(group[item], len(LONGEST_FIRST)))   # stable: the rest keep their order


@pytest.hookimpl(optionalhook=True)   # a hook of pytest-xdist: without it installed, unused
def pytest_xdist_node_collection_finished(node, ids):
    """A worker's test ids lack their group (`<id>@<group>`) when pytest drops it (pytest 9.2 with pytest-xdist 3.8):
    a file's tests, and the notebooks, would be spread over both workers. Stop with the reason instead."""
    ungrouped = [nodeid for nodeid in ids if "@" not in nodeid]
    if node.config.getoption("dist") == "loadgroup" and ungrouped:
        pytest.exit(f"pytest-xdist's loadgroup did not group {len(ungrouped)} tests (e.g. {ungrouped[0]}): pytest 9.2 "
                    "drops the group from the test ids (pytest-dev/pytest-xdist#1386); install pytest<9.2 as "
                    "constraints.txt says", returncode=pytest.ExitCode.USAGE_ERROR)


@pytest.fixture(scope="session")
def nano_dir():
    from agentgym_nb import models
    from agentgym_nb.config import make_config
    return models.resolve_config(make_config(preset="smoke", env="babyai"), log=lambda *a: None)


@pytest.fixture(scope="session")
def tokenizer(nano_dir):
    from agentgym_nb.models import load_tokenizer
    return load_tokenizer(nano_dir)


@pytest.fixture(scope="session")
def chat(tokenizer):
    from agentgym_nb.rollout.trajectory import ChatFormat
    return ChatFormat(tokenizer)


@pytest.fixture(scope="module")   # not session: closing another module's engine would break a shared one
def vllm_nano(nano_dir):
    from agentgym_nb.rollout.vllm import VLLMEngine
    engine = VLLMEngine(nano_dir, max_model_len=2048, max_num_seqs=32, kv_cache_gib=0.5)
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def hf_nano(nano_dir, tokenizer):
    from agentgym_nb.rollout.engine import HFEngine
    return HFEngine(nano_dir, tokenizer=tokenizer)
