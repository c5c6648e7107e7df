"""The viewers: the token strip colours every token of a real trajectory by its kind, the mask heatmaps draw the
batch's own tensors into a PNG, and the replay widget filters logged episodes and steps through their turns."""
import json
import os
import re

import numpy as np
import pytest

from agentgym_nb import envs
from agentgym_nb.rollout.engine import SamplingParams
from agentgym_nb.rollout.runner import run_episodes, write_rollout_log
from agentgym_nb.rollout.trajectory import ENV, POLICY, PROMPT, TEMPLATE, collate
from agentgym_nb.viz import KIND_COLOURS, KIND_NAMES, Replay, load_rollouts, plot_masks, token_strip_html
from harness import needs

pytestmark = pytest.mark.timeout(120)
SPAN = re.compile(r'<span class="tok" data-kind="([^"]+)" data-pos="(\d+)" title="[^"]*· id (\d+) ·[^"]*" '
                  r'style="([^"]*)">(.*?)</span>', re.S)


@pytest.fixture(scope="module")
def trajectories(chat, hf_nano):
    trajs = run_episodes(hf_nano, lambda: envs.make("babyai"), [0, 41, 5], chat, n=1, max_rounds=2,
                         params=SamplingParams(max_tokens=16, seed=4), max_total_tokens=1500)
    assert all(t.failed is None and t.num_rounds >= 1 for t in trajs)
    return trajs


def test_token_strip_colours_each_token_by_its_kind(trajectories, chat):
    t = trajectories[0]
    spans = SPAN.findall(token_strip_html(t, chat.tokenizer))
    assert len(spans) == len(t.input_ids)
    by_name = {v: k for k, v in KIND_NAMES.items()}
    assert [by_name[kind] for kind, *_ in spans] == t.kinds
    assert {by_name[kind] for kind, *_ in spans} == {TEMPLATE, PROMPT, ENV, POLICY}
    for (kind, pos, _, style, _), k, m in zip(spans, t.kinds, t.loss_mask):
        assert f"background:{KIND_COLOURS[k]}" in style
        assert ("underline" in style) == bool(m) == (k == POLICY)
    assert [int(pos) for _, pos, *_ in spans] == list(range(len(t.input_ids)))
    assert [int(i) for _, _, i, _, _ in spans] == t.input_ids
    # each box shows its token's text (a newline as an arrow before the break); together they spell the chat
    import html
    shown = [html.unescape(s).replace("↵\n", "\n") for *_, s in spans]
    assert shown == [chat.decode([i]) or "∅" for i in t.input_ids]
    assert "".join(shown[:40]) == chat.decode(t.input_ids[:40])   # the template and instruction are plain text


def test_token_strip_window_and_foreign_mask(trajectories, chat):
    t = trajectories[1]
    x = t.to_tensors()
    everything_but_padding = [1] * len(t.input_ids)
    spans = SPAN.findall(token_strip_html(x, chat.tokenizer, start=5, stop=25, loss_mask=everything_but_padding))
    assert [int(p) for _, p, *_ in spans] == list(range(5, 25))
    assert all("underline" in style for _, _, _, style, _ in spans)
    with pytest.raises(ValueError, match="loss_mask has 3 entries"):
        token_strip_html(x, chat.tokenizer, loss_mask=[1, 0, 1])
    with pytest.raises(ValueError, match="one sequence"):
        token_strip_html(collate(trajectories, chat.tokenizer.pad_token_id), chat.tokenizer)


def test_mask_heatmaps_draw_the_batch_into_a_png(trajectories, chat, tmp_path):
    batch = collate(trajectories, pad_id=chat.tokenizer.pad_token_id)
    path = tmp_path / "masks.png"
    fig = plot_masks(batch, str(path))
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > 5000
    panels = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title(loc="left").split()[0] for ax in panels] == ["token", "attention_mask", "loss_mask",
                                                                       "position_ids", "turn_ids"]
    drawn = {name: np.ma.getdata(ax.images[0].get_array()) for name, ax in
             zip(["kinds", "attention_mask", "loss_mask", "position_ids", "turn_ids"], panels)}
    for name, data in drawn.items():
        assert np.array_equal(data, batch[name].numpy()), name
    padding = ~batch["attention_mask"].bool().numpy()
    assert padding.any() and np.ma.getmaskarray(panels[4].images[0].get_array())[padding].all()
    import matplotlib.pyplot as plt
    plt.close(fig)
    zoom = plot_masks(batch, start=5, stop=50, fields=("loss_mask",))
    assert np.array_equal(zoom.axes[0].images[0].get_array(), batch["loss_mask"][:, 5:50].numpy())
    assert zoom.axes[0].get_xlim() == (4.5, 49.5)
    plt.close(zoom)
    with pytest.raises(ValueError, match="lacks"):
        plot_masks({"input_ids": batch["input_ids"]})


def _episode(item, reward, replies):
    conv = [{"role": "user", "content": "instruction"}, {"role": "assistant", "content": "OK"},
            {"role": "user", "content": f"task of item {item}"}]
    for k, reply in enumerate(replies, 1):
        conv += [{"role": "assistant", "content": reply}, {"role": "user", "content": f"observation {k} of {item}"}]
    return {"item_id": item, "group": 0, "conversations": conv, "reward": reward, "success": reward > 0,
            "done": reward > 0, "truncated": False, "failed": None, "num_rounds": len(replies)}


def _write_run(root, name, env, step_records):
    run = os.path.join(root, name)
    os.makedirs(os.path.join(run, "rollouts"))
    with open(os.path.join(run, "config.json"), "w") as f:
        json.dump({"env": env}, f)
    for step, records in step_records.items():
        with open(os.path.join(run, "rollouts", f"step_{step:05d}.jsonl"), "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in records)
    return run


@needs("ipywidgets")
def test_replay_widget_filters_and_steps(tmp_path):
    a = _write_run(tmp_path, "a", "babyai", {1: [_episode(3, 0.0, ["turn left", "turn right"]),
                                                _episode(4, 0.82, ["go to red ball 1"])],
                                            2: [_episode(3, 0.64, ["move forward", "pick up key 1", "toggle"])]})
    b = _write_run(tmp_path, "b", "textcraft", {1: [_episode(3, 1.0, ["craft stick"])]})
    replay = Replay([a, b])
    assert len(replay.records) == 4 and len(replay.filtered) == 4
    assert {r["env"] for r in replay.records} == {"babyai", "textcraft"}

    replay.env.value = "babyai"
    assert [(r["item_id"], r["reward"]) for r in replay.filtered] == [(3, 0.0), (4, 0.82), (3, 0.64)]
    replay.reward.value = (0.5, 1.0)
    assert [(r["item_id"], r["reward"]) for r in replay.filtered] == [(4, 0.82), (3, 0.64)]
    replay.item.value = 3
    assert [r["source"] for r in replay.filtered] == ["step_00002"]
    ep = replay.current
    assert ep["reward"] == 0.64 and replay.turn.value == 0 and replay.turn.max == 3
    assert "task of item 3" in replay.view.value and "move forward" not in replay.view.value
    assert replay.prev_button.disabled and not replay.next_button.disabled

    replay.next_button.click()                      # the button, as a user would press it
    assert replay.turn.value == 1
    assert "move forward" in replay.view.value and "observation 1 of 3" in replay.view.value
    assert "pick up key 1" not in replay.view.value
    replay.next_turn()
    replay.next_turn()
    replay.next_turn()                              # already at the last turn: stays there
    assert replay.turn.value == 3 and replay.next_button.disabled
    assert "toggle" in replay.view.value and "observation 3 of 3" in replay.view.value
    replay.prev_button.click()
    assert replay.turn.value == 2 and "toggle" not in replay.view.value

    replay.env.value = "textcraft"                  # item 3 and reward in [0.5, 1] still apply
    assert [r["env"] for r in replay.filtered] == ["textcraft"] and replay.turn.value == 0
    replay.reward.value = (0.0, 0.1)
    assert replay.filtered == [] and replay.current is None and "no episode" in replay.status.value

    bundle = replay._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle and "no episode passes" in bundle["text/html"]


@needs("ipywidgets")
def test_replay_reads_real_rollout_logs(trajectories, tmp_path):
    run = tmp_path / "run"
    write_rollout_log(str(run / "rollouts" / "step_00001.jsonl"), trajectories, step=1)
    records = load_rollouts(str(run))
    assert [r["item_id"] for r in records] == [t.item_id for t in trajectories]
    replay = Replay(records)
    replay.turn.value = replay.turn.max
    assert replay.turn.max == trajectories[0].num_rounds
    last_reply = [m for m in trajectories[0].messages if m["role"] == "assistant"][-1]["content"]
    import html
    assert html.escape(last_reply) in replay.view.value
    assert html.escape(last_reply) in replay.static_html()
    with pytest.raises(ValueError, match="no logged episodes"):
        Replay(str(tmp_path / "nothing"))


def test_t_interval_over_seeds_by_hand_and_clipped_for_rates():
    """[0.1, 0.2, 0.3]: s = 0.1, t_{0.975,2} = 4.303, half-width 4.303 * 0.1 / sqrt(3) = 0.2484. [0.1, 0.3]:
    s = 0.1414, half-width 12.706 * 0.1414 / sqrt(2) = 1.2706, which a success rate's bounds cut to [0, 1]; a
    curve of success gets the same bounds, a curve of KL none."""
    from agentgym_nb.viz.plots import curve_band, t_interval
    assert t_interval([0.1, 0.2, 0.3]) == pytest.approx((0.2, 0.2 - 0.24844, 0.2 + 0.24844), abs=1e-4)
    assert t_interval([0.1, 0.3]) == pytest.approx((0.2, -1.0706, 1.4706), abs=1e-4)
    assert t_interval([0.1, 0.3], bounds=(0, 1)) == pytest.approx((0.2, 0.0, 1.0), abs=1e-4)
    assert t_interval([0.4]) == (0.4, 0.4, 0.4)
    seeds = [[{"step": 1, "success": 0.1, "kl": 0.1}], [{"step": 1, "success": 0.3, "kl": 0.3}]]
    assert curve_band(seeds, "success")[2][0] == pytest.approx(0.0)
    assert curve_band(seeds, "kl")[2][0] == pytest.approx(-1.0706, abs=1e-4)


def test_training_curves_smooth_measurements_but_draw_the_horizon_as_scheduled():
    """A 3-step trailing mean of success 0, 0, 0.3, 0.3 is 0, 0, 0.1, 0.2; the horizon 2, 2, 4, 4 is drawn as is
    (smoothed, a stepwise jump would look like a ramp)."""
    import matplotlib
    matplotlib.use("Agg")
    from agentgym_nb.viz.plots import plot_runs
    history = [{"step": i + 1, "success": s, "max_rounds": h} for i, (s, h) in enumerate(zip([0, 0, 0.3, 0.3],
                                                                                              [2, 2, 4, 4]))]
    fig = plot_runs({"run": [history]}, ["success", "max_rounds"], window=3, ncols=2)
    assert fig.axes[0].lines[0].get_ydata().tolist() == pytest.approx([0, 0, 0.1, 0.2])
    assert fig.axes[1].lines[0].get_ydata().tolist() == [2, 2, 4, 4]


def test_the_schedule_plot_draws_each_schedules_horizon_per_step():
    from agentgym_nb.algos.schedule import adaptive, fixed, stepwise
    from agentgym_nb.viz.plots import plot_schedules
    fig = plot_schedules({"stepwise": stepwise([6, 13, 20], every=2), "fixed": fixed(20),
                          "adaptive": adaptive([6, 13, 20])}, steps=6)
    lines = fig.axes[0].lines
    assert list(lines[0].get_ydata()) == [6, 6, 13, 13, 20, 20]
    assert list(lines[1].get_ydata()) == [20] * 6
    assert list(lines[2].get_ydata()) == [6] * 6 and "until its metric" in lines[2].get_label()


def test_interval_chart_wraps_long_labels_and_draws_its_reference_line(tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    from agentgym_nb.viz.plots import LABEL_WIDTH, plot_intervals
    label = "fixed H=20: plateau (slope +0.06/10 steps), no collapse, held-out gain +0.03"
    fig = plot_intervals([{"label": label, "value": -0.02, "lo": -0.08, "hi": 0.04}], reference=0,
                         title="line one\nline two", path=str(tmp_path / "d.png"))
    ax = fig.axes[0]
    shown = ax.get_yticklabels()[0].get_text()
    assert shown.replace("\n", " ") == label and max(map(len, shown.split("\n"))) <= LABEL_WIDTH
    assert ax.get_title() == "line one\nline two"        # its own line breaks kept
    assert [list(line.get_xdata()) for line in ax.lines if list(line.get_xdata()) == [0, 0]]
    assert (tmp_path / "d.png").exists()
