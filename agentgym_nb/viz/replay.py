"""Trajectory replay from rollout logs on disk: static HTML (papermill, GitHub) and an ipywidgets viewer.

A rollout log is JSONL, one episode per line (runner.write_rollout_log): AgentGym-RL's {item_id, conversations,
reward} plus success, done, truncated, num_rounds, ... The viewer filters episodes by env, log file, item and reward,
and steps through an episode turn by turn.
"""
from __future__ import annotations

import glob
import html
import json
import os


def load_rollouts(run_dir: str, pattern: str = "step_*.jsonl") -> list[dict]:
    """Every episode in <run_dir>/rollouts/<pattern>, in file order. Each record gains `env` (from the run's
    config.json, when the record has none) and `source` (its log's file name without .jsonl)."""
    env = None
    config = os.path.join(run_dir, "config.json")
    if os.path.exists(config):
        with open(config) as f:
            env = json.load(f).get("env")
    records = []
    for path in sorted(glob.glob(os.path.join(run_dir, "rollouts", pattern))):
        source = os.path.basename(path).removesuffix(".jsonl")
        with open(path) as f:
            for line in f:
                record = json.loads(line)
                record.setdefault("env", env)
                record.setdefault("source", source)
                records.append(record)
    return records


def _turns(record: dict, skip_instruction: bool) -> list[dict]:
    return record["conversations"][2:] if skip_instruction else record["conversations"]


def num_turns(record: dict) -> int:
    """Agent replies in a logged episode (the instruction's acknowledgement is not one)."""
    return sum(m["role"] == "assistant" for m in _turns(record, skip_instruction=True))


def replay_html(record: dict, *, skip_instruction: bool = True, upto: int | None = None) -> str:
    """One episode, turn by turn: env observations left, the agent's replies right. With `upto = k`, only the
    task and the first k exchanges (agent reply k and the env's answer to it), the k-th outlined."""
    turns = _turns(record, skip_instruction)
    head = (f"{html.escape(str(record.get('env') or ''))} item {record['item_id']} · reward {record['reward']:.3f} · "
            f"success {record['success']} · turns {record['num_rounds']} · done {record['done']} · "
            f"truncated {record['truncated']}"
            + (f" · FAILED: {html.escape(str(record['failed']))}" if record.get("failed") else ""))
    rows, replies = [], 0
    for m in turns:
        who = "agent" if m["role"] == "assistant" else "env"
        if who == "agent":
            replies += 1
            if upto is not None and replies > upto:
                break
        colour = "#e8f1ff" if who == "agent" else "#f4f4f4"
        align = "margin-left:15%" if who == "agent" else "margin-right:15%"
        latest = upto is not None and upto > 0 and replies == upto
        outline = ";outline:2px solid #f0a020" if latest else ""
        rows.append(f'<div style="background:{colour};{align};padding:4px 8px;margin:3px 0;border-radius:6px;'
                    f'white-space:pre-wrap;font-family:monospace;font-size:12px{outline}"><b>{who}</b>\n'
                    f"{html.escape(m['content'])}</div>")
    return f'<div style="max-width:900px"><div style="font-weight:bold">{head}</div>{"".join(rows)}</div>'


class Replay:
    """An ipywidgets viewer over logged episodes: filters (env, log file, item, reward range), an episode slider,
    and a turn slider with previous/next buttons.

        Replay("outputs/runs/demo-babyai")            # every rollouts/*.jsonl of a run
        Replay(["runs/a", "runs/b"], pattern="after.jsonl")
        Replay(records)                               # records from load_rollouts

    Displayed in Jupyter it is the live widget; in a static render (papermill output, GitHub) the same cell shows
    the selected episode as HTML. `filtered`, `current`, `next_turn()` and `prev_turn()` drive it from code.
    """

    ALL = "all"

    def __init__(self, source, *, pattern: str = "*.jsonl"):
        import ipywidgets as w   # the viewer's alone: headless readers of rollout logs need not load IPython
        if isinstance(source, str):
            source = [source]
        records = [r for run in source for r in load_rollouts(run, pattern)] if source and isinstance(source[0], str) \
            else list(source or [])
        if not records:
            raise ValueError(f"no logged episodes in {source!r} (pattern {pattern!r}); a run writes them to "
                             "<run_dir>/rollouts/*.jsonl: check the run directory and the pattern")
        self.records = records
        rewards = [float(r["reward"]) for r in records]
        lo, hi = min(rewards), max(rewards)
        opts = lambda values: [(self.ALL, self.ALL)] + [(str(v), v) for v in values]   # noqa: E731
        self.env = w.Dropdown(options=opts(sorted({str(r.get("env")) for r in records})), description="env")
        self.source = w.Dropdown(options=opts(sorted({str(r.get("source")) for r in records})), description="log")
        self.item = w.Dropdown(options=opts(sorted({r["item_id"] for r in records})), description="item")
        self.reward = w.FloatRangeSlider(value=(lo, hi), min=lo, max=hi if hi > lo else lo + 1.0,
                                         step=max((hi - lo) / 100, 1e-3), description="reward", readout_format=".3f")
        self.episode = w.IntSlider(value=0, min=0, max=0, description="episode")
        self.turn = w.IntSlider(value=0, min=0, max=0, description="turn")
        self.prev_button = w.Button(description="◀ previous turn")
        self.next_button = w.Button(description="next turn ▶")
        self.status = w.HTML()
        self.view = w.HTML()
        for control in (self.env, self.source, self.item, self.reward):
            control.observe(lambda _: self._refilter(), names="value")
        self.episode.observe(lambda _: self._load_episode(), names="value")
        self.turn.observe(lambda _: self._render(), names="value")
        self.prev_button.on_click(lambda _: self.prev_turn())
        self.next_button.on_click(lambda _: self.next_turn())
        self.widget = w.VBox([w.HBox([self.env, self.source, self.item]), self.reward,
                              w.HBox([self.episode, self.status]),
                              w.HBox([self.turn, self.prev_button, self.next_button]), self.view])
        self._filtered: list[dict] = []
        self._refilter()

    # ------------------------------------------------------------------------------------------- state
    def _keep(self, r: dict) -> bool:
        lo, hi = self.reward.value
        return ((self.env.value == self.ALL or str(r.get("env")) == self.env.value)
                and (self.source.value == self.ALL or str(r.get("source")) == self.source.value)
                and (self.item.value == self.ALL or r["item_id"] == self.item.value)
                and lo - 1e-9 <= float(r["reward"]) <= hi + 1e-9)

    @property
    def filtered(self) -> list[dict]:
        """The episodes that pass every filter, in log order."""
        return self._filtered

    @property
    def current(self) -> dict | None:
        return self._filtered[self.episode.value] if self._filtered else None

    def _refilter(self) -> None:
        self._filtered = [r for r in self.records if self._keep(r)]
        self.episode.max = max(len(self._filtered) - 1, 0)
        if self.episode.value != 0:
            self.episode.value = 0    # triggers _load_episode
        else:
            self._load_episode()

    def _load_episode(self) -> None:
        ep = self.current
        self.turn.max = num_turns(ep) if ep else 0
        if self.turn.value != 0:
            self.turn.value = 0       # triggers _render
        else:
            self._render()

    def _render(self) -> None:
        ep = self.current
        n = len(self._filtered)
        self.status.value = (f"&nbsp;{self.episode.value + 1} of {n} episodes (of {len(self.records)})" if n
                             else "&nbsp;no episode passes the filters")
        self.view.value = replay_html(ep, upto=self.turn.value) if ep else ""
        self.prev_button.disabled = self.turn.value <= 0
        self.next_button.disabled = self.turn.value >= self.turn.max

    def next_turn(self) -> None:
        if self.turn.value < self.turn.max:
            self.turn.value += 1

    def prev_turn(self) -> None:
        if self.turn.value > 0:
            self.turn.value -= 1

    # ------------------------------------------------------------------------------------------- display
    def static_html(self) -> str:
        """The selected episode in full, for outputs without a widget manager."""
        ep = self.current
        n = len(self._filtered)
        note = (f'<div style="font-size:11px;color:#666">static view: episode {self.episode.value + 1} of {n} that '
                f'pass the filters ({len(self.records)} logged); run the notebook to browse them</div>')
        return note + (replay_html(ep) if ep else "<i>no episode passes the filters</i>")

    def _repr_mimebundle_(self, **kwargs):
        bundle = self.widget._repr_mimebundle_(**kwargs) or {}
        return {**bundle, "text/html": self.static_html()}
