"""The nano tokenizer's BPE training: hand-computed merges, and the same tokenizer from the same text in any
order and in any process (Hugging Face's trainer broke ties in hash-map order: one of two tokenizers per process)."""
import hashlib
import os
import subprocess
import sys

import pytest

from agentgym_nb.models import bpe_merges, train_tokenizer


def test_the_most_frequent_pair_is_merged_first_and_the_new_symbol_counts_as_one():
    # n(a,a) = 3, n(a,b) = 3 + 2 = 5, n(b,a) = 2  ->  "ab"; then n(a,ab) = 3, n(b,a) = 2  ->  "aab"; then "ba"
    words = {"aab": 3, "ab": 2, "ba": 2}
    assert bpe_merges(words, new_symbols=10) == [("a", "b"), ("a", "ab"), ("b", "a")]
    assert bpe_merges(words, new_symbols=2) == [("a", "b"), ("a", "ab")]


def test_overlapping_occurrences_count_twice_but_merge_left_to_right():
    # "aaa": n(a,a) = 2; merged left to right it is "aa" + "a", so the next pair is (aa, a), never (a, aa)
    assert bpe_merges({"aaa": 1}, new_symbols=5) == [("a", "a"), ("aa", "a")]
    assert bpe_merges({"aaaa": 1}, new_symbols=5) == [("a", "a"), ("aa", "aa")]


def test_ties_go_to_the_smallest_pair_whatever_the_order_of_the_words(tmp_path):
    assert bpe_merges({"cd": 2, "ab": 2}, new_symbols=1) == [("a", "b")]
    assert bpe_merges({"ab": 2, "cd": 2}, new_symbols=1) == [("a", "b")]
    texts = [f"go to the {c} {o} {i}, then open the {c} door" for c in ("red", "blue", "grey") for o in
             ("ball", "box", "key") for i in range(3)]
    forward = train_tokenizer(texts, 300, str(tmp_path / "forward"))
    backward = train_tokenizer(texts[::-1], 300, str(tmp_path / "backward"))
    assert forward.backend_tokenizer.to_str() == backward.backend_tokenizer.to_str()


@pytest.mark.slow   # three processes, each importing transformers and playing BabyAI's expert
def test_three_processes_train_the_same_tokenizer_from_the_same_text(tmp_path):
    """What a rebuilt nano and a resumed build rely on. Python's string hashing is seeded per process as well."""
    script = ("import sys; from agentgym_nb import models; "
              "spec = models.nano_spec('babyai', 'smoke'); items, _ = models.nano_items(spec); "
              "convs = models.expert_conversations('babyai', items[:40]); "
              "models.nano_tokenizer(spec, convs, sys.argv[1])")
    digests = set()
    for seed in ("1", "2", "3"):
        out = tmp_path / seed
        subprocess.run([sys.executable, "-c", script, str(out)], check=True, timeout=600,
                       env={**os.environ, "PYTHONHASHSEED": seed})
        digests.add(hashlib.sha256((out / "tokenizer.json").read_bytes()).hexdigest())
    assert len(digests) == 1
