"""Value types of the allocator: its configuration and the grants it returns."""

from __future__ import annotations

from dataclasses import dataclass

from agora.common import Resources
from agora.common.settings import Number, check_settings, setting

# Mesos' --min_allocatable_resources default: a scrap smaller than both is not worth an offer.
DEFAULT_MIN_ALLOCATABLE: tuple[Resources, ...] = (Resources.of(cpus=0.01), Resources.of(mem=32))
# Mesos caps Filters.refuse_seconds at 365 days so that expiry times stay representable.
MAX_REFUSE_SECONDS = 365 * 24 * 3600.0


@dataclass(frozen=True, slots=True)
class OfferGrant:
    """Resources on one agent that one allocation cycle offers a framework.

    `exclusive`: moved from free to the framework, so only it may use them while it decides
    (pessimistic offers, and a met hold's); False for an optimistic offer, which leaves them
    free and may overlap other frameworks' offers. (Not "held": holds are another thing.)
    `hold_id`: the met hold this grant delivers, if any.
    `revocable`: revocable resources (revocable.py): held by no one, lent until wanted.
    """

    framework_id: str
    agent_id: str
    resources: Resources
    exclusive: bool = True
    hold_id: str = ""
    revocable: bool = False


@dataclass(frozen=True)
class AllocatorConfig:
    """Policy choices fixed at start-up; construction fails fast on a bad combination."""

    role_sorter: str = "drf"  # orders roles (by weighted dominant share for "drf")
    framework_sorter: str = "drf"  # orders frameworks inside one role
    # An offer must contain at least one of these (flattened over roles); () allows any scrap.
    # A string in Mesos' flag syntax is accepted too: "cpus:0.01|mem:32".
    min_allocatable: tuple[Resources, ...] | str = DEFAULT_MIN_ALLOCATABLE
    # Used by Allocator.decline() when none is given.
    default_refuse_seconds: float = setting(
        5.0, Number(at_least=0, at_most=MAX_REFUSE_SECONDS, unit="seconds")
    )
    # Seeds the "random" sorter, so tests can repeat an order.
    seed: int | None = setting(None, Number(whole=True, optional=True))
    # How free resources become offers (policies.py): "pessimistic" (Mesos: each agent's free
    # resources to one framework at a time, held while it decides) or "optimistic" (to the
    # first `optimistic_fanout` frameworks in DRF order at once, held by none: optimistic.py).
    # None: optimistic when optimistic_fanout > 0, else pessimistic.
    offer_mode: str | None = None
    optimistic_fanout: int = setting(0, Number(at_least=0, whole=True))

    def __post_init__(self) -> None:
        from agora.master.allocator.policies import OFFER_POLICIES
        from agora.master.allocator.sorters import check_sorter_name

        check_settings(self)  # each number's bounds, as MasterConfig and AgentConfig do
        check_sorter_name("role_sorter", self.role_sorter)
        check_sorter_name("framework_sorter", self.framework_sorter)
        fanout = self.optimistic_fanout
        mode = self.offer_mode
        if mode is None:
            mode = "optimistic" if fanout > 0 else "pessimistic"
        if mode not in OFFER_POLICIES:
            raise ValueError(
                f"offer_mode {mode!r} is not one of: {', '.join(sorted(OFFER_POLICIES))}"
            )
        if mode == "optimistic" and fanout < 1:
            raise ValueError("optimistic offers need optimistic_fanout >= 1 (how many at once)")
        if mode == "pessimistic" and fanout > 0:
            raise ValueError("optimistic_fanout is for optimistic offers; leave it 0 here")
        object.__setattr__(self, "offer_mode", mode)
        mins = self.min_allocatable
        if isinstance(mins, str):
            mins = tuple(Resources.parse(part) for part in mins.split("|") if part.strip())
        mins = tuple(mins)
        for m in mins:
            if not isinstance(m, Resources):
                raise ValueError(f"min_allocatable takes Resources values, got {m!r}")
            if m.ranges:
                raise ValueError(f"min_allocatable takes scalars only (cpus, mem...), got {m}")
        object.__setattr__(self, "min_allocatable", mins)

    @property
    def min_allocatable_set(self) -> tuple[Resources, ...]:
        """min_allocatable as parsed (construction turned a string into Resources)."""
        mins = self.min_allocatable
        assert not isinstance(mins, str), "__post_init__ parses the string form"
        return mins

    @property
    def mode(self) -> str:
        """offer_mode as resolved (construction turned None into a name)."""
        assert self.offer_mode is not None, "__post_init__ resolves it"
        return self.offer_mode
