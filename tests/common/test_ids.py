"""Identifiers: unique across a pool's refills and across a fork."""

from __future__ import annotations

import os
import re

from agora.common import ids
from agora.common.ids import new_id


def test_ids_are_prefixed_hex_and_unique_across_many_pool_refills():
    made = [new_id("offer") for _ in range(ids.POOL_IDS * 5 + 7)]
    assert all(re.fullmatch(r"offer-[0-9a-f]{12}", i) for i in made)
    assert len(set(made)) == len(made)


def test_a_forked_child_does_not_hand_out_its_parents_next_ids():
    new_id("warm")  # the pool holds ids now, which the child must not reuse
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids, to the parent
        os.write(write, " ".join(new_id("t") for _ in range(50)).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read) as pipe:
        child = set(pipe.read().split())
    parent = {new_id("t") for _ in range(50)}
    assert len(child) == 50 and not child & parent
