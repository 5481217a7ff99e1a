"""ACLs from a file (`--acls FILE` of the master and the agents): which principals may do what,
to what.

The file is YAML or JSON, one list of rules per action, in the spirit of Mesos' ACLs:

    permissive: false          # an action no rule allows is denied (the default)
    register_agents:    [{principals: [agent-1, agent-2]}]
    register_frameworks: [{principals: [batch], roles: ["*"], names: [batch]},
                          {principals: [services], roles: ["*"], names: [services]},
                          {principals: [analytics], roles: [analytics]}]
    run_tasks:          [{principals: [batch, services], users: [nobody]}]
    kill_tasks:         [{principals: [ops], frameworks: [ANY]}]
    teardown_frameworks: [{principals: [ops], frameworks: [ANY]}]
    read_sandboxes:     [{principals: [ops], frameworks: [ANY]}]
    set_weights:        [{principals: [ops], roles: [ANY]}]
    set_quota:          [{principals: [ops], roles: [ANY]}]
    drain_agents:       [{principals: [ops], agents: [ANY]}]
    read_state:         [{principals: [ANY]}]                 # any certificate of the CA
    read_metrics:       [{principals: [prometheus]}]          # every daemon's /metrics
    relay_agents:       [{principals: [relay-1]}]
    submit_jobs:        [{principals: [alice, ci], roles: ["*"]}]     # agora batch --acls
    manage_apps:        [{principals: [web-team], roles: ["*"]}]      # agora services --acls

A rule allows when the caller's principal and the action's object are both listed. ANY matches
every object, and every principal that proved a name (a certificate of the cluster's CA, a bearer
token); an anonymous caller (a browser without a certificate, any caller without TLS) is matched
only by ANONYMOUS, so opening something to everyone is written down:
`read_state: [{principals: [ANY, ANONYMOUS]}]`. Frameworks are named by id or by
name. A framework always acts on its own tasks and sandboxes; kill_tasks, teardown_frameworks
and read_sandboxes are for acting on others' (`agora cluster kill`, `agora cluster teardown`,
the dashboard's and the agents' file API). relay_agents (`agora relay`, which names who each
agent it carries is) is allowed only by a rule, even with permissive: true.

submit_jobs and manage_apps are read by the framework daemons (`agora batch --acls FILE`,
`agora services --acls FILE`, the same file format): who may submit jobs, and create, update,
scale or delete apps, in which roles. A job or app still belongs to whoever made it: only its
owner changes it (frameworks/sdk/ownership.py).

`names:` in a register_frameworks rule reserves those framework names for the rule's principals:
no one else may register a framework of that name, whatever roles they may use. Clients find the
batch and services APIs by name, so reserving `batch` and `services` for their daemons' principals
keeps a hostile framework from posing as them. Pure: parsing and deciding, no I/O but the read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from agora.common.authz import EXPLICIT_ONLY, Action, Decision

__all__ = ["AclAuthorizer", "AclError", "load_acls"]

ANY = "ANY"
ANONYMOUS = "ANONYMOUS"  # in principals: a caller without a name

# File key -> (action, the key naming the objects in a rule; None: the action has no object).
SECTIONS: dict[str, tuple[Action, str | None]] = {
    "register_agents": (Action.REGISTER_AGENT, None),
    "register_frameworks": (Action.REGISTER_FRAMEWORK, "roles"),
    "run_tasks": (Action.RUN_AS_USER, "users"),
    "kill_tasks": (Action.KILL_TASKS, "frameworks"),
    "teardown_frameworks": (Action.TEARDOWN_FRAMEWORK, "frameworks"),
    "read_sandboxes": (Action.READ_SANDBOX, "frameworks"),
    "set_weights": (Action.SET_WEIGHT, "roles"),
    "set_quota": (Action.SET_QUOTA, "roles"),
    "drain_agents": (Action.DRAIN_AGENT, "agents"),
    "read_state": (Action.READ_STATE, None),
    "read_metrics": (Action.READ_METRICS, None),
    "relay_agents": (Action.RELAY_AGENTS, None),
    "submit_jobs": (Action.SUBMIT_JOB, "roles"),
    "manage_apps": (Action.MANAGE_APP, "roles"),
}


class AclError(ValueError):
    """A malformed ACL file; the message names the file, the place and what to write."""


@dataclass(frozen=True)
class Rule:
    principals: frozenset[str]
    objects: frozenset[str] | None  # None: the action has no object
    names: frozenset[str] = frozenset()  # register_frameworks: framework names reserved

    def allows(self, principal: str, obj: str) -> bool:
        if not principal:
            if ANONYMOUS not in self.principals:
                return False
        elif ANY not in self.principals and principal not in self.principals:
            return False
        return self.objects is None or ANY in self.objects or obj in self.objects


class AclAuthorizer:
    def __init__(self, rules: dict[Action, list[Rule]], permissive: bool, source: str) -> None:
        self.rules = rules
        self.permissive = permissive
        self.source = source
        # Framework name -> the principals it is reserved for.
        self.reserved: dict[str, set[str]] = {}
        for rule in rules.get(Action.REGISTER_FRAMEWORK, []):
            for name in rule.names:
                self.reserved.setdefault(name, set()).update(rule.principals)

    def names(self, principal: str) -> bool:
        """Whether any rule names `principal` (ANY a named one, ANONYMOUS an anonymous one):
        a caller named by none may do nothing here, so nothing it sends need be read."""
        if self.permissive:
            return True
        return any(
            (ANONYMOUS in rule.principals)
            if not principal
            else (ANY in rule.principals or principal in rule.principals)
            for rules in self.rules.values()
            for rule in rules
        )

    def authorize(self, principal: str, action: Action, obj: str) -> Decision:
        if action is Action.USE_FRAMEWORK_NAME:
            owners = self.reserved.get(obj)
            named = (ANY in owners or principal in owners) if principal and owners else False
            if owners is None or named or (not principal and ANONYMOUS in owners):
                return Decision(True)
            return Decision(
                False,
                f"{self.source} reserves the name for {', '.join(sorted(owners))}; "
                "choose another name",
            )
        rules = self.rules.get(action)
        if rules is None:
            if action in EXPLICIT_ONLY:
                return Decision(False, f"{self.source} has no {action.value} rule")
            if self.permissive:
                return Decision(True)
            return Decision(False, f"no rule in {self.source} allows it (permissive: false)")
        if any(rule.allows(principal, obj) for rule in rules):
            return Decision(True)
        return Decision(False, f"no rule of {self.source} allows it")


def _names(value, where: str) -> frozenset[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise AclError(f"{where}: give a list of names, e.g. [alice, bob] or [ANY]")
    return frozenset(value)


def parse_acls(data: object, source: str) -> AclAuthorizer:
    if not isinstance(data, dict):
        raise AclError(f"{source}: the ACL file must be a mapping of action -> rules")
    permissive = data.get("permissive", False)
    if not isinstance(permissive, bool):
        raise AclError(f"{source}: permissive must be true or false")
    rules: dict[Action, list[Rule]] = {}
    for key, value in data.items():
        if key == "permissive":
            continue
        if key not in SECTIONS:
            raise AclError(f"{source}: unknown action {key!r}; use one of {', '.join(SECTIONS)}")
        action, object_key = SECTIONS[key]
        if not isinstance(value, list):
            raise AclError(f"{source}: {key} must be a list of rules")
        parsed = []
        for i, rule in enumerate(value):
            where = f"{source}: {key}[{i}]"
            if not isinstance(rule, dict) or "principals" not in rule:
                raise AclError(f"{where}: a rule is a mapping with principals (and {object_key})")
            known = {"principals", object_key}
            if action is Action.REGISTER_FRAMEWORK:
                known.add("names")
            extra = set(rule) - known
            if extra:
                raise AclError(f"{where}: unknown field(s) {', '.join(sorted(map(str, extra)))}")
            objects = None
            if object_key is not None:
                if object_key not in rule:
                    raise AclError(f"{where}: name the {object_key} (or [ANY])")
                objects = _names(rule[object_key], f"{where}.{object_key}")
            names = _names(rule["names"], f"{where}.names") if "names" in rule else frozenset()
            if ANY in names:
                raise AclError(f"{where}.names: list the framework names to reserve, not ANY")
            parsed.append(Rule(_names(rule["principals"], f"{where}.principals"), objects, names))
        rules[action] = parsed
    return AclAuthorizer(rules, permissive, source)


def load_acls(path: str | Path) -> AclAuthorizer:
    """The ACLs in `path` (YAML or JSON); AclError naming what is wrong."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise AclError(f"--acls {path}: {e.strerror or e}") from None
    kind = "JSON" if str(path).endswith(".json") else "YAML"
    try:
        data = json.loads(text) if kind == "JSON" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise AclError(f"--acls {path}: not valid {kind} ({first})") from None
    return parse_acls(data, str(path))
