"""The runner under env failure: a server that dies mid-rollout and a server that never answers both end their
episodes as `failed` with the reason, in bounded time; nothing is turned into a silent zero reward."""
import concurrent.futures as cf
import copy
import socket
import threading
import time

import pytest

from agentgym_nb import envs
from agentgym_nb.envs.base import EnvError
from agentgym_nb.envs.http import start_server
from agentgym_nb.rollout.engine import Completion, SamplingParams
from agentgym_nb.rollout.runner import (RolloutStats, add_completion, anchor_of, fold_env_reply, reset_env,
                                        run_episodes, run_groups, step_env)
from agentgym_nb.rollout.trajectory import Trajectory


@pytest.fixture
def server_process():
    proc, url = start_server("babyai")
    yield proc, url
    proc.kill()
    proc.wait()


class KillAfterFirstCall:
    """A real engine; the env server is killed as soon as the first replies have been sampled."""

    def __init__(self, engine, proc):
        self.engine, self.proc = engine, proc

    def generate(self, prompts, params, seeds=None, *, sessions=None):
        out = self.engine.generate(prompts, params, seeds, sessions=sessions)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        return out

    def release(self, sessions):
        self.engine.release(sessions)


def test_a_server_that_dies_mid_rollout_fails_its_episodes(server_process, hf_nano, chat):
    proc, url = server_process
    engine = KillAfterFirstCall(hf_nano, proc)
    trajs = run_episodes(engine, lambda: envs.connect("babyai", url, timeout=5), [0, 1, 2], chat, n=2,
                         max_rounds=4, params=SamplingParams(max_tokens=24, seed=0), max_total_tokens=1500,
                         env_timeout=10)
    assert len(trajs) == 6
    for t in trajs:
        assert t.failed is not None and url in t.failed, t.failed
        assert t.num_rounds <= 1 and not t.done
    # the first batch is sampled as soon as env replies stop arriving: on a loaded machine a reset still in flight
    # misses it and fails at reset (0 rounds); the others fail at their first step, after the kill
    assert any(t.num_rounds == 1 for t in trajs)


def test_a_server_that_never_answers_times_out(hf_nano, chat):
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)                      # accepts connections, never replies
    url = f"http://127.0.0.1:{silent.getsockname()[1]}"
    held = []
    stop = threading.Event()

    def accept():
        silent.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(silent.accept()[0])
            except OSError:
                pass

    threading.Thread(target=accept, daemon=True).start()
    try:
        t0 = time.monotonic()
        trajs = run_episodes(hf_nano, lambda: envs.connect("babyai", url, timeout=60), [0, 1], chat, n=1,
                             max_rounds=2, params=SamplingParams(max_tokens=8, seed=0), max_total_tokens=1500,
                             env_timeout=2.0)
        elapsed = time.monotonic() - t0
    finally:
        stop.set()
        silent.close()
        for c in held:
            c.close()
    # bounded: the episodes ended before the client's own 60 s timeout could fire (nothing is sampled, so this is a
    # logical bound, not a speed target)
    assert elapsed < 60
    assert [t.failed for t in trajs] == ["env call timed out after 2s"] * 2
    assert all(t.num_policy_tokens == 0 for t in trajs)


class CappedBabyAI(envs.env_class("babyai")):
    """Real BabyAI, capped like SciWorld's JVMs: at most CAP live envs per process, creating one more fails at once,
    and close gives the slot back only after a while (a JVM's release is not instant)."""
    CAP, live, lock = 2, 0, threading.Lock()

    def __init__(self):
        with CappedBabyAI.lock:
            if CappedBabyAI.live >= CappedBabyAI.CAP:
                raise envs.EnvError(f"all {CappedBabyAI.CAP} slots are in use")
            CappedBabyAI.live += 1
        super().__init__()

    def close(self):
        time.sleep(0.2)
        with CappedBabyAI.lock:
            CappedBabyAI.live -= 1
        super().close()


def test_an_env_keeps_its_slot_until_it_is_closed(hf_nano, chat):
    """With max_concurrency = the cap, a new episode starts only once an ended one's env is closed: no episode fails
    for want of a slot (before, a create could overtake the close it waited for, as SciWorld's step 1 showed)."""
    trajs = run_episodes(hf_nano, CappedBabyAI, list(range(6)), chat, n=2, max_rounds=1, max_concurrency=2,
                         params=SamplingParams(max_tokens=8, seed=0), max_total_tokens=1500, env_timeout=30)
    assert len(trajs) == 12 and [t.failed for t in trajs] == [None] * 12
    assert CappedBabyAI.live == 0   # every env closed by the time run_episodes returns


def test_each_turn_records_the_state_it_acted_in(hf_nano, chat):
    """anchors[k - 1] is the env's state key before turn k (GiGPO's anchor states): one per turn taken, the group's
    episodes all start in their item's state, and BabyAI's key is the grid state, so it reappears whenever an
    episode returns to it."""
    from agentgym_nb.envs.babyai import BabyAI
    trajs = run_episodes(hf_nano, lambda: envs.make("babyai"), [0, 41], chat, n=3, max_rounds=3,
                         params=SamplingParams(temperature=1.0, max_tokens=24, seed=3), max_total_tokens=2048)
    for t in trajs:
        assert t.failed is None and len(t.anchors) == t.num_rounds >= 1
    for item in (0, 41):
        fresh = BabyAI()
        start = anchor_of(fresh.state_key(fresh.reset(item)))
        fresh.close()
        assert {t.anchors[0] for t in trajs if t.item_id == item} == {start}


def test_episodes_carry_the_group_ids_they_were_given(hf_nano, chat):
    """A process playing its share of a step's items numbers their groups as the step does (group_ids), so groups
    can be matched across processes without index arithmetic; the default is the item's position."""
    params = SamplingParams(max_tokens=8, seed=0)
    trajs = run_episodes(hf_nano, lambda: envs.make("babyai"), [3, 8], chat, n=2, max_rounds=1, params=params,
                         group_ids=[5, 9], max_total_tokens=1500)
    assert [(t.item_id, t.group) for t in trajs] == [(3, 5), (3, 5), (8, 9), (8, 9)]
    default = run_episodes(hf_nano, lambda: envs.make("babyai"), [3, 8], chat, n=2, max_rounds=1, params=params,
                           max_total_tokens=1500)
    assert [t.group for t in default] == [0, 0, 1, 1]
    assert [t.input_ids for t in default] == [t.input_ids for t in trajs]   # the numbering changes nothing else
    with pytest.raises(ValueError, match="got 1 group ids for 2 items"):
        run_episodes(hf_nano, lambda: envs.make("babyai"), [3, 8], chat, group_ids=[5])
    groups = run_groups(hf_nano, lambda: envs.make("babyai"), [3, 8], chat, n=2, max_rounds=1, params=params,
                        group_ids=[5, 9], max_total_tokens=1500)
    assert [(g.id, g.item_id, len(g.episodes)) for g in groups] == [(5, 3, 2), (9, 8, 2)]   # as played, by item
    assert [t.input_ids for g in groups for t in g.episodes] == [t.input_ids for t in trajs]
    assert all(t.group == g.id for g in groups for t in g.episodes)



# ------------------------------------------------------------------------- the steps of an episode, one by one
def _done(call) -> cf.Future:
    """The outcome of `call()` (its result or its exception) as a finished Future, as the runner's env pool gives."""
    fut = cf.Future()
    try:
        fut.set_result(call())
    except Exception as error:  # noqa: BLE001
        fut.set_exception(error)
    return fut


def test_add_completion_cuts_a_reply_to_the_room_the_budget_leaves(chat):
    """room = budget - len(input_ids) - 1; a reply that sampled its own end-of-turn may take one token more."""
    start = Trajectory.start(chat, [{"content": "go"}, {"content": "ok"}], "a room", item_id=0)
    budget = len(start.input_ids) + 5   # room 4
    word, eot = chat.encode("left")[0], chat.end_of_turn_id

    def add(ids):
        t = copy.deepcopy(start)
        return t, add_completion(t, Completion(ids, [-0.5] * len(ids), "stop"), chat, budget)

    t, text = add([word] * 4 + [eot])   # 5 tokens, closed: room + 1 fits, and no end-of-turn is added
    assert text is not None and not t.truncated and len(t.input_ids) == budget
    t, text = add([word] * 4)           # 4 tokens, open: room fits, with the template's end-of-turn
    assert text is not None and not t.truncated and len(t.input_ids) == budget
    for too_long in ([word] * 5 + [eot], [word] * 5):   # one token over: cut to the room's 4, not sent
        t, text = add(too_long)
        assert text is None and t.truncated and t.num_policy_tokens == 4
        assert len(t.input_ids) == budget and t.input_ids[-1] == eot and t.sampled_logprobs == [-0.5] * 4


def _reply(chat, text: str) -> Completion:
    return Completion(chat.encode(text) + [chat.end_of_turn_id], None, "stop")


def test_fold_env_reply_plays_the_expert_through_an_episode(chat):
    """reset_env, add_completion, step_env and fold_env_reply, called one by one as a lockstep schedule does,
    play the expert's episode to its success; each turn still to come has its state recorded."""
    env = envs.make("babyai")
    try:
        replies = env.expert(7)
        stats, kw = RolloutStats(), dict(max_rounds=len(replies), max_total_tokens=4096)
        t, more = fold_env_reply(Trajectory(item_id=7, group=3), env, _done(lambda: reset_env(env, 7)), chat,
                                 stats=stats, **kw)
        assert more and (t.item_id, t.group, t.num_rounds, len(t.anchors)) == (7, 3, 0, 1)
        assert t.anchors[0] == anchor_of(env.state_key(t.messages[-1]["content"]))
        for k, reply in enumerate(replies, 1):
            text = add_completion(t, _reply(chat, reply), chat, kw["max_total_tokens"])
            outcome = _done(lambda: step_env(env, text, k == len(replies)))
            t, more = fold_env_reply(t, env, outcome, chat, stats=stats, **kw)
            assert stats.env_steps == k and t.num_rounds == k and t.reward == outcome.result()[1].reward
            assert more == (k < len(replies)) and len(t.anchors) == k + more
        assert t.done and t.success and not t.truncated and t.failed is None
    finally:
        env.close()


def test_fold_env_reply_ends_an_episode_at_the_horizon_the_budget_or_an_env_error(chat):
    env = envs.make("babyai")
    try:
        first = reset_env(env, 7)
        t, more = fold_env_reply(Trajectory(item_id=7), env, _done(lambda: first), chat, max_rounds=1,
                                 max_total_tokens=4096)
        n = len(t.input_ids)
        for budget, goes_on in ((n, False), (n + 1, True)):   # a budget of the first prompt's length ends it
            again, more = fold_env_reply(Trajectory(item_id=7), env, _done(lambda: first), chat, max_rounds=1,
                                         max_total_tokens=budget)
            assert more == goes_on and again.truncated == (not goes_on)
        text = add_completion(t, _reply(chat, env.expert(7)[0]), chat, 4096)
        step = step_env(env, text, last_turn=True)
        assert step[2] is None   # no turn follows the last: no state to record
        ended, more = fold_env_reply(copy.deepcopy(t), env, _done(lambda: step), chat, max_rounds=1,
                                     max_total_tokens=4096)
        assert not more and not ended.done and not ended.truncated and ended.anchors == t.anchors
        cut, more = fold_env_reply(copy.deepcopy(t), env, _done(lambda: step), chat, max_rounds=5,
                                   max_total_tokens=len(t.input_ids) + 2)   # the observation does not fit
        assert not more and cut.truncated and len(cut.input_ids) == len(t.input_ids)
        for error, said in ((EnvError("http://x: server gone"), "http://x: server gone"),
                            (ValueError("not enough values to unpack"), "ValueError: not enough values to unpack")):
            raised = cf.Future()
            raised.set_exception(error)
            failed, more = fold_env_reply(copy.deepcopy(t), env, raised, chat, max_rounds=5, max_total_tokens=4096)
            assert not more and failed.failed == said and failed.num_rounds == t.num_rounds
    finally:
        env.close()


def test_seeds_mix_by_hand():
    from agentgym_nb.rollout.runner import turn_seed
    from agentgym_nb.seeds import mix_seed
    assert mix_seed(3, 5) == 3 * 1_000_003 + 5 == 3_000_014
    assert mix_seed(2, 7, stride=7_919) == 2 * 7_919 + 7 == 15_845
    assert turn_seed(1, 2, 3) == 1 + 2 * 1_000_003 + 3 * 7_919 == 2_023_764
    assert turn_seed(0, 3_000, 0) == 3_000_009_000 - 2**31 == 852_525_352   # kept below 2**31


# ------------------------------------------------------------------------- the scheduler's parts, one by one
class RecordingEngine:
    """Replies "go forward" to every prompt (in one generate call per batch) and records its calls."""

    def __init__(self, chat):
        self.reply = chat.encode("go forward") + [chat.end_of_turn_id]
        self.calls, self.released = [], []

    def generate(self, prompts, params, seeds=None, *, sessions=None):
        self.calls.append({"prompts": len(prompts), "seeds": seeds, "sessions": sessions})
        return [Completion(self.reply, [-0.5] * len(self.reply), "stop") for _ in prompts]

    def release(self, sessions):
        self.released.extend(sessions)


def scheduler(engine, chat, items, **kw):
    from agentgym_nb.rollout.runner import EpisodeScheduler
    options = dict(first_episode=10, max_rounds=2, params=SamplingParams(seed=3), max_total_tokens=4096,
                   max_concurrency=2, env_timeout=60.0, stats=RolloutStats())
    return EpisodeScheduler(engine, lambda: envs.make("babyai"), chat, [(j, item) for j, item in enumerate(items)],
                            **{**options, **kw})


def test_the_scheduler_starts_episodes_into_free_slots_only(chat):
    s = scheduler(RecordingEngine(chat), chat, [3, 8, 11])
    s.start()
    assert len(s.waiting) == 2 and [index for index, _ in s.todo] == [12]   # max_concurrency = 2
    s.fold(cf.wait(s.waiting)[0])
    assert sorted(ep.index for ep in s.ready) == [10, 11] and not s.waiting   # reset: ready for a first reply
    s.start()
    assert len(s.waiting) == 0 and len(s.todo) == 1   # both slots still held by ready episodes


def test_the_scheduler_generates_once_for_every_ready_episode_in_its_session(chat):
    from agentgym_nb.rollout.runner import turn_seed
    engine = RecordingEngine(chat)
    s = scheduler(engine, chat, [3, 8])
    s.start()
    s.fold(cf.wait(s.waiting)[0])
    s.generate()
    indices = sorted(ep.index for ep, _ in s.waiting.values())
    assert indices == [10, 11] and not s.ready   # each reply went to its env
    (call,) = engine.calls
    assert call["prompts"] == 2 and sorted(call["sessions"]) == [10, 11]
    assert sorted(call["seeds"]) == sorted(turn_seed(3, i, 0) for i in (10, 11))


def test_the_scheduler_fails_an_env_call_past_its_deadline_and_releases_its_session(chat):
    engine = RecordingEngine(chat)
    s = scheduler(engine, chat, [3], env_timeout=0.0)
    s.start()
    time.sleep(0.01)
    s.time_out()
    (traj,) = s.finished
    assert traj.failed.startswith("env call timed out") and traj.episode == 10 and engine.released == [10]


def test_the_scheduler_plays_every_episode_to_its_end(chat):
    engine = RecordingEngine(chat)
    finished = scheduler(engine, chat, [3, 8, 11], max_concurrency=8).run()
    assert sorted(t.episode for t in finished) == [10, 11, 12]
    assert all(t.num_rounds == 2 and not t.failed for t in finished)   # max_rounds = 2 replies each
    assert sorted(set(engine.released)) == [10, 11, 12]
