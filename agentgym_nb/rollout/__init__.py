from agentgym_nb.rollout.engine import Completion, Engine, HFEngine, SamplingParams, make_engine
from agentgym_nb.rollout.vllm import VLLMEngine

__all__ = ["Completion", "Engine", "HFEngine", "SamplingParams", "VLLMEngine", "make_engine"]
