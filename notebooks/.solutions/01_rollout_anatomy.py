"""Reference answers of notebooks/01_rollout_anatomy.ipynb (used only under AGENTGYM_NB_SOLUTIONS=1)."""
import torch

__all__ = ["my_token_logprobs"]


def my_token_logprobs(logits, input_ids, temperature):
    """logits[t] is the distribution of token t + 1, so token t is scored by logits[t - 1], after dividing by the
    sampling temperature and normalising (log_softmax); token 0 has no predictor: 0."""
    logp = torch.log_softmax(logits[:-1] / temperature, dim=-1)
    picked = logp.gather(-1, input_ids[1:, None])[:, 0]
    return torch.cat([torch.zeros(1), picked])
