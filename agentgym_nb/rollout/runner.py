"""Acting: many episodes at once, one engine, envs stepped in a thread pool.

No lockstep rounds. The main thread generates for every episode whose env has replied, while the other episodes'
env calls are still running in threads; an episode that ends frees its slot at once and the next one starts. Every
env call has a timeout; an env that fails marks its episode `failed` (reported, excluded from the update), never a
silent zero reward.

Batching: a generate call costs nearly as much for one prompt as for many (CPU and GPU alike), so after the first env
reply the runner gathers more before generating: it keeps waiting for the next reply until LINGER times the duration
of the previous generate call has passed, and after that for as long as replies keep arriving less than GAP seconds
apart. Replies that come milliseconds apart share one call; a slow env holds the others back by at most that much
(bench/rollout_lockstep.py measures it: mode `ours-nolinger`).
"""
from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import hashlib
import json
import os
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable

import torch

from ..envs.base import Env, EnvError, Step
from ..seeds import mix_seed
from .engine import Completion, Engine, SamplingParams
from .trajectory import ChatFormat, Trajectory, TrajectoryGroup

LINGER = 0.5   # wait for more env replies up to this share of the previous generate call's duration, ...
GAP = 0.01     # ... and beyond it while replies keep arriving at most this many seconds apart


@dataclass
class RolloutStats:
    episodes: int = 0
    policy_tokens: int = 0
    env_steps: int = 0
    seconds: float = 0.0
    generate_seconds: float = 0.0
    prompt_tokens: int = 0       # tokens of the prompts sent to the engine, ...
    cached_tokens: int = 0       # ... of which the engine read this many from their episodes' caches (HFEngine)
    cache_fallbacks: int = 0     # later turns the engine prefilled whole: the prompt did not extend the episode's
                                 # last prompt and reply (a re-encoded turn), or the weights had changed

    @property
    def tokens_per_s(self) -> float:
        return self.policy_tokens / max(self.seconds, 1e-9)

    @property
    def env_steps_per_s(self) -> float:
        return self.env_steps / max(self.seconds, 1e-9)


@dataclass
class _Episode:
    traj: Trajectory
    index: int  # position in the run's episode order: with the turn number it fixes the episode's random draws
    env: Env | None = None


def turn_seed(seed: int, episode: int, turn: int) -> int:
    """The sampling seed of one reply, seed + 1_000_003 * episode + 7_919 * turn (mod 2**31): a function of (run
    seed, episode, turn) only, so an episode samples the same replies whichever other episodes share its generate
    call (evaluations reproduce and resume exactly)."""
    return (mix_seed(episode, seed) + 7_919 * turn) % 2**31


def run_episodes(engine: Engine, env_factory: Callable[[], Env], item_ids: list[int], chat: ChatFormat, *,
                 n: int = 1, max_rounds: int = 10, params: SamplingParams | None = None,
                 max_total_tokens: int = 4096, max_concurrency: int = 64, env_timeout: float = 60.0,
                 threads: int | None = None, stats: RolloutStats | None = None,
                 first_episode: int = 0, group_ids: list[int] | None = None,
                 on_episode: Callable[[Trajectory], None] | None = None) -> list[Trajectory]:
    """Play `n` episodes of every item (group id: `group_ids[j]` for item j, default j); return them in that order.
    Episode j (item j // n) samples with turn_seed(params.seed, first_episode + j, turn): a long list played in
    chunks samples exactly what it would in one call when each chunk passes its offset.

    An episode ends when the env says done, after `max_rounds` replies (the horizon), when the next reply cannot
    fit in `max_total_tokens` (truncated), or when the env fails (failed). `on_episode(trajectory)` is called as each
    episode ends (a progress bar).
    """
    if max_rounds < 1:
        raise ValueError(f"max_rounds must be >= 1, got {max_rounds}")
    if group_ids is not None and len(group_ids) != len(item_ids):
        raise ValueError(f"got {len(group_ids)} group ids for {len(item_ids)} items; give one per item or none")
    params = params or SamplingParams()
    params = dataclasses.replace(params, stop_token_ids=sorted(set(params.stop_token_ids) | set(chat.stop_token_ids)))
    stats = stats if stats is not None else RolloutStats()
    t0 = time.perf_counter()
    groups = range(len(item_ids)) if group_ids is None else group_ids
    todo = [(group, item) for group, item in zip(groups, item_ids) for _ in range(n)]
    torch_threads = torch.get_num_threads()
    torch.set_num_threads(threads or torch_threads)
    try:
        finished = EpisodeScheduler(engine, env_factory, chat, todo, first_episode=first_episode,
                                    max_rounds=max_rounds, params=params, max_total_tokens=max_total_tokens,
                                    max_concurrency=max_concurrency, env_timeout=env_timeout, stats=stats,
                                    on_episode=on_episode).run()
    finally:
        torch.set_num_threads(torch_threads)
    stats.seconds += time.perf_counter() - t0
    finished.sort(key=lambda t: t.episode)   # the order played, not the order finished: a rerun gets the same list
    return finished


class EpisodeScheduler:
    """The episodes of one `run_episodes` call, advanced together: each is waiting for its env (a call in flight in
    the env pool, with a deadline), ready for a reply (the env answered), or finished. One round of `run`:
    `start` new episodes into free slots, take the env replies that came (`replies`, lingering for more) and `fold`
    them in, `time_out` the env calls past their deadline, and `generate` one batch of replies for every ready
    episode, whose texts go to their envs.

    Closes get their own threads: env calls still pending at the end are cancelled, closes never are (a cancelled
    close leaves the env alive on its server, or holding a JVM). The healthy episodes' closes are waited for, so their
    envs are gone when `run` returns; a failed episode's env may sit on a dead server: not waited for. An env holds
    its slot until its close is done: envs capped per process (SciWorld's JVMs) would otherwise see a new episode's
    create arrive before the last one's close and fail it ("all 4 JVMs in use")."""

    def __init__(self, engine: Engine, env_factory: Callable[[], Env], chat: ChatFormat,
                 todo: list[tuple[int, int]], *, first_episode: int, max_rounds: int, params: SamplingParams,
                 max_total_tokens: int, max_concurrency: int, env_timeout: float, stats: RolloutStats,
                 on_episode: Callable[[Trajectory], None] | None = None):
        self.engine, self.env_factory, self.chat, self.params, self.stats = engine, env_factory, chat, params, stats
        self.max_rounds, self.max_total_tokens, self.on_episode = max_rounds, max_total_tokens, on_episode
        self.max_concurrency, self.env_timeout = max_concurrency, env_timeout
        self.sessions = range(first_episode, first_episode + len(todo))
        self.todo = deque(enumerate(todo, start=first_episode))    # (episode index, (group, item)) not yet started
        self.waiting: dict[cf.Future, tuple[_Episode, float]] = {}   # env call in flight -> (episode, deadline)
        self.ready: list[_Episode] = []                                # env replied; needs a reply
        self.finished: list[Trajectory] = []
        self.pool = cf.ThreadPoolExecutor(max_workers=max(1, min(max_concurrency, 64)), thread_name_prefix="env")
        self.closer = cf.ThreadPoolExecutor(max_workers=4, thread_name_prefix="env-close")
        self.closing: list[cf.Future] = []    # the closes `run` waits for
        self.unclosed: list[cf.Future] = []   # the closes still holding their slots
        self.last_generate = 0.0   # seconds of the previous generate call (0 before the first: no lingering)

    def run(self) -> list[Trajectory]:
        """Every episode played to its end, in the order they finished."""
        try:
            while self.todo or self.waiting or self.ready:
                self.start()
                if not self.waiting and not self.ready:   # every slot is an env still closing
                    cf.wait(self.unclosed, timeout=self.env_timeout, return_when=cf.FIRST_COMPLETED)
                    continue
                self.fold(self.replies())
                self.time_out()
                if self.ready:
                    self.generate()
            cf.wait(self.closing, timeout=self.env_timeout)
        finally:
            self.engine.release(self.sessions)   # (those an error left behind)
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.closer.shutdown(wait=False)
        return self.finished

    def start(self) -> None:
        """Episodes into the free slots: an env made and reset in the pool for each."""
        self.unclosed[:] = [f for f in self.unclosed if not f.done()]
        while self.todo and len(self.waiting) + len(self.ready) + len(self.unclosed) < self.max_concurrency:
            index, (group, item) = self.todo.popleft()
            ep = _Episode(Trajectory(item_id=item, group=group), index)
            deadline = time.monotonic() + self.env_timeout
            self.waiting[self.pool.submit(_reset, self.env_factory, ep, item)] = (ep, deadline)

    def replies(self) -> list[cf.Future]:
        """The env calls that are done. With no episode ready, wait for the first reply (or a deadline), then for
        more: replies about to come join the same generate call."""
        if self.ready:
            return [f for f in self.waiting if f.done()]
        done, _ = cf.wait(self.waiting, timeout=_time_left(self.waiting), return_when=cf.FIRST_COMPLETED)
        return _gather(self.waiting, until=time.monotonic() + LINGER * self.last_generate) if done else done

    def fold(self, done) -> None:
        """Each finished env call into its episode, which is then ready for a reply or finished."""
        for fut in done:
            ep, _ = self.waiting.pop(fut)
            ep.traj, more = fold_env_reply(ep.traj, ep.env, fut, self.chat, max_rounds=self.max_rounds,
                                           max_total_tokens=self.max_total_tokens, stats=self.stats)
            if more:
                self.ready.append(ep)
            else:
                self.finish(ep)

    def time_out(self) -> None:
        """The episodes whose env call is past its deadline: failed."""
        for fut in [f for f, (_, deadline) in self.waiting.items() if time.monotonic() > deadline]:
            ep, _ = self.waiting.pop(fut)
            ep.traj.failed = f"env call timed out after {self.env_timeout:.0f}s"
            self.finish(ep)
            # a create/reset that answers after its deadline still holds an env (a server slot): close it then
            fut.add_done_callback(lambda f, ep=ep: ep.env is not None and close_quietly(ep.env))

    def generate(self) -> None:
        """One generate call for every ready episode (each in its engine session, with its turn's seed); each reply
        goes to its env, or ends its episode when the token budget cut it."""
        batch, self.ready = self.ready, []
        t0, stats, seed = time.perf_counter(), self.stats, self.params.seed
        seeds = None if seed is None else [turn_seed(seed, ep.index, ep.traj.num_rounds) for ep in batch]
        completions = self.engine.generate([ep.traj.input_ids for ep in batch], self.params, seeds,
                                           sessions=[ep.index for ep in batch])
        self.last_generate = time.perf_counter() - t0
        stats.generate_seconds += self.last_generate
        for ep, c in zip(batch, completions):
            stats.prompt_tokens += len(ep.traj.input_ids)
            if c.cached_tokens is not None:
                stats.cached_tokens += c.cached_tokens
                stats.cache_fallbacks += ep.traj.num_rounds > 0 and c.cached_tokens == 0
            text = add_completion(ep.traj, c, self.chat, self.max_total_tokens)
            if text is None:
                self.finish(ep)
            else:
                last_turn = ep.traj.num_rounds >= self.max_rounds
                self.waiting[self.pool.submit(step_env, ep.env, text, last_turn)] = (
                    ep, time.monotonic() + self.env_timeout)

    def finish(self, ep: _Episode) -> None:
        """An episode's end: its engine session released, its env closed, its trajectory kept."""
        self.engine.release([ep.index])
        if ep.env is not None:
            fut = self.closer.submit(close_quietly, ep.env)
            self.unclosed.append(fut)
            if not ep.traj.failed:
                self.closing.append(fut)
        ep.traj.episode = ep.index
        self.finished.append(ep.traj)
        self.stats.episodes += 1
        self.stats.policy_tokens += ep.traj.num_policy_tokens
        if self.on_episode is not None:
            self.on_episode(ep.traj)


def run_groups(engine: Engine, env_factory: Callable[[], Env], item_ids: list[int], chat: ChatFormat, *,
               n: int = 1, group_ids: list[int] | None = None, **options) -> list[TrajectoryGroup]:
    """`run_episodes`, its episodes returned by item: group j holds the `n` episodes of item j, in the order played,
    under the id `group_ids[j]` (default j). `options` are run_episodes' own."""
    episodes = run_episodes(engine, env_factory, item_ids, chat, n=n, group_ids=group_ids, **options)
    ids = range(len(item_ids)) if group_ids is None else group_ids
    return [TrajectoryGroup(g, item, episodes[j * n:(j + 1) * n]) for j, (g, item) in enumerate(zip(ids, item_ids))]


def _time_left(waiting: dict) -> float:
    return max(0.0, min(deadline for _, deadline in waiting.values()) - time.monotonic()) + 0.01


def _gather(waiting: dict, until: float) -> set[cf.Future]:
    """The env calls done once replies stop coming: wait for the next reply while before `until`, and after it
    while replies keep arriving at most GAP seconds apart (never past an env call's deadline)."""
    while True:
        pending = [f for f in waiting if not f.done()]
        if not pending:
            break
        timeout = min(max(until - time.monotonic(), GAP), _time_left(waiting))
        arrived, _ = cf.wait(pending, timeout=timeout, return_when=cf.FIRST_COMPLETED)
        if not arrived:
            break
    return {f for f in waiting if f.done()}


def _reset(env_factory, ep: _Episode, item_id: int):
    ep.env = env_factory()   # set before the reset: an env whose reset fails is still closed
    return reset_env(ep.env, item_id)


def reset_env(env: Env, item_id: int) -> tuple[str, str, str]:
    """Reset `env` to item `item_id`; returns the reply `fold_env_reply` takes: ("reset", the first observation,
    the anchor of the state the first turn acts in)."""
    observation = env.reset(item_id)
    return "reset", observation, anchor_of(env.state_key(observation))


def step_env(env: Env, text: str, last_turn: bool) -> tuple[str, Step, str | None]:
    """Send one reply's text to `env`; returns the reply `fold_env_reply` takes: ("step", the Step, the anchor of
    the state the next turn acts in, or None when no turn follows: the env said done, or `last_turn`)."""
    step = env.step(text)
    return "step", step, None if step.done or last_turn else anchor_of(env.state_key(step.observation))


def anchor_of(state_key) -> str:
    """A short digest of an env's state key (`Env.state_key`): equal states give equal anchors, and a trajectory
    stays small and JSON-writable whatever the key holds (grid bytes, a room's description)."""
    return hashlib.sha1(repr(state_key).encode()).hexdigest()[:16]


def close_quietly(env: Env) -> None:
    """Close `env`, ignoring its errors: closing is best effort, the episode's data is already safe."""
    try:
        env.close()
    except Exception:
        pass


def add_completion(traj: Trajectory, completion: Completion, chat: ChatFormat, max_total_tokens: int) -> str | None:
    """Append one sampled reply to `traj`; returns its text for the env, or None when the token budget cut it.

    room = max_total_tokens - len(input_ids) - 1 (the 1: the end-of-turn the template adds to a reply that did not
    sample its own). A reply longer than room (room + 1 if it ends with its own end-of-turn) keeps its first room
    tokens and marks `traj` truncated: a cut reply is not a whole action, so it is not sent to the env."""
    ids, logprobs = completion.token_ids, completion.logprobs
    room = max_total_tokens - len(traj.input_ids) - 1
    closed = bool(ids) and ids[-1] == chat.end_of_turn_id
    if len(ids) > room + closed:
        ids, logprobs = ids[:max(room, 0)], logprobs[:max(room, 0)]
        traj.truncated = True
    text = traj.add_reply(chat, ids, logprobs)
    return None if traj.truncated else text


def fold_env_reply(traj: Trajectory, env: Env | None, reply: cf.Future, chat: ChatFormat, *, max_rounds: int,
                   max_total_tokens: int, stats: RolloutStats | None = None) -> tuple[Trajectory, bool]:
    """Fold one env call's outcome (a done Future of `reset_env` or `step_env`) into the episode's trajectory.
    Returns the trajectory (a new one after a reset, with `traj`'s item and group) and whether the episode wants
    another reply.

    An exception marks `traj` failed with its text (an env bug is a failure of the env, never a zero reward). A
    step sets reward, success and done, counts an invalid action, appends the observation and counts an env step
    in `stats`. The episode goes on unless the env said done, the observation does not fit under
    `max_total_tokens` (truncated), or it has made `max_rounds` replies; the anchor of the state the next turn acts
    in is recorded only when it goes on."""
    try:
        kind, result, state = reply.result()
    except EnvError as e:
        traj.failed = str(e)
        return traj, False
    except Exception as e:
        traj.failed = f"{type(e).__name__}: {e}"
        return traj, False
    if kind == "reset":
        traj = Trajectory.start(chat, env.instruction, result, traj.item_id, traj.group)
        traj.anchors.append(state)
        if len(traj.input_ids) >= max_total_tokens:
            traj.truncated = True
            return traj, False
        return traj, True
    step = result
    if stats is not None:
        stats.env_steps += 1
    traj.reward = float(step.reward)
    traj.success = env.success(traj.reward)
    traj.done = bool(step.done)
    traj.invalid_actions += step.info.get("valid") is False
    fits = traj.add_observation(chat, step.observation, budget=max_total_tokens)
    if traj.done:
        return traj, False
    if not fits:
        traj.truncated = True
        return traj, False
    if traj.num_rounds >= max_rounds:
        return traj, False
    traj.anchors.append(state)
    return traj, True


def write_rollout_log(path: str, trajectories: list[Trajectory], **extra) -> None:
    """One JSON line per episode (AgentGym-RL's {item_id, conversations, reward} and more)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        for t in trajectories:
            f.write(json.dumps({**t.to_log(), **extra}) + "\n")
