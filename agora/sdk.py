"""The framework SDK under a short name: `from agora.sdk import Framework, TaskSpec, run`.

The same objects as `agora.frameworks.sdk` (re-exported, not copied), so either import works.
"""

from agora.frameworks.sdk import *  # noqa: F403
from agora.frameworks.sdk import __all__, __doc__  # noqa: F401
