"""Credit assignment and losses: pure tensor functions, no I/O."""
from agentgym_nb.algos.advantages import (ESTIMATORS, Credit, Estimator, assign_credit, gae, gigpo, grpo, masked_mean,
                                          masked_whiten, reinforce_plus_plus, rloo)
from agentgym_nb.algos.losses import (aggregate, entropy_from_logits, explained_variance, kl_penalty, policy_loss,
                                      sft_loss, token_logprobs, value_loss)
from agentgym_nb.algos.schedule import adaptive, fixed, make_schedule, stepwise

__all__ = ["ESTIMATORS", "Credit", "Estimator", "assign_credit", "gae", "gigpo", "grpo", "masked_mean", "masked_whiten",
           "reinforce_plus_plus", "rloo",
           "aggregate", "entropy_from_logits", "explained_variance", "kl_penalty", "policy_loss",
           "sft_loss", "token_logprobs", "value_loss", "adaptive", "fixed", "make_schedule", "stepwise"]
