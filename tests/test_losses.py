"""Losses against numbers worked out by hand."""
import math

import pytest
import torch

from agentgym_nb.algos.losses import (aggregate, entropy_from_logits, explained_variance, kl_penalty, policy_loss,
                                      token_logprobs, value_loss)

LOG = math.log


def test_kl_estimators():
    logp = torch.tensor([0.0, -1.0, -0.5])
    ref = torch.tensor([0.0, 0.0, -1.0])  # d = logp - ref = [0, -1, .5]
    assert kl_penalty(logp, ref, "k1").tolist() == [0.0, -1.0, 0.5]
    assert torch.equal(kl_penalty(logp, ref, "kl"), kl_penalty(logp, ref, "k1"))
    assert kl_penalty(logp, ref, "abs").tolist() == [0.0, 1.0, 0.5]
    assert kl_penalty(logp, ref, "mse").tolist() == [0.0, 0.5, 0.125]  # d^2/2
    assert torch.equal(kl_penalty(logp, ref, "k2"), kl_penalty(logp, ref, "mse"))
    # k3 = exp(-d) + d - 1:  d=0 -> 0;  d=-1 -> e - 2 = .718282;  d=.5 -> exp(-.5) - .5 = .106531
    assert kl_penalty(logp, ref, "low_var_kl").tolist() == pytest.approx([0.0, math.e - 2, math.exp(-0.5) - 0.5])
    assert torch.equal(kl_penalty(logp, ref, "k3"), kl_penalty(logp, ref, "low_var_kl"))


def test_low_var_kl_clamped_with_finite_gradient():
    logp = torch.tensor([-5.0, -100.0, 100.0], requires_grad=True)
    k3 = kl_penalty(logp, torch.zeros(3), "k3")
    # d = -5: exp(5) - 6 = 142.4 -> 10;  d = -100 -> 10;  d = 100: exp(-100) + 99 -> 10
    assert k3.tolist() == [10.0, 10.0, 10.0]
    k3.sum().backward()
    assert torch.isfinite(logp.grad).all()


def test_unknown_kl_kind_lists_valid():
    with pytest.raises(ValueError, match="low_var_kl"):
        kl_penalty(torch.zeros(1), torch.zeros(1), "full")


def ppo_case(advantages, ratios):
    old = torch.zeros(len(ratios))[None]
    logp = torch.tensor([[LOG(r) for r in ratios]], requires_grad=True)
    return logp, old, torch.tensor([advantages]), torch.ones(1, len(ratios))


def test_ppo_clip_both_signs():
    logp, old, adv, m = ppo_case([1.0, 1.0, -1.0, -1.0], [1.5, 0.5, 1.5, 0.5])
    loss, metrics = policy_loss(logp, old, adv, m, clip_ratio=0.2)
    # A=+1, rho=1.5: max(-1.5, -1.2) = -1.2 (clipped)    A=+1, rho=.5: max(-.5, -.8) = -.5
    # A=-1, rho=1.5: max(1.5, 1.2) = 1.5                 A=-1, rho=.5: max(.5, .8) = .8 (clipped)
    # token-mean = (-1.2 - .5 + 1.5 + .8)/4 = .15
    assert loss.item() == pytest.approx(0.15)
    assert metrics["clip_frac"] == 0.5
    assert metrics["dual_clip_frac"] == 0.0
    # approx_kl = mean(old - logp) = -(ln 1.5 + ln .5 + ln 1.5 + ln .5)/4 = .143841
    assert metrics["approx_kl"] == pytest.approx(-(LOG(1.5) + LOG(0.5)) / 2)
    loss.backward()
    # clipped tokens get no gradient; d/dlogp of -A*rho/4 = -A*rho/4: token 2 -> -.5/4, token 3 -> 1.5/4
    assert logp.grad[0].tolist() == pytest.approx([0.0, -0.125, 0.375, 0.0])


def test_ppo_asymmetric_clip():
    logp, old, adv, m = ppo_case([1.0, 1.0, -1.0, -1.0], [1.5, 0.5, 1.5, 0.5])
    loss, metrics = policy_loss(logp, old, adv, m, clip_ratio=0.2, clip_ratio_high=0.6)
    # token 1: rho=1.5 < 1.6 now unclipped -> -1.5;  (-1.5 - .5 + 1.5 + .8)/4 = .075
    assert loss.item() == pytest.approx(0.075)
    assert metrics["clip_frac"] == 0.25


def test_dual_clip():
    logp, old, adv, m = ppo_case([-1.0, -1.0, 1.0], [5.0, 2.0, 5.0])
    loss, metrics = policy_loss(logp, old, adv, m, clip_ratio=0.2, dual_clip_c=3.0)
    # A=-1, rho=5: max(5, 1.2) = 5, dual bound -A*c = 3 -> 3;   A=-1, rho=2: 2 (< 3, bound inactive)
    # A=+1, rho=5: max(-5, -1.2) = -1.2, dual clip never applies to A > 0;   mean = (3 + 2 - 1.2)/3
    assert loss.item() == pytest.approx(3.8 / 3)
    assert metrics["dual_clip_frac"] == pytest.approx(1 / 3)
    loss.backward()
    assert logp.grad[0].tolist() == pytest.approx([0.0, 2 / 3, 0.0])  # d(-A*rho)/dlogp /3 = rho/3 for token 1
    plain, _ = policy_loss(logp, old, adv, m, clip_ratio=0.2)
    assert plain.item() == pytest.approx(5.8 / 3)
    with pytest.raises(ValueError, match="dual_clip_c"):
        policy_loss(logp, old, adv, m, dual_clip_c=0.5)


LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])


def test_aggregation_modes():
    m = torch.tensor([[1, 0, 0], [1, 1, 1]])
    assert aggregate(LOSS, m, "token-mean").item() == 4.0  # (1 + 4+5+6)/4
    assert aggregate(LOSS, m, "seq-mean-token-sum").item() == 8.0  # (1 + 15)/2
    assert aggregate(LOSS, m, "seq-mean-token-mean").item() == 3.0  # (1/1 + 15/3)/2
    # a third row with no trainable token (and -inf where nothing is trained) changes nothing, and no NaN
    loss3 = torch.cat([LOSS, torch.tensor([[float("-inf"), 7.0, 7.0]])])
    m3 = torch.cat([m, torch.zeros(1, 3, dtype=m.dtype)])
    for mode, want in [("token-mean", 4.0), ("seq-mean-token-sum", 8.0), ("seq-mean-token-mean", 3.0)]:
        assert aggregate(loss3, m3, mode).item() == want


def test_aggregation_row_without_trainable_tokens_is_not_nan():
    m = torch.tensor([[1, 1, 0], [0, 0, 0]])
    assert aggregate(LOSS, m, "token-mean").item() == 1.5  # (1+2)/2
    assert aggregate(LOSS, m, "seq-mean-token-sum").item() == 3.0  # 3/1 (the empty row is not counted)
    assert aggregate(LOSS, m, "seq-mean-token-mean").item() == 1.5  # (3/2)/1
    for mode in ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"]:
        assert aggregate(LOSS, torch.zeros(2, 3), mode).item() == 0.0


def test_aggregation_errors():
    with pytest.raises(ValueError, match="seq-mean-token-mean"):
        aggregate(LOSS, torch.ones(2, 3), "mean")
    with pytest.raises(ValueError, match="global_tokens"):
        aggregate(LOSS, torch.ones(2, 3), "token-mean", global_tokens=0)
    with pytest.raises(ValueError, match="same shape"):
        aggregate(LOSS, torch.ones(2, 2), "token-mean")


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"])
def test_micro_batches_with_global_counts_equal_full_batch(mode):
    g = torch.Generator().manual_seed(0)
    B, T = 6, 7
    m = (torch.rand(B, T, generator=g) > 0.5).long()
    m[2] = 0  # one empty row
    old = torch.randn(B, T, generator=g, dtype=torch.float64)
    logp = (old + 0.3 * torch.randn(B, T, generator=g, dtype=torch.float64)).requires_grad_()
    adv = torch.randn(B, T, generator=g, dtype=torch.float64)
    full, _ = policy_loss(logp, old, adv, m, agg=mode)
    (full_grad,) = torch.autograd.grad(full, logp)
    n_tok, n_seq = int(m.sum()), int(m.any(-1).sum())
    total = 0.0
    for rows in [slice(0, 1), slice(1, 4), slice(4, 6)]:  # uneven micro-batches: the local mean would differ
        part, _ = policy_loss(logp[rows], old[rows], adv[rows], m[rows], agg=mode, global_tokens=n_tok,
                              global_seqs=n_seq)
        total = total + part
    (acc_grad,) = torch.autograd.grad(total, logp)
    assert total.item() == pytest.approx(full.item())
    assert torch.allclose(acc_grad, full_grad)


def test_value_loss_clipped():
    values = torch.tensor([[1.0, 0.0]])
    old = torch.tensor([[0.0, 0.0]])
    returns = torch.tensor([[1.0, 1.0]])
    loss, metrics = value_loss(values, old, returns, torch.ones(1, 2), clip=0.5)
    # token 0: (1-1)^2 = 0 vs clipped V = .5: (.5-1)^2 = .25 -> .25;   token 1: (0-1)^2 = 1 both -> 1
    # 0.5 * mean(.25, 1) = .3125
    assert loss.item() == pytest.approx(0.3125)
    assert metrics["clip_frac"] == 0.5


def test_entropy_from_logits():
    logits = torch.tensor([[[0.0, 0.0, 0.0, 0.0], [0.0, LOG(3), -1e9, -1e9]]])
    # uniform over 4: ln 4 = 1.386294;  p = [.25, .75]: -(.25 ln .25 + .75 ln .75) = .562335
    assert entropy_from_logits(logits).tolist() == [pytest.approx([LOG(4), 0.562335], abs=1e-6)]


def test_explained_variance():
    ret = torch.tensor([[1.0, 2.0, 3.0, 99.0]])
    m = torch.tensor([[1, 1, 1, 0]])
    assert explained_variance(ret.clone(), ret, m) == pytest.approx(1.0)
    assert explained_variance(torch.full((1, 4), 2.0), ret, m) == pytest.approx(0.0)
    # residual [0, 0, -1]: var = 2/9;  var R = 2/3  ->  1 - 1/3
    assert explained_variance(torch.tensor([[1.0, 2.0, 4.0, 0.0]]), ret, m) == pytest.approx(2 / 3)
    assert math.isnan(explained_variance(ret, torch.ones(1, 4), m))


def test_the_kl_loss_term_is_aggregated_k3():
    """The trainer's KL term: aggregate(kl_penalty(logp, ref_logp, kl_type), loss_mask)."""
    logp = torch.tensor([[0.0, -1.0, 5.0]])
    ref = torch.tensor([[0.0, 0.0, 0.0]])
    m = torch.tensor([[1, 1, 0]])
    # (0 + (e - 2))/2, the untrained third token is ignored
    assert aggregate(kl_penalty(logp, ref, "low_var_kl"), m).item() == pytest.approx((math.e - 2) / 2)
    assert aggregate(kl_penalty(logp, ref, "k1"), m).item() == pytest.approx(-0.5)


def tiny_lm(vocab=97, seed=0):
    from transformers import Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(Qwen2Config(vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                        num_key_value_heads=1, intermediate_size=64, tie_word_embeddings=True))


@pytest.mark.parametrize("lora", [False, True])
def test_chunked_log_probs_equal_the_whole_and_never_hold_more_logits_than_a_chunk(lora):
    """token_logprobs over a batch whose logits exceed chunk_elements runs the output head chunk by chunk: the same
    log-probs, entropies and gradients as one pass over all the logits, with no head output larger than a chunk."""
    from agentgym_nb.train.common import add_lora
    model = tiny_lm()
    if lora:
        model = add_lora(model, r=4)
        for name, p in model.named_parameters():   # B starts at 0: move it so the adapters take part
            if "lora_B" in name:
                p.data.normal_(0, 0.1)
    ids = torch.randint(0, 97, (3, 20), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[2, 15:] = 0   # right padding
    weights = torch.rand(3, 20, generator=torch.Generator().manual_seed(2))

    def run(chunk):
        model.zero_grad()
        logp, entropy = token_logprobs(model, ids, mask, temperature=0.7, with_entropy=True, chunk_elements=chunk)
        ((logp * weights).sum() + entropy.sum()).backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        return logp.detach(), entropy.detach(), grads

    whole = run(1 << 30)
    sizes = []
    head = model.get_output_embeddings()
    hook = head.register_forward_hook(lambda m, i, out: sizes.append(out.numel()))
    chunked = run(3 * 4 * 97)   # 4 positions of 3 rows per chunk
    hook.remove()
    assert sizes and max(sizes) <= 3 * 4 * 97 and len(sizes) >= 2 * (19 // 4)   # forward, then again in backward
    assert torch.allclose(chunked[0], whole[0], atol=1e-6) and torch.allclose(chunked[1], whole[1], atol=1e-6)
    assert chunked[2].keys() == whole[2].keys() and whole[2]
    for name, g in whole[2].items():
        assert torch.allclose(chunked[2][name], g, atol=1e-6), name


def test_truncated_importance_weights_by_hand():
    """w = min(exp(trainer - engine), cap): exp(0.5) = 1.6487 -> capped at 1.5; exp(-1.5) = 0.2231; an unknown
    engine log-prob (NaN) weighs 1; no gradient flows through the weights."""
    from agentgym_nb.algos.losses import truncated_is_weights
    trainer = torch.tensor([[-1.0, -2.0, -0.3]], requires_grad=True)
    engine = torch.tensor([[-1.5, -0.5, float("nan")]])
    w = truncated_is_weights(trainer, engine, cap=1.5)
    assert w.tolist() == [pytest.approx([1.5, math.exp(-1.5), 1.0])]
    assert not w.requires_grad


def test_policy_loss_weights_each_tokens_loss_by_its_importance_weight():
    """ratio 1 everywhere (logp = old_logp), A = +1: L_t = -1 per token; weights [0.5, 2.0] give
    token-mean -(0.5 + 2.0) / 2 = -1.25; the gradient of each token's log-prob is scaled the same way."""
    logp = torch.zeros(1, 2, requires_grad=True)
    loss, _ = policy_loss(logp, torch.zeros(1, 2), torch.ones(1, 2), torch.ones(1, 2),
                          is_weights=torch.tensor([[0.5, 2.0]]))
    assert loss.item() == pytest.approx(-1.25)
    loss.backward()
    assert logp.grad.tolist() == [pytest.approx([-0.25, -1.0])]   # d/dlogp of -w * exp(logp - old) / 2
