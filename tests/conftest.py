"""Shared fixtures: the smoke-sized nano model (built once, cached under outputs/models) and engines on it."""
import os

import pytest

os.environ.setdefault("PYTHONHASHSEED", "0")


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


@pytest.fixture(scope="session")
def vllm_nano(nano_dir):
    from agentgym_nb.rollout.engine import VLLMEngine
    engine = VLLMEngine(nano_dir, max_model_len=2048, max_num_seqs=32, kv_cache_gib=0.5)
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def hf_nano(nano_dir, tokenizer):
    from agentgym_nb.rollout.engine import HFEngine
    return HFEngine(nano_dir, tokenizer=tokenizer)
