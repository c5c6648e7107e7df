"""Advantage estimators against numbers worked out by hand."""
import math

import pytest
import torch

from agentgym_nb.algos.advantages import (ESTIMATORS, Credit, gae, gigpo, grpo, masked_mean, masked_moments, masked_whiten,
                                          reinforce_plus_plus, rloo)

# One multi-turn sequence, T = 11:
#   t:     0     1  2    3  4  5    6  7    8  9    10
#        [tmpl | a  a | e  e  e | a  a | e  e | pad]   (last real token is an env observation)
MASK = torch.tensor([[0, 1, 1, 0, 0, 0, 1, 1, 0, 0, 0]])
TRAIN = [1, 2, 6, 7]
# critic values: 9 on untrainable positions, which must never be read
VALUES = torch.tensor([[9, .2, .4, 9, 9, 9, .6, .8, 9, 9, 9]], dtype=torch.float64)


def token_rewards_from_scores(scores, loss_mask):
    """[B, T]: scores[b] on the last token of row b with loss_mask = 1 (where Trajectory.to_tensors puts it)."""
    m = loss_mask.bool()
    last = m.shape[1] - 1 - m.flip(1).int().argmax(dim=1)
    rewards = torch.zeros(m.shape, dtype=scores.dtype)
    rewards[torch.arange(len(scores)), last] = torch.where(m.any(dim=1), scores, torch.zeros_like(scores))
    return rewards


def at(x, idx=TRAIN, row=0):
    return x[row, idx].tolist()


def rewards(score=1.0):
    return token_rewards_from_scores(torch.tensor([score], dtype=torch.float64), MASK)


def trajectory_of(mask_row, reward):
    """A Trajectory whose token kinds follow a loss-mask row (1: policy, 0: environment), scored `reward`."""
    from agentgym_nb.rollout.trajectory import ENV, POLICY, Trajectory
    kinds = [POLICY if x else ENV for x in mask_row]
    return Trajectory(item_id=0, input_ids=list(range(len(kinds))), kinds=kinds, turn_ids=[1] * len(kinds),
                      reward=reward)


def test_score_lands_on_last_trainable_token_not_on_the_final_observation():
    """The package's one placement of the score: Trajectory.to_tensors (the helper above mirrors it for the
    estimator tests, and is checked against it here)."""
    r = trajectory_of(MASK[0, :10].tolist(), 1.0).to_tensors()["rewards"]
    assert r.tolist() == [0, 0, 0, 0, 0, 0, 0, 1, 0, 0]  # t = 7, not t = 9 (last real token)
    assert r.tolist() == rewards(1.0)[0, :10].tolist()


def test_row_without_trainable_token_gets_no_reward():
    assert trajectory_of([0, 0, 0], 5.0).to_tensors()["rewards"].tolist() == [0, 0, 0]
    m = torch.tensor([[0, 1, 1], [0, 0, 0]])
    assert token_rewards_from_scores(torch.tensor([2.0, 5.0]), m).tolist() == [[0, 0, 2], [0, 0, 0]]


def test_reinforce_pp_discounts_once_per_trainable_token():
    adv, ret = reinforce_plus_plus(rewards(), MASK, gamma=0.5, whiten=False)
    # G7 = 1; G6 = .5*1 = .5; G2 = .5*.5 = .25 (env tokens 3-5 add no discount); G1 = .125
    assert at(ret) == [0.125, 0.25, 0.5, 1.0]
    assert torch.equal(adv, ret)
    assert ret[0, [0, 3, 4, 5, 8, 9, 10]].abs().sum() == 0


def test_reinforce_pp_whitened():
    adv, ret = reinforce_plus_plus(rewards(), MASK, gamma=0.5)
    # x = [.125, .25, .5, 1]: mean = 1.875/4 = .46875; deviations -.34375, -.21875, .03125, .53125
    # squares .1181640625 + .0478515625 + .0009765625 + .2822265625 = .44921875; unbiased var = .44921875/3
    std = math.sqrt(0.44921875 / 3)  # = .386962...
    assert at(adv) == pytest.approx([-0.34375 / std, -0.21875 / std, 0.03125 / std, 0.53125 / std])
    assert at(adv) == pytest.approx([-0.888330, -0.565301, 0.080757, 1.372874], abs=1e-6)
    assert at(ret) == [0.125, 0.25, 0.5, 1.0]  # returns are never whitened
    assert adv[0, [0, 3, 4, 5, 8, 9, 10]].abs().sum() == 0


def test_gae_with_lambda_gamma_one_is_monte_carlo():
    adv, ret = gae(rewards(), VALUES, MASK, gamma=1.0, lam=1.0, whiten=False)
    # A_t = 1 - V_t: 1-.2, 1-.4, 1-.6, 1-.8; returns = A + V = 1 everywhere trainable
    assert at(adv) == pytest.approx([0.8, 0.6, 0.4, 0.2])
    assert at(ret) == pytest.approx([1.0, 1.0, 1.0, 1.0])
    assert adv[0, [0, 3, 4, 5, 8, 9, 10]].abs().sum() == 0 and ret[0, [0, 3, 8, 10]].abs().sum() == 0


def test_gae_gamma_lambda_half_by_hand():
    adv, ret = gae(rewards(), VALUES, MASK, gamma=0.5, lam=0.5, whiten=False)
    # t7: delta = 1 + .5*0 - .8 = .2                A = .2
    # t6: delta = 0 + .5*.8 - .6 = -.2              A = -.2 + .25*.2 = -.15
    # t2: delta = 0 + .5*.6 - .4 = -.1              A = -.1 + .25*(-.15) = -.1375   (V_next is V6, not V3 = 9)
    # t1: delta = 0 + .5*.4 - .2 = 0                A = 0 + .25*(-.1375) = -.034375
    assert at(adv) == pytest.approx([-0.034375, -0.1375, -0.15, 0.2])
    assert at(ret) == pytest.approx([0.165625, 0.2625, 0.45, 1.0])  # A + V


def test_appendix_a_layout():
    # reference Appendix A: 3 env, 3 policy, 3 env, 3 policy, 3 env (final observation), 3 pad; V_t = t/10
    m = torch.tensor([[0, 0, 0, 1, 1, 1, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0]])
    policy = [3, 4, 5, 9, 10, 11]
    r = token_rewards_from_scores(torch.tensor([1.0], dtype=torch.float64), m)
    assert r[0, 11] == 1 and r.sum() == 1
    values = torch.arange(18, dtype=torch.float64)[None] / 10
    adv, _ = gae(r, values, m, whiten=False)
    assert at(adv, policy) == pytest.approx([0.7, 0.6, 0.5, 0.1, 0.0, -0.1])  # "later-verl" = 1 - V_t
    _, ret = reinforce_plus_plus(r, m, gamma=0.99, whiten=False)
    # .99^5, .99^4, .99^3, .99^2, .99, 1
    assert at(ret, policy) == pytest.approx([0.95099005, 0.96059601, 0.970299, 0.9801, 0.99, 1.0])


def test_truncated_episode_mid_assistant():
    # row 0 is MASK's episode (success, score 1); row 1 was cut mid-assistant: [tmpl a a e a a], score 0
    m = torch.tensor([[0, 1, 1, 0, 0, 0, 1, 1, 0, 0, 0],
                      [0, 1, 1, 0, 1, 1, 0, 0, 0, 0, 0]])
    scores = torch.tensor([1.0, 0.0], dtype=torch.float64)
    r = token_rewards_from_scores(scores, m)
    assert r[1].abs().sum() == 0
    _, ret = reinforce_plus_plus(r, m, whiten=False)
    assert ret[1].abs().sum() == 0
    # with partial credit (SciWorld's 0.5, say) the cut row's score sits on its last trainable token, 5
    partial = token_rewards_from_scores(torch.tensor([1.0, 0.5], dtype=torch.float64), m)
    assert at(partial, [5], row=1) == [0.5] and partial[1].sum() == 0.5
    _, ret = reinforce_plus_plus(partial, m, gamma=0.9, whiten=False)
    assert at(ret, [1, 2, 4, 5], row=1) == pytest.approx([0.5 * 0.9 ** 3, 0.5 * 0.9 ** 2, 0.5 * 0.9, 0.5])
    adv = grpo(scores, torch.tensor([0, 0]), m)
    # mean .5, unbiased std = sqrt((.25 + .25)/1) = .7071; adv = +-.5/(.7071 + 1e-6)
    a = 0.5 / (math.sqrt(0.5) + 1e-6)
    assert at(adv, [1, 2, 6, 7], row=0) == pytest.approx([a] * 4)
    assert at(adv, [1, 2, 4, 5], row=1) == pytest.approx([-a] * 4)  # incl. the cut-off last token
    assert adv[1, [0, 3, 6, 7, 8, 9, 10]].abs().sum() == 0


def test_grpo_unbiased_std_interleaved_groups_and_singletons():
    m = torch.ones(6, 2)
    scores = torch.tensor([1.0, 0.0, 2.0, 1.0, 6.0, 5.0], dtype=torch.float64)
    group = torch.tensor([7, 3, 7, 3, 7, 4])  # 7: [1, 2, 6]; 3: [0, 1]; 4: singleton
    adv = grpo(scores, group, m, eps=0.0)
    # group 7: mean 3, deviations -2 -1 3, unbiased var (4+1+9)/2 = 7 -> std 2.6458 (biased would be 2.1602)
    s7 = math.sqrt(7)
    # group 3: mean .5, unbiased var (.25+.25)/1 = .5
    s3 = math.sqrt(0.5)
    assert adv[:, 0].tolist() == pytest.approx([-2 / s7, -0.5 / s3, -1 / s7, 0.5 / s3, 3 / s7, 0.0])
    assert adv[:, 0].tolist() == pytest.approx([-0.755929, -0.707107, -0.377964, 0.707107, 1.133893, 0.0], abs=1e-6)
    assert torch.equal(adv[:, 0], adv[:, 1])


def test_grpo_equal_scores_give_zero():
    adv = grpo(torch.tensor([1.0, 1.0, 1.0]), torch.tensor([0, 0, 0]), torch.ones(3, 2))
    assert adv.abs().sum() == 0


@pytest.mark.parametrize("n", [7, 8, 16])
def test_a_group_of_equal_inexact_scores_gets_exactly_zero(n):
    """Eight scores of 0.9 (BabyAI's 1 - 0.9 * steps / max_steps is rarely a round binary number): their float32
    mean misses 0.9 by an ulp, and GRPO divided that by a std of about an ulp: +-0.056 for every member, a push
    with no signal behind it. The other group keeps its advantages: 0 and 1 in a group of 4 give
    -+0.5 / (sqrt(1/3) + 1e-6) = -+0.866024."""
    scores = torch.tensor([0.9] * n + [0.0, 1.0, 0.0, 1.0])
    group = torch.tensor([0] * n + [1] * 4)
    for estimator in (grpo, rloo):
        adv = estimator(scores, group, torch.ones(n + 4, 2))
        assert torch.equal(adv[:n], torch.zeros(n, 2)), estimator.__name__
    assert grpo(scores, group, torch.ones(n + 4, 1))[n:, 0].tolist() == pytest.approx([-0.866024, 0.866024] * 2, abs=1e-6)


def test_rloo_leave_one_out():
    m = torch.tensor([[1, 1], [1, 0], [0, 1], [1, 1], [1, 1], [1, 1]])
    scores = torch.tensor([1.0, 2.0, 6.0, 0.0, 1.0, 9.0])
    group = torch.tensor([0, 0, 0, 1, 1, 2])
    adv = rloo(scores, group, m)
    # 1 - (2+6)/2 = -3;  2 - (1+6)/2 = -1.5;  6 - (1+2)/2 = 4.5;  0 - 1 = -1;  1 - 0 = 1;  singleton -> 0
    assert adv.flatten().tolist() == pytest.approx([-3, -3, -1.5, 0, 0, 4.5, -1, -1, 1, 1, 0, 0])


def test_masked_whiten_numbers_and_untouched_outside():
    x = torch.tensor([[1.0, 100.0, 2.0], [3.0, 4.0, float("nan")]])
    m = torch.tensor([[1, 0, 1], [1, 1, 0]])
    w = masked_whiten(x, m, eps=0.0)
    # [1,2,3,4]: mean 2.5, unbiased var (2.25+.25+.25+2.25)/3 = 5/3
    s = math.sqrt(5 / 3)
    assert w.flatten().tolist() == pytest.approx([-1.5 / s, 0.0, -0.5 / s, 0.5 / s, 1.5 / s, 0.0])
    assert w[m.bool()].std().item() == pytest.approx(1.0)  # unbiased std of the result is 1


def test_masked_mean_empty_slice_is_zero():
    x = torch.tensor([[1.0, 3.0], [5.0, float("-inf")]])
    m = torch.tensor([[1, 1], [0, 0]])
    assert masked_mean(x, m, dim=-1).tolist() == [2.0, 0.0]
    assert masked_mean(x, torch.zeros(2, 2)).item() == 0.0


def test_whitening_needs_two_tokens():
    m = torch.tensor([[0, 1, 0]])
    r = torch.tensor([[0.0, 1.0, 0.0]])
    with pytest.raises(ValueError, match="at least 2 trainable tokens"):
        reinforce_plus_plus(r, m)
    with pytest.raises(ValueError, match="at least 2 trainable tokens"):
        gae(r, torch.zeros(1, 3), m)
    assert reinforce_plus_plus(r, m, whiten=False)[0].tolist() == [[0.0, 1.0, 0.0]]


def test_reward_on_untrainable_token_is_an_error():
    r = torch.zeros(1, 11)
    r[0, 9] = 1.0  # AgentGym-RL's placement: the last attention token, an env observation
    with pytest.raises(ValueError, match=r"token_rewards\[0, 9\]"):
        reinforce_plus_plus(r, MASK)
    with pytest.raises(ValueError, match="loss_mask = 0"):
        gae(r, torch.zeros(1, 11), MASK)


def test_shape_errors():
    with pytest.raises(ValueError, match="shape"):
        grpo(torch.ones(3), torch.zeros(2, dtype=torch.long), torch.ones(3, 2))
    with pytest.raises(ValueError, match="integer group ids"):
        grpo(torch.ones(2), torch.zeros(2), torch.ones(2, 2))
    with pytest.raises(ValueError, match="values"):
        gae(torch.zeros(1, 11), torch.zeros(1, 10), MASK)
    with pytest.raises(ValueError, match=r"\[B, T\]"):
        reinforce_plus_plus(torch.zeros(11), MASK[0])


def test_long_batch_matches_per_row():
    # the vectorised recursion on a batch equals running each row alone (rows do not leak into each other)
    g = torch.Generator().manual_seed(0)
    m = (torch.rand(4, 50, generator=g) > 0.4).long()
    r = torch.where(m.bool(), torch.randn(4, 50, generator=g, dtype=torch.float64), 0.0)
    v = torch.randn(4, 50, generator=g, dtype=torch.float64)
    adv, ret = gae(r, v, m, gamma=0.9, lam=0.8, whiten=False)
    for b in range(4):
        a1, r1 = gae(r[b:b + 1], v[b:b + 1], m[b:b + 1], gamma=0.9, lam=0.8, whiten=False)
        assert torch.allclose(adv[b], a1[0]) and torch.allclose(ret[b], r1[0])


def test_whitening_a_split_batch_with_summed_moments_is_whitening_the_whole():
    # two processes hold [1, 2] and [3, 4] (plus untrainable tokens): moments (1+2, 1+4, 2) + (3+4, 9+16, 2)
    x1, m1 = torch.tensor([[1.0, 9.0], [2.0, -7.0]]), torch.tensor([[1, 0], [1, 0]])
    x2, m2 = torch.tensor([[3.0, 4.0, 50.0]]), torch.tensor([[1, 1, 0]])
    assert masked_moments(x1, m1).tolist() == [3.0, 5.0, 2.0]
    total = masked_moments(x1, m1) + masked_moments(x2, m2)
    assert total.tolist() == [10.0, 30.0, 4.0]
    # mu = 10/4 = 2.5, var = (30 - 4 * 2.5^2) / 3 = 5/3: the numbers of test_masked_whiten_numbers_and_untouched_outside
    s = math.sqrt(5 / 3)
    assert masked_whiten(x1, m1, eps=0.0, moments=total).flatten().tolist() == pytest.approx([-1.5 / s, 0, -0.5 / s, 0])
    assert masked_whiten(x2, m2, eps=0.0, moments=total).flatten().tolist() == pytest.approx([0.5 / s, 1.5 / s, 0])
    # each share whitened on its own is something else: [1, 2] -> mean 1.5, std sqrt(.5)
    assert masked_whiten(x1, m1, eps=0.0).flatten().tolist() == pytest.approx([-0.5 ** 0.5, 0, 0.5 ** 0.5, 0])
    with pytest.raises(ValueError, match="at least 2 trainable tokens"):
        masked_whiten(x1, m1, moments=masked_moments(x1[:1], m1[:1]))


def test_the_registry_calls_each_estimator_with_the_config_name_and_says_what_it_needs():
    """One calling convention for all: compute(Credit) -> (advantages, returns or None), unwhitened where the
    trainer whitens over every process; the flags are what config validation and the trainer read."""
    scores, group = torch.tensor([1.0, 0.0, 0.5, 0.5]), torch.tensor([0, 0, 1, 1])
    mask = torch.tensor([[0, 1, 1, 0, 1]] * 4)
    credit = Credit(scores, group, mask, token_rewards_from_scores(scores, mask), values=torch.full((4, 5), 0.25),
                    gamma=0.9, lam=0.8)
    assert set(ESTIMATORS) == {"grpo", "rloo", "reinforce_plus_plus", "gae", "gigpo"}
    adv, returns = ESTIMATORS["grpo"].compute(credit)
    assert torch.equal(adv, grpo(scores, group, mask)) and returns is None
    adv, returns = ESTIMATORS["rloo"].compute(credit)
    assert adv[0, 1].item() == 1.0 and adv[2].abs().sum() == 0 and returns is None   # 1 - 0; a tied group: 0
    adv, returns = ESTIMATORS["reinforce_plus_plus"].compute(credit)
    assert torch.equal(adv, reinforce_plus_plus(credit.token_rewards, mask, 0.9, whiten=False)[0]) and returns is None
    assert adv[0, 1].item() == pytest.approx(0.9 * 0.9)   # G_1 = 0.9^2 * 1 (two trainable tokens later)
    adv, returns = ESTIMATORS["gae"].compute(credit)
    expected = gae(credit.token_rewards, credit.values, mask, 0.9, 0.8, whiten=False)
    assert torch.equal(adv, expected[0]) and torch.equal(returns, expected[1])
    flags = {name: (e.needs_critic, e.token_level, e.whiten, e.group_baseline) for name, e in ESTIMATORS.items()}
    assert flags == {"grpo": (False, False, False, True), "rloo": (False, False, False, True),
                     "reinforce_plus_plus": (False, True, True, False), "gae": (True, True, True, False),
                     "gigpo": (False, False, False, True)}


def gigpo_batch():
    """Five episodes, two groups. Token layout per row: [template | turn 1 (2 tokens) | env | turn 2 | env | turn 3].
    Group 0: ep0 acts in states A, B and wins (1); ep1 in A, C, D and fails; ep2 in A and fails (a 1-turn episode).
    Group 1: ep3 and ep4 both act in A and both win (no signal at either level)."""
    turns = [2, 3, 1, 1, 1]
    layout = [0, 1, 1, 0, 2, 0, 3]                 # turn id per position (0: not a reply)
    mask = torch.tensor([[int(0 < t <= n) for t in layout] for n in turns])
    turn_ids = torch.tensor([layout] * 5)
    anchors = [["A", "B"], ["A", "C", "D"], ["A"], ["A"], ["A"]]
    return torch.tensor([1.0, 0, 0, 1, 1]), torch.tensor([0, 0, 0, 1, 1]), mask, turn_ids, anchors


def test_gigpo_adds_step_credit_from_states_the_group_shares():
    # gamma 0.5: returns ep0 (0.5, 1), ep1 (0, 0, 0), ep2 (0). State A of group 0 holds turn 1 of ep0, ep1, ep2:
    # returns 0.5, 0, 0 -> mean 1/6, unbiased std sqrt(1/12) -> +1.1547, -0.5774, -0.5774. B, C, D: one turn each.
    # Episode level (GRPO): scores 1, 0, 0 -> mean 1/3, std sqrt(1/3) -> +1.1547, -0.5774, -0.5774.
    scores, group, mask, turn_ids, anchors = gigpo_batch()
    adv = gigpo(scores, group, mask, turn_ids, anchors, gamma=0.5, step_weight=1.0)
    a, b = 2 / math.sqrt(3), 1 / math.sqrt(3)
    near = dict(abs=1e-5)   # the stds carry eps = 1e-6
    assert adv[0, [1, 2, 4]].tolist() == pytest.approx([a + a, a + a, a], **near)   # turn 1 in A, turn 2 alone in B
    assert adv[1, [1, 2, 4, 6]].tolist() == pytest.approx([-b - b, -b - b, -b, -b], **near)
    assert adv[2, [1, 2]].tolist() == pytest.approx([-b - b, -b - b], **near)
    assert adv[3:].abs().sum() == 0 and adv[~mask.bool()].abs().sum() == 0     # tied group; untrainable tokens
    half = gigpo(scores, group, mask, turn_ids, anchors, gamma=0.5, step_weight=0.5)
    assert half[0, 1].item() == pytest.approx(a + 0.5 * a, **near)
    # omega weighs the step term only: where a turn is alone in its state the episode term stays whole
    assert half[0, 4].item() == pytest.approx(a, **near) and half[1, 6].item() == pytest.approx(-b, **near)


def test_gigpo_mean_norm_centres_without_dividing():
    scores, group, mask, turn_ids, anchors = gigpo_batch()
    adv = gigpo(scores, group, mask, turn_ids, anchors, gamma=0.5, mode="mean_norm")
    # episode: 2/3, -1/3, -1/3; state A: 0.5 - 1/6 = 1/3, -1/6, -1/6
    assert adv[0, [1, 4]].tolist() == pytest.approx([2 / 3 + 1 / 3, 2 / 3])
    assert adv[1, [1, 4, 6]].tolist() == pytest.approx([-1 / 3 - 1 / 6, -1 / 3, -1 / 3])
    with pytest.raises(ValueError, match="gigpo mode 'std'"):
        gigpo(scores, group, mask, turn_ids, anchors, mode="std")


def test_gigpo_discounts_per_turn_and_reads_turn_rewards():
    """Two episodes that pass through the same state at different turns: the later one is nearer its reward."""
    mask = torch.tensor([[1, 0, 1, 0, 1], [1, 0, 1, 0, 0]])
    turn_ids = torch.tensor([[1, 0, 2, 0, 3], [1, 0, 2, 0, 0]])
    anchors = [["S", "X", "Y"], ["Z", "X"]]         # X: turn 2 of both
    scores, group = torch.tensor([1.0, 1.0]), torch.tensor([0, 0])
    adv = gigpo(scores, group, mask, turn_ids, anchors, gamma=0.9, mode="mean_norm")
    # returns at X: ep0 0.9 * 1 (one turn before its end), ep1 1 (its last turn) -> -0.05, +0.05; episodes tie
    assert adv[0, 2].item() == pytest.approx(-0.05) and adv[1, 2].item() == pytest.approx(0.05)
    shaped = gigpo(scores, group, mask, turn_ids, anchors, turn_rewards=[[0, 0.5, 0.5], [0, 1]], gamma=0.9,
                   mode="mean_norm")
    # ep0 at X: 0.5 + 0.9 * 0.5 = 0.95; ep1: 1
    assert shaped[0, 2].item() == pytest.approx(-0.025) and shaped[1, 2].item() == pytest.approx(0.025)


def test_episodes_left_out_of_the_baseline_are_measured_against_the_others():
    """Group 0: two finished episodes (0.8, 0.6) and two cut by the horizon (0, 0); group 1: both cut.
    GRPO: baseline = mean of the finished = 0.7, std over all four (GRPO's scale) = sqrt(0.51 / 3) = 0.41231.
    RLOO: a finished member's baseline is the other finished one, a cut member's the mean of the finished."""
    scores, group = torch.tensor([0.8, 0.6, 0.0, 0.0, 1.0, 0.0]), torch.tensor([0, 0, 0, 0, 1, 1])
    finished = torch.tensor([True, True, False, False, False, False])
    mask = torch.ones(6, 1)
    std = math.sqrt(0.51 / 3)
    adv = grpo(scores, group, mask, in_baseline=finished)[:, 0].tolist()
    assert adv == pytest.approx([0.1 / std, -0.1 / std, -0.7 / std, -0.7 / std, 0, 0], abs=1e-5)
    assert rloo(scores, group, mask, in_baseline=finished)[:, 0].tolist() == pytest.approx([0.2, -0.2, -0.7, -0.7, 0, 0])
    # GiGPO's episode term: GRPO's, or with mean_norm s_b - baseline (group 1 has no finished member: 0). One turn
    # each, in states of its own, so no step term
    turn_ids, anchors = torch.ones(6, 1, dtype=torch.long), [[f"state {b}"] for b in range(6)]
    g = gigpo(scores, group, mask, turn_ids, anchors, in_baseline=finished)[:, 0].tolist()
    assert g == pytest.approx([0.1 / std, -0.1 / std, -0.7 / std, -0.7 / std, 0, 0], abs=1e-5)
    g = gigpo(scores, group, mask, turn_ids, anchors, mode="mean_norm", in_baseline=finished)[:, 0].tolist()
    assert g == pytest.approx([0.1, -0.1, -0.7, -0.7, 0, 0], abs=1e-6)
    # the registry hands the trainer's in_baseline to each estimator with a group baseline
    credit = Credit(scores, group, mask, token_rewards_from_scores(scores, mask), turn_ids=turn_ids, anchors=anchors,
                    in_baseline=finished)
    assert ESTIMATORS["grpo"].compute(credit)[0][:, 0].tolist() == pytest.approx(adv, abs=1e-6)
    assert ESTIMATORS["rloo"].compute(credit)[0][:, 0].tolist() == pytest.approx([0.2, -0.2, -0.7, -0.7, 0, 0])
    assert ESTIMATORS["gigpo"].compute(credit)[0][:, 0].tolist() == pytest.approx(adv, abs=1e-6)
    # without the option both are the usual estimators
    assert torch.equal(grpo(scores, group, mask, in_baseline=torch.ones(6, dtype=torch.bool)), grpo(scores, group, mask))


def test_assign_credit_puts_the_kl_in_the_reward_whitens_and_discounts_cut_turns():
    """REINFORCE++ (gamma 1) on two rows with a KL penalty of 0.1 per policy token; row 1 is cut by the horizon.
    Rewards: row 0 scores 1 on its last policy token (t = 3), row 1 scores 0 (t = 2), minus 0.1 on each policy token:
      returns row 0 [0.7, 0.8, -, 0.9], row 1 [-0.3, -0.2, -0.1]
      whitened over the 6: mean 0.3, deviations [0.4, 0.5, 0.6] and [-0.6, -0.5, -0.4], unbiased var 1.54 / 5
      row 1's turn 2 (t = 2) keeps 0.5 of its advantage."""
    from agentgym_nb.algos.advantages import assign_credit
    mask = torch.tensor([[1, 1, 0, 1], [1, 1, 1, 0]])
    turns = torch.tensor([[1, 1, 1, 2], [1, 1, 2, 2]])
    rewards_ = torch.tensor([[0, 0, 0, 1.0], [0, 0, 0, 0]], dtype=torch.float64)
    credit = Credit(torch.tensor([1.0, 0.0]), torch.tensor([0, 0]), mask, rewards_, turn_ids=turns)
    kl = torch.full((2, 4), 0.1, dtype=torch.float64)
    adv, returns = assign_credit("reinforce_plus_plus", credit, kl_penalty=kl, cut=torch.tensor([False, True]),
                                 cut_turn_discount=0.5)
    assert returns is None   # REINFORCE++'s returns are its advantages before whitening: the trainer needs none
    s = math.sqrt(1.54 / 5 + 1e-8)
    assert adv[0].tolist() == pytest.approx([0.4 / s, 0.5 / s, 0, 0.6 / s])
    assert adv[1].tolist() == pytest.approx([-0.6 / s, -0.5 / s, -0.4 / s * 0.5, 0])
    # a process holding row 0 alone, whose moments are summed with row 1's, gets the whole batch's row 0
    row1 = masked_moments(torch.tensor([[-0.3, -0.2, -0.1]], dtype=torch.float64), torch.ones(1, 3))
    part = Credit(credit.scores[:1], credit.group[:1], mask[:1], rewards_[:1], turn_ids=turns[:1])
    alone, _ = assign_credit("reinforce_plus_plus", part, kl_penalty=kl[:1], sum_over_processes=lambda m: m + row1)
    assert alone[0].tolist() == pytest.approx(adv[0].tolist())
    # without the KL penalty, the cut or the discount: the estimator's own advantages
    plain, _ = assign_credit("grpo", credit, cut=torch.tensor([False, True]))
    assert plain.tolist() == grpo(credit.scores, credit.group, mask).tolist()
