"""pass@(k, T): the surface of pass@k over samples and evaluation horizons, by hand, and measured on the committed
long-track nano in real BabyAI (played once at the longest horizon, every shorter one read off it, and checked against
playing it)."""
import os

import pytest
import torch

from agentgym_nb.evaluate import horizon_surface, pass_at_k_surface
from agentgym_nb.rollout.engine import SamplingParams

pytestmark = pytest.mark.timeout(240)

LONG_NANO = os.path.join(os.path.dirname(os.path.dirname(__file__)), "models", "nano-babyai-long")

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


def test_a_surface_read_off_the_longest_horizon_is_what_each_horizon_plays(tmp_path):
    """The committed long-track nano on 8 one-room items, 3 samples, T = 1, 2, 4 and 6 (it succeeds at turns 1, 3 and
    5 there). The surface plays T = 6 once and reads the others off it; played for real at T = 1, 2 and 4, every
    episode repeats the T = 6 episode's first replies (the sampling seed is the episode's position and turn) and
    succeeds exactly when that one succeeded within T turns, so the surface is the one the horizons give when each
    is played."""
    from agentgym_nb import envs
    from agentgym_nb.evaluate import evaluate, load_results
    from agentgym_nb.models import load_tokenizer
    from agentgym_nb.rollout.engine import HFEngine
    from agentgym_nb.rollout.trajectory import ChatFormat
    tokenizer = load_tokenizer(LONG_NANO)
    engine, chat, items = HFEngine(LONG_NANO, tokenizer=tokenizer), ChatFormat(tokenizer), list(range(100_000, 100_008))
    kw = dict(params=SamplingParams(temperature=1.0, max_tokens=24, seed=3), max_total_tokens=768, resamples=300)
    before = torch.get_num_threads()
    torch.set_num_threads(1)   # the machine is shared
    try:
        s = horizon_surface(engine, lambda: envs.make("babyai"), items, chat, horizons=[6, 1, 2, 4], n=3,
                            results_dir=str(tmp_path / "surface"), **kw)
        for T in (1, 2, 4):
            evaluate(engine, lambda: envs.make("babyai"), items, chat, n=3, max_rounds=T,
                     results_path=str(tmp_path / f"played-h{T}.jsonl"), **kw)
    finally:
        torch.set_num_threads(before)
    assert (s["horizons"], s["k"], s["n"], s["items"], s["episodes"]) == ([1, 2, 4, 6], [1, 2, 3], 3, 8, 3 * 8)
    assert s["item_ids"] == items
    assert sorted(os.listdir(tmp_path / "surface")) == ["h6.jsonl"]   # one play, kept: an interrupted call resumes
    longest = {r["episode"]: r for r in load_results(str(tmp_path / "surface" / "h6.jsonl"))[1]}

    def replies(r):
        return [m["content"] for m in r["conversations"][2:] if m["role"] == "assistant"]

    assert {r["num_rounds"] for r in longest.values() if r["success"]} >= {1, 3, 5}   # a success each T tells apart
    played = {}
    for T in (1, 2, 4):
        records = load_results(str(tmp_path / f"played-h{T}.jsonl"))[1]
        assert len(records) == 24 and all(r["num_rounds"] <= T for r in records)
        for r in records:
            whole = longest[r["episode"]]
            assert replies(r) and replies(r) == replies(whole)[:len(replies(r))]
            assert r["success"] == (whole["success"] and whole["num_rounds"] <= T)
            played.setdefault(T, {}).setdefault(r["position"], []).append(float(r["success"]))
    played[6] = {}
    for r in longest.values():
        played[6].setdefault(r["position"], []).append(float(r["success"]))
    assert s["pass@k"] == pass_at_k_surface(played, resamples=300)["pass@k"]
    for row, cis in zip(s["pass@k"], s["ci"]):
        assert row == sorted(row) and all(lo - 1e-12 <= v <= hi + 1e-12 for v, (lo, hi) in zip(row, cis))
    for k in range(3):   # the cells are paired episode by episode: a longer horizon cannot lose a success
        assert [row[k] for row in s["pass@k"]] == sorted(row[k] for row in s["pass@k"])


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
