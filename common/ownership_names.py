"""The two words by which the master and the frameworks agree on who owns and who acts.

The batch and services frameworks record who owns a job, a schedule or an app in the label
OWNER_LABEL (agora.frameworks.sdk.ownership); the master's dashboard reads it to check its
caller first, then relays the action naming that caller in the metadata key ON_BEHALF_OF. Both
sides import them from here, since the master may not import the frameworks.
"""

from __future__ import annotations

__all__ = ["ON_BEHALF_OF", "OWNER_LABEL"]

OWNER_LABEL = "agora.owner"
# The metadata key with which the master names the person it relays a call for (the
# dashboard's actions: master/dashboard/calls.py).
ON_BEHALF_OF = "agora-on-behalf-of"
