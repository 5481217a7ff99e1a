"""The packages that load their names on first use still export exactly what they say.

agora.common and the frameworks' packages import nothing eagerly (agora.common.lazy), so that
`agora job` and `agora app` load their clients alone (test_cli_startup). Each states its names
three times: `__all__`, the imports a type checker reads (under TYPE_CHECKING) and the table
that loads them at run time. These tests hold the three to one another.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

LAZY_PACKAGES = [
    "agora.common",
    "agora.frameworks.sdk",
    "agora.frameworks.batch",
    "agora.frameworks.service",
]


def type_checking_imports(package) -> dict[str, str]:
    """name -> module, from the package's `if TYPE_CHECKING:` imports."""
    tree = ast.parse(Path(package.__file__).read_text())
    (block,) = [
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    ]
    return {
        alias.asname or alias.name: node.module
        for node in block.body
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }


@pytest.mark.parametrize("name", LAZY_PACKAGES)
def test_each_exported_name_is_the_object_type_checkers_see(name):
    package = importlib.import_module(name)
    typed = type_checking_imports(package)
    assert sorted(typed) == sorted(package.__all__)
    for export, module in typed.items():
        assert getattr(package, export) is getattr(importlib.import_module(module), export)
    assert set(package.__all__) <= set(dir(package))


@pytest.mark.parametrize("name", LAZY_PACKAGES)
def test_an_unknown_name_is_an_attribute_error(name):
    package = importlib.import_module(name)
    with pytest.raises(AttributeError, match="no_such_name"):
        package.no_such_name  # noqa: B018


def test_the_documented_imports_work_in_a_fresh_interpreter():
    # What the README and the SDK's docs write, and a submodule beside a lazy name.
    code = (
        "from agora.sdk import Framework, TaskSpec, fit, run\n"
        "import agora.sdk, agora.frameworks.sdk as sdk\n"
        "assert agora.sdk.Framework is sdk.Framework is Framework\n"
        "from agora.frameworks.sdk import *\n"
        "assert TaskState.TASK_FINISHED and Driver and FrameworkDaemon\n"
        "from agora.frameworks.batch import BatchDaemon, state\n"
        "from agora.frameworks.service import ServicesDaemon, views\n"
        "from agora.common import Resources, configure_logging\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
