"""pass@(k, T): the surface of pass@k over samples and evaluation horizons, by hand, and measured on the real smoke
nano in real BabyAI (every horizon plays the same episodes, cut at its own turn limit)."""
import pytest
import torch

from agentgym_nb.evaluate import horizon_surface, pass_at_k_surface
from agentgym_nb.rollout.engine import SamplingParams

pytestmark = pytest.mark.timeout(240)

# two items, four samples each, at T = 2 and T = 4
OUTCOMES = {2: {"a": [1, 0, 0, 0], "b": [0, 0, 0, 0]},
            4: {"a": [1, 1, 0, 0], "b": [0, 0, 0, 1]}}


def test_the_surface_by_hand():
    s = pass_at_k_surface(OUTCOMES)
    assert (s["horizons"], s["k"], s["n"], s["items"], s["dropped"]) == ([2, 4], [1, 2, 3, 4], 4, 2, 0)
    # T = 2: item a has c = 1 of n = 4: pass@1 = 1/4, pass@2 = 1 - C(3,2)/C(4,2) = 1/2, pass@3 = 1 - C(3,3)/C(4,3)
    # = 3/4, pass@4 = 1; item b has none: 0 throughout. The mean over the two items halves a's.
    assert s["pass@k"][0] == pytest.approx([1 / 8, 1 / 4, 3 / 8, 1 / 2])
    # T = 4: a has c = 2: 1/2, 1 - C(2,2)/C(4,2) = 5/6, 1, 1; b has c = 1: 1/4, 1/2, 3/4, 1
    assert s["pass@k"][1] == pytest.approx([3 / 8, 2 / 3, 7 / 8, 1])
    # Two items: a bootstrap mean is b's value, the mean of both or a's, with chances 1/4, 1/2, 1/4, so the 2.5% and
    # 97.5% quantiles are the two items' own values
    assert s["ci"][0][0] == pytest.approx([0, 1 / 4]) and s["ci"][0][3] == pytest.approx([0, 1])
    assert s["ci"][1][1] == pytest.approx([1 / 2, 5 / 6]) and s["ci"][1][3] == pytest.approx([1, 1])


def test_items_without_every_sample_are_left_out_and_bad_input_is_refused():
    short = {2: {**OUTCOMES[2], "c": [1, 1, 1]}, 4: {**OUTCOMES[4], "c": [1, 1, 1, 1]}}   # c lost a sample at T = 2
    s = pass_at_k_surface(short, ks=[1, 4])
    assert (s["items"], s["dropped"], s["k"]) == (2, 1, [1, 4]) and s["pass@k"][0] == pytest.approx([1 / 8, 1 / 2])
    with pytest.raises(ValueError, match="1 <= k <= n"):
        pass_at_k_surface(OUTCOMES, ks=[5])
    with pytest.raises(ValueError, match="0 or 1"):
        pass_at_k_surface({2: {"a": [0.5, 1]}})
    with pytest.raises(ValueError, match="every horizon"):
        pass_at_k_surface({2: {"a": [1, 0]}, 4: {"b": [1, 0]}})
    with pytest.raises(ValueError, match="one horizon at least"):
        pass_at_k_surface({})


def test_a_measured_surface_plays_the_same_episodes_at_every_horizon(tmp_path, hf_nano, chat):
    """The smoke nano on 4 one-room items, 3 samples at T = 1, 2 and 4. Every horizon draws the same replies (the
    sampling seed is the episode's position and turn), so an episode played with more turns repeats the shorter
    one's replies and then goes on: a longer horizon can only add successes, episode by episode."""
    from agentgym_nb import envs
    from agentgym_nb.evaluate import load_results
    before = torch.get_num_threads()
    torch.set_num_threads(1)   # the machine is shared
    try:
        s = horizon_surface(hf_nano, lambda: envs.make("babyai"), list(range(100_000, 100_004)), chat,
                            horizons=[4, 1, 2], n=3, params=SamplingParams(temperature=1.0, max_tokens=24, seed=3),
                            max_total_tokens=768, results_dir=str(tmp_path), resamples=300)
    finally:
        torch.set_num_threads(before)
    assert (s["horizons"], s["k"], s["n"], s["items"], s["episodes"]) == ([1, 2, 4], [1, 2, 3], 3, 4, 3 * 4 * 3)
    assert s["item_ids"] == list(range(100_000, 100_004))
    episodes = {}
    for T in (1, 2, 4):
        _, records = load_results(str(tmp_path / f"h{T}.jsonl"))   # kept per horizon: an interrupted call resumes
        episodes[T] = {r["episode"]: r for r in records}
        assert len(records) == 12 and all(r["num_rounds"] <= T for r in records)

    def replies(r):
        return [m["content"] for m in r["conversations"][2:] if m["role"] == "assistant"]

    for short, long in ((1, 2), (2, 4)):
        for e, r in episodes[short].items():
            assert replies(r) == replies(episodes[long][e])[:len(replies(r))] and replies(r)
            assert r["success"] <= episodes[long][e]["success"]
    for row, cis in zip(s["pass@k"], s["ci"]):
        assert row == sorted(row) and all(lo - 1e-12 <= v <= hi + 1e-12 for v, (lo, hi) in zip(row, cis))


def test_the_surface_figure_draws_one_line_per_horizon_with_its_numbers():
    import matplotlib
    matplotlib.use("Agg")
    from agentgym_nb.viz.study import plot_pass_at_k_surface, surface_lines
    s = pass_at_k_surface(OUTCOMES)
    lines = surface_lines(s)
    assert [x["horizon"] for x in lines] == ["T = 2", "T = 4"]
    assert lines[1]["mean"] == s["pass@k"][1] and lines[1]["lo"] == [c[0] for c in s["ci"][1]]
    fig = plot_pass_at_k_surface({"policy a": s, "policy b": s})
    drawn = [line for line in fig.axes[0].get_lines() if line.get_label().startswith("T = ")]
    assert [line.get_label() for line in drawn] == ["T = 2", "T = 4"] and len(fig.axes) == 2
    assert list(drawn[1].get_ydata()) == pytest.approx([3 / 8, 2 / 3, 7 / 8, 1])
    assert "2 tasks x 4 samples" in fig.axes[0].get_title()
    with pytest.raises(ValueError, match="no pass@"):
        plot_pass_at_k_surface({})
