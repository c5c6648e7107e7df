"""SearchQA with AgentGym's interface (agentenv-searchqa): answer a question by searching a passage corpus.

The agent's whole reply is the action. The first `<search>q</search>` or `<answer>a</answer>` in it decides:
  - search -> the top-3 passages for q: `<information>Doc 1(Title: <title>) <text>\\nDoc 2(...) ...</information>`
    (title = first line of the passage's `contents`, text = the rest), reward 0;
  - answer -> the last `<answer>` of the reply, SQuAD-normalised, equals a golden answer: reward 1 and done; else
    "Sorry, your answer is incorrect. Please try again.", reward 0, not done (the agent may retry);
  - neither -> AgentGym's invalid-action message.
Retrieval: BM25 (`bm25s`, stemmed English, stopwords removed) by default; anything with `search(query, k) -> rows`
plugs in instead (`DenseRetriever` for embeddings). A query matching no passage returns `<information></information>`
(AgentGym's BM25 path would; its dense default always returns 3).

Data. Default: the fictional knowledge base of `searchqa_corpus` (21,120 passages; 500 test + 2,500 train questions,
half 1-hop, half 2-hop), built on first use under outputs/data/searchqa/. The real Search-R1 setting:
    SearchQA(corpus="wiki-18.jsonl", test="test.parquet", train="train.parquet")
with a wiki-18 style jsonl corpus (`{"id", "contents": "\\"Title\\"\\ntext"}` per line) and question files
(parquet or jsonl with `question` and `golden_answers`, several files allowed, concatenated in order).
Item ids: the test questions first, then the train questions (`id - len(test)`). With AgentGym's test.parquet
(51,713 rows) and train.parquet (169,615 rows), or FlashRAG's own files in AgentGym's order, these are AgentGym's ids:
    0-3609 nq, 3610-14922 triviaqa, 14923-29189 popqa, 29190-36594 hotpotqa, 36595-49170 2wikimultihopqa,
    49171-51587 musique, 51588-51712 bamboogle (test/dev splits); 51713-130880 nq, 130881-221327 hotpotqa (train).
For the default, 0-499 are the test questions and 500-2999 the train questions. `category(item_id)` is the
question's `data_source` ("1-hop"/"2-hop" for the default, "nq", "hotpotqa", ... for FlashRAG files).

The BM25 index and the corpus' line offsets are built once per corpus file and cached under
outputs/data/searchqa/index/; searches read their passages from the file by offset, so a server never holds the
corpus text in memory.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

import numpy as np
import Stemmer
from fastapi.exceptions import RequestValidationError

from ..paths import default_outputs_dir
from . import searchqa_corpus
from .base import ActionTooLong, Env, EnvStateError, Episodes, Step, Track, check_action_length, check_item_id
from .wire import EnvIdxBody, EnvIdxStepBody, HTTPEnv, IdBody, UnknownEnv, answer, error_answer, on_env
from .searchqa_corpus import normalize_answer

# AgentGym's SearchQAEnvClient.conversation_start, verbatim
INSTRUCTION = (
    "You must always reason inside <think>...</think> first; if you lack knowledge, issue a <search>...</search> and "
    "then stop; do not generate <information> or <answer> yet; wait for external input between "
    "<information>...</information> before continuing; resume only when new <information> is given; do not skip "
    "steps or anticipate answers early."
)
ACKNOWLEDGEMENT = "Ok."
# AgentGym's SearchQAEnvServer.observation, verbatim (two newlines, then " Question: ")
PROMPT = (
    "You must reason inside <think>...</think> first. If you do not have enough knowledge, issue a "
    "<search>...</search> and then STOP. Do not generate <information> or <answer> yet. Wait for external input "
    "wrapped in <information>...</information>. After receiving information, reason again in <think>. If confident, "
    "output your final answer in <answer>...</answer>. Do not output <answer> before receiving <information> unless "
    "you are fully confident. If you find no further external knowledge needed, you can directly provide the answer "
    "inside <answer> and </answer>, without detailed illustrations. For example, <answer> Beijing </answer>. Follow "
    "this process every time.\n\n Question: {question}"
)
CORRECT = "Congratulations! You have answered the question correctly."
INCORRECT = "Sorry, your answer is incorrect. Please try again."
INVALID = ("Your previous action is invalid. If you want to search, you should put the query between <search> and "
           "</search>. If you want to give the final answer, you should put the answer between <answer> and </answer>. "
           "Please try again.")
ACTION = re.compile(r"<(search|answer)>(.*?)</\1>", re.DOTALL)
ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
TOP_K = 3  # AgentGym hard-codes num=3


# ---------------------------------------------------------------- corpus and retrieval

class Corpus:
    """A jsonl corpus read by line offset: row i = line i, a JSON object with "contents" ("\\"Title\\"\\ntext")."""

    def __init__(self, path: str | os.PathLike, offsets: np.ndarray):
        self.path, self.offsets = str(path), offsets  # offsets[i] = start of line i, offsets[-1] = file size
        self._fd = os.open(self.path, os.O_RDONLY)

    @staticmethod
    def scan(path: str | os.PathLike) -> np.ndarray:
        offsets, position = [0], 0
        with open(path, "rb") as lines:
            for line in lines:
                position += len(line)
                offsets.append(position)
        return np.asarray(offsets, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def contents(self, row: int) -> str:
        start, end = int(self.offsets[row]), int(self.offsets[row + 1])
        record = json.loads(os.pread(self._fd, end - start, start))
        return record["contents"]

    def all_contents(self):
        with open(self.path, "rb") as lines:
            for number, line in enumerate(lines):
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as error:
                    raise ValueError(f"{self.path} line {number + 1} is not a JSON object: {error}") from None
                if not isinstance(record, dict) or "contents" not in record:
                    raise ValueError(f"{self.path} line {number + 1} has no 'contents' field (wiki-18 format: "
                                     '{"id": ..., "contents": "\\"Title\\"\\ntext"}); it has ' + repr(record)[:200])
                yield record["contents"]


class Retriever(Protocol):
    def search(self, query: str, k: int) -> list[int]:
        """Corpus rows of the (at most) k best passages for `query`, best first."""


def _bm25s():
    """bm25s, with its numpy backend whatever else is installed. Imported on first use (it is heavy), with jax hidden:
    bm25s imports jax when it can and runs it at import, and a jax whose CUDA plugin cannot start (one preinstalled
    on a GPU machine, in an env server's subprocess) takes the process down with it."""
    if "bm25s" not in sys.modules:
        hidden = {name: sys.modules.get(name) for name in ("jax", "jax.lax")}
        sys.modules.update(dict.fromkeys(hidden))   # a None entry makes `import jax` raise ImportError
        try:
            import bm25s   # noqa: F401
        finally:
            for name, module in hidden.items():
                if module is None:
                    del sys.modules[name]
                else:
                    sys.modules[name] = module
    return sys.modules["bm25s"]


class BM25:
    """bm25s's Lucene BM25 (k1 1.5, b 0.75) over Snowball-stemmed English tokens, stopwords removed."""

    def __init__(self, model):
        self.model, self.stemmer = model, Stemmer.Stemmer("english")
        self._lock = threading.Lock()  # the stemmer is not thread-safe

    @classmethod
    def build(cls, texts: list[str]) -> "BM25":
        bm25s = _bm25s()
        model = bm25s.BM25()
        tokens = bm25s.tokenize(texts, stopwords="en", stemmer=Stemmer.Stemmer("english"), show_progress=False)
        model.index(tokens, show_progress=False)
        return cls(model)

    @classmethod
    def load(cls, directory: str | os.PathLike) -> "BM25":
        return cls(_bm25s().BM25.load(str(directory), mmap=True, show_progress=False))

    def save(self, directory: str | os.PathLike) -> None:
        self.model.save(str(directory), show_progress=False)

    def search(self, query: str, k: int) -> list[int]:
        with self._lock:
            tokens = _bm25s().tokenize([query], stopwords="en", stemmer=self.stemmer, return_ids=False,
                                    show_progress=False)
            scores = self.model.get_scores(tokens[0]) if tokens[0] else np.zeros(1, dtype=np.float32)
        # bm25s's own top-k (argpartition) is slow on mostly-zero scores; only matching passages can win
        matching = np.flatnonzero(scores > 0)
        return [int(r) for r in matching[np.argsort(-scores[matching], kind="stable")[:k]]]  # ties: lower row


class DenseRetriever:
    """Exact inner-product search: `embeddings[i]` is the vector of corpus row i, `encode(query)` the query's (for
    AgentGym's default: e5-base-v2, "query: " prefix, mean pooling, L2-normalised)."""

    def __init__(self, embeddings: np.ndarray, encode: Callable[[str], np.ndarray]):
        self.embeddings, self.encode = np.asarray(embeddings, dtype=np.float32), encode

    def search(self, query: str, k: int) -> list[int]:
        scores = self.embeddings @ np.asarray(self.encode(query), dtype=np.float32)
        top = np.argpartition(-scores, min(k, len(scores) - 1))[:k]
        return [int(i) for i in top[np.argsort(-scores[top], kind="stable")]]


def index_dir(corpus_path: str) -> Path:
    """Where the corpus' offsets and BM25 index are cached: keyed by its real path, size and modification time."""
    stat = os.stat(corpus_path)
    key = hashlib.sha1(f"{os.path.realpath(corpus_path)}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()
    return Path(default_outputs_dir()) / "data" / "searchqa" / "index" / f"{Path(corpus_path).stem}-{key[:12]}"


def load_indexed_corpus(corpus_path: str) -> tuple[Corpus, BM25]:
    """The corpus and its BM25 index, built on first use (into a temporary folder, then renamed)."""
    directory = index_dir(corpus_path)
    if not (directory / "offsets.npy").exists():
        offsets = Corpus.scan(corpus_path)
        corpus = Corpus(corpus_path, offsets)
        if len(corpus) == 0:
            raise ValueError(f"corpus {corpus_path} is empty")
        bm25 = BM25.build(list(corpus.all_contents()))
        directory.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=directory.name + ".", dir=directory.parent))
        try:
            bm25.save(tmp)
            np.save(tmp / "offsets.npy", offsets)
            try:
                os.rename(tmp, directory)
            except OSError:  # built concurrently by another process: theirs is identical
                pass
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return corpus, bm25
    return Corpus(corpus_path, np.load(directory / "offsets.npy")), BM25.load(directory)


def information(passages: list[str]) -> str:
    """AgentGym's `_passages2string`, stripped and wrapped: `Doc i(Title: <first line>) <rest>\\n` per passage."""
    docs = ""
    for i, contents in enumerate(passages, 1):
        title, _, text = contents.partition("\n")
        docs += f"Doc {i}(Title: {title}) {text}\n"
    return f"<information>{docs.strip()}</information>"


def deciding_tag(reply: str) -> str:
    """The first complete <search>...</search> or <answer>...</answer> of a reply ("" if none): the action."""
    match = ACTION.search(reply)
    return match.group(0) if match else ""


# ---------------------------------------------------------------- questions

@dataclass
class Item:
    question: str
    golden_answers: list[str]
    source: str
    expert: list[str] | None = None        # the default corpus stores its oracle's replies
    gold_passages: list[int] | None = None  # and the corpus row each of its searches must find


QUESTION_FIELDS = ("question", "golden_answers", "reward_model", "data_source", "expert", "gold_passages")


def read_questions(path: str | os.PathLike) -> list[Item]:
    """Questions from a parquet or jsonl file with `question` and `golden_answers` (or Search-R1's
    `reward_model.ground_truth.target`) and optionally `data_source`. Rows without `data_source` are raw FlashRAG
    rows: they get AgentGym's preprocessing (strip, append "?" if missing) and the file's dataset name as source
    (the folder name for FlashRAG's `<dataset>/<split>.jsonl`, else the file name)."""
    path = Path(path)
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq  # heavy: loaded only for parquet question files
        names = pq.read_schema(path).names
        if "golden_answers" in names:
            names = [n for n in names if n != "reward_model"]  # nested and slow to read; not needed then
        table = pq.read_table(path, columns=[c for c in QUESTION_FIELDS if c in names])
        columns = {name: table.column(name).to_pylist() for name in table.column_names}  # column-wise: fast
        n = table.num_rows
    else:
        with open(path) as lines:
            rows = [json.loads(line) for line in lines if line.strip()]
        columns = {name: [row.get(name) for row in rows] for name in QUESTION_FIELDS if any(name in r for r in rows)}
        n = len(rows)
    none = [None] * n
    questions, answers, sources = (columns.get(c, none) for c in ("question", "golden_answers", "data_source"))
    targets, experts, golds = (columns.get(c, none) for c in ("reward_model", "expert", "gold_passages"))
    stem_source = path.parent.name if path.stem in ("train", "dev", "test") else path.stem
    items = []
    for row in range(n):
        gold = answers[row]
        if gold is None and isinstance(targets[row], dict):
            gold = targets[row]["ground_truth"]["target"]
        if questions[row] is None or gold is None:
            raise ValueError(f"{path} row {row}: needs 'question' and 'golden_answers' (or "
                             f"'reward_model.ground_truth.target'); the file has {sorted(columns)}")
        question, source = questions[row], sources[row]
        if source is None:
            question, source = question.strip(), stem_source
            question += "" if question.endswith("?") else "?"
        items.append(Item(question, [gold] if isinstance(gold, str) else gold, source, experts[row], golds[row]))
    return items


@dataclass
class Library:
    """What every SearchQA env of a process shares: the corpus, its index and the questions (test first)."""
    corpus: Corpus
    bm25: BM25
    items: list[Item]
    n_test: int

    def item(self, item_id: int) -> Item:
        n = len(self.items)
        item_id = check_item_id(item_id, f"searchqa: 0 <= id < {n}")
        if item_id >= n:
            raise ValueError(f"searchqa item id {item_id} is out of range: valid ids are 0..{n - 1} "
                             f"(0..{self.n_test - 1} test questions, {self.n_test}..{n - 1} train questions)")
        return self.items[item_id]


_LIBRARIES: dict[tuple, Library] = {}
_LIBRARIES_LOCK = threading.Lock()


def _as_list(paths) -> list[str]:
    if paths is None:
        return []
    return [str(paths)] if isinstance(paths, (str, os.PathLike)) else [str(p) for p in paths]


def load_library(corpus=None, test=None, train=None) -> Library:
    """The shared Library of these files (the default knowledge base when all are None); loaded once per process."""
    if corpus is None and test is None and train is None:
        paths = searchqa_corpus.build()
        corpus, test, train = paths["corpus"], paths["test"], paths["train"]
    if corpus is None or (test is None and train is None):
        raise ValueError("searchqa: give corpus= (a wiki-18 style jsonl) and test= and/or train= (parquet/jsonl "
                         "question files), or none of them for the default fictional knowledge base")
    key = (str(corpus), tuple(_as_list(test)), tuple(_as_list(train)))
    with _LIBRARIES_LOCK:
        if key not in _LIBRARIES:
            for path in (key[0], *key[1], *key[2]):
                if not os.path.exists(path):
                    raise ValueError(f"searchqa: file not found: {path}")
            tests = [item for path in key[1] for item in read_questions(path)]
            trains = [item for path in key[2] for item in read_questions(path)]
            corpus_, bm25 = load_indexed_corpus(key[0])
            _LIBRARIES[key] = Library(corpus_, bm25, tests + trains, len(tests))
        return _LIBRARIES[key]


# ---------------------------------------------------------------- the env

def think(text: str, tag: str, content: str) -> str:
    return f"<think>{text}</think>\n<{tag}>{content}</{tag}>"


class SearchQA(Env):
    """One question at a time, with AgentGym's prompt, grammar, messages and exact-match reward."""

    name, title = "searchqa", "SearchQA"
    task_instruction = INSTRUCTION
    acknowledgement = ACKNOWLEDGEMENT
    tracks = {"all": Track("every question", None, Episodes(rounds=(3, 4, 5), max_tokens=80, max_total_tokens=2048),
                           # a clone must copy entity names: word-level tokens and more episodes than it can memorise
                           nano=dict(tokenizer="words", demos=2400, bc_max_steps=800, check_every=100))}
    smoke = Episodes(rounds=(1, 2), max_tokens=24, max_total_tokens=1024)

    def __init__(self, corpus: str | os.PathLike | None = None, test: str | os.PathLike | list | None = None,
                 train: str | os.PathLike | list | None = None, retriever: Retriever | None = None):
        self.library = load_library(corpus, test, train)
        self.retriever = retriever or self.library.bm25
        self.item: Item | None = None

    def reset(self, item_id: int) -> str:
        self.check_open()
        self.item = self.library.item(item_id)
        self.score, self.reward, self.phase = 0.0, 0.0, "running"
        return self.observe()

    def observe(self) -> str:
        """The question prompt (constant during the episode, as AgentGym's /observation)."""
        if self.item is None:
            raise EnvStateError("searchqa: observe() called before reset()")
        return PROMPT.format(question=self.item.question.strip())

    def parse_action(self, text: str) -> str:
        return text  # AgentGym's client posts the whole reply; the server reads the tags

    @staticmethod
    def is_valid_action(observation: str, action: str) -> bool:
        return bool(deciding_tag(action))

    def search(self, query: str) -> str:
        rows = self.retriever.search(query, TOP_K)
        return information([self.library.corpus.contents(r) for r in rows])

    def respond(self, action: str) -> tuple[str, float, bool, str]:
        """(observation, reward, done, the deciding tag) for a reply; changes nothing (AgentGym's `step`)."""
        check_action_length(self.name, action)
        match = ACTION.search(action)
        if match is None:
            return INVALID, 0.0, False, ""
        if match.group(1) == "search":
            return self.search(match.group(2).strip()), 0.0, False, match.group(0)
        answer = normalize_answer(ANSWER.findall(action)[-1].strip())
        if any(answer == normalize_answer(str(gold)) for gold in self.item.golden_answers):
            return CORRECT, 1.0, True, match.group(0)
        return INCORRECT, 0.0, False, match.group(0)

    def act(self, action: str) -> Step:
        self.check_running()
        observation, reward, done, tag = self.respond(action)
        self.reward = reward
        self.score += reward
        if done:
            self.phase = "over"
        return Step(observation, reward, done, {"score": self.score, "step_reward": reward, "action": tag,
                                                "valid": bool(tag)})

    def expert(self, item_id: int) -> list[str]:
        """The oracle: search the question's entity (then the bridge entity for 2-hop) and answer. For question
        files without stored replies: search the question itself, then give the first golden answer."""
        item = self.library.item(item_id)
        if item.expert:
            return list(item.expert)
        gold = item.golden_answers[0]
        return [think("I need to search for this.", "search", item.question),
                think(f"The answer is {gold}.", "answer", gold)]

    def category(self, item_id: int) -> str:
        return self.library.item(item_id).source

    def close(self) -> None:
        self.item = None
        super().close()


# ---------------------------------------------------------------- HTTP: AgentGym's SearchQA wire format

class SearchQAResetBody(EnvIdxBody):
    id: int  # the item. AgentGym: Optional, but a missing or null id fails there too (HTTP 500)


def searchqa_routes(app, pool, cls) -> None:
    """AgentGym's agentenv-searchqa endpoints (`env_idx` names the env, `id` the item):
        GET  /                           -> "ok"
        POST /create {"id": item}        -> env_idx (bare int); the env is reset to `item`
        POST /reset {"env_idx", "id"}    -> the question prompt (a JSON string)
        POST /step {"env_idx", "action"} -> {"observation", "reward", "done", "info": null}
        GET  /observation?env_idx=       -> the question prompt
        POST /close {"env_idx"}          -> true / false (unknown or already closed)
    Steps after done are answered as AgentGym does (the episode is not locked). Failures, which AgentGym answers
    with a bare HTTP 500, answer {"error": "<what was wrong and what is valid>"}: 404 unknown env_idx, 413 action too
    long, 422 malformed JSON, missing/null/mistyped fields or item ids out of range, 500 anything else.
    """
    probe = pool.factory()  # loads (or builds) the corpus and index now, not on the first request
    n, n_test = len(probe.library.items), probe.library.n_test
    item_range = f"item ids are 0..{n - 1} (0..{n_test - 1} test, {n_test}..{n - 1} train)"
    expected = {"/create": '{"id": <item id>}', "/reset": '{"env_idx": <int from /create>, "id": <item id>}',
                "/step": '{"env_idx": <int from /create>, "action": "<the whole model reply>"}',
                "/close": '{"env_idx": <int from /create>}', "/observation": "?env_idx=<int from /create>"}

    async def bad_request(request, exc: RequestValidationError):
        problems = []
        for e in exc.errors():
            field = ".".join(str(p) for p in e["loc"][1:])
            if e["type"] == "json_invalid":
                problems.append(f"the body is not valid JSON ({e.get('ctx', {}).get('error', 'decode error')})")
            elif e["type"] == "missing":
                problems.append(f"field {field!r} is missing")
            else:
                problems.append(f"field {field or 'body'!r}: {e['msg']}, got {repr(e.get('input'))[:80]}")
        path = request.url.path
        return error_answer(f"{request.method} {path}: {'; '.join(problems)}. Expected "
                            f"{expected.get(path, 'no body')}; {item_range}.", 422)

    app.add_exception_handler(RequestValidationError, bad_request)

    def failure(error: Exception) -> tuple[int, str]:
        if isinstance(error, UnknownEnv):
            return 404, (f"env_idx {error.env_id} does not exist (never created, or closed); POST /create "
                         '{"id": <item id>} returns a new one')
        if isinstance(error, ActionTooLong):
            return 413, str(error)
        if isinstance(error, ValueError):
            return 422, f"{error}; {item_range}" if "item" in str(error) else str(error)
        return 500, f"{error.__class__.__name__}: {error}"

    @app.get("/")
    def hello():
        return "ok"

    @app.post("/create")
    def create(body: IdBody):  # the item's id
        def handle():
            probe.library.item(body.id)  # validate before creating anything
            env_idx = pool.create()
            with pool.use(env_idx) as env:
                env.reset(body.id)
            return env_idx
        return answer(handle, failure)

    @app.post("/reset")
    def reset(body: SearchQAResetBody):
        return on_env(pool, body.env_idx, lambda env: env.reset(body.id), failure)

    @app.post("/step")
    def step(body: EnvIdxStepBody):
        def work(env):
            if env.phase == "over":  # AgentGym keeps answering after done, without changing the episode
                observation, reward, done, _ = env.respond(body.action)
            else:
                result = env.act(body.action)
                observation, reward, done = result.observation, result.reward, result.done
            return {"observation": observation, "reward": reward, "done": done, "info": None}
        return on_env(pool, body.env_idx, work, failure)

    @app.get("/observation")
    def observation(env_idx: int):
        return on_env(pool, env_idx, lambda env: env.observe(), failure)

    @app.post("/close")
    def close(body: EnvIdxBody):
        return pool.close(body.env_idx)


class SearchQAHTTPEnv(HTTPEnv):
    """Our client for SearchQA servers (ours or AgentGym's): `env_idx` in bodies and queries, the whole reply
    posted to /step, the step's own reward reported (as AgentGym's SearchQAEnvClient does)."""

    def _create(self) -> int:
        return self._call("POST", "create", {"id": 0})  # AgentGym's client creates with item 0, then resets

    def _reset(self, item_id: int) -> str:
        observation = self._call("POST", "reset", {"env_idx": self.env_id, "id": item_id})
        self.reward, self.score, self.phase = 0.0, 0.0, "running"
        return observation

    def act(self, action: str) -> Step:
        self.check_running()
        data = self._call("POST", "step", {"env_idx": self.env_id, "action": action})
        self.last_observation, self.reward = data["observation"], float(data["reward"])
        self.score += self.reward
        if data["done"]:
            self.phase = "over"
        tag = deciding_tag(action)
        info = {"score": self.score, "step_reward": self.reward, "action": tag, "valid": bool(tag)}
        return Step(self.last_observation, self.reward, bool(data["done"]), info)

    def observe(self) -> str:
        return self._call("GET", "observation", params={"env_idx": self.env_id})

    def _close(self) -> None:
        self._call("POST", "close", {"env_idx": self.env_id})


SearchQA.http_routes = staticmethod(searchqa_routes)
SearchQA.http_client = SearchQAHTTPEnv
