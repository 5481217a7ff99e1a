"""--master values: one master, a list, or zk://; a bad value says what to write."""

from __future__ import annotations

import pytest

from agora.common.masters import MasterSet, MasterSpecError, parse_masters


def test_one_master_a_list_and_zookeeper():
    assert parse_masters("127.0.0.1:5050") == MasterSet(addresses=("127.0.0.1:5050",))
    assert parse_masters("127.0.0.1:5050").single == "127.0.0.1:5050"
    several = parse_masters("h1:5050, h2:5051,[::1]:5052")
    assert several.addresses == ("h1:5050", "h2:5051", "[::1]:5052")
    assert several.single is None and not several.uses_zookeeper
    zk = parse_masters("zk://z1:2181,z2:2181/agora/")
    assert (zk.zk_hosts, zk.zk_path, zk.uses_zookeeper) == ("z1:2181,z2:2181", "/agora", True)
    assert zk.single is None and str(zk) == "zk://z1:2181,z2:2181/agora"
    assert parse_masters("zk://z1:2181/a/b").zk_path == "/a/b"


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "no master given"),
        ("foo", "has no port"),
        ("foo:bar", "needs a port in 1-65535"),
        ("foo:70000", "needs a port in 1-65535"),
        ("h1:5050,h1:5050", "names a master twice"),
        ("h1:5050,", "has no port"),
        ("http://h1:5050", "unknown scheme 'http'"),
        ("zk://z1:2181", "name the ZooKeeper path"),
        ("zk://z1:2181/", "name the ZooKeeper path"),
        ("zk:///agora", "at least one ZooKeeper server"),
        ("zk://z1/agora", "ZooKeeper server 'z1' has no port"),
        ("zk://z1:2181/a/../b", "is not a ZooKeeper path"),
    ],
)
def test_bad_values_say_what_to_write(text, message):
    with pytest.raises(MasterSpecError, match=message.replace("(", r"\(")) as e:
        parse_masters(text)
    assert "\n" not in str(e.value)
