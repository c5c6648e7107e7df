from agentgym_nb.rollout.engine import Completion, Engine, HFEngine, SamplingParams, VLLMEngine, make_engine

__all__ = ["Completion", "Engine", "HFEngine", "SamplingParams", "VLLMEngine", "make_engine"]
