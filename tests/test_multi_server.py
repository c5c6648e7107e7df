"""Envs spread over several server processes: `serve <env> --workers 2` starts two processes on consecutive ports,
`envs.connect(name, [url0, url1])` creates new envs on them in turn, episodes played through them match in-process
episodes, every env a rollout created is closed on its server when run_episodes returns, and stopping the parent
stops both workers."""
import subprocess
import sys
import time

import psutil
import pytest
import requests

from agentgym_nb.envs.http import free_ports
from agentgym_nb import envs
from agentgym_nb.rollout.engine import SamplingParams
from agentgym_nb.rollout.runner import run_episodes

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]


def answering(url: str) -> bool:
    try:
        return requests.get(url, timeout=2).status_code == 200
    except requests.ConnectionError:
        return False


def start_two_servers() -> tuple[subprocess.Popen, list[str]]:
    port = free_ports(2)
    proc = subprocess.Popen([sys.executable, "-m", "agentgym_nb.envs", "serve", "babyai", "--port", str(port),
                             "--workers", "2"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    urls = [f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port + 1}"]
    deadline = time.monotonic() + 120
    while not all(map(answering, urls)):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.terminate()   # not kill: the parent stops its workers on SIGTERM
            proc.wait(timeout=30)
            raise AssertionError(f"serve --workers 2 did not answer on {urls} (exit code {proc.poll()})")
        time.sleep(0.2)
    return proc, urls


@pytest.fixture(scope="module")
def two_servers():
    proc, urls = start_two_servers()
    yield proc, urls
    proc.terminate()
    proc.wait(timeout=30)


def test_workers_are_separate_processes_on_consecutive_ports(two_servers):
    proc, urls = two_servers
    children = psutil.Process(proc.pid).children()
    assert len(children) == 2
    ports = {c.laddr.port for child in children for c in child.net_connections(kind="tcp")
             if c.status == psutil.CONN_LISTEN}
    assert ports == {int(u.rsplit(":", 1)[1]) for u in urls}


def test_connect_spreads_new_envs_round_robin_and_they_play_like_local_envs(two_servers):
    _, urls = two_servers
    remote = [envs.connect("babyai", urls, timeout=30) for _ in range(4)]
    local = envs.make("babyai")
    try:
        placed = [env.url for env in remote]
        assert all(a != b for a, b in zip(placed, placed[1:])), placed   # alternating
        assert sorted(placed) == sorted(urls * 2)
        # each process numbers its own envs: the two envs on one server have different ids there
        for url in urls:
            ids = [env.env_id for env in remote if env.url == url]
            assert len(set(ids)) == 2
        for item, env in zip([0, 41, 82, 3], remote):
            first = env.reset(item)
            assert first == local.reset(item)
            for reply in local.expert(item):
                got, want = env.step(reply), local.step(reply)
                assert (got.observation, got.done) == (want.observation, want.done)
            assert env.success(got.reward) and got.done
    finally:
        local.close()
        for env in remote:
            env.close()


def test_a_rollout_over_two_servers_uses_both_and_closes_every_env(two_servers, hf_nano, chat):
    _, urls = two_servers
    created = []

    def factory():
        env = envs.connect("babyai", urls, timeout=30)
        created.append(env)
        return env

    trajs = run_episodes(hf_nano, factory, [0, 1, 2], chat, n=2, max_rounds=2,
                         params=SamplingParams(max_tokens=24, seed=0), max_total_tokens=1500, env_timeout=60)
    assert len(trajs) == 6 and not [t.failed for t in trajs if t.failed]
    assert all(t.num_rounds >= 1 for t in trajs)
    assert {env.url for env in created} == set(urls)
    for env in created:   # closed on its server: the id is gone there
        answer = requests.get(f"{env.url}/observation", params={"id": env.env_id}, timeout=10).json()
        assert answer == {"error": f"The id {env.env_id} is not valid."}


def test_connect_rejects_an_empty_url_list():
    with pytest.raises(ValueError, match="non-empty list"):
        envs.connect("babyai", [])


def test_stopping_the_parent_stops_both_workers():
    proc, urls = start_two_servers()
    children = psutil.Process(proc.pid).children()
    assert len(children) == 2
    proc.terminate()
    assert proc.wait(timeout=30) == 0
    _, alive = psutil.wait_procs(children, timeout=30)
    assert not alive
    assert not any(map(answering, urls))
