"""ScienceWorld with AgentGym's interface (agentenv-sciworld), on the real `scienceworld` package and its jar.

Item ids index AgentGym's flat game list: scienceworld's tasks in its own order (tasks.json), skipping 5-1, 5-2
(growing plants), 9-1..9-3 (inclined planes) and 10-1, 10-2 (Mendelian genetics), each task contributing all its
variations in order. 23 tasks, 4,639 games: boil = 0..29, melt = 30..59, ..., identify-life-stages-2 = 4629..4638.

An episode is `load(task, variation)` then one "look around"; the agent first sees the task description, a newline
and that look (as AgentGym's client shows it). The score is scienceworld's `round(100 * getScore())`: 0..100, negative
when the task failed; the episode ends on completion, failure, or after 100 moves (scienceworld's default limit).
`Step.reward` is that score (what AgentGym's client reports), `info["step_reward"]` the change of score of the step.
The expert replays scienceworld's gold action sequence. Within 100 moves it solves every test item except some
changes of state of matter (boil, melt, freeze, change-the-state-of), whose gold paths heat or cool for longer.

scienceworld keeps objects in identity-hash sets, so the order in which a room lists its objects, and the choices of
a gold path among equivalent objects, differ between two loads of the same variation (in AgentGym too); which
objects exist, and how a task is scored, do not.

Speed and memory: scienceworld's own `ScienceWorldEnv.step` lists every valid action (~2,700) on each call, which
costs the JVM far more than the step itself; `Simulator.step` asks the JVM only for the observation, score, completion
and move count. Valid actions are on demand (`action_hint()`, GET /action_hint). Each JVM gets `JAVA_OPTIONS` (512 MB
heap, serial GC). JVMs are process-wide (`JVMS`): at most `JVMS.cap` live ones (default 4, env var
AGENTGYM_NB_SCIWORLD_JVMS); an env takes one when built (or /create is called) and parks it for the next env when
closed, so a JVM starts once and then serves episode after episode, each with a `load` (far cheaper than starting a
JVM). Building an env beyond the cap fails at once with EnvError saying how to raise it (waiting instead would
deadlock clients that create all their envs before stepping, as AgentGym-RL does).
"""
from __future__ import annotations

import atexit
import bisect
import itertools
import os
import subprocess
import threading
import weakref

from py4j.java_gateway import GatewayParameters, JavaGateway, launch_gateway
from py4j.protocol import Py4JError
from scienceworld import ScienceWorldEnv
from scienceworld.constants import BASEPATH, ID2TASK, JAR_PATH

from .base import Env, EnvError, EnvStateError, Episodes, Levels, Step, Track, check_action_length, check_item_id
from .wire import HTTPEnv, IdBody, ResetBody, StepBody, answer, running

INSTRUCTION = (
    'You are an agent for science world. Every round I will give you an observation, you have to respond an action '
    'based on the observation to finish the given task. Here are the actions you may take: [{"action": "open/close '
    'OBJ", "description": "open/close a container"}, {"action": "de/activate OBJ", "description": "activate/deactivate'
    ' a device"}, {"action": "connect OBJ to OBJ", "description": "connect electrical components"}, {"action": '
    '"disconnect OBJ", "description": "disconnect electrical components"}, {"action": "use OBJ [on OBJ]", '
    '"description": "use a device/item"}, {"action": "look around", "description": "describe the current room"}, '
    '{"action": "look at OBJ", "description": "describe an object in detail"}, {"action": "look in OBJ", '
    '"description": "describe a container\'s contents"}, {"action": "read OBJ", "description": "read a note or book"}, '
    '{"action": "move OBJ to OBJ", "description": "move an object to a container"}, {"action": "pick up OBJ", '
    '"description": "move an object to the inventory"}, {"action": "put down OBJ", "description": "drop an inventory '
    'item"}, {"action": "pour OBJ into OBJ", "description": "pour a liquid into a container"}, {"action": "dunk OBJ '
    'into OBJ", "description": "dunk a container into a liquid"}, {"action": "mix OBJ", "description": "chemically mix'
    ' a container"}, {"action": "go to LOC", "description": "move to a new location"}, {"action": "eat OBJ", '
    '"description": "eat a food"}, {"action": "flush OBJ", "description": "flush a toilet"}, {"action": "focus on '
    'OBJ", "description": "signal intent on a task object"}, {"action": "wait", "description": "take no action for 10'
    ' iterations"}, {"action": "wait1", "description": "take no action for 1 iteration"}, {"action":"examine OBJ",'
    '"description":"provides a description of the objects present on or in a receptacle."}, {"action": "task", '
    '"description": "describe current task"}, {"action": "inventory", "description": "list your inventory"}]\n'
    'Your response should use the following format:\nThought:\nyour thoughts.\n\nAction:\nyour next action'
)

EXCLUDED = ("5-1", "5-2", "9-1", "9-2", "9-3", "10-1", "10-2")  # AgentGym's `exceptions`
TASKS = tuple(name for task_id, name in ID2TASK.items() if task_id not in EXCLUDED)
# getTaskMaxVariations of scienceworld 1.2.3 per task of TASKS; every new JVM checks them (item ids depend on them)
VARIATIONS = dict(zip(TASKS, (30, 30, 30, 30, 540, 436, 300, 20, 20, 900, 600, 300, 300, 300, 300, 32, 36, 36, 125,
                              125, 125, 14, 10), strict=True))
FIRST = tuple(itertools.accumulate((VARIATIONS[t] for t in TASKS), initial=0))  # FIRST[k] = id of task k, variation 0
NUM_GAMES = FIRST[-1]  # 4639
TEST_PER_TASK = 10  # test list: this many evenly spaced test variations per task (201 items; AgentGym evaluates 200)

NO_MATCH = "No known action matches that input."
JAVA_OPTIONS = ("-Xmx512m", "-XX:+UseSerialGC")  # one JVM stays at ~300-450 MB resident
STEP_LIMIT = 100  # moves; ScienceWorldEnv's default, which AgentGym's server keeps


def task_index(item_id: int) -> int:
    """item_id -> the index of its task in TASKS (0 = boil, 22 = identify-life-stages-2): its level."""
    what = f"sciworld: 0..{NUM_GAMES - 1}, AgentGym's flat list of {len(TASKS)} tasks x their variations"
    item_id = check_item_id(item_id, what)
    if item_id >= NUM_GAMES:
        raise ValueError(f"sciworld item_id {item_id} is out of range: valid ids are 0..{NUM_GAMES - 1} ({what})")
    return bisect.bisect_right(FIRST, item_id) - 1


def game(item_id: int) -> tuple[str, int]:
    """item_id -> (task name, variation): AgentGym's flat game list, indexed directly."""
    task = task_index(item_id)
    return TASKS[task], item_id - FIRST[task]


def item_id_of(task: str, variation: int) -> int:
    """(task name, variation) -> item id; the inverse of `game`."""
    if task not in VARIATIONS:
        raise ValueError(f"unknown sciworld task {task!r}; tasks: {', '.join(TASKS)}")
    if not 0 <= variation < VARIATIONS[task]:
        raise ValueError(f"task {task!r} has variations 0..{VARIATIONS[task] - 1}, got {variation}")
    return FIRST[TASKS.index(task)] + variation


def expert_reply(action: str) -> str:
    return f"Thought:\nI need to {action}.\n\nAction:\n{action}"


class Simulator(ScienceWorldEnv):
    """scienceworld's ScienceWorldEnv on a JVM started with `JAVA_OPTIONS`, whose `step` leaves out the ~2,700
    valid actions (and the look/inventory texts) that ScienceWorldEnv.step puts in its info dict every time.

    Everything else (load with its checks, gold action sequences, possible actions, goal progress, splits) is the
    package's own code. The JVM dies with this process (py4j's die_on_exit) or on `close()`.
    """

    def __init__(self):  # ScienceWorldEnv.__init__ cannot pass JVM options; this is its launch, with them
        try:
            port, process = launch_gateway(classpath=JAR_PATH, cwd=BASEPATH, die_on_exit=True, return_proc=True,
                                           javaopts=list(JAVA_OPTIONS))
        except FileNotFoundError:
            raise EnvError("no `java` on PATH: ScienceWorld runs its jar on Java >= 8 (17 tested); "
                           "install it, e.g. apt-get install -y openjdk-17-jre-headless") from None
        try:
            self._gateway = JavaGateway(gateway_parameters=GatewayParameters(auto_field=True, port=port),
                                        java_process=process)
            self.server = self._gateway.jvm.scienceworld.runtime.pythonapi.PythonInterface()
        except Exception:
            process.kill()
            process.wait()
            raise
        self.taskName, self.variationIdx, self.simplificationStr = None, 0, ""
        self.lastStepScore, self.envStepLimit, self.goldPathGenerated = 0, STEP_LIMIT, False
        self.runHistories = {}

    @property
    def pid(self) -> int:
        return self._gateway.java_process.pid

    def alive(self) -> bool:
        return self._gateway.java_process.poll() is None

    def step(self, input_str: str):
        """ScienceWorldEnv.step without the expensive info: (observation, reward, completed, {score, reward, moves})."""
        observation = self.server.step(input_str)
        score = int(round(100 * self.server.getScore()))
        moves = self.server.getNumMoves()
        completed = bool(self.server.getCompleted()) or moves > self.envStepLimit or score < 0
        reward, self.lastStepScore = score - self.lastStepScore, score
        return observation, reward, completed, {"score": score, "step_reward": reward, "moves": moves}

    def gold_actions(self, task: str, variation: int) -> list[str]:
        self.load(task, variation, "", generateGoldPath=True)
        return self.get_gold_action_sequence()

    def close(self) -> None:
        gateway = getattr(self, "_gateway", None)  # None when the launch failed (ScienceWorldEnv.__del__ calls this)
        process = gateway.java_process if gateway is not None else None
        if process is not None and process.poll() is None:
            super().close()  # py4j shutdown + the newline that makes a die_on_exit JVM exit
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


class JVMPool:
    """The process's ScienceWorld JVMs: at most `cap` alive; a released JVM waits idle for the next `acquire`."""

    def __init__(self, cap: int):
        self.cap = cap
        self.idle: list[Simulator] = []
        self.busy = 0
        self.started: weakref.WeakSet[Simulator] = weakref.WeakSet()  # to stop them all at exit
        self._lock = threading.Lock()
        self._checked = False

    @property
    def live(self) -> int:
        return self.busy + len(self.idle)

    def acquire(self) -> Simulator:
        with self._lock:
            while self.idle:
                sim = self.idle.pop()
                if sim.alive():
                    self.busy += 1
                    return sim
                sim.close()
            if self.busy >= self.cap:
                raise EnvError(
                    f"all {self.cap} ScienceWorld JVMs of this process are in use (each ~300-450 MB and a share of the "
                    f"CPU); close an env first, or raise the cap: env var AGENTGYM_NB_SCIWORLD_JVMS=<n> before "
                    f"starting (e.g. the server), or agentgym_nb.envs.sciworld.JVMS.cap = <n>")
            self.busy += 1
        try:
            sim = Simulator()
            self.started.add(sim)
            self._check_variations(sim)
        except BaseException:
            with self._lock:
                self.busy -= 1
            raise
        return sim

    def release(self, sim: Simulator) -> None:
        with self._lock:
            self.busy -= 1
            if sim.alive() and self.live < self.cap:
                self.idle.append(sim)
                return
        sim.close()

    def close_idle(self) -> None:
        """Stop the idle JVMs (those of open envs stay)."""
        with self._lock:
            idle, self.idle = self.idle, []
        for sim in idle:
            sim.close()

    def close_all(self) -> None:
        """Stop every JVM, also those of envs never closed (at exit: a py4j gateway left to the interpreter's
        finalization hangs it)."""
        self.close_idle()
        for sim in list(self.started):
            sim.close()

    def _check_variations(self, sim: Simulator) -> None:
        if self._checked:
            return
        found = {task: sim.get_max_variations(task) for task in TASKS}
        if found != VARIATIONS:
            wrong = {t: (VARIATIONS[t], n) for t, n in found.items() if n != VARIATIONS[t]}
            sim.close()
            raise EnvError(f"this scienceworld has other variation counts than 1.2.3 (task: (expected, found)) "
                           f"{wrong}: item ids would not mean what they mean in AgentGym; install scienceworld==1.2.3")
        self._checked = True


JVMS = JVMPool(cap=int(os.environ.get("AGENTGYM_NB_SCIWORLD_JVMS", "4")))
atexit.register(JVMS.close_all)


def item_lists() -> dict[str, list[int]]:
    """The shipped item lists, from scienceworld's own variation splits per task: "train" = every train variation,
    "test" = TEST_PER_TASK evenly spaced test variations (all of them when fewer). Dev variations are in neither."""
    sim = JVMS.acquire()
    try:
        lists = {"train": [], "test": []}
        for task in TASKS:
            # PythonInterface.getSets splits by the current task's name alone: set it instead of loading the task
            getattr(sim.server, "taskStr_$eq")(task)
            train, test = sim.get_variations_train(), sim.get_variations_test()
            count = min(TEST_PER_TASK, len(test))
            lists["train"] += [item_id_of(task, v) for v in train]
            lists["test"] += [item_id_of(task, test[k * len(test) // count]) for k in range(count)]
        return lists
    finally:
        JVMS.release(sim)


# The cpu nano's recipe (models.NanoSpec fields): actions name objects of the room description, so word-level tokens,
# then cloning at a learning rate falling to 0.
NANO_RECIPE = dict(tokenizer="words", bc_max_steps=800, check_every=100, bc_decay_steps=600, bc_decay_lr=2e-3)
CPU_EPISODES = Episodes(rounds=(8, 16, 24), max_tokens=64, max_total_tokens=4096, max_envs=4)


def unordered_lines(text: str) -> tuple[str, ...]:
    """The non-empty lines of `text`, stripped and sorted: equal for two listings of the same objects."""
    return tuple(sorted(line.strip() for line in text.splitlines() if line.strip()))


class SciWorld(Env):
    """One ScienceWorld episode at a time on the env's own JVM (taken from `JVMS` when built)."""

    name, title = "sciworld", "ScienceWorld"
    task_instruction = INSTRUCTION
    levels = Levels("task index in AgentGym's task list (sciworld.TASKS)", range(len(TASKS)))
    tracks = {
        # The tasks whose gold action sequences are short (4-17 actions over four train variations each), so an
        # episode fits a horizon of 24 with room to err; the others take 16-94, mostly over 20.
        "short": Track("the 10 tasks whose gold sequences take 4-17 actions: find-*, lifespan, power-component, "
                       "secondary paint colours, identify-life-stages-2", (7, 11, 12, 13, 14, 16, 18, 19, 20, 22),
                       CPU_EPISODES, nano=NANO_RECIPE),
        "all": Track("all 23 tasks (the paper's item set)", None, CPU_EPISODES, nano=NANO_RECIPE),
    }
    # Its instruction alone is ~900 tokens; two JVMs (starting each costs seconds of CPU).
    smoke = Episodes(rounds=(1, 2), max_tokens=24, max_total_tokens=1536, max_envs=2)
    # Expert episodes take seconds in a JVM and run 20-50 turns: few of them, kept whole, few cloning steps.
    smoke_nano = dict(demos=6, max_total_tokens=3072, bc_max_steps=8, check_every=8, max_envs=2)
    success_score = 100.0   # scienceworld's score for a completed task

    def __init__(self):
        self.sim: Simulator | None = JVMS.acquire()
        self.item_id = self.task_name = None
        self.variation = 0
        self.task_description = ""
        self.raw = ""  # the simulator's latest observation (GET /observation)
        self.last = ""  # what the agent was shown last (reset: task description + "\n" + look)
        self.moves = 0

    def reset(self, item_id: int) -> str:
        self.check_open()
        task, variation = game(item_id)
        if self.sim is None or not self.sim.alive():  # the JVM died (killed, out of memory): take a fresh one
            dead, self.sim = self.sim, None
            if dead is not None:
                JVMS.release(dead)
            self.sim = JVMS.acquire()
        self.sim.load(task, variation)
        self.item_id, self.task_name, self.variation = int(item_id), task, variation
        self.task_description = self.sim.get_task_description()
        observation, reward, done, info = self.sim.step("look around")
        self.raw, self.last = observation, self.task_description + "\n" + observation
        self.reward, self.score, self.moves = reward, info["score"], info["moves"]
        self.phase = "over" if done else "running"
        return self.last

    def act(self, action: str) -> Step:
        self.check_running()
        check_action_length(self.name, action)  # before py4j copies it into the JVM and scienceworld parses it
        try:
            observation, reward, done, info = self.sim.step(action)
        except Py4JError as error:
            raise EnvError(f"sciworld: the ScienceWorld JVM failed ({error.__class__.__name__}: {error}); "
                           f"reset() starts a new one") from None
        self.raw = self.last = observation
        self.reward, self.score, self.moves = reward, info["score"], info["moves"]
        if done:
            self.phase = "over"
        info = {"score": self.score, "step_reward": reward, "action": action, "valid": observation != NO_MATCH}
        return Step(observation, float(self.score), done, info)

    def observe(self) -> str:
        """What the agent was shown last, as AgentGym's client `observe()` returns it (GET /observation answers
        the simulator's text alone, without the task description after a reset)."""
        return self.last

    def parse_action(self, text: str) -> str:
        """AgentGym's SciWorld client: everything after the last "Action:", stripped ("" when there is none).

        A trailing "</s>" is dropped first; AgentGym's client cuts 5 characters there, one too many."""
        if text.endswith("</s>"):
            text = text[:-4]
        return text.rsplit("Action:", 1)[1].strip() if "Action:" in text else ""

    def state_key(self, observation: str) -> tuple:
        """What the agent's room looks like and what it holds, and the task score: two free actions of the
        simulator (they take no move), instead of the last action's answer, which differs between equal states.
        Their lines are sorted: ScienceWorld keeps objects in Scala sets and may list an equal room in another order
        (the order within one line, as in "a bowl (containing ...)", is kept)."""
        return unordered_lines(self.sim.look()), unordered_lines(self.sim.inventory()), self.score

    @classmethod
    def level(cls, item_id: int) -> int:
        return task_index(item_id)

    def category(self, item_id: int) -> str:
        return game(item_id)[0]

    def action_hint(self) -> dict:
        """GET /action_hint: the action templates and object names of the current state (as AgentGym answers), plus
        the valid action-object combinations (scienceworld's ~2,700-entry list, which costs more than a step to
        build: asked for only here)."""
        self._check_loaded()
        return {"possible_actions": self.sim.get_possible_actions(),
                "possible_objects": self.sim.get_possible_objects(),
                "valid_actions": self.sim.get_valid_action_object_combinations()}

    def goals(self) -> str:
        """scienceworld's goal progress text."""
        self._check_loaded()
        return self.sim.get_goal_progress()

    def details(self) -> dict:
        """GET /detail: AgentGym's cached info dict (reset payload updated by each step)."""
        if self.phase == "new":
            return {"deleted": False, "done": False}
        return {"deleted": False, "done": self.phase == "over", "task_name": self.task_name, "var_num": self.variation,
                "task_description": self.task_description, "observation": self.raw, "reward": self.reward,
                "score": self.score}

    def expert(self, item_id: int) -> list[str]:
        """scienceworld's gold action sequence for the item's variation, one reply per action.

        Computed on the env's own JVM, or, while an episode runs on it, on another JVM of `JVMS`, so the episode is
        not disturbed (after done, the env's simulator then holds the expert's world; observe() is unaffected)."""
        task, variation = game(item_id)
        self.check_open()
        if self.phase != "running":
            return [expert_reply(a) for a in self.sim.gold_actions(task, variation)]
        sim = JVMS.acquire()
        try:
            return [expert_reply(a) for a in sim.gold_actions(task, variation)]
        finally:
            JVMS.release(sim)

    def close(self) -> None:
        if self.sim is not None:
            sim, self.sim = self.sim, None
            JVMS.release(sim)
        super().close()

    def _check_loaded(self) -> None:
        self.check_open()
        if self.phase == "new":
            raise EnvStateError("sciworld: no task loaded yet; call reset() first")


# ---------------------------------------------------------------- AgentGym's SciWorld wire format

def sciworld_routes(app, pool, cls) -> None:
    """agentenv-sciworld's endpoints: `id` in bodies and queries; /reset answers task_name, var_num,
    task_description, observation, reward, score, deleted, done; /step observation, reward (score change), score,
    done; GET /observation a JSON string; /action_hint, /goals, /detail. Failures are 200 {"error"} (a second
    /close too, where AgentGym answers HTTP 500); stepping after done is AgentGym's "has finished" error; the GET
    endpoints also answer after done."""
    issued = [-1]  # highest id handed out: ids are sequential, so a lower id that is gone was closed
    issued_lock = threading.Lock()

    def missing(env_id: int) -> ValueError:
        if 0 <= env_id <= issued[0]:
            return ValueError(f"The task with environment {env_id} has been deleted.")
        return ValueError(f"The id {env_id} is not valid.")

    def use(env_id: int):
        if env_id not in pool.slots:
            raise missing(env_id)
        return pool.use(env_id)

    def loaded(env: SciWorld, env_id: int) -> SciWorld:
        if env.phase == "new":
            raise EnvStateError(f"The environment {env_id} has not been reset; POST /reset first.")
        return env

    @app.get("/")
    def hello():
        return f"This is environment {cls.title}."

    @app.post("/create")
    def create():
        def handle():
            env_id = pool.create()
            with issued_lock:
                issued[0] = max(issued[0], env_id)
            return {"id": env_id}
        return answer(handle)

    @app.post("/reset")
    def reset(body: ResetBody):
        def handle():
            with use(body.id) as env:
                env.reset(body.data_idx)
                return {"task_name": env.task_name, "var_num": env.variation, "task_description": env.task_description,
                        "observation": env.raw, "reward": env.reward, "score": env.score, "deleted": False,
                        "done": env.phase == "over"}
        return answer(handle)

    @app.post("/step")
    def step(body: StepBody):
        def handle():  # AgentGym's client posts the extracted action; a whole reply is extracted here
            with use(body.id) as env:
                running(env, body.id)
                result = env.step(body.action) if "Action:" in body.action else env.act(body.action)
                return {"observation": result.observation, "reward": result.info["step_reward"],
                        "score": result.info["score"], "done": result.done}
        return answer(handle)

    @app.get("/observation")
    def observation(id: int):  # noqa: A002  (AgentGym's query parameter name)
        def handle():
            with use(id) as env:
                return loaded(env, id).raw
        return answer(handle)

    @app.get("/action_hint")
    def action_hint(id: int):  # noqa: A002
        def handle():
            with use(id) as env:
                return loaded(env, id).action_hint()
        return answer(handle)

    @app.get("/goals")
    def goals(id: int):  # noqa: A002
        def handle():
            with use(id) as env:
                return {"goals": loaded(env, id).goals()}
        return answer(handle)

    @app.get("/detail")
    def detail(id: int):  # noqa: A002
        def handle():
            with use(id) as env:
                return env.details()
        return answer(handle)

    @app.post("/close")
    def close(body: IdBody):
        def handle():
            if not pool.close(body.id):
                raise missing(body.id)
            return True
        return answer(handle)


class SciWorldHTTP(HTTPEnv):
    """AgentGym's SciworldEnvClient: the first observation is task_description + "\\n" + observation, observe()
    returns the latest observation without asking the server, and the reward is the server's score."""

    def _reset(self, item_id: int) -> str:
        data = self._call("POST", "reset", {"id": self.env_id, "data_idx": item_id})
        self.reward, self.score = data["reward"], data["score"]
        self.phase = "over" if data["done"] else "running"
        return data["task_description"] + "\n" + data["observation"]

    def act(self, action: str) -> Step:
        self.check_running()
        data = self._call("POST", "step", {"id": self.env_id, "action": action})
        self.last_observation, self.reward, self.score = data["observation"], data["reward"], data["score"]
        if data["done"]:
            self.phase = "over"
        valid = self.last_observation != NO_MATCH
        info = {"score": self.score, "step_reward": self.reward, "action": action, "valid": valid}
        return Step(self.last_observation, float(self.score), bool(data["done"]), info)

    def observe(self) -> str:
        return self.last_observation


SciWorld.http_routes = staticmethod(sciworld_routes)
SciWorld.http_client = SciWorldHTTP
