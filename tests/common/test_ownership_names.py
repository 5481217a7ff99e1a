"""The owner label and the on-behalf-of key are written once, and the master's dashboard and
the frameworks read the same words: were they copies, one could change without the other, and
the master would check owners, or name its callers, where no framework looks."""

from __future__ import annotations

from agora.common import ownership_names
from agora.frameworks.sdk import ownership
from agora.master.dashboard import calls


def test_the_dashboard_and_the_frameworks_share_one_spelling():
    assert calls.OWNER_LABEL is ownership.OWNER_LABEL is ownership_names.OWNER_LABEL
    assert calls.ON_BEHALF_OF is ownership.ON_BEHALF_OF is ownership_names.ON_BEHALF_OF
    # gRPC metadata keys are lowercase ASCII; a label key is a dotted name.
    assert ownership_names.ON_BEHALF_OF == ownership_names.ON_BEHALF_OF.lower()
