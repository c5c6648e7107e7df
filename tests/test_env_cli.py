"""The env CLI: `python -m agentgym_nb.envs serve <env> --set key=value` passes constructor options to the env, here
SearchQA's Search-R1 / FlashRAG files, through one or several real server processes; bad keys are clear errors.
`start_server` starts one such process on a free port and survives the port being taken before the server binds it."""
import json
import os
import socket
import subprocess
import sys
import time

import pytest
import requests

from agentgym_nb.envs import EnvError, http

from agentgym_nb.envs.__main__ import constructor_options, main
from agentgym_nb.envs.http import free_ports, start_server
from harness import needs

pytestmark = pytest.mark.timeout(120)

PASSAGES = [('"Ada Lovelace"', "Ada Lovelace was an English mathematician, born in London in 1815."),
            ('"Charles Babbage"', "Charles Babbage designed the Analytical Engine."),
            ('"London"', "London is the capital of England.")]


def write_search_r1_files(folder) -> dict:
    """A wiki-18 style corpus and a FlashRAG question file (raw rows: no data_source, no "?")."""
    with open(folder / "wiki.jsonl", "w") as out:
        for i, (title, text) in enumerate(PASSAGES):
            out.write(json.dumps({"id": str(i), "contents": f"{title}\n{text}"}) + "\n")
    (folder / "nq").mkdir()
    with open(folder / "nq" / "test.jsonl", "w") as out:
        out.write(json.dumps({"id": "test_0", "question": "who designed the analytical engine",
                              "golden_answers": ["Charles Babbage"]}) + "\n")
        out.write(json.dumps({"id": "test_1", "question": "where was ada lovelace born?",
                              "golden_answers": ["London"]}) + "\n")
    return {"corpus": str(folder / "wiki.jsonl"), "test": [str(folder / "nq" / "test.jsonl")]}


def wait_until_serving(url: str, process: subprocess.Popen) -> None:
    for _ in range(600):
        try:
            if requests.get(url, timeout=1).status_code == 200:
                return
        except requests.ConnectionError:
            pass
        assert process.poll() is None, process.stderr.read().decode()
        time.sleep(0.1)
    raise AssertionError(f"{url} did not answer within a minute")


def test_set_passes_search_r1_files_to_every_server_process(tmp_path):
    """`--workers 2` with `--set`: both processes (serve_workers forwards the options) serve our files."""
    files = write_search_r1_files(tmp_path)
    port = free_ports(2)
    command = [sys.executable, "-m", "agentgym_nb.envs", "serve", "searchqa", "--port", str(port), "--workers", "2",
               "--set", f"corpus={files['corpus']}", "--set", f"test={json.dumps(files['test'])}"]
    env = {**os.environ, "AGENTGYM_NB_OUTPUTS": str(tmp_path / "outputs")}   # this corpus' index cache
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        for url in (f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port + 1}"):
            wait_until_serving(url, process)
            env_idx = requests.post(f"{url}/create", json={"id": 1}, timeout=30).json()
            question = requests.post(f"{url}/reset", json={"env_idx": env_idx, "id": 1}, timeout=30).json()
            assert question.endswith("\n\n Question: where was ada lovelace born?")
            step = requests.post(f"{url}/step", json={"env_idx": env_idx, "action": "<search>Ada Lovelace</search>"},
                                 timeout=30).json()
            assert step["observation"].startswith('<information>Doc 1(Title: "Ada Lovelace") Ada Lovelace was an '
                                                  "English mathematician, born in London in 1815.")
            assert step["observation"].count("Doc ") == 1 and (step["reward"], step["done"]) == (0.0, False)
            step = requests.post(f"{url}/step", json={"env_idx": env_idx, "action": "<answer>london</answer>"},
                                 timeout=30).json()
            assert (step["reward"], step["done"]) == (1.0, True)
            too_far = requests.post(f"{url}/create", json={"id": 2}, timeout=30)   # our file has 2 questions
            assert too_far.status_code == 422 and "valid ids are 0..1" in too_far.json()["error"]
            assert requests.post(f"{url}/close", json={"env_idx": env_idx}, timeout=30).json() is True
        assert list((tmp_path / "outputs" / "data" / "searchqa" / "index").glob("wiki-*/offsets.npy"))
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert process.returncode == 0, process.stderr.read().decode()[-2000:]


def test_unknown_option_is_a_clear_cli_error():
    result = subprocess.run([sys.executable, "-m", "agentgym_nb.envs", "serve", "searchqa", "--set", "corpse=x.jsonl"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stdout == ""
    assert ("--set corpse: searchqa has no option 'corpse'; its options are: corpus, test, train, retriever"
            in result.stderr)


@needs(envs=("webarena",))
def test_options_are_json_or_text_and_checked_against_the_constructor(capsys):
    assert constructor_options("webarena", ["config_dir=/data/config_files", "page_load_timeout=60"]) == {
        "config_dir": "/data/config_files", "page_load_timeout": 60}
    assert constructor_options("searchqa", ['test=["a.jsonl", "b.parquet"]', "train=null", "corpus=w=1.jsonl"]) == {
        "test": ["a.jsonl", "b.parquet"], "train": None, "corpus": "w=1.jsonl"}
    assert constructor_options("babyai", []) == {}
    with pytest.raises(ValueError, match=r"babyai has no option 'seed'; it takes no options"):
        constructor_options("babyai", ["seed=1"])
    with pytest.raises(ValueError, match=r"webarena has no option 'url'; its options are: config_dir, judge, "
                                         r"page_load_timeout"):
        constructor_options("webarena", ["url=http://x"])
    with pytest.raises(ValueError, match=r"--set 'corpus': expected key=value"):
        constructor_options("searchqa", ["corpus"])
    with pytest.raises(SystemExit) as exit_:   # argparse's usage error, before anything is started
        main(["serve", "textcraft", "--set", "=1"])
    assert exit_.value.code == 2 and "--set '=1': expected key=value" in capsys.readouterr().err


def test_start_server_answers_on_a_free_port_and_retries_a_port_taken_before_it_binds(monkeypatch):
    """The race the OS allows: free_ports finds a port free, then another process takes it before the server binds.
    Here a listening socket holds the first port handed out; start_server starts again on the next one."""
    real_free_ports = http.free_ports
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        handed_out = []

        def free_ports(**kw):   # the taken port first, then the OS's
            handed_out.append(taken if not handed_out else real_free_ports(**kw))
            return handed_out[-1]

        monkeypatch.setattr(http, "free_ports", free_ports)
        process, url = start_server("babyai")
        try:
            assert handed_out[0] == taken and len(handed_out) == 2 and url == f"http://127.0.0.1:{handed_out[1]}"
            assert requests.get(url + "/", timeout=10).json() == "This is environment BabyAI."
            env_id = requests.post(f"{url}/create", timeout=30).json()["id"]
            reset = requests.post(f"{url}/reset", json={"id": env_id, "data_idx": 0}, timeout=30).json()
            assert reset["done"] is False and "Your goal:" in reset["observation"]
        finally:
            process.terminate()
            process.wait(timeout=30)


def test_start_server_on_a_taken_port_the_user_chose_is_a_clear_error():
    """A port the caller chose is not silently replaced: the error says the address is in use."""
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        with pytest.raises(EnvError, match=rf"the babyai server at http://127.0.0.1:{taken} exited with code \d+: "
                                           rf"(.|\n)*address already in use"):
            start_server("babyai", port=taken)


def test_start_server_reports_a_server_that_cannot_start_with_its_stderr():
    with pytest.raises(EnvError, match=r"the searchqa server at http://127.0.0.1:\d+ exited with code 2: "
                                       r"(.|\n)*--set corpse: searchqa has no option 'corpse'"):
        start_server("searchqa", corpse="x.jsonl")
