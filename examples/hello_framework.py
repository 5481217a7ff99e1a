"""hello_framework: the smallest useful Agora framework. Copy it to start your own.

It subscribes to the master, launches N short tasks (`echo hello from task N`) spread over the
agents, prints every status update as one line, and exits 0 once all of them are FINISHED
(1, with a summary, if any ended otherwise).

    .venv/bin/python examples/hello_framework.py --master 127.0.0.1:5050 --tasks 20
"""

from __future__ import annotations

import argparse
import os
import sys

from agora.common import configure_logging
from agora.sdk import (
    Framework,
    SchedulerError,
    SubscriptionEnded,
    TaskSpec,
    describe_status,
    fit,
    is_terminal,
    run,
    state_name,
)


class Hello(Framework):
    """Launches `count` tasks, then waits for each to end. Every callback is optional."""

    def __init__(self, count: int, cpus: float, mem: float, per_agent: int) -> None:
        # What each task needs and runs; the SDK picks the concrete resources from offers.
        self.pending = [
            TaskSpec(f"hello-{n}", cpus=cpus, mem=mem, command=f"echo hello from task {n}")
            for n in range(1, count + 1)
        ]
        self.per_agent = per_agent
        self.launched: set[str] = set()  # task ids
        self.states: dict[str, int] = {}  # task id -> latest state
        self.ended: dict[str, str] = {}  # task id -> final state name

    async def on_subscribed(self, driver, framework_id):
        # Also called after a reconnect, with the same id: our tasks carry on meanwhile.
        print(f"subscribed as {framework_id}", flush=True)

    async def on_offers(self, driver, offers):
        if not self.pending:
            # Nothing left to launch: give the resources back, and ask for no more offers.
            await driver.decline(offers)
            await driver.suppress()
            return
        # fit() places tasks into offers: at most `per_agent` per agent per round, taking turns
        # between agents, so the tasks spread over the cluster.
        result = fit(offers, self.pending, max_per_agent=self.per_agent, spread=True)
        self.pending = result.unplaced
        for placement in result.placements:
            try:
                # refuse_seconds=0: what these tasks leave of the offers may come right back
                # in the next offer (the default would hide it from us for 5 s, or until one
                # of our tasks ends on that agent and frees more).
                await driver.launch(placement.offers, placement.tasks, refuse_seconds=0)
            except SchedulerError as e:
                # E.g. the offer was rescinded meanwhile: try those tasks again on the next offer.
                print(f"launch on {placement.agent_id} refused: {e}", flush=True)
                self.pending.extend(placement.specs)
                continue
            for task in placement.tasks:
                self.launched.add(task.task_id)
                print(f"launching {task.task_id} on {placement.agent_id}", flush=True)
        # Offers we did not use go straight back to the master for other frameworks.
        await driver.decline(result.unused)
        if not self.pending:
            await driver.suppress()

    async def on_update(self, driver, status):
        # Updates arrive at least once: an agent resends each until it is acknowledged, so the
        # same state can come twice. Print each new state as one line, e.g.
        # "hello-3-1a2b3c4d5e6f FINISHED on agent-9f8e7d6c5b4a: exited with code 0".
        if self.states.get(status.task_id) != status.state:
            self.states[status.task_id] = status.state
            print(describe_status(status), flush=True)
        if status.task_id in self.launched and is_terminal(status.state):
            self.ended[status.task_id] = state_name(status.state)
            if len(self.ended) == len(self.launched) and not self.pending:
                # All done. The driver acknowledges this update, then tears the framework
                # down so the master forgets it; run() returns.
                await driver.teardown()
        # Returning acknowledges the update (it carries a uuid): its agent stops resending it.

    async def on_agent_lost(self, driver, agent_id):
        # Its tasks arrive separately as TASK_LOST updates.
        print(f"agent {agent_id} was lost", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Launch N 'hello' tasks on an Agora cluster and wait for them to finish."
    )
    parser.add_argument(
        "--master",
        default=os.environ.get("AGORA_MASTER", "127.0.0.1:5050"),
        help="the master's HOST:PORT (default $AGORA_MASTER or 127.0.0.1:5050)",
    )
    parser.add_argument("--tasks", type=int, default=20, help="how many tasks (default 20)")
    parser.add_argument("--cpus", type=float, default=0.1, help="cpus per task (default 0.1)")
    parser.add_argument("--mem", type=float, default=32, help="MB of memory per task (default 32)")
    parser.add_argument(
        "--per-agent", type=int, default=3, help="most tasks per agent per offer (default 3)"
    )
    parser.add_argument("--log-level", default="warning", help="SDK log level (default warning)")
    args = parser.parse_args(argv)
    if args.tasks < 1 or args.per_agent < 1:
        parser.error("--tasks and --per-agent must be at least 1")
    configure_logging(args.log_level)  # logging is set up by the program, never the library

    hello = Hello(args.tasks, args.cpus, args.mem, args.per_agent)
    try:
        # Blocks until the framework stops (teardown above). The driver reconnects by itself
        # if the master restarts, and acknowledges status updates for us.
        run(hello, master=args.master, name="hello", role="*", failover_timeout=60)
    except SubscriptionEnded as e:
        print(f"hello: the master ended the framework: {e.message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130

    failed = {task: state for task, state in hello.ended.items() if state != "FINISHED"}
    if failed:
        print(f"hello: {len(failed)} of {len(hello.ended)} tasks did not finish:", file=sys.stderr)
        for task, state in sorted(failed.items()):
            print(f"  {task} {state}", file=sys.stderr)
        return 1
    print(f"all {len(hello.ended)} tasks finished", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
