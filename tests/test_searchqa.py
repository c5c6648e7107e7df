"""SearchQA: AgentGym's grammar and texts, the fictional knowledge base, the FlashRAG file layout, the HTTP protocol.

The first test to run builds the default knowledge base and its BM25 index under outputs/data/searchqa/ (~10 s on
a busy 2-core machine, once); later runs load them in about a second.
"""
import json
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import requests

from agentgym_nb.envs import EnvError, EnvStateError, connect, item_ids, make
from agentgym_nb.envs.base import MAX_ACTION_CHARS
from agentgym_nb.envs.http import make_app, start_server
from agentgym_nb.envs.searchqa import (ACTION, CORRECT, INCORRECT, INSTRUCTION, INVALID, PROMPT, DenseRetriever,
                                       SearchQA, information)
from agentgym_nb.envs.searchqa_corpus import build, contains_answer, normalize_answer
from harness import loopback_server

pytestmark = pytest.mark.timeout(240)  # a hang is a failure; the first run also builds the corpus

N_TEST, N_ITEMS = 500, 3000


@pytest.fixture(scope="module")
def env():
    env = make("searchqa")
    yield env
    env.close()


def searches(replies: list[str]) -> list[str]:
    return [m.group(2).strip() for m in map(ACTION.search, replies) if m.group(1) == "search"]


# ---------------------------------------------------------------- texts and grammar

def test_instruction_and_question_prompt_are_agentgym_verbatim(env):
    assert env.instruction == [{"role": "user", "content": INSTRUCTION}, {"role": "assistant", "content": "Ok."}]
    assert INSTRUCTION.startswith("You must always reason inside <think>...</think> first; if you lack knowledge, ")
    assert INSTRUCTION.endswith("resume only when new <information> is given; do not skip steps or anticipate "
                                "answers early.")
    observation = env.reset(0)
    question = env.library.items[0].question
    assert observation == PROMPT.format(question=question)
    assert observation.startswith("You must reason inside <think>...</think> first. If you do not have enough "
                                  "knowledge, issue a <search>...</search> and then STOP. ")
    assert observation.endswith("For example, <answer> Beijing </answer>. Follow this process every time.\n\n"
                                f" Question: {question}")
    assert env.observe() == observation  # constant through the episode
    env.step("<search>anything</search>")
    assert env.observe() == observation


def test_search_returns_top3_in_agentgym_format(env):
    env.reset(0)
    subject = searches(env.expert(0))[0]
    step = env.step(f"<think>Let me look.</think>\n<search> {subject} </search>")
    rows = env.retriever.search(subject, 3)
    assert len(rows) == 3 and (step.reward, step.done) == (0.0, False)
    docs = [env.library.corpus.contents(r) for r in rows]
    title, text = docs[0].split("\n", 1)
    assert title == f'"{subject}"'  # wiki-18 titles carry their quotes; the entity's own passage ranks first
    assert step.observation == ("<information>" + "\n".join(
        f"Doc {i}(Title: {d.split(chr(10))[0]}) {d.split(chr(10), 1)[1]}" for i, d in enumerate(docs, 1))
        + "</information>")
    assert step.observation.startswith(f'<information>Doc 1(Title: "{subject}") {text}\nDoc 2(Title: "')
    assert "\nDoc 3(Title: " in step.observation and not step.observation.endswith("\n</information>")
    assert step.info == {"score": 0.0, "step_reward": 0.0, "action": f"<search> {subject} </search>", "valid": True}
    assert env.step("<search>qwxzy vvvkk</search>").observation == "<information></information>"  # no match
    assert information([]) == "<information></information>"
    assert information(['"T"\nline one\nline two', '"U"']) == (
        '<information>Doc 1(Title: "T") line one\nline two\nDoc 2(Title: "U")</information>')


def test_first_tag_decides_last_answer_is_scored_squad_normalised(env):
    item = env.library.items[0]
    gold = item.golden_answers[0]
    env.reset(0)
    for reply in ("The answer is obvious.", "<search>unclosed", "<Search>x</Search>", "<answer>x</search>", ""):
        assert env.step(reply) == env.step(reply)
        step = env.step(reply)
        assert (step.observation, step.reward, step.done, step.info["valid"]) == (INVALID, 0.0, False, False)
    step = env.step(f"<search>{gold}</search> then <answer>{gold}</answer>")  # the search came first
    assert step.observation.startswith("<information>") and not step.done
    wrong = env.step(f"<answer>{gold} and more</answer>")
    assert (wrong.observation, wrong.reward, wrong.done) == (INCORRECT, 0.0, False)  # may retry
    assert env.step(f"<answer>{gold}</answer><search>x</search><answer>wrong</answer>").observation == INCORRECT
    shouted = f"<think>sure</think><answer>nothing</answer> <answer>  The {gold.upper()}!! </answer>"
    step = env.step(shouted)  # first tag is an answer; the last answer is scored, normalised
    assert (step.observation, step.reward, step.done) == (CORRECT, 1.0, True)
    assert step.info == {"score": 1.0, "step_reward": 1.0, "action": "<answer>nothing</answer>", "valid": True}
    assert env.success(step.reward)
    with pytest.raises(EnvStateError, match="done"):
        env.step(f"<answer>{gold}</answer>")
    assert normalize_answer("  The  Quick, brown-fox! ") == "quick brownfox"
    assert normalize_answer("An apple a day") == "apple day"


def test_bad_input_errors(env):
    fresh = SearchQA()
    with pytest.raises(EnvStateError, match="before reset"):
        fresh.step("<search>x</search>")
    with pytest.raises(ValueError, match=r"out of range: valid ids are 0\.\.2999 \(0\.\.499 test"):
        fresh.reset(N_ITEMS)
    with pytest.raises(ValueError, match="integer >= 0"):
        fresh.reset(-1)
    fresh.reset(1)
    with pytest.raises(ValueError, match=f"1,048,576 characters; at most {MAX_ACTION_CHARS:,}"):
        fresh.step("<search>" + "a" * (2**20 - 17) + "</search>")
    fresh.close()
    with pytest.raises(EnvStateError, match="after close"):
        fresh.reset(0)
    with pytest.raises(ValueError, match="give corpus="):
        SearchQA(corpus="corpus.jsonl")


# ---------------------------------------------------------------- the fictional knowledge base

def test_knowledge_base_sizes_splits_and_item_lists(env):
    library = env.library
    assert len(library.corpus) >= 20_000 and library.n_test == N_TEST and len(library.items) == N_ITEMS
    assert item_ids("searchqa", "test") == list(range(N_TEST))
    assert item_ids("searchqa", "train") == list(range(N_TEST, N_ITEMS))
    test, train = library.items[:N_TEST], library.items[N_TEST:]
    assert [env.category(i) for i in range(4)] == ["1-hop", "2-hop", "1-hop", "2-hop"]
    assert sum(env.category(i) == "2-hop" for i in range(N_TEST)) == N_TEST // 2
    assert sum(item.source == "2-hop" for item in train) == len(train) // 2
    # disjoint by task: no shared question, and no shared subject (the passage the first search must find)
    assert not {item.question for item in test} & {item.question for item in train}
    subjects = [item.gold_passages[0] for item in library.items]
    assert len(set(subjects)) == N_ITEMS
    # passages are a few sentences about syllable-built names
    lengths = [library.corpus.contents(r).count(". ") + 1 for r in range(0, len(library.corpus), 97)]
    assert min(lengths) >= 3


def test_generation_is_deterministic_across_processes(env, tmp_path):
    """A fresh process with another hash seed writes byte-identical files (slow but essential: a full generation)."""
    script = f"from agentgym_nb.envs.searchqa_corpus import build; build({str(tmp_path)!r})"
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120,
                   env={**os.environ, "PYTHONHASHSEED": "12345"})
    reference = build()  # the default files the env was loaded from (this process: PYTHONHASHSEED=0)
    for name in ("corpus", "test", "train"):
        assert (tmp_path / f"{name}.jsonl").read_bytes() == reference[name].read_bytes(), name


def test_expert_solves_every_test_question_and_finds_gold_passages(env):
    library, hops = env.library, {"1-hop": 0, "2-hop": 0}
    for item_id in range(N_TEST):
        item, replies = library.items[item_id], env.expert(item_id)
        assert all(r.startswith("<think>") for r in replies) and replies[-1].endswith("</answer>")
        queries = searches(replies)
        assert len(queries) == len(item.gold_passages) == int(item.source[0])
        for query, gold in zip(queries, item.gold_passages):
            assert gold in env.retriever.search(query, 3), (item_id, query)
        env.reset(item_id)
        steps = [env.step(r) for r in replies]
        assert [s.done for s in steps] == [False] * len(queries) + [True] and steps[-1].reward == 1.0
        hops[item.source] += 1
    assert hops == {"1-hop": 250, "2-hop": 250}


def test_two_hop_questions_need_two_searches(env):
    library, leaks = env.library, 0
    for item in library.items[:N_TEST]:
        answer = item.golden_answers[0]
        assert contains_answer(library.corpus.contents(item.gold_passages[-1]), answer)
        if item.source == "1-hop":
            continue
        bridge, final = (library.corpus.contents(r) for r in item.gold_passages)
        assert not contains_answer(bridge, answer)  # the subject's passage names the bridge, not the answer
        assert final.split("\n")[0].strip('"') in bridge  # ... and the bridge entity is named there
        first_search = env.retriever.search(searches(item.expert)[0], 3)
        leaks += any(contains_answer(library.corpus.contents(r), answer) for r in first_search)
    assert leaks <= 2  # measured 0/250 (2/1500 over all items: a year or name another top-3 passage mentions)


def test_dense_retriever_plugs_in(env):
    """Any `search(query, k) -> rows` replaces BM25; here exact inner product over hashed bag-of-words vectors."""
    library = env.library

    def encode(text: str) -> np.ndarray:
        vector = np.zeros(512, dtype=np.float32)
        for word in normalize_answer(text).split():
            vector[sum(map(ord, word)) * 31 % 512] += 1
        return vector / max(np.linalg.norm(vector), 1e-9)

    texts = [library.corpus.contents(r) for r in range(2000)]  # vectors for the first 2,000 rows keep it quick
    dense = DenseRetriever(np.stack([encode(t) for t in texts]), encode)
    plugged = SearchQA(retriever=dense)
    assert plugged.library is library and plugged.retriever is dense
    assert len(dense.search("anything at all", 3)) == 3
    plugged.reset(0)
    step = plugged.step(f"<search>{texts[1234]}</search>")  # a passage is its own nearest neighbour
    title, text = texts[1234].split("\n", 1)
    assert step.observation.startswith(f"<information>Doc 1(Title: {title}) {text}\nDoc 2(Title: ")
    assert step.observation.count("Doc ") == 3


# ---------------------------------------------------------------- real Search-R1 / FlashRAG files

AGENTGYM_TEST = {"nq": 3610, "triviaqa": 11313, "popqa": 14267, "hotpotqa": 7405, "2wikimultihopqa": 12576,
                 "musique": 2417, "bamboogle": 125}
AGENTGYM_TRAIN = {"nq": 79168, "hotpotqa": 90447}


def write_wiki(path: Path) -> None:
    passages = [('"Ada Lovelace"', "Ada Lovelace was an English mathematician, born in London in 1815."),
                ('"Charles Babbage"', "Charles Babbage designed the Analytical Engine."),
                ('"London"', "London is the capital of England."),
                ('"Analytical Engine"', "The Analytical Engine was a proposed mechanical computer.")]
    with open(path, "w") as out:
        for i, (title, text) in enumerate(passages):
            out.write(json.dumps({"id": str(i), "contents": f"{title}\n{text}"}) + "\n")


def test_flashrag_files_keep_agentgym_item_ids(tmp_path, monkeypatch):
    """AgentGym's test.parquet / train.parquet layout (row counts and data_source per range, Search-R1 columns).
    Slow but essential (~3 s idle): 221,328 questions, the real row counts, so the real id boundaries are checked."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    monkeypatch.setenv("AGENTGYM_NB_OUTPUTS", str(tmp_path / "outputs"))  # the index cache of this corpus
    write_wiki(tmp_path / "wiki.jsonl")
    for split, sizes in (("test", AGENTGYM_TEST), ("train", AGENTGYM_TRAIN)):
        sources = [s for s, n in sizes.items() for _ in range(n)]
        questions = [f"{split} question {i} about ada lovelace?" for i in range(len(sources))]
        answers = [[f"{source} answer", "alias"] for source in sizes]
        pq.write_table(pa.table({
            "question": questions, "data_source": sources,
            "golden_answers": [answers[k] for k, n in enumerate(sizes.values()) for _ in range(n)],
            "reward_model": pa.array([None] * len(sources), pa.struct([("style", pa.string())]))}),
            tmp_path / f"{split}.parquet")
    env = SearchQA(corpus=tmp_path / "wiki.jsonl", test=tmp_path / "test.parquet", train=tmp_path / "train.parquet")
    assert len(env.library.items) == 221_328 and env.library.n_test == 51_713
    bounds = {0: "nq", 3609: "nq", 3610: "triviaqa", 14923: "popqa", 29190: "hotpotqa", 36595: "2wikimultihopqa",
              49171: "musique", 51588: "bamboogle", 51712: "bamboogle", 51713: "nq", 130880: "nq",
              130881: "hotpotqa", 221327: "hotpotqa"}
    assert {i: env.category(i) for i in bounds} == bounds
    assert env.library.items[51713].question == "train question 0 about ada lovelace?"
    with pytest.raises(ValueError, match=r"0\.\.51712 test questions, 51713\.\.221327 train"):
        env.reset(221_328)
    observation = env.reset(3610)
    assert observation.endswith("\n\n Question: test question 3610 about ada lovelace?")
    step = env.step("<think>Who is she?</think>\n<search>Ada Lovelace London</search>")
    assert step.observation == ('<information>Doc 1(Title: "Ada Lovelace") Ada Lovelace was an English '
                                'mathematician, born in London in 1815.\nDoc 2(Title: "London") London is the capital '
                                'of England.</information>')
    assert env.step("<answer>alias</answer>").reward == 1.0  # any golden answer counts
    env.reset(5)
    for reply in env.expert(5):
        step = env.step(reply)
    assert step.done and step.reward == 1.0


def test_raw_flashrag_jsonl_and_search_r1_columns(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTGYM_NB_OUTPUTS", str(tmp_path / "outputs"))
    write_wiki(tmp_path / "wiki.jsonl")
    (tmp_path / "nq").mkdir()
    with open(tmp_path / "nq" / "test.jsonl", "w") as out:  # FlashRAG's own rows: no data_source, no "?"
        out.write(json.dumps({"id": "test_0", "question": "  who designed the analytical engine ",
                              "golden_answers": ["Charles Babbage"], "metadata": {}}) + "\n")
    with open(tmp_path / "r1.jsonl", "w") as out:  # Search-R1 rows: answers only under reward_model
        out.write(json.dumps({"question": "where was ada born?", "data_source": "custom",
                              "reward_model": {"ground_truth": {"target": ["London"]}}}) + "\n")
    env = SearchQA(corpus=str(tmp_path / "wiki.jsonl"), test=[str(tmp_path / "nq" / "test.jsonl")],
                   train=str(tmp_path / "r1.jsonl"))
    assert env.reset(0).endswith(" Question: who designed the analytical engine?")
    assert (env.category(0), env.category(1)) == ("nq", "custom")
    assert env.step("<answer>charles  babbage.</answer>").reward == 1.0
    env.reset(1)
    assert env.step("<answer>the London</answer>").done
    (tmp_path / "bad.jsonl").write_text(json.dumps({"query": "x", "answers": ["y"]}) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl row 0: needs 'question' and 'golden_answers'"):
        SearchQA(corpus=str(tmp_path / "wiki.jsonl"), test=str(tmp_path / "bad.jsonl"))
    with pytest.raises(ValueError, match="file not found"):
        SearchQA(corpus=str(tmp_path / "missing.jsonl"), test=str(tmp_path / "r1.jsonl"))


# ---------------------------------------------------------------- HTTP

@pytest.fixture(scope="module")
def server(env):
    app = make_app("searchqa")
    with loopback_server(app) as url:
        yield url, app.state.pool


class AgentGymSearchQAClient:
    """What agentenv/envs/searchqa.py's SearchQAEnvClient does, request for request."""

    def __init__(self, env_server_base: str, timeout: int = 300):
        self.base, self.timeout = env_server_base, timeout
        ok = requests.post(f"{self.base}/create", json={"id": 0}, timeout=timeout)
        if ok.status_code != 200:
            raise requests.RequestException(f"Failed to create environment: {ok}")
        self.env_id = ok.json()

    def _post(self, path, data):
        data["env_idx"] = self.env_id
        res = requests.post(f"{self.base}/{path}", json=data, timeout=self.timeout)
        assert res.status_code == 200
        return res.json()

    def _get(self, path):
        res = requests.get(f"{self.base}/{path}?env_idx={self.env_id}", timeout=self.timeout)
        assert res.status_code == 200
        return res.json()

    def observe(self):
        return self._get("observation")

    def step(self, action):
        response = self._post("step", {"action": action})
        return response["observation"], response["reward"], response["done"]

    def reset(self, idx):
        return self._post("reset", {"id": idx})

    def close(self):
        return self._post("close", {})


def test_agentgym_client_works_against_our_server(server, env):
    url, pool = server
    assert requests.get(url + "/", timeout=30).json() == "ok"
    client = AgentGymSearchQAClient(url)
    assert isinstance(client.env_id, int) and client.env_id in pool.slots
    for item in (0, 1, 3, N_TEST + 1):
        question = client.reset(item)
        assert question == env.reset(item) == client.observe()
        for reply in ["<think>hmm</think> no tags"] + env.expert(item):
            expected = env.step(reply)
            assert client.step(reply) == (expected.observation, expected.reward, expected.done)
        assert expected.done and expected.reward == 1.0
    raw = requests.post(f"{url}/step", json={"env_idx": client.env_id, "action": "<answer>x</answer>"}, timeout=30)
    # stepping after done is answered, as AgentGym's server does
    assert raw.json() == {"observation": INCORRECT, "reward": 0.0, "done": False, "info": None}
    assert client.close() is True and client.env_id not in pool.slots


def test_create_resets_to_the_item(server, env):
    url, _ = server
    env_idx = requests.post(f"{url}/create", json={"id": 7}, timeout=30).json()
    observation = requests.get(f"{url}/observation", params={"env_idx": env_idx}, timeout=30).json()
    assert observation == env.reset(7)
    assert requests.post(f"{url}/close", json={"env_idx": env_idx}, timeout=30).json() is True


def test_server_errors_are_clear_and_it_keeps_serving(server):
    url, pool = server

    def call(method, path, **kw):
        answer = requests.request(method, f"{url}/{path}", timeout=60, **kw)
        return answer.status_code, answer.json()

    env_idx = requests.post(f"{url}/create", json={"id": 0}, timeout=30).json()
    status, body = call("POST", "step", json={"env_idx": 10**6, "action": "<search>x</search>"})
    assert status == 404 and "env_idx 1000000 does not exist" in body["error"] and "POST /create" in body["error"]
    assert call("GET", "observation", params={"env_idx": 10**6})[0] == 404
    assert call("POST", "reset", json={"env_idx": 10**6, "id": 0})[0] == 404
    for path, payload in (("create", {"id": N_ITEMS}), ("reset", {"env_idx": env_idx, "id": N_ITEMS}),
                          ("reset", {"env_idx": env_idx, "id": -3})):
        status, body = call("POST", path, json=payload)
        assert status == 422 and "item ids are 0..2999 (0..499 test, 500..2999 train)" in body["error"], body
    status, body = call("POST", "create", json={"id": None})
    assert status == 422 and "field 'id'" in body["error"] and "None" in body["error"]
    assert 'Expected {"id": <item id>}' in body["error"]
    status, body = call("POST", "reset", json={"env_idx": env_idx, "id": None})
    assert status == 422 and "field 'id'" in body["error"]
    status, body = call("POST", "reset", json={"env_idx": env_idx})
    assert status == 422 and "field 'id' is missing" in body["error"]
    status, body = call("POST", "step", data=b'{"env_idx": 0, "action": ', headers={"content-type": "application/json"})
    assert status == 422 and "not valid JSON" in body["error"]
    assert '"action": "<the whole model reply>"' in body["error"]
    status, body = call("POST", "step", json={"env_idx": env_idx, "action": "<search>" + "x" * 2**20 + "</search>"})
    assert status == 413 and f"at most {MAX_ACTION_CHARS:,} are accepted" in body["error"]
    status, body = call("GET", "observation", params={"env_idx": "abc"})
    assert status == 422 and "env_idx" in body["error"]
    assert len(pool.slots) == 1  # failed creates left nothing behind
    assert call("POST", "close", json={"env_idx": env_idx}) == (200, True)
    assert call("POST", "close", json={"env_idx": env_idx}) == (200, False)  # closing twice
    assert call("POST", "step", json={"env_idx": env_idx, "action": "<search>x</search>"})[0] == 404
    assert call("GET", "") == (200, "ok")  # still serving
    fresh = requests.post(f"{url}/create", json={"id": 2}, timeout=30).json()
    status, body = call("POST", "step", json={"env_idx": fresh, "action": "<search>x</search>"})
    assert status == 200 and body["done"] is False
    call("POST", "close", json={"env_idx": fresh})


def test_our_client_against_our_server(server, env):
    url, pool = server
    remote = connect("searchqa", url)
    assert remote.instruction == env.instruction
    with pytest.raises(EnvStateError, match="before reset"):
        remote.step("<search>x</search>")
    assert remote.reset(4) == env.reset(4) == remote.observe()
    for reply in ["no tags here"] + env.expert(4):
        ours, theirs = remote.step(reply), env.step(reply)
        assert (ours.observation, ours.reward, ours.done, ours.info) == (
            theirs.observation, theirs.reward, theirs.done, theirs.info)
    assert ours.done and remote.success(ours.reward)
    with pytest.raises(EnvStateError, match="done"):
        remote.step("<answer>x</answer>")
    assert remote.expert(4) == env.expert(4)
    remote.close()
    remote.close()  # closing twice is fine
    assert remote.env_id not in pool.slots
    with pytest.raises(EnvError, match="HTTP 404"):
        connect("searchqa", url + "/nowhere")
    lost = connect("searchqa", url)
    lost.reset(0)
    pool.close(lost.env_id)
    with pytest.raises(EnvError, match="HTTP 404.*does not exist"):
        lost.step("<search>x</search>")


def test_concurrent_episodes_do_not_mix_and_cycles_leave_nothing(server, env):
    url, pool = server
    items = list(range(N_TEST, N_TEST + 24))
    expected = {}
    for item in items:
        env.reset(item)
        expected[item] = [env.observe()] + [env.step(r).observation for r in env.expert(item)]
    start = threading.Barrier(len(items))

    def episode(item):
        session = requests.Session()
        env_idx = session.post(f"{url}/create", json={"id": 0}, timeout=60).json()
        start.wait()
        seen = [session.post(f"{url}/reset", json={"env_idx": env_idx, "id": item}, timeout=60).json()]
        for reply in env.expert(item):
            seen.append(session.post(f"{url}/step", json={"env_idx": env_idx, "action": reply}, timeout=60)
                        .json()["observation"])
        assert session.post(f"{url}/close", json={"env_idx": env_idx}, timeout=60).json() is True
        return seen

    with ThreadPoolExecutor(len(items)) as threads:
        assert list(threads.map(episode, items)) == [expected[item] for item in items]
    session = requests.Session()
    for cycle in range(100):  # bench/env_searchqa.py runs 10,000 of these and reports the server's memory
        env_idx = session.post(f"{url}/create", json={"id": 0}, timeout=30).json()
        session.post(f"{url}/reset", json={"env_idx": env_idx, "id": cycle}, timeout=30)
        session.post(f"{url}/step", json={"env_idx": env_idx, "action": "<search>city</search>"}, timeout=30)
        assert session.post(f"{url}/close", json={"env_idx": env_idx}, timeout=30).json() is True
    assert not pool.slots


def test_cli_serves_searchqa(env):
    process, url = start_server("searchqa")
    try:
        assert requests.get(url, timeout=10).json() == "ok"
        remote = connect("searchqa", url)
        remote.reset(1)
        for reply in env.expert(1):
            step = remote.step(reply)
        assert step.done and step.reward == 1.0
        remote.close()
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_retrieval_uses_numpy_whatever_jax_is_installed(tmp_path):
    """bm25s imports jax when it can and runs it at import; a jax whose CUDA plugin cannot start (as one preinstalled
    on a GPU machine did) kills the process. A stand-in jax that ends any process importing it: bm25s imported as
    is dies with it, the env's retrieval does not."""
    fake = tmp_path / "site" / "jax"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("import os\nos._exit(3)\n")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path / 'site'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    plain = subprocess.run([sys.executable, "-c", "import bm25s"], env=env, capture_output=True, timeout=120)
    assert plain.returncode == 3, "the stand-in jax must kill a plain import of bm25s, or this test checks nothing"
    code = ("from agentgym_nb.envs.searchqa import BM25\n"
            "index = BM25.build(['the cat sat on the mat', 'dogs bark at night', 'a cat and a dog'])\n"
            "print(index.search('cat', 2))\n")
    ours = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert ours.returncode == 0, ours.stderr[-2000:]
    assert ours.stdout.strip() in ("[0, 2]", "[2, 0]")
