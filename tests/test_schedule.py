"""Round schedules: pure functions of the (1-based) training step."""
import pytest

from agentgym_nb.algos.schedule import ALIASES, SCHEDULE_TYPES, SCHEDULES, adaptive, fixed, make_schedule, stepwise


def test_fixed():
    s = fixed(20)
    assert [s.rounds_at(k) for k in (1, 2, 500)] == [20, 20, 20]
    assert s.max_rounds == 20
    assert make_schedule("fixed", 20, every=100) == s  # AgentGym-RL configs always carry steps_scaling_inter


def test_stepwise_boundaries():
    s = stepwise([6, 13, 20], every=100)
    # step k uses rounds[min((k-1)//100, 2)]: (1-1)//100 = 0, (100-1)//100 = 0, (101-1)//100 = 1, (201-1)//100 = 2
    assert {k: s.rounds_at(k) for k in (1, 100, 101, 200, 201, 202, 1000)} == {
        1: 6, 100: 6, 101: 13, 200: 13, 201: 20, 202: 20, 1000: 20}
    assert [s.rounds_at(k) for k in range(1, 301)] == [6] * 100 + [13] * 100 + [20] * 100
    assert s.max_rounds == 20
    assert make_schedule("scaling_inter_stepwise", [6, 13, 20], every=100) == s
    assert make_schedule("stepwise", (6, 13, 20), every=100) == s


def test_resume_gives_the_fresh_schedule():
    fresh = stepwise([6, 13, 20], every=100)
    trace = {k: fresh.rounds_at(k) for k in range(1, 301)}
    # a new object after resuming at step 100 or 150 (Appendix B: the original gave 102 -> 20 and 201 -> 13)
    for resumed_at in (100, 150):
        resumed = make_schedule("scaling_inter_stepwise", [6, 13, 20], every=100)
        assert {k: resumed.rounds_at(k) for k in range(resumed_at + 1, 301)} == {
            k: trace[k] for k in range(resumed_at + 1, 301)}
    assert resumed.rounds_at(102) == 13 and resumed.rounds_at(201) == 20


# success per finished step (as in metrics.jsonl), rounds [4, 8, 12], threshold .5, patience 2, min_steps 3
HISTORY = [{"step": k + 1, "success": v} for k, v in enumerate([0.2, 0.6, 0.6, 0.9, 0.9, 0.1, 0.0, 0.0, 0.0, 1.0])]


def test_adaptive_from_history():
    s = adaptive([4, 8, 12], metric="success", threshold=0.5, patience=2, min_steps=3)
    # after step 2: only 2 steps at horizon 4 (< min_steps 3)          -> step 3 still 4
    # after step 3: 3 steps, mean of last 2 = (.6 + .6)/2 = .6 >= .5   -> step 4 uses 8
    # after step 5: 2 steps at 8 (< 3)                                  -> step 6 still 8
    # after step 6: 3 steps, mean of last 2 = (.9 + .1)/2 = .5 >= .5   -> step 7 uses 12
    # steps 7-9 fail: the horizon never shrinks; 12 is the last horizon
    assert [s.rounds_at(k, HISTORY) for k in range(1, 12)] == [4, 4, 4, 8, 8, 8, 12, 12, 12, 12, 12]
    assert s.max_rounds == 12


def test_adaptive_resume_is_pure():
    s = adaptive([4, 8, 12], threshold=0.5, patience=2, min_steps=3)
    # only the records of steps 1..k-1 matter: a longer metrics.jsonl (read on resume) gives the same answer
    for k in range(1, 11):
        assert s.rounds_at(k, HISTORY[:k - 1]) == s.rounds_at(k, HISTORY)
    assert make_schedule("adaptive", [4, 8, 12], every=100, threshold=0.5, patience=2, min_steps=3) == s


def test_adaptive_history_errors():
    s = adaptive([4, 8], patience=2, min_steps=0)
    assert s.rounds_at(1) == 4
    with pytest.raises(ValueError, match="steps 1..4"):
        s.rounds_at(5, HISTORY[:3])
    with pytest.raises(KeyError, match="'truncated'"):
        adaptive([4, 8], metric="truncated").rounds_at(2, HISTORY)


def test_adaptive_truncation_trigger():
    # grow when at least half of the episodes were cut by the horizon, two steps in a row
    s = adaptive([5, 10], metric="truncated_frac", threshold=0.5, patience=2, min_steps=0)
    hist = [{"truncated_frac": v} for v in (0.1, 0.6, 0.4, 0.7)]
    # after 2: (.1+.6)/2 = .35;  after 3: (.6+.4)/2 = .5 -> grow at step 4
    assert [s.rounds_at(k, hist) for k in range(1, 6)] == [5, 5, 5, 10, 10]


@pytest.mark.parametrize("build, match", [
    (lambda: fixed(0), "positive integers"),
    (lambda: fixed(2.5), "positive integers"),
    (lambda: stepwise([], every=10), "non-empty"),
    (lambda: stepwise([6, 3], every=10), "non-decreasing"),
    (lambda: stepwise([6, True], every=10), "positive integers"),
    (lambda: stepwise([6, 13], every=0), "every"),
    (lambda: fixed(5).rounds_at(0), "1-based"),
    (lambda: stepwise([6], every=1).rounds_at(1.0), "1-based"),
    (lambda: adaptive([4, 8], patience=0), "patience"),
    (lambda: adaptive([4, 8], metric=""), "metric must name"),
    (lambda: adaptive([4, 8], threshold="high"), "threshold must be a finite number"),
    (lambda: adaptive([4, 8], threshold=float("nan")), "threshold must be a finite number"),
    (lambda: adaptive([4, 8], min_steps=-1), "min_steps"),
    (lambda: make_schedule("linear", [6, 13]), "scaling_inter_stepwise"),
    (lambda: make_schedule("stepwise", [6, 13]), "every"),
    (lambda: make_schedule("stepwise", 6, every=10), "list of horizons"),
    (lambda: make_schedule("fixed", 6, threshold=0.5), "no options"),
])
def test_validation(build, match):
    with pytest.raises(ValueError, match=match):
        build()


def test_schedules_are_frozen():
    s = stepwise([6, 13, 20], every=100)
    with pytest.raises(AttributeError):
        s.every = 1


def test_registry_makes_every_config_name_from_runconfig_fields():
    import dataclasses

    from agentgym_nb.config import RunConfig, make_config, round_schedule
    fields = {f.name for f in dataclasses.fields(RunConfig)}
    assert set(SCHEDULE_TYPES) == set(SCHEDULES) | set(ALIASES) and set(ALIASES.values()) <= set(SCHEDULES)
    for name, kind in SCHEDULES.items():
        assert kind.fields["rounds"] == "rounds" and set(kind.fields.values()) <= fields
        rounds = [4] if name == "fixed" else [2, 4]
        cfg = make_config(preset="smoke", schedule=name, rounds=rounds, rounds_every=3)
        assert round_schedule(cfg) == make_schedule(name, rounds, every=3)
    # an AgentGym-RL name is stored as ours
    assert make_config(preset="smoke", overrides=["algorithm.rounds_ctrl.type=scaling_inter_stepwise"]).schedule \
        == "stepwise"


def test_describe_and_reads():
    assert stepwise([2, 4], every=3).describe(7) == "steps 1-3: H=2; steps 4-7: H=4"
    assert fixed(5).describe(4) == "steps 1-4: H=5"
    assert adaptive([2, 4], metric="cut_by_horizon", threshold=0.8, patience=3, min_steps=4).describe(10) == (
        "H=2 -> 4, the next one once the mean cut_by_horizon of the last 3 steps is >= 0.8, after at least 4 steps "
        "at the current one")
    assert fixed(5).reads == stepwise([2], every=1).reads == ()
    assert adaptive([2, 4], metric="success_in_reach").reads == ("success_in_reach",)
