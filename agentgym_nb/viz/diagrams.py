"""Pictures of ideas rather than of runs: the agent-environment loop and the training loop around it (lesson 00b)."""
from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

POLICY_COLOUR, ENV_COLOUR, TRAIN_COLOUR = "#7fb3ee", "#9bd68a", "#f5d76e"   # the token-view colours (viz.masks)


def _box(ax, xy, text, colour, width=2.6, height=1.0, fontsize=9):
    x, y = xy
    ax.add_patch(FancyBboxPatch((x - width / 2, y - height / 2), width, height, boxstyle="round,pad=0.08",
                                fc=colour, ec="0.25", lw=1))
    ax.text(x, y, text, ha="center", va="center", fontsize=fontsize, wrap=True)


def _arrow(ax, start, end, text="", bend=0.0, offset=(0.0, 0.0), fontsize=8):
    ax.add_patch(FancyArrowPatch(start, end, connectionstyle=f"arc3,rad={bend}", arrowstyle="-|>",
                                 mutation_scale=14, lw=1.3, color="0.2"))
    if text:
        ax.text((start[0] + end[0]) / 2 + offset[0], (start[1] + end[1]) / 2 + offset[1], text, ha="center",
                va="center", fontsize=fontsize, color="0.15")


def plot_agent_loop(path: str | None = None):
    """Left: one episode, the policy (an LLM) and the environment taking turns until the task is done or the horizon
    H runs out. Right: one training step, rollout -> score -> advantage -> update -> weight sync -> rollout."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.6), constrained_layout=True,
                                      gridspec_kw={"width_ratios": [1, 1.25]})
    for ax in (left, right):
        ax.set_xlim(0, 10)
        ax.set_ylim(0, 6)
        ax.axis("off")
    left.set_title("one episode: at most H turns", fontsize=11)
    _box(left, (2.2, 3.0), "policy $\\pi_\\theta$\n(the LLM)\nreads the whole\nconversation so far", POLICY_COLOUR,
         width=3.0, height=2.0)
    _box(left, (7.8, 3.0), "environment\n(BabyAI, TextCraft, ...\nover AgentGym's HTTP\nprotocol)", ENV_COLOUR,
         width=3.0, height=2.0)
    _arrow(left, (3.0, 4.1), (7.0, 4.1), "action $a_k$: a reply\n\"Thought: ... Action: go to red ball 1\"",
           bend=-0.35, offset=(0, 1.05))
    _arrow(left, (7.0, 1.9), (3.0, 1.9), "observation $o_k$ (text), reward $r_k$, done?", bend=-0.35,
           offset=(0, -1.0))
    left.text(5.0, 3.0, "turn k = 1, 2, ..., H", ha="center", va="center", fontsize=9, style="italic")

    right.set_xlim(-0.5, 10.5)
    right.set_title("one training step", fontsize=11)
    ring = [((5.0, 5.2), "1 rollout: play n episodes of\neach task (a group) with $\\pi_\\theta$", POLICY_COLOUR),
            ((8.4, 3.4), "2 score: each episode's\nreturn R (the env's reward)", ENV_COLOUR),
            ((7.3, 0.8), "3 advantage: R against a\nbaseline (GRPO: the group mean)", TRAIN_COLOUR),
            ((2.7, 0.8), "4 update: PPO-clip on the\nsampled tokens, + KL to $\\pi_{ref}$", TRAIN_COLOUR),
            ((1.6, 3.4), "5 weight sync: the engine\nsamples from the new $\\theta$", POLICY_COLOUR)]
    for xy, text, colour in ring:
        _box(right, xy, text, colour, width=3.3, height=1.1, fontsize=8.5)
    ends = [((6.7, 5.0), (8.2, 4.0)), ((8.4, 2.8), (7.9, 1.4)), ((5.6, 0.8), (4.4, 0.8)),
            ((2.2, 1.4), (1.5, 2.8)), ((1.9, 4.0), (3.3, 5.0))]
    for start, end in ends:
        _arrow(right, start, end, bend=-0.2)
    right.text(5.0, 3.0, "repeat; the horizon H\nmay grow with the step\n(ScalingInter-RL)", ha="center", va="center",
               fontsize=9, style="italic")
    if path:
        fig.savefig(path, dpi=100)
    return fig
