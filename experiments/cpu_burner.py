"""A process that keeps a share of one core busy, for `agora experiment throughput
--background-load`: what CPU taken from the daemons by something else costs the user's path on
this machine, to set beside a cost of Agora's own (a task's namespaces) that takes about as much.

Run as `python -m agora.experiments.cpu_burner SHARE` (0 < SHARE <= 1): busy for a millisecond,
then asleep for as long as keeps the average at SHARE of a core, until killed. Short bursts,
so the load is spread over the run as a task's kernel work is, not taken in long slices."""

from __future__ import annotations

import sys
import time

BURST_SECONDS = 0.001


def burn(share: float) -> None:
    rest = BURST_SECONDS * (1 - share) / share
    while True:
        started = time.perf_counter()
        while time.perf_counter() - started < BURST_SECONDS:
            pass
        if rest:
            time.sleep(rest)


def shares(cores: float) -> list[float]:
    """`cores` of load as one share (at most a whole core) per process."""
    whole = int(cores)
    parts = [1.0] * whole
    if cores - whole > 1e-9:
        parts.append(round(cores - whole, 6))
    return parts


if __name__ == "__main__":
    burn(float(sys.argv[1]))
