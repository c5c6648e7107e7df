"""Trajectory replay from rollout logs on disk, as HTML that shows in a notebook and in a papermill output."""
from __future__ import annotations

import glob
import html
import json
import os


def load_rollouts(run_dir: str, pattern: str = "step_*.jsonl") -> list[dict]:
    records = []
    for path in sorted(glob.glob(os.path.join(run_dir, "rollouts", pattern))):
        with open(path) as f:
            records += [json.loads(line) for line in f]
    return records


def replay_html(record: dict, *, skip_instruction: bool = True) -> str:
    """One episode, turn by turn: env observations left, the agent's replies right."""
    turns = record["conversations"][2:] if skip_instruction else record["conversations"]
    head = (f"item {record['item_id']} · reward {record['reward']:.3f} · success {record['success']} · "
            f"turns {record['num_rounds']} · done {record['done']} · truncated {record['truncated']}"
            + (f" · FAILED: {html.escape(str(record['failed']))}" if record.get("failed") else ""))
    rows = []
    for m in turns:
        who = "agent" if m["role"] == "assistant" else "env"
        colour = "#e8f1ff" if who == "agent" else "#f4f4f4"
        align = "margin-left:15%" if who == "agent" else "margin-right:15%"
        rows.append(f'<div style="background:{colour};{align};padding:4px 8px;margin:3px 0;border-radius:6px;'
                    f'white-space:pre-wrap;font-family:monospace;font-size:12px"><b>{who}</b>\n'
                    f"{html.escape(m['content'])}</div>")
    return f'<div style="max-width:900px"><div style="font-weight:bold">{head}</div>{"".join(rows)}</div>'
