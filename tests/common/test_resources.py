"""Resource strings, arithmetic and the wire form."""

import math

import pytest

from agora.common import ResourceError, Resources
from agora.v1 import common_pb2


def test_parse_and_format_round_trip():
    text = "cpus:4;cpus(analytics):2;mem:4096;ports:[31000-32000]"
    r = Resources.parse(text)
    assert r.scalar("cpus") == 6
    assert r.scalar("cpus", "analytics") == 2
    assert r.port_ranges() == ((31000, 32000),)
    assert Resources.parse(r.format()) == r
    assert r.format() == text


def test_reservations_reach_only_their_role():
    r = Resources.parse("cpus:4;cpus(analytics):2;mem(analytics):1024")
    assert r.allocatable_to("analytics").scalar("cpus") == 6
    assert r.allocatable_to("web").scalar("cpus") == 4
    assert r.allocatable_to("web").scalar("mem") == 0


def test_arithmetic_keeps_ranges_and_scalars_exact():
    total = Resources.parse("cpus:1;mem:100;ports:[31000-31010]")
    used = Resources.parse("cpus:0.1;ports:[31003-31004]")
    left = total - used
    assert left.scalar("cpus") == 0.9
    assert left.port_ranges() == ((31000, 31002), (31005, 31010))
    assert left + used == total
    # ten tenths make exactly one: no float drift
    acc = Resources()
    for _ in range(10):
        acc = acc + Resources.of(cpus=0.1)
    assert acc == Resources.of(cpus=1)


def test_arithmetic_results_are_values_as_if_written_out():
    # Sums and differences skip __init__'s checks: they must still be what it would make,
    # with nothing left at zero (an emptied key, an emptied range) and ranges merged.
    whole = Resources.parse("cpus:2;cpus(a):1;mem:64;ports:[31000-31001]")
    part = Resources.parse("cpus:2;mem:0.5;ports:[31000-31001]")
    left = whole - part
    assert left == Resources.parse("cpus(a):1;mem:63.5")
    assert ("cpus", "*") not in left.scalars and not left.ranges
    assert left + part == whole
    assert (left + part).ranges == {("ports", "*"): ((31000, 31001),)}
    joined = Resources.parse("ports:[31000-31001]") + Resources.parse("ports:[31002-31005]")
    assert joined.ranges == {("ports", "*"): ((31000, 31005),)}
    assert hash(left + part) == hash(whole)
    assert whole - Resources() is whole and whole + Resources() is whole


def test_subtracting_what_is_not_there_is_an_error():
    with pytest.raises(ResourceError, match="not contained"):
        Resources.of(cpus=1) - Resources.of(cpus=2)
    assert not Resources.of(cpus=1).contains(Resources.of(cpus=1, role="analytics"))


def test_proto_round_trip():
    r = Resources.parse("cpus:2;mem:512;disk:100;gpus:1;ports:[1-5,7-9]")
    assert Resources.from_proto(r.to_proto()) == r


def test_filling_a_repeated_field_gives_what_to_proto_gives():
    """fill() writes into a message's own field (a TaskInfo's resources) what to_proto()
    makes as separate messages: every scalar and range, reserved ones with their role."""
    from agora.v1 import common_pb2

    r = Resources.parse("cpus:2;mem:512;ports:[1-5,7-9]") + Resources.of(cpus=1, role="web")
    task = common_pb2.TaskInfo(task_id="t")
    r.fill(task.resources)
    assert list(task.resources) == r.to_proto()
    assert Resources.from_proto(task.resources) == r


@pytest.mark.parametrize(
    "text, message",
    [
        ("cpus:-1", "must not be negative"),
        ("cpus:nan", "finite"),
        ("cpus:abc", "takes a number"),
        ("bogus:1", "unknown resource"),
        ("cpus", "cannot parse"),
        ("ports:31000-32000", "ranges like"),
        ("ports:[32000-31000]", "begin <= end"),
    ],
)
def test_bad_strings_say_what_to_change(text, message):
    with pytest.raises(ResourceError, match=message):
        Resources.parse(text)


def test_bad_wire_values_are_rejected():
    for bad in (-1.0, math.nan, math.inf, 1e308):
        with pytest.raises(ResourceError):
            Resources.from_proto([common_pb2.Resource(name="cpus", scalar=bad)])
    with pytest.raises(ResourceError, match="at most"):
        Resources.parse("mem:1e16")
    with pytest.raises(ResourceError, match="unknown resource"):
        Resources.from_proto([common_pb2.Resource(name="unicorns", scalar=1)])


def test_a_resource_given_twice_is_refused_not_summed():
    with pytest.raises(
        ResourceError, match=r"cpus is given twice in 'cpus:2;cpus:3'; give it once"
    ):
        Resources.parse("cpus:2;cpus:3")
    with pytest.raises(ResourceError, match=r"ports\(web\) is given twice"):
        Resources.parse("ports(web):[1-2];ports(web):[5-6]")
    # The same name in two roles is two resources, as before.
    assert Resources.parse("cpus:2;cpus(analytics):3").scalar("cpus") == 5
