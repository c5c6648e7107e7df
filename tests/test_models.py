"""The model ladder: the nano build is complete, reloads with the exact tokenizer it was trained with, and its
validation history is recorded; named models and bad names resolve or fail clearly."""
import json
import math
import os
import re

import pytest
from tokenizers import Tokenizer

from agentgym_nb import envs, models

pytestmark = pytest.mark.slow


def test_nano_reloads_with_the_tokenizer_it_was_trained_with(nano_dir):
    tok = models.load_tokenizer(nano_dir)
    raw = Tokenizer.from_file(os.path.join(nano_dir, "tokenizer.json"))
    obs = envs.make("babyai").reset(41)
    assert tok.encode(obs, add_special_tokens=False) == raw.encode(obs, add_special_tokens=False).ids
    assert tok.decode(tok.encode(obs, add_special_tokens=False)) == obs
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"


def test_nano_build_records_what_it_did(nano_dir):
    info = json.load(open(os.path.join(nano_dir, "build.json")))
    assert info["demos"] > 0 and info["params"] > 0
    assert info["bc"] and all(0.0 <= h["val_success"] <= 1.0 for h in info["bc"])
    # cloning learned: below the loss of a uniform guess over the vocabulary, where an untrained model starts
    vocab = json.load(open(os.path.join(nano_dir, "config.json")))["vocab_size"]
    assert info["bc"][-1]["loss"] < math.log(vocab)


def test_phrase_tokenizer_keeps_actions_compositional(nano_dir):
    tok = models.load_tokenizer(nano_dir)
    ids = tok.encode("go to red ball 1", add_special_tokens=False)
    assert tok.decode(ids[-1:]) == "1"          # numbers stay separate tokens: the object index is chosen, not memorised


def test_word_tokenizer_gives_a_name_the_same_pieces_wherever_it_stands(tmp_path):
    """What TextCraft's and SearchQA's clones copy: a name in a passage, in a thought and after a tag."""
    texts = ["Doc 1(Title: \"Purhond Works\") Purhond Works is a mining company based in Nithkrulfi.",
             "<think>I need to look up Purhond Works.</think>\n<search>Purhond Works</search>"] * 20
    phrases = models.train_tokenizer(texts, 300, str(tmp_path / "p"), style="phrases")
    words = models.train_tokenizer(texts, 300, str(tmp_path / "w"), style="words")

    def pieces(tok, text):
        return [tok.decode([i]) for i in tok.encode(text, add_special_tokens=False)]
    name = pieces(words, " Purhond Works")
    assert pieces(words, " Purhond Works.")[:len(name)] == pieces(words, " Purhond Works is")[:len(name)] == name
    assert pieces(words, ">Purhond Works")[2:] == name[1:]                    # after a tag only the first piece differs
    assert pieces(phrases, " Purhond Works.")[:2] != pieces(phrases, " Purhond Works is")[:2]
    with pytest.raises(ValueError, match="'phrases' or 'words'"):
        models.train_tokenizer(texts, 300, str(tmp_path / "x"), style="letters")


def test_unknown_model_names_fail_clearly():
    with pytest.raises(ValueError, match="nano, smollm2-135m"):
        models.resolve("nano2")
    with pytest.raises(ValueError, match="not in the local Hugging Face cache"):
        models.resolve("Qwen/Qwen2.5-7B-Instruct")


def test_the_cli_and_the_trainer_mean_the_same_nano(nano_dir):
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "agentgym_nb.models", "nano", "--preset", "smoke"],
                         capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
    assert os.path.realpath(out) == os.path.realpath(nano_dir)


def test_smollm2_loads_offline_from_its_wheel_and_acts():
    """The real pretrained instruct model: GGUF from the registry wheel -> HF folder -> one BabyAI turn."""
    from agentgym_nb.rollout.engine import HFEngine, SamplingParams
    from agentgym_nb.rollout.runner import run_episodes
    from agentgym_nb.rollout.trajectory import ChatFormat
    path = models.resolve("smollm2-135m", log=lambda *a: None)
    tok = models.load_tokenizer(path)
    chat = ChatFormat(tok)
    assert chat.head.startswith("<|im_start|>system")          # its own template, default system prompt and all
    engine = HFEngine(path, tokenizer=tok)
    [t] = run_episodes(engine, lambda: envs.make("babyai"), [1], chat, max_rounds=1,
                       params=SamplingParams(temperature=0, max_tokens=16), max_total_tokens=4096)
    assert t.failed is None and t.num_rounds == 1 and t.num_policy_tokens > 0
    assert t.messages[-2]["role"] == "assistant" and t.messages[-2]["content"].strip()


def test_a_changed_recipe_is_a_different_build():
    """The folder name hashes the whole recipe: a cpu nano cloned from another demonstrator is never the old one."""
    spec = models.nano_spec("babyai", "cpu", levels=[0, 1])
    assert spec.hesitation == 0.4 and models.nano_path(spec) == models.nano_path(models.nano_spec("babyai", "cpu", [0, 1]))
    other = models.NanoSpec(**{**spec.__dict__, "hesitation": 0.0})
    assert models.nano_path(other) != models.nano_path(spec)
    assert models.nano_path(models.nano_spec("babyai", "smoke", [0, 1]), "smoke").split(os.sep)[-1].startswith("nano-babyai-smoke-")


def test_nano_dir_names_the_folder_resolve_builds(nano_dir):
    """Notebook 00 and the benchmarks ask whether a build exists without building it: the folder they look in is
    the one `resolve_config` builds into, and it carries the config's levels (TextCraft's cpu preset keeps depths
    1-2: another build than one over every goal)."""
    from agentgym_nb.config import make_config
    assert models.nano_dir(make_config(preset="smoke", env="babyai")) == nano_dir
    textcraft = make_config(preset="cpu", env="textcraft")
    assert textcraft.levels and models.nano_dir(textcraft) != models.nano_path(models.nano_spec("textcraft", "cpu"))


@pytest.mark.parametrize("env,demos", [("babyai", 30), ("textcraft", 200), ("searchqa", 200),   # BabyAI's bot: ~0.5 s
                                       # 240 expert episodes in a JVM or Chromium, minutes together: the long tier's
                                       pytest.param("sciworld", 120, marks=[pytest.mark.jvm, pytest.mark.long]),
                                       pytest.param("miniwob", 60, marks=[pytest.mark.browser, pytest.mark.long]),
                                       pytest.param("webarena", 60, marks=[pytest.mark.browser, pytest.mark.long])])
def test_the_cpu_reply_budget_fits_every_expert_reply(env, demos, tmp_path):
    """A reply cut at the cpu preset's max_tokens is an invalid action: if the expert's own replies do not fit, the
    nano (cloned from them) cannot succeed on those episodes in validation or in RL. Measured with a tokenizer
    trained the way the cpu build trains it."""
    spec = models.nano_spec(env, "cpu")
    items, _ = models.nano_items(spec)
    convs = models.expert_conversations(env, items[:demos], spec.hesitation)
    tok = models.nano_tokenizer(spec, convs, str(tmp_path))
    longest = max(len(tok.encode(m["content"], add_special_tokens=False)) + 1   # + the end-of-turn token
                  for _, msgs, _ in convs for m in msgs[3::2])
    assert longest <= spec.max_tokens, f"{env}: an expert reply takes {longest} tokens, the budget is {spec.max_tokens}"


def test_count_params_and_weights_digest_read_the_folder(nano_dir, tmp_path):
    import shutil

    import torch
    from transformers import AutoModelForCausalLM

    from agentgym_nb.models import count_params, weights_digest
    model = AutoModelForCausalLM.from_pretrained(nano_dir, dtype=torch.float32)
    stored = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}   # tied: stored once
    assert count_params(nano_dir) == sum(v.numel() for v in stored.values())
    copy = tmp_path / "copy"
    shutil.copytree(nano_dir, copy)
    assert weights_digest(str(copy)) == weights_digest(nano_dir)   # the same bytes elsewhere: the same digest
    with torch.no_grad():
        model.model.norm.weight[0] += 1.0
    model.save_pretrained(copy)
    assert weights_digest(str(copy)) != weights_digest(nano_dir)
    with pytest.raises(ValueError, match="no .safetensors file"):
        weights_digest(str(tmp_path))


def test_a_killed_nano_build_goes_on_from_its_last_check_to_the_same_weights(tmp_path):
    """A cpu nano takes hours of cloning: a build killed in either phase (constant, then decaying learning rate)
    goes on from its last check and ends with the bytes of a build that was never interrupted."""
    from dataclasses import replace
    spec = replace(models.nano_spec("babyai", "smoke"), bc_max_steps=12, check_every=4, bc_decay_steps=8,
                   target_success=1.1, demos=16, val_items=2)   # resuming does not depend on how many episodes

    class Killed(Exception):
        pass

    def kill_at(line: str, nth: int, lines: list[str]):
        seen = []

        def log(message):
            lines.append(message)
            seen.extend([message] if line in message else [])
            if len(seen) == nth:
                raise Killed(message)   # raised as the check is logged: the checkpoint of the check before stays
        return log

    whole = models.build_nano(str(tmp_path / "whole"), spec, log=lambda *a: None)
    path, lines = str(tmp_path / "killed"), []
    for nth in (1, 2):   # the first phase's step 8; then, gone on from step 4, the decay phase's 8th (its last)
        with pytest.raises(Killed):
            models.build_nano(path, spec, log=kill_at("bc step 8:", nth, lines))
        assert not os.path.exists(os.path.join(path, "build.json"))
    models.build_nano(path, spec, log=lines.append)
    assert "bc: going on from step 4 of 12" in "\n".join(lines)     # the first kill lost the steps after 4
    assert "bc: going on from step 12 of 12" in "\n".join(lines)    # the first phase, ended, is not run again
    assert "bc: going on from step 4 of 8" in "\n".join(lines)
    assert models.weights_digest(path) == models.weights_digest(whole)
    build, reference = (json.load(open(os.path.join(p, "build.json"))) for p in (path, whole))
    assert [(h["step"], h["loss"]) for h in build["bc"]] == [(h["step"], h["loss"]) for h in reference["bc"]]
    assert len(build["bc"]) == 5 and build["bc"][-1]["phase"] == "decay"
    # the cloning done before the kills counts: the constant phase's end and the decay checkpoint gone on from
    checks = [(int(m.group(1)), float(m.group(2))) for m in (re.match(r"bc step (\d+):.*\((\d+)s\)$", line)
                                                            for line in lines) if m]
    end = [step for step, _ in checks].index(12)   # the constant phase's last check, then the decay phase's step 4
    assert build["cloning_seconds"] >= checks[end][1] + checks[end + 1][1] - 1   # the log rounds to whole seconds
    assert reference["cloning_seconds"] <= reference["seconds"]   # one process: its cloning was part of its time
    assert not [f for f in os.listdir(path) if f.startswith("cloning-")]   # a finished build keeps no checkpoints


def test_a_cloning_checkpoint_is_only_continued_with_the_tokenizer_it_was_cloned_with(nano_dir, tmp_path):
    """Its weights are indexed by its vocabulary's token ids: loaded under another tokenizer they would clone
    nonsense without a word of warning."""
    import torch
    from transformers import AutoModelForCausalLM

    from agentgym_nb.rollout.trajectory import ChatFormat
    chat = ChatFormat(models.load_tokenizer(nano_dir))
    model = AutoModelForCausalLM.from_pretrained(nano_dir, dtype=torch.float32)
    demos = models.demo_trajectories(chat, models.expert_conversations("babyai", [1, 2, 3, 4]))
    checkpoint = str(tmp_path / "cloning.pt")
    common = dict(validate=lambda m: 0.0, max_steps=2, check_every=1, batch_tokens=4096, log=lambda *a: None)
    models.behaviour_cloning(model, demos, chat, checkpoint=checkpoint, **{**common, "max_steps": 1})
    models.behaviour_cloning(model, demos, chat, checkpoint=checkpoint, **common)   # its own tokenizer: accepted
    other = ChatFormat(models.train_tokenizer(["go to the red ball", "open the door"] * 9, 300, str(tmp_path / "t")))
    with pytest.raises(ValueError, match="cloned with another tokenizer .* remove it to clone anew"):
        models.behaviour_cloning(model, demos, other, checkpoint=checkpoint, **common)


def test_two_processes_that_ask_for_the_same_nano_build_it_once(tmp_path):
    """Two notebooks run at once, or the suite's two workers on a clean clone, ask for the same model: one builds
    it, the other waits for the build lock and finds it done (no two writers in one folder)."""
    import subprocess
    import sys
    ask = ("from agentgym_nb import models; "
           "print('->', models.resolve('nano', preset='smoke', env='textcraft', log=print), flush=True)")
    env = {**os.environ, "AGENTGYM_NB_OUTPUTS": str(tmp_path), "OMP_NUM_THREADS": "1"}
    both = [subprocess.Popen([sys.executable, "-c", ask], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True) for _ in range(2)]
    outs = [p.communicate(timeout=900) for p in both]
    assert [p.returncode for p in both] == [0, 0], [err[-2000:] for _, err in outs]
    paths = {line.split("-> ", 1)[1] for out, _ in outs for line in out.splitlines() if line.startswith("-> ")}
    builds = [out.count("nano: built in") for out, _ in outs]
    assert len(paths) == 1 and sorted(builds) == [0, 1], outs
    assert os.path.exists(os.path.join(paths.pop(), "build.json"))
