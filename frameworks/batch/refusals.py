"""How long the batch framework refuses the offers it does not use, by default, and why.

Declared once for the scheduler, the daemon's config and `agora batch` (--decline-refuse,
--idle-refuse). No imports: `agora batch --help` reads them without loading the framework.

A refusal is a decline filter at the master, as in Mesos: it hides from us only an offer of
that agent contained in what was refused (an offer with more of any resource is made at once),
so the resources our own finished tasks free come back at once; and new work (a submission, a
retry due) revives, which clears every filter. A refusal therefore only spares the master and
us the same unusable offer again and again.
"""

from __future__ import annotations

# While work waits: offers it cannot use, and what a launch leaves of an offer where it placed
# all it could (Mesos' default refusal).
DECLINE_REFUSE_SECONDS = 5.0
# While nothing waits. The framework suppresses its offers then too, so this only bounds what
# a revive lost on the way costs: seconds, not minutes.
IDLE_REFUSE_SECONDS = 15.0
