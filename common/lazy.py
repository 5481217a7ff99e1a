"""A package's public names, each imported from its module on first use (PEP 562).

A package's `__init__` states its API (`__all__`), but importing every module behind it makes
any import of one part pay for all: `agora job` reads `agora.frameworks.batch.client` and
must not load the batch daemon, its scheduler and its SQLite store. Such a package imports its
names for type checkers only and hands the rest to `exports_on_first_use`:

    if TYPE_CHECKING:
        from agora.frameworks.sdk.driver import Driver, run
    else:
        __getattr__, __dir__ = exports_on_first_use(
            __name__, {"agora.frameworks.sdk.driver": ("Driver", "run")}
        )

`from package import Driver` and `from package import *` work as with eager imports. Under
TYPE_CHECKING the package has no `__getattr__`, so a type checker still reports a name it does
not export.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["exports_on_first_use"]


def exports_on_first_use(
    package: str, sources: Mapping[str, Iterable[str]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The `__getattr__` and `__dir__` of `package`, exporting each name of `sources` (module
    -> names it defines) from its module the first time it is asked for."""
    where = {name: module for module, names in sources.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:  # AttributeError, so `from package import submodule` still works
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # later lookups find it without this call
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *where})

    return __getattr__, __dir__
