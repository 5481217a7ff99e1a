"""Pure parts of the service framework: constraints, restart backoff, the deployment planner,
placement explanations and app files."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from agora.common import Resources
from agora.frameworks.sdk.constraints import AgentFacts, Constraint, ConstraintError
from agora.frameworks.service.apps import AppError, normalize, parse_app_text
from agora.frameworks.service.backoff import RestartBackoff
from agora.frameworks.service.deploy import (
    InstanceView,
    Plan,
    Strategy,
    max_total,
    min_healthy,
    plan,
)
from agora.frameworks.service.placement import AgentSlot, Needs, explain

A = AgentFacts("a1", "host-a", {"rack": "r1", "zone": "z1"})
B = AgentFacts("a2", "host-b", {"rack": "r1", "zone": "z2"})
C = AgentFacts("a3", "host-c", {"rack": "r2"})


# --- constraints ------------------------------------------------------------------------------


def ok(constraint: Constraint, agent: AgentFacts, placed=(), values=()) -> bool:
    return constraint.violation(agent, list(placed), values) is None


def test_unique_allows_one_instance_per_value():
    c = Constraint.parse("hostname", "unique")
    assert ok(c, A) and ok(c, B, [A])
    assert not ok(c, A, [A])
    rack = Constraint.parse("rack", "UNIQUE")
    assert not ok(rack, B, [A])  # same rack r1
    assert ok(rack, C, [A])


def test_cluster_like_unlike_and_missing_attributes():
    assert ok(Constraint.parse("rack", "CLUSTER", "r1"), A)
    assert not ok(Constraint.parse("rack", "CLUSTER", "r1"), C)
    assert ok(Constraint.parse("hostname", "LIKE", "host-[ab]"), B)
    assert not ok(Constraint.parse("hostname", "LIKE", "host-[ab]"), C)
    assert not ok(Constraint.parse("hostname", "UNLIKE", "host-a"), A)
    assert ok(Constraint.parse("hostname", "UNLIKE", "host-a"), B)
    # C has no zone: only UNLIKE accepts an agent without the attribute.
    assert not ok(Constraint.parse("zone", "LIKE", ".*"), C)
    assert ok(Constraint.parse("zone", "UNLIKE", "z1"), C)
    reason = Constraint.parse("zone", "CLUSTER", "z1").violation(C, [], ())
    assert "no 'zone' attribute" in reason


def test_max_per_and_group_by():
    c = Constraint.parse("rack", "MAX_PER", "2")
    assert ok(c, A, [B]) and not ok(c, A, [A, B])
    g = Constraint.parse("rack", "GROUP_BY")
    values = {"r1", "r2"}
    assert ok(g, A, [], values) and ok(g, C, [A], values)
    assert not ok(g, B, [A], values)  # r1 has 1, r2 has 0: r2 goes next
    assert ok(g, B, [A, C], values)
    # GROUP_BY n: values not seen yet count as empty groups.
    g3 = Constraint.parse("rack", "GROUP_BY", "3")
    assert not ok(g3, C, [A, C], values)


@pytest.mark.parametrize(
    "args,message",
    [
        (("hostname", "NEAR", ""), "unknown operator 'NEAR'; use one of UNIQUE, CLUSTER"),
        (("", "UNIQUE", ""), "field is empty"),
        (("rack", "CLUSTER", ""), "CLUSTER needs a value"),
        (("rack", "MAX_PER", "x"), "whole number"),
        (("rack", "LIKE", "("), "bad regular expression"),
        (("rack", "UNIQUE", "1"), "UNIQUE takes no value"),
    ],
)
def test_bad_constraints_say_what_to_write(args, message):
    with pytest.raises(ConstraintError, match=message.replace("(", r"\(").replace("[", r"\[")):
        Constraint.parse(*args)


def test_like_patterns_match_in_linear_time_and_refuse_what_needs_backtracking():
    # With Python's backtracking `re` this one check takes about a minute (the test would hit
    # its timeout); RE2 answers at once, so a hostile app cannot freeze the shared event loop.
    hostile = Constraint.parse("hostname", "LIKE", "(?:.?){56}X")
    long_host = AgentFacts("a", "a" * 60)
    assert "does not match" in hostile.violation(long_host, [])
    # RE2 has no backreferences or lookaround: refused when the app is put, saying why.
    with pytest.raises(ConstraintError, match="RE2 syntax: no backreferences"):
        Constraint.parse("rack", "LIKE", r"(r)\1")
    with pytest.raises(ConstraintError, match="1001 characters; the limit is 1000"):
        Constraint.parse("rack", "UNLIKE", "r" * 1001)


# --- backoff ----------------------------------------------------------------------------------


def test_backoff_grows_by_the_factor_up_to_the_cap_and_resets():
    b = RestartBackoff(1.0, 1.15, 300.0)
    assert b.ready(0) and b.delay() == 0
    assert b.failed(10.0) == pytest.approx(11.0)
    assert b.failed(20.0) == pytest.approx(21.15)
    assert b.failed(30.0) == pytest.approx(30 + 1.15**2)
    assert not b.ready(30.5) and b.ready(40)
    for _ in range(5000):  # a long crash loop neither overflows nor passes the cap
        b.failed(0)
    assert b.delay() == 300.0
    b.reset()
    assert b.failures == 0 and b.ready(0)


@given(st.floats(0, 10), st.floats(1, 3), st.floats(0, 600), st.integers(1, 200))
def test_backoff_is_monotonic_and_capped(initial, factor, cap, failures):
    b = RestartBackoff(initial, factor, cap)
    delays = []
    for _ in range(failures):
        b.failed(0)
        delays.append(b.delay())
    assert delays == sorted(delays)
    assert all(d <= max(cap, 0) + 1e-9 for d in delays)


# --- the planner ------------------------------------------------------------------------------


def inst(
    task_id,
    version="v2",
    running=True,
    healthy=True,
    launched_at=0.0,
    killing=False,
    has_check=True,
    draining=False,
) -> InstanceView:
    return InstanceView(
        task_id, version, running, healthy, has_check, launched_at, killing, draining
    )


def test_launches_missing_instances_and_scales_down_youngest_first():
    assert plan(3, "v1", [], Strategy()).launch == 3
    instances = [
        inst("a", "v1", launched_at=1),
        inst("b", "v1", launched_at=3),
        inst("c", "v1", launched_at=2),
    ]
    p = plan(1, "v1", instances, Strategy())
    assert p.launch == 0
    assert [t for t, _ in p.kill] == ["b", "c"]


def test_scale_down_kills_instances_not_serving_first():
    instances = [
        inst("old-ok", "v1", launched_at=1),
        inst("young-ok", "v1", launched_at=5),
        inst("staging", "v1", running=False, healthy=None, launched_at=2),
    ]
    assert [t for t, _ in plan(2, "v1", instances).kill] == ["staging"]


def test_rolling_update_with_no_extra_capacity_kills_then_launches():
    strategy = Strategy(minimum_health_capacity=0.5, maximum_over_capacity=0.0)
    old = [inst(f"o{i}", "v1", launched_at=i) for i in range(3)]
    p = plan(3, "v2", old, strategy)
    # floor = 2: one old may go; no room to launch until it is gone
    assert len(p.kill) == 1 and p.launch == 0
    killing = [
        inst(t.task_id, t.version, killing=t.task_id == p.kill[0][0], launched_at=t.launched_at)
        for t in old
    ]
    assert plan(3, "v2", killing, strategy).launch == 0
    survivors = [i for i in old if i.task_id != p.kill[0][0]]
    assert plan(3, "v2", survivors, strategy).launch == 1


def test_rolling_update_with_extra_capacity_launches_first():
    old = [inst(f"o{i}", "v1") for i in range(3)]
    p = plan(3, "v2", old, Strategy(1.0, 1.0))
    assert p.launch == 3 and p.kill == ()
    starting = old + [inst(f"n{i}", "v2", running=False, healthy=None) for i in range(3)]
    # new ones starting: nothing serving may go yet, and there is no room for more
    assert plan(3, "v2", starting, Strategy(1.0, 1.0)) == Plan(launch=0, kill=())
    one_up = old + [inst("n0", "v2")] + starting[4:]
    p = plan(3, "v2", one_up, Strategy(1.0, 1.0))
    assert len(p.kill) == 1 and p.kill[0][0].startswith("o")  # one new is up: one old goes


def test_an_instance_on_a_draining_agent_is_replaced_before_it_is_killed():
    up = [inst("a"), inst("b", draining=True)]
    # The drained one still serves: a replacement starts first, nothing is killed.
    assert plan(2, "v2", up) == Plan(launch=1, kill=())
    starting = up + [inst("c", running=False, healthy=None)]
    assert plan(2, "v2", starting) == Plan(launch=0, kill=())
    # The replacement serves: now the drained one goes, saying why.
    assert plan(2, "v2", up + [inst("c")]) == Plan(
        launch=0, kill=(("b", "moved off its draining agent"),)
    )
    # With no room above the target (maximum_over_capacity 0), it goes first, within what
    # may be down (one of two at minimum_health_capacity 0.5), and then it is replaced.
    tight = Strategy(0.5, 0.0)
    assert plan(2, "v2", up, tight).kill == (("b", "moved off its draining agent"),)
    assert plan(2, "v2", [inst("a"), inst("b", draining=True, killing=True)], tight).launch == 0
    assert plan(2, "v2", [inst("a")], tight).launch == 1


def test_health_check_storm_kills_no_more_than_may_be_down():
    strategy = Strategy(minimum_health_capacity=0.6, maximum_over_capacity=0.0)
    sick = [inst(f"s{i}", "v1", healthy=False, launched_at=i) for i in range(5)]
    p = plan(5, "v1", sick, strategy)
    # floor = 3, so 2 may be down at once
    assert len(p.kill) == 2 and all(why == "unhealthy" for _, why in p.kill)
    after = [inst(i.task_id, "v1", healthy=False, killing=i.task_id in dict(p.kill)) for i in sick]
    assert plan(5, "v1", after, strategy).kill == ()  # wait for those two first
    # Even when no instance may be down, a broken one is replaced, one at a time.
    strict = Strategy(1.0, 1.0)
    assert len(plan(5, "v1", sick, strict).kill) == 1


def test_strategy_bounds():
    assert min_healthy(3, Strategy(0.5, 0)) == 2
    assert max_total(3, Strategy(0.5, 0)) == 3
    assert max_total(3, Strategy(1.0, 0.5)) == 4
    assert max_total(4, Strategy(1.0, 0.1)) == 5  # always room for one when none may go


def _simulate(target, n_old, strategy, order_seed):
    """Runs plan() to completion, applying its actions and making launched instances healthy
    in a shuffled order; returns the serving counts seen after each kill decision."""
    import random

    rng = random.Random(order_seed)
    instances = {f"o{i}": inst(f"o{i}", "v1", launched_at=i) for i in range(n_old)}
    floor = min_healthy(target, strategy)
    observed = []
    clock = 100.0
    for _ in range(500):
        views = list(instances.values())
        serving_before = sum(v.serving for v in views)
        p = plan(target, "v2", views, strategy)
        for task_id, _ in p.kill:
            v = instances[task_id]
            instances[task_id] = InstanceView(
                v.task_id, v.version, v.running, v.healthy, v.has_check, v.launched_at, True
            )
        serving_after = sum(v.serving for v in instances.values())
        observed.append((serving_before, serving_after))
        assert serving_after >= min(floor, serving_before)
        assert len(instances) + p.launch <= max(max_total(target, strategy), len(instances))
        for _ in range(p.launch):
            clock += 1
            tid = f"n{clock}"
            instances[tid] = inst(tid, "v2", running=False, healthy=None, launched_at=clock)
        # the world moves: one random event
        pending = [v for v in instances.values() if v.killing or not v.serving]
        if not pending:
            if all(v.version == "v2" for v in instances.values()) and len(instances) == target:
                return observed
            continue
        v = rng.choice(pending)
        if v.killing:
            del instances[v.task_id]
        else:
            instances[v.task_id] = inst(v.task_id, v.version, launched_at=v.launched_at)
    raise AssertionError(f"did not converge: {list(instances.values())}")


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 8),
    st.integers(0, 8),
    st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0]),
    st.sampled_from([0.0, 0.2, 0.5, 1.0]),
    st.integers(0, 1000),
)
def test_rolling_update_converges_and_keeps_the_floor(target, n_old, m, o, seed):
    assume(not (m == 1.0 and o == 0.0))  # rejected by app validation
    _simulate(target, n_old, Strategy(m, o), seed)


# --- placement explanations -------------------------------------------------------------------


def slot(facts: AgentFacts, text: str = "cpus:2;mem:1024;ports:[31000-31009]") -> AgentSlot:
    return AgentSlot(facts, Resources.parse(text))


def test_explain_too_big_constraints_and_no_agents():
    needs = Needs(cpus=4, mem=128)
    reason, never = explain(1, needs, [], [], [slot(A), slot(B)])
    assert never and "more than any of the 2 agent(s) has" in reason and "cpus 4 > 2" in reason
    reason, never = explain(2, Needs(1, 128), [], [], [])
    assert never and "no agents" in reason
    unique = [Constraint.parse("hostname", "UNIQUE")]
    reason, never = explain(1, Needs(1, 128), unique, [A, B], [slot(A), slot(B)])
    assert never and "[hostname, UNIQUE]" in reason and "host-a" in reason
    reason, never = explain(1, Needs(1, 128), unique, [A], [slot(A), slot(B)])
    assert not never and "1 suitable agent" in reason


# --- app definitions and files ----------------------------------------------------------------


def test_app_file_yaml_with_conveniences():
    app = parse_app_text(
        """
id: web
cmd: [python3, -m, http.server]
instances: 2
cpus: 0.5
mem: 64
ports: 1
env: {A: 1}
constraints:
  - [hostname, UNIQUE]
  - [rack, CLUSTER, r1]
health_check:
  http: {path: /health}
""",
        "web.yaml",
    )
    app = normalize(app)
    assert list(app.args) == ["python3", "-m", "http.server"] and app.env["A"] == "1"
    assert [(c.field, c.operator, c.value) for c in app.constraints] == [
        ("hostname", "UNIQUE", ""),
        ("rack", "CLUSTER", "r1"),
    ]
    assert app.health_check.http.path == "/health"
    assert app.health_check.interval_seconds > 0 and app.health_check.max_consecutive_failures
    assert app.backoff.backoff_seconds == 1 and app.backoff.backoff_factor == 1.15
    assert app.backoff.max_launch_delay_seconds == 300
    assert app.upgrade_strategy.minimum_health_capacity == 1
    assert app.upgrade_strategy.maximum_over_capacity == 1


@pytest.mark.parametrize(
    "text,source,message",
    [
        ('{"id": "web", "cmd": "x",', "a.json", "a.json: not valid JSON at line 1"),
        ("id: [unclosed", "a.yaml", "a.yaml: not valid YAML"),
        ("- just a list", "a.yaml", "expected an object"),
        ('{"id": "web", "instances": "three"}', "a.json", "a.json: .*instances"),
        ("instances: three", "a.yaml", "a.yaml: instances must be a whole number, got 'three'"),
        ("cpus: lots", "a.yaml", "a.yaml: cpus must be a number, got 'lots'"),
        ("", "a.yaml", r"a.yaml is empty: write an app's fields in it \(id, cmd"),
        ('{"id": "web", "colour": "red"}', "a.json", "a.json: .*colour"),
        ('{"id": "web", "constraints": [["hostname"]]}', "a.json", r"constraints\[0\]"),
    ],
)
def test_malformed_app_files_say_where(text, source, message):
    with pytest.raises(AppError, match=message):
        parse_app_text(text, source)


@pytest.mark.parametrize(
    "fields,message",
    [
        (dict(id="Web!", cmd="x", cpus=1, mem=1), "app id 'Web!' is not valid"),
        (dict(id="web", cpus=1, mem=1), "has no command"),
        (dict(id="web", cmd="x", cpus=0, mem=1), "cpus must be more than 0"),
        (dict(id="web", cmd="x", cpus=1, mem=-5), "mem must be more than 0"),
        (dict(id="web", cmd="x", cpus=1, mem=1, instances=-1), "instances must be between 0"),
        (
            dict(id="web", cmd="x", cpus=1, mem=1, constraints=[["hostname", "NEAR", "x"]]),
            "unknown operator 'NEAR'",
        ),
        (
            dict(id="web", cmd="x", cpus=1, mem=1, health_check={"http": {"port_index": 0}}),
            "uses PORT0 but the app has 0 port",
        ),
        (
            dict(
                id="web",
                cmd="x",
                cpus=1,
                mem=1,
                upgrade_strategy={"minimum_health_capacity": 1, "maximum_over_capacity": 0},
            ),
            "can never replace",
        ),
    ],
)
def test_invalid_apps_are_refused_with_a_reason(fields, message):
    from agora.frameworks.service.apps import app_from_mapping

    with pytest.raises(AppError, match=message.replace("(", r"\(")):
        normalize(app_from_mapping(fields))


def test_versions_sort_in_time_order():
    from agora.frameworks.service.apps import new_version

    assert new_version(1.5) < new_version(2.0) < new_version(1e9)


def test_the_example_app_file_is_valid():
    from harness import ROOT

    path = ROOT / "examples" / "apps" / "web.yaml"
    app = normalize(parse_app_text(path.read_text(), str(path)))
    assert app.id == "web" and app.ports == 1 and app.health_check.http.path == "/"


# --- placing into offers and the words for waiting ----------------------------------------------


def _offer(offer_id, agent_id, text, attrs=None):
    from agora.frameworks.sdk.testing import make_offer
    from agora.v1 import common_pb2

    offer = make_offer(offer_id, agent_id, text)
    offer.agent_address = f"10.0.0.{agent_id[-1]}:5051"
    for name, value in (attrs or {}).items():
        offer.attributes.append(common_pb2.Attribute(name=name, text=value))
    return offer


def _request(app_id, count, constraints=(), placed=(), ports=1):
    from agora.frameworks.sdk import TaskSpec
    from agora.frameworks.service.placement import Request

    return Request(
        app_id,
        count,
        Needs(1, 64, 0, ports),
        list(constraints),
        list(placed),
        lambda: TaskSpec(app_id, cpus=1, mem=64, ports=ports, command="true"),
    )


def test_place_spreads_honours_constraints_and_never_gives_a_port_twice():
    from agora.frameworks.service.placement import offer_host, place

    offers = [
        _offer("o1", "a1", "cpus:8;mem:1024;ports:[100-102]", {"rack": "r1"}),
        _offer("o2", "a2", "cpus:8;mem:1024;ports:[200-201]", {"rack": "r2"}),
    ]
    rack = [Constraint.parse("rack", "CLUSTER", "r1")]
    result = place(offers, [_request("web", 2), _request("db", 2, rack)])
    assert result.placed == {"web": 2, "db": 2}
    by_agent = {launch.agent_id: [app for app, _, _ in launch.tasks] for launch in result.launches}
    assert sorted(by_agent["a1"]) == ["db", "db", "web"] and by_agent["a2"] == ["web"]
    ports = [
        r.ranges[0].begin
        for launch in result.launches
        for _, t, _ in launch.tasks
        for r in t.resources
        if r.name == "ports"
    ]
    assert len(ports) == len(set(ports)) == 4 and set(ports) <= {100, 101, 102, 200, 201}
    assert offer_host(offers[0]) == "10.0.0.1"
    # Out of ports on a1: a fourth db instance cannot go anywhere, and we hear why.
    more = place(offers, [_request("db", 4, rack)])
    assert more.placed == {"db": 3}
    assert any("too small" in r for r in more.reasons["db"])
    assert any("[rack, CLUSTER, r1]" in r for r in more.reasons["db"])


def test_why_waiting_orders_its_reasons():
    from agora.frameworks.service.waiting import why_waiting
    from agora.v1 import services_pb2

    app = normalize(services_pb2.App(id="w", cmd="x", cpus=1, mem=64, instances=2))
    agents = [slot(A), slot(B)]
    assert why_waiting(app, 0, 0, [], agents, RestartBackoff(), "", 0) == ("", False)
    delayed = RestartBackoff(5, 1, 5)
    delayed.failed(100)
    reason, never = why_waiting(app, 1, 1, [], agents, delayed, "", 101)
    assert not never and "restart backoff after 1 failure(s): next launch in 4.0s" in reason
    reason, _ = why_waiting(app, 1, 0, [], agents, RestartBackoff(), "", 0)
    assert "upgrade strategy" in reason
    reason, _ = why_waiting(app, 1, 1, [], agents, RestartBackoff(), "offer of host-a too small", 0)
    assert "waiting for offers" in reason and "last offers: offer of host-a too small" in reason
    reason, never = why_waiting(app, 1, 1, [], [], RestartBackoff(), "", 0)
    assert never and "no agents" in reason


@pytest.mark.parametrize(
    "text, message",
    [
        ("id: web\ncmd: x\ncpus: 1\nmem: 32\n", "missing 'instances'"),
        ("id: web\ncmd: x\ninstances: 2\n", "missing 'cpus', 'mem'"),
    ],
)
def test_an_app_file_must_say_what_proto3_cannot_tell_from_zero(text, message):
    from agora.frameworks.service.apps import parse_app_text

    with pytest.raises(AppError, match=message):
        parse_app_text(text, "web.yaml")


def test_a_pattern_and_an_app_have_a_budget_of_instructions():
    from agora.frameworks.sdk.constraints import MAX_PROGRAM_SIZE, check_pattern_budget

    # Under RE2's memory budget but over the instruction bound: refused, saying by how much.
    with pytest.raises(ConstraintError, match=f"at most {MAX_PROGRAM_SIZE}"):
        Constraint.parse("rack", "LIKE", r"[a-z]{900}" * 6)
    with pytest.raises(ConstraintError, match="too large for RE2's budget"):
        Constraint.parse("rack", "LIKE", r"(?:\pL){300}N")
    # Each within its bound, too many together.
    heavy = [Constraint.parse("rack", "LIKE", r"[a-z]{700}" * 2 + str(i)) for i in range(16)]
    with pytest.raises(ConstraintError, match="instructions together; at most 20000"):
        check_pattern_budget(heavy, "app x")
    check_pattern_budget(heavy[:3], "app x")
