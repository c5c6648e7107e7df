"""The exercises: each checker accepts the reference solution, rejects wrong answers with the message that names the
mistake, and leaves a blank answer unticked without stopping "Run All"; the solutions stay out of the lessons and
stand in for the learner's answers only under AGENTGYM_NB_SOLUTIONS=1. The real data is a batch the smoke nano plays
in BabyAI."""
import ast
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from agentgym_nb import exercises
from harness import needs

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def solution(lesson: str, name: str):
    return getattr(exercises.load_solutions(lesson), name)


def test_solutions_stand_in_only_under_the_variable(monkeypatch, capsys):
    def blank(n, c, k):
        return None

    namespace = {"my_pass_at_k": blank}
    monkeypatch.delenv(exercises.SOLUTIONS_ENV, raising=False)
    assert exercises.solutions_under_ci("07_pass_at_k", namespace) == []
    assert namespace["my_pass_at_k"] is blank
    monkeypatch.setenv(exercises.SOLUTIONS_ENV, "1")
    assert exercises.solutions_under_ci("07_pass_at_k", namespace) == ["my_pass_at_k"]
    assert namespace["my_pass_at_k"](4, 1, 2) == pytest.approx(0.5)
    with pytest.raises(FileNotFoundError, match="lessons with solutions: \\['00b_rl_in_one_page'"):
        exercises.solutions_under_ci("99_no_such_lesson", namespace)
    exercises.check_pass_at_k(namespace["my_pass_at_k"], 4, [0, 1, 4])
    assert "(the reference solution, AGENTGYM_NB_SOLUTIONS=1)" in capsys.readouterr().out
    exercises._reference_in_use.clear()


def _lesson(path: Path) -> tuple[list[str], str]:
    cells = [c for c in json.load(open(path))["cells"] if c["cell_type"] == "code"]
    return ["".join(c["source"]) for c in cells], path.stem


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_lesson_holds_blank_answers_and_its_solutions_live_in_a_hidden_folder(path):
    sources, lesson = _lesson(path)
    assert not any(s.lstrip().startswith("# solution") for s in sources), "a solution cell sits in the lesson"
    if not (exercises.SOLUTIONS_DIR / f"{lesson}.py").exists():
        assert not any("exercises" in s for s in sources), "a lesson with exercises needs its notebooks/.solutions file"
        return
    calls = [s for s in sources if f'solutions_under_ci("{lesson}", globals())' in s]
    assert len(calls) == 1, f"one cell calls exercises.solutions_under_ci({lesson!r}, globals()) before its checks"
    answers = exercises.load_solutions(lesson).__all__
    defined = {}
    for source in sources:
        for node in ast.parse(source).body:
            if isinstance(node, ast.FunctionDef):
                defined[node.name] = node
            elif isinstance(node, ast.Assign):
                defined.update({t.id: node for t in node.targets if isinstance(t, ast.Name)})
    for name in answers:
        assert name in defined, f"the lesson defines no {name} for its solution to stand in for"
        node = defined[name]
        if isinstance(node, ast.FunctionDef):   # handed out blank: a docstring and `return None` / `...` at most
            body = [s for s in node.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
            assert all(isinstance(s, ast.Return) and (s.value is None or isinstance(s.value, ast.Constant)
                                                      and s.value.value is None) for s in body), \
                f"{name} is not handed out blank"
        else:
            assert isinstance(node.value, ast.Constant) and node.value.value is None, f"{name} is not None"


def test_every_lesson_from_00b_on_asks_for_code_and_the_solutions_hide_from_jupyterlab():
    """Every answer is a function the learner writes (no number to fill in), every lesson but 00 has one, and the
    solutions sit in a dot-folder, which JupyterLab's file browser does not list."""
    assert exercises.SOLUTIONS_DIR.name.startswith(".")
    lessons = {p.stem for p in NOTEBOOKS} - {"00_env_setup"}
    coded = {lesson: [n for n in exercises.load_solutions(lesson).__all__
                      if callable(getattr(exercises.load_solutions(lesson), n))] for lesson in lessons}
    assert all(coded.values()) and all(len(v) == len(exercises.load_solutions(k).__all__) for k, v in coded.items())


# ---------------------------------------------------------------------------------------------------------- pass@k

def test_pass_at_k_checker(capsys):
    counts = [0, 1, 3, 8]   # successes of 4 tasks, 8 samples each
    exercises.check_pass_at_k(lambda n, c, k: None, 8, counts)
    assert "not answered yet" in capsys.readouterr().out
    with pytest.raises(AssertionError, match="plug-in estimate"):
        exercises.check_pass_at_k(lambda n, c, k: 1 - (1 - c / n) ** k, 8, counts)
    with pytest.raises(AssertionError, match="that is pass\\^k"):
        exercises.check_pass_at_k(lambda n, c, k: math.comb(c, k) / math.comb(n, k), 8, counts)
    with pytest.raises(AssertionError, match="raise ValueError"):
        exercises.check_pass_at_k(lambda n, c, k: 1 - math.comb(n - c, k) / math.comb(n, k) if k <= n else 1.0,
                                  8, counts)
    exercises.check_pass_at_k(solution("07_pass_at_k", "my_pass_at_k"), 8, counts)
    assert "✓ pass@k" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------- intervals over seeds

def _study_pairs():
    from agentgym_nb.viz import study
    return study.load_study(path=study.RESULT)["pairs"]


def test_t_interval_checker_on_the_committed_study(capsys):
    pairs = _study_pairs()
    exercises.check_t_interval(lambda d: None, pairs)
    assert "not answered yet" in capsys.readouterr().out

    def interval(quantile, ddof=1, root=True):
        def fn(d):
            d = np.asarray(d)
            half = quantile(len(d)) * d.std(ddof=ddof) / (np.sqrt(len(d)) if root else 1)
            return d.mean() - half, d.mean() + half
        return fn

    t = lambda n: [12.706, 4.303, 3.182, 2.776, 2.571][n - 2]   # noqa: E731  (n seeds: n - 1 degrees of freedom)
    for wrong, message in ((interval(lambda n: 1.96), "normal quantile 1.96"),
                           (interval(t, ddof=0), "population std"),
                           (interval(t, root=False), "the mean's is s / sqrt\\(n\\)"),
                           (interval(lambda n: t(n + 1)), "n = \\d degrees of freedom"),
                           (lambda d: (min(d), max(d)), "centred on the mean"),
                           (lambda d: 0.5, "return two numbers")):
        with pytest.raises(AssertionError, match=message):
            exercises.check_t_interval(wrong, pairs)
    exercises.check_t_interval(solution("06_ablations", "my_t_interval"), pairs)
    assert "✓ the 95% t-interval over seeds" in capsys.readouterr().out
    with pytest.raises(ValueError, match="two seeds or more"):
        exercises.check_t_interval(solution("06_ablations", "my_t_interval"), {"a - b @ steps": {"per_seed": [0.1]}})


def test_seeds_to_establish_by_hand():
    from agentgym_nb.viz.plots import seeds_to_establish
    # mean 0.05, sd 0.03: n = 3 gives 4.303 * 0.03 / 1.732 = 0.0745 (reaches 0), n = 4 gives 3.182 * 0.03 / 2 = 0.0477
    assert seeds_to_establish(0.05, 0.03) == 4
    assert seeds_to_establish(-0.05, 0.03) == 4      # the sign does not matter
    assert seeds_to_establish(0.1, 0.0) == 2         # no spread: two seeds
    assert seeds_to_establish(0.0, 0.1) == math.inf
    # past 31 seeds the quantile is 1.96: n > (1.96 * 0.2 / 0.01)^2 = 1536.64
    assert seeds_to_establish(0.01, 0.2) == 1537


def test_seeds_for_half_width_by_hand():
    from agentgym_nb.viz.plots import seeds_for_half_width
    # sd 0.05, half-width 0.03: n = 9 gives 2.306 * 0.05 / 3 = 0.0384, n = 10 2.262 * 0.05 / 3.162 = 0.0358, n = 12
    # 2.201 * 0.05 / 3.464 = 0.0318, n = 13 2.179 * 0.05 / 3.606 = 0.0302, n = 14 2.160 * 0.05 / 3.742 = 0.0289
    assert seeds_for_half_width(0.05, 0.03) == 14
    assert seeds_for_half_width(0.0, 0.03) == 2          # no spread: two seeds
    # past 31 seeds the quantile is 1.96: n >= (1.96 * 0.2 / 0.03)^2 = 170.7
    assert seeds_for_half_width(0.2, 0.03) == 171


def test_seeds_needed_checker(capsys):
    cases = [("a", 0.05, 0.03), ("b", -0.02, 0.04), ("c", 0.0, 0.02), ("d", 0.01, 0.2)]
    exercises.check_seeds_needed(lambda m, s: None, cases)
    assert "not answered yet" in capsys.readouterr().out
    normal = lambda m, s: math.inf if m == 0 else max(2, math.floor((1.96 * s / abs(m)) ** 2) + 1)   # noqa: E731
    with pytest.raises(AssertionError, match="you used 1.96 for every n"):
        exercises.check_seeds_needed(normal, cases)
    reference = solution("06b_running_a_grid", "my_seeds_needed")
    with pytest.raises(AssertionError, match="the interval still reaches 0"):
        exercises.check_seeds_needed(lambda m, s: reference(m, s) - 1, cases)
    with pytest.raises(AssertionError, match="ask for the fewest seeds"):
        exercises.check_seeds_needed(lambda m, s: reference(m, s) + 1, cases)
    with pytest.raises(AssertionError, match="return math.inf"):
        exercises.check_seeds_needed(lambda m, s: 10_000 if m == 0 else reference(m, s), cases)
    exercises.check_seeds_needed(reference, cases)
    assert "✓ seeds needed" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------- the real batch

@pytest.fixture(scope="module")
def played(hf_nano, chat):
    """Episodes of the smoke nano in BabyAI: a batch at the smoke budget, and a replay with replies capped at 4 ids
    (cut replies) and a token budget that stops episodes before an observation fits."""
    from agentgym_nb import envs
    from agentgym_nb.config import item_pool, make_config
    from agentgym_nb.rollout.engine import SamplingParams
    from agentgym_nb.rollout.runner import run_episodes
    cfg = make_config(preset="smoke", env="babyai")
    items = item_pool(cfg, "train")[:3]
    play = lambda max_tokens, budget: run_episodes(   # noqa: E731
        hf_nano, lambda: envs.make("babyai"), items, chat, n=2, max_rounds=3,
        params=SamplingParams(temperature=1.0, max_tokens=max_tokens, seed=0), max_total_tokens=budget)
    batch = play(cfg.max_tokens, cfg.max_total_tokens)
    longest = max(len(t.input_ids) for t in batch)
    cut = play(4, longest)
    assert any(t.replies_cut_by_max_tokens for t in cut)
    return batch, cut


def test_turn_record_and_the_sequence_checker(played, chat, capsys):
    batch, cut = played
    episodes = batch + cut
    record = exercises.turn_record(episodes[0], chat)
    assert record["prompt"] == episodes[0].input_ids[:len(record["prompt"])]
    assert len(record["turns"]) == episodes[0].num_rounds
    assert any(turn["observation"] is None for t in episodes for turn in exercises.turn_record(t, chat)["turns"])
    reference = solution("02_mask_construction", "my_sequence")
    exercises.check_sequence(lambda chat, record: None, chat, episodes)
    assert "not answered yet" in capsys.readouterr().out

    def trains_the_closing(chat, record):   # AgentGym-RL's mask: the template's <|im_end|> trained too
        ids, mask = reference(chat, record)
        return ids, [1 if (m or (i == chat.end_of_turn_id and k and mask[k - 1])) else 0
                     for k, (i, m) in enumerate(zip(ids, mask))]

    with pytest.raises(AssertionError, match="must be 0 \\(the <\\|im_end\\|> added after a reply"):
        exercises.check_sequence(trains_the_closing, chat, cut)

    def trains_the_environment(chat, record):
        ids, mask = list(record["prompt"]), [0] * len(record["prompt"])
        for turn in record["turns"]:
            closing = [chat.end_of_turn_id] if turn["sampled"][-1:] != [chat.end_of_turn_id] else []
            ids += turn["sampled"] + closing
            mask += [1] * len(turn["sampled"]) + [0] * len(closing)
            if turn["observation"] is not None:
                scaffold, seen = chat.encode(chat.after_reply), chat.encode(turn["observation"])
                ids += scaffold + seen + chat.encode(chat.generation_header)
                mask += [0] * len(scaffold) + [1] * len(seen) + [0] * len(chat.encode(chat.generation_header))
        return ids, mask

    with pytest.raises(AssertionError, match="environment token .*must be 0 \\(the agent is not trained to predict"):
        exercises.check_sequence(trains_the_environment, chat, episodes)

    def forgets_the_closing(chat, record):   # a cut reply left open: the template's <|im_end|> is missing
        ids, mask = list(record["prompt"]), [0] * len(record["prompt"])
        for turn in record["turns"]:
            answer = [] if turn["observation"] is None else (
                chat.encode(chat.after_reply) + chat.encode(turn["observation"]) + chat.encode(chat.generation_header))
            ids += turn["sampled"] + answer
            mask += [1] * len(turn["sampled"]) + [0] * len(answer)
        return ids, mask

    with pytest.raises(AssertionError, match="input_ids differ at position .*template token.*closed with one"):
        exercises.check_sequence(forgets_the_closing, chat, cut)
    exercises.check_sequence(reference, chat, episodes)
    assert "✓ the multi-turn sequence" in capsys.readouterr().out


def _batch_tensors(batch, tokenizer):
    from agentgym_nb.rollout.trajectory import collate
    x = collate(batch, pad_id=tokenizer.pad_token_id)
    return x, torch.tensor([t.reward for t in batch]), torch.tensor([t.group for t in batch])


@pytest.mark.filterwarnings("ignore:std\\(\\)")
def test_grpo_checker(played, tokenizer, capsys):
    x, scores, group = _batch_tensors(played[0], tokenizer)
    mask = x["loss_mask"]
    reference = solution("03_advantage_estimators", "my_grpo")

    def per_episode(fn):
        def estimator(s, g, m):
            adv = torch.zeros(len(s))
            for k in g.unique():
                members = g == k
                adv[members] = fn(s[members]) if members.sum() > 1 else 0.0
            return adv[:, None] * m
        return estimator

    exercises.check_grpo(lambda s, g, m: None, scores, group, mask)
    assert "not answered yet" in capsys.readouterr().out
    for wrong, message in (
            (per_episode(lambda s: (s - s.mean()) / (s.std(unbiased=False) + 1e-6)), "population std"),
            (per_episode(lambda s: s - s.mean()), "did not divide by the group's std|subtracted the mean"),
            (lambda s, g, m: ((s - s.mean()) / (s.std() + 1e-6))[:, None] * m, "whole batch"),
            (lambda s, g, m: reference(s, g, m) + (1 - m), "has loss_mask 0"),
            (lambda s, g, m: reference(s, g, m)[:, :1], "expected shape \\[B, T\\]")):
        with pytest.raises(AssertionError, match=message):
            exercises.check_grpo(wrong, scores, group, mask)

    def nan_for_singletons(s, g, m):
        adv = torch.zeros(len(s))
        for k in g.unique():
            members = g == k
            adv[members] = (s[members] - s[members].mean()) / (s[members].std() + 1e-6)
        return adv[:, None] * m

    with pytest.raises(AssertionError, match="gets nan"):
        exercises.check_grpo(nan_for_singletons, scores, group, mask)
    exercises.check_grpo(reference, scores, group, mask)
    assert "✓ GRPO advantages" in capsys.readouterr().out


def test_ppo_loss_checker(played, nano_dir, tokenizer, capsys):
    from transformers import AutoModelForCausalLM

    from agentgym_nb.algos.advantages import grpo
    from agentgym_nb.algos.losses import token_logprobs
    x, scores, group = _batch_tensors(played[0], tokenizer)
    model = AutoModelForCausalLM.from_pretrained(nano_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        old = token_logprobs(model, x["input_ids"], x["attention_mask"])
        for p in model.parameters():   # the policy after a small step: other weights, other log-probs
            p.add_(0.01 * torch.randn(p.shape, generator=torch.Generator().manual_seed(0)))
        logp = token_logprobs(model, x["input_ids"], x["attention_mask"])
    adv = grpo(torch.linspace(0, 1, len(scores)), group, x["loss_mask"])
    mask = x["loss_mask"]
    reference = solution("03b_update_step", "my_ppo_loss")
    exercises.check_ppo_loss(lambda *a: None, logp, old, adv, mask)
    assert "not answered yet" in capsys.readouterr().out

    def per_token(lp, old_lp, a, m, eps):
        ratio = torch.exp(lp - old_lp)
        return -a * ratio, -a * ratio.clamp(1 - eps, 1 + eps)

    for wrong, message in (
            (lambda lp, o, a, m, e: (torch.minimum(*per_token(lp, o, a, m, e)) * m).sum() / m.sum(), "took the min"),
            (lambda lp, o, a, m, e: (per_token(lp, o, a, m, e)[0] * m).sum() / m.sum(), "there is no clip"),
            (lambda lp, o, a, m, e: torch.maximum(*per_token(lp, o, a, m, e)).mean(), "averaged over every position"),
            (lambda lp, o, a, m, e: reference(lp, o, a, m, e).item(), "one-element torch tensor"),
            (lambda lp, o, a, m, e: reference(lp, o, a, m, e).detach(), "it has no gradient"),
            (lambda lp, o, a, m, e: (torch.maximum(-a * torch.exp(lp - o), -a * torch.exp(lp - o).detach().clamp(
                1 - e, 1 + e) * torch.exp(lp - lp.detach())) * m).sum() / m.sum(), "gradient with respect to logp")):
        with pytest.raises(AssertionError, match=message):
            exercises.check_ppo_loss(wrong, logp, old, adv, mask)
    exercises.check_ppo_loss(reference, logp, old, adv, mask)
    assert "✓ the PPO-clip loss" in capsys.readouterr().out



@pytest.fixture(scope="module")
def moved(played, nano_dir, tokenizer):
    """The real batch's log-probs under the smoke nano (the reference) and under the nano after a small step."""
    from transformers import AutoModelForCausalLM

    from agentgym_nb.algos.losses import token_logprobs
    x, _, _ = _batch_tensors(played[0], tokenizer)
    model = AutoModelForCausalLM.from_pretrained(nano_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        ref = token_logprobs(model, x["input_ids"], x["attention_mask"])
        for p in model.parameters():   # the policy after a small step: other weights, other log-probs
            p.add_(0.01 * torch.randn(p.shape, generator=torch.Generator().manual_seed(0)))
        logp = token_logprobs(model, x["input_ids"], x["attention_mask"])
    return x, ref, logp, model


@pytest.mark.filterwarnings("ignore:std\\(\\)")
def test_rloo_checker(played, tokenizer, capsys):
    x, scores, group = _batch_tensors(played[0], tokenizer)
    mask = x["loss_mask"]
    reference = solution("00b_rl_in_one_page", "my_rloo")

    def per_group(fn):
        def estimator(s, g, m):
            adv = torch.zeros(len(s))
            for k in g.unique():
                members = g == k
                adv[members] = fn(s[members]) if members.sum() > 1 else 0.0
            return adv[:, None] * m
        return estimator

    exercises.check_rloo(lambda s, g, m: None, scores, group, mask)
    assert "not answered yet" in capsys.readouterr().out
    for wrong, message in (
            (per_group(lambda s: s - s.mean()), "which holds the episode itself"),
            (per_group(lambda s: (s - s.mean()) / (s.std() + 1e-6)), "that is GRPO"),
            (lambda s, g, m: (s - (s.sum() - s) / (len(s) - 1))[:, None] * m, "out of the whole batch"),
            (lambda s, g, m: reference(s, g, m) + (1 - m), "has loss_mask 0")):
        with pytest.raises(AssertionError, match=message):
            exercises.check_rloo(wrong, scores, group, mask)

    def zero_division(s, g, m):   # a group of one: (0 / 0)
        adv = torch.zeros(len(s))
        for k in g.unique():
            members = g == k
            adv[members] = s[members] - (s[members].sum() - s[members]) / (members.sum() - 1)
        return adv[:, None] * m

    with pytest.raises(AssertionError, match="no other member to average"):
        exercises.check_rloo(zero_division, scores, group, mask)
    exercises.check_rloo(reference, scores, group, mask)
    assert "✓ RLOO advantages" in capsys.readouterr().out


def test_token_logprobs_checker(played, moved, capsys):
    _, _, _, model = moved
    sequences = [t.input_ids for t in played[0][:3]]
    reference = solution("01_rollout_anatomy", "my_token_logprobs")
    exercises.check_token_logprobs(lambda z, ids, temperature: None, model, sequences)
    assert "not answered yet" in capsys.readouterr().out

    def scored(table, ids):
        return torch.cat([torch.zeros(1), table[:-1].gather(-1, ids[1:, None])[:, 0]])

    for wrong, message in (
            (lambda z, ids, T: torch.log_softmax(z / T, -1).gather(-1, ids[:, None])[:, 0], "NEXT token"),
            (lambda z, ids, T: reference(z, ids, T).exp() * (torch.arange(len(ids)) > 0), "probabilities"),
            (lambda z, ids, T: scored(z / T, ids), "raw logit"),
            (lambda z, ids, T: scored(torch.log_softmax(z, -1), ids), "by the temperature before the softmax"),
            (lambda z, ids, T: scored(torch.log_softmax(z, -1) / T, ids), "not the log-probs"),
            (lambda z, ids, T: reference(z, ids, T)[1:], "expected shape \\[T\\]")):
        with pytest.raises(AssertionError, match=message):
            exercises.check_token_logprobs(wrong, model, sequences)
    exercises.check_token_logprobs(reference, model, sequences)
    assert "✓ the log-probability of each token" in capsys.readouterr().out


def test_gae_checker(played, tokenizer, capsys):
    from agentgym_nb.algos.advantages import gae
    x, _, _ = _batch_tensors(played[0], tokenizer)
    mask, rewards = x["loss_mask"], x["rewards"]
    values = 0.1 * torch.cos(torch.arange(mask.numel(), dtype=torch.float32)).reshape(mask.shape)   # a critic's
    reference = solution("03_advantage_estimators", "my_gae")
    exercises.check_gae(lambda r, v, m, g, lam: None, rewards, values, mask)
    assert "not answered yet" in capsys.readouterr().out
    for wrong, message in (
            (lambda r, v, m, g, lam: exercises._gae_variant(r, v, m.bool(), g, lam, "every"), "stepped over every"),
            (lambda r, v, m, g, lam: exercises._gae_variant(r, v, m.bool(), g, lam, "reset"), "you reset V_next"),
            (lambda r, v, m, g, lam: gae(r, v, m, gamma=g, lam=lam)[0], "those are whitened"),
            (lambda r, v, m, g, lam: gae(r, v, m, gamma=g, lam=lam, whiten=False)[1], "the return A \\+ V"),
            (lambda r, v, m, g, lam: gae(r, v, m, gamma=lam, lam=g, whiten=False)[0], "swapped"),
            (lambda r, v, m, g, lam: gae(r, v, m, gamma=g, lam=1.0, whiten=False)[0], "lambda is missing"),
            (lambda r, v, m, g, lam: reference(r, v, m, g, lam) + (1 - m), "has loss_mask 0")):
        with pytest.raises(AssertionError, match=message):
            exercises.check_gae(wrong, rewards, values, mask)
    exercises.check_gae(reference, rewards, values, mask)
    assert "✓ GAE over the loss mask" in capsys.readouterr().out


def test_gigpo_steps_checker(played, tokenizer, capsys):
    x, scores, group = _batch_tensors(played[0], tokenizer)
    anchors = [t.anchors for t in played[0]]
    reference = solution("03_advantage_estimators", "my_step_advantages")
    exercises.check_gigpo_steps(lambda s, g, a, gamma: None, scores, group, anchors)
    assert "not answered yet" in capsys.readouterr().out

    def variant(**kw):
        return lambda s, g, a, gamma: exercises._step_advantages(s, g, a, gamma, 1e-6, **kw)

    for wrong, message in ((variant(discount="none"), "every turn got the whole score"),
                           (variant(discount="start"), "from the first turn"),
                           (variant(by_task=False), "by state alone"),
                           (variant(ddof=0), "population std"),
                           (variant(scale=False), "did not divide by the step group's std"),
                           (lambda s, g, a, gamma: [[0.0] * len(x) for x in a[:-1]], "one number per turn"),
                           (lambda s, g, a, gamma: [[math.nan] * len(x) for x in a], "gets nan")):
        with pytest.raises(AssertionError, match=message):
            exercises.check_gigpo_steps(wrong, scores, group, anchors)
    exercises.check_gigpo_steps(reference, scores, group, anchors)
    assert "✓ GiGPO's step-level advantages" in capsys.readouterr().out


def test_k3_and_its_gradient_checkers(moved, capsys):
    x, ref, logp, _ = moved
    mask = x["loss_mask"]
    k3, grad = solution("03b_update_step", "my_k3"), solution("03b_update_step", "my_k3_grad")
    exercises.check_k3(lambda lp, r: None, logp, ref, mask)
    exercises.check_k3_grad(lambda lp, r: None, logp, ref, mask)
    assert capsys.readouterr().out.count("not answered yet") == 2
    unclamped = lambda lp, r: torch.exp(r - lp) + (lp - r) - 1   # noqa: E731
    for wrong, message in ((lambda lp, r: (torch.exp(lp - r) - (lp - r) - 1).clamp(max=10), "d = ref_logp - logp"),
                           (unclamped, "clamped at 10"),
                           (lambda lp, r: lp - r, "that is k1"),
                           (lambda lp, r: 0.5 * (lp - r) ** 2, "that is k2"),
                           (lambda lp, r: k3(lp, r).detach(), "no gradient"),
                           (lambda lp, r: k3(lp, r).mean(), "one value per token"),
                           (lambda lp, r: unclamped(lp, r) - (unclamped(lp, r) - 10).clamp(min=0).detach(),
                            "their gradient")):   # the clamp's value, the unclamped gradient
        with pytest.raises(AssertionError, match=message):
            exercises.check_k3(wrong, logp, ref, mask)
    exercises.check_k3(k3, logp, ref, mask)
    d = lambda lp, r: lp - r   # noqa: E731
    clamped = lambda lp, r: torch.exp(-d(lp, r)) + d(lp, r) - 1 >= 10   # noqa: E731
    for wrong, message in ((lambda lp, r: 1 - torch.exp(-d(lp, r)), "its gradient is 0 there"),
                           (lambda lp, r: torch.where(clamped(lp, r), 0.0, torch.exp(-d(lp, r)) - 1), "the sign"),
                           (lambda lp, r: torch.where(clamped(lp, r), 0.0, -torch.exp(-d(lp, r))), "derivative 1"),
                           (lambda lp, r: d(lp, r), "k2's gradient"),
                           (lambda lp, r: torch.ones_like(lp), "k1's gradient")):
        with pytest.raises(AssertionError, match=message):
            exercises.check_k3_grad(wrong, logp, ref, mask)
    exercises.check_k3_grad(grad, logp, ref, mask)
    out = capsys.readouterr().out
    assert "✓ k3: value and gradient" in out and "✓ the gradient of k3" in out


def test_tis_weights_checker(played, moved, capsys):
    x, ref, _, _ = moved
    mask = x["loss_mask"].bool()
    engine = torch.full_like(ref, float("nan"))   # what the engine reported as it sampled
    for b, t in enumerate(played[0]):
        engine[b, mask[b]] = torch.tensor(t.sampled_logprobs)
    reference = solution("03b_update_step", "my_tis_weights")
    exercises.check_tis_weights(lambda tr, en, c: None, ref, engine, mask)
    assert "not answered yet" in capsys.readouterr().out
    for wrong, message in ((lambda tr, en, c: torch.exp(en - tr).clamp(max=c), "upside down"),
                           (lambda tr, en, c: torch.exp(tr - en), "not truncated"),
                           (lambda tr, en, c: torch.exp(tr - en).clamp(1 / c, c), "only large weights are cut"),
                           (lambda tr, en, c: (tr - en).clamp(max=math.log(c)), "log-weights"),
                           (lambda tr, en, c: reference(tr, en, c)[:, 1:], "one weight per token")):
        with pytest.raises(AssertionError, match=message):
            exercises.check_tis_weights(wrong, ref, engine, mask)
    exercises.check_tis_weights(reference, ref, engine, mask)
    assert "✓ the TIS weights" in capsys.readouterr().out


def test_aggregation_checker(moved, capsys):
    from agentgym_nb.algos.losses import aggregate
    x, ref, logp, _ = moved
    loss, mask = -(logp - ref), x["loss_mask"]   # a per-token loss of the real batch
    reference = solution("03b_update_step", "my_aggregate")
    exercises.check_aggregation(lambda l, m, mode: None, loss, mask)
    assert "not answered yet" in capsys.readouterr().out
    other = {"token-mean": "seq-mean-token-mean", "seq-mean-token-mean": "token-mean"}
    for wrong, message in ((lambda l, m, mode: aggregate(l, m, other[mode]), "that is seq-mean-token-mean"),
                           (lambda l, m, mode: aggregate(l, m, "seq-mean-token-sum"), "seq-mean-token-sum"),
                           (lambda l, m, mode: l.mean(), "averaged over every position"),
                           (lambda l, m, mode: reference(l, m, mode) if mode == "token-mean" else
                            ((l * m).sum(-1) / m.sum(-1).clamp(min=1)).sum() / len(l), "not counted"),
                           (lambda l, m, mode: reference(l, m, mode) if mode == "token-mean" else
                            ((l * m).sum(-1) / m.sum(-1)).mean(), "0 / 0")):
        with pytest.raises(AssertionError, match=message):
            exercises.check_aggregation(wrong, loss, mask)
    exercises.check_aggregation(reference, loss, mask)
    assert "✓ loss aggregation" in capsys.readouterr().out


@pytest.fixture(scope="module")
def logged_run(played, tmp_path_factory):
    """A run folder as the trainer leaves it, two steps of the real batch: rollouts/step_*.jsonl and the metrics the
    trainer computes from them (train.health.episode_metrics)."""
    from agentgym_nb.rollout.runner import write_rollout_log
    from agentgym_nb.rollout.trajectory import TrajectoryGroup
    from agentgym_nb.train.health import episode_metrics
    run = tmp_path_factory.mktemp("run")
    with open(run / "metrics.jsonl", "w") as f:
        for step, trajs in enumerate(played, start=1):
            write_rollout_log(str(run / "rollouts" / f"step_{step:05d}.jsonl"), trajs, step=step, max_rounds=3)
            usable = [t for t in trajs if not t.failed and t.num_policy_tokens > 0]
            f.write(json.dumps({"step": step, **episode_metrics(trajs, TrajectoryGroup.of(usable))}) + "\n")
    return str(run)


def test_zero_adv_share_checker(logged_run, capsys):
    runs = {"a logged run": logged_run}
    reference = solution("04_fixed_horizon", "my_zero_adv_share")
    assert exercises.step_episodes(logged_run).keys() == {1, 2}
    exercises.check_zero_adv_share(lambda episodes: None, runs)
    assert "not answered yet" in capsys.readouterr().out

    def groups(episodes):
        by = {}
        for e in episodes:
            by.setdefault(e["group"], []).append(e["reward"])
        return list(by.values())

    for wrong, message in ((lambda eps: sum(all(r == 0 for r in g) for g in groups(eps)) / len(groups(eps)),
                            "all FAILED"),
                           (lambda eps: sum(len(g) for g in groups(eps) if len(set(g)) == 1) / len(eps),
                            "a share of episodes"),
                           (lambda eps: 1.0, "should be")):
        with pytest.raises(AssertionError, match=message):
            exercises.check_zero_adv_share(wrong, runs)
    exercises.check_zero_adv_share(reference, runs)
    assert "✓ the zero-advantage share: equal to the trainer's zero_adv_groups on a hand-made step and 2" \
        in capsys.readouterr().out


def test_cut_share_checker(logged_run, capsys):
    runs = {"a logged run": logged_run}
    reference = solution("05_scalinginter", "my_cut_share")
    exercises.check_cut_share(lambda episodes: None, runs)
    assert "not answered yet" in capsys.readouterr().out
    share = lambda test: lambda eps: sum(map(test, eps)) / len(eps)   # noqa: E731
    for wrong, message in ((share(lambda e: not e["done"]), "token budget"),
                           (share(lambda e: e["reward"] == 0), "you counted failures"),
                           (share(lambda e: e["num_rounds"] >= e["max_rounds"]), "used every turn")):
        with pytest.raises(AssertionError, match=message):
            exercises.check_cut_share(wrong, runs)
    exercises.check_cut_share(reference, runs)
    assert "✓ the share cut by the horizon" in capsys.readouterr().out

@pytest.mark.slow
@needs("papermill")
def test_run_all_in_a_kernel_of_your_own_ticks_no_blank_answer(tmp_path, monkeypatch):
    """Lesson 00b run top to bottom as a learner's kernel runs it (no AGENTGYM_NB_SOLUTIONS): it finishes, and its
    exercise says it is not answered yet instead of printing a tick."""
    import papermill
    monkeypatch.delenv(exercises.SOLUTIONS_ENV, raising=False)
    monkeypatch.setenv("AGENTGYM_NB_PRESET", "smoke")
    out = tmp_path / "00b.ipynb"
    papermill.execute_notebook(str(ROOT / "notebooks" / "00b_rl_in_one_page.ipynb"), str(out), progress_bar=False)
    text = "".join("".join(o.get("text", "")) for c in json.load(open(out))["cells"] if c["cell_type"] == "code"
                   for o in c["outputs"])
    assert "RLOO advantages: not answered yet" in text and "✓" not in text
