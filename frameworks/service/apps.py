"""App definitions: validation with messages that say what to change, defaults, versions, and
reading an app file (JSON or YAML). Pure: no I/O beyond parsing text it is given."""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Mapping
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor

from agora.frameworks.sdk.constraints import (
    Constraint,
    ConstraintError,
    check_pattern_budget,
)
from agora.frameworks.service.backoff import (
    DEFAULT_BACKOFF_FACTOR,
    DEFAULT_BACKOFF_SECONDS,
    DEFAULT_MAX_LAUNCH_DELAY,
)
from agora.frameworks.service.deploy import Strategy
from agora.v1 import common_pb2, services_pb2

App = services_pb2.App

_ID = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
MAX_PORTS = 100
# Instances of one app (Marathon has no such limit; a typo of 2^31-1 should not be taken).
MAX_INSTANCES = 10_000
# Health check defaults for fields left at 0 (Marathon's, shortened: services here start fast).
HEALTH_DEFAULTS = {
    "grace_period_seconds": 60.0,
    "interval_seconds": 10.0,
    "timeout_seconds": 5.0,
    "max_consecutive_failures": 3,
}


class AppError(ValueError):
    """An app that cannot be accepted; `code` is the gRPC status name to answer with."""

    def __init__(self, message: str, code: str = "INVALID_ARGUMENT") -> None:
        super().__init__(message)
        self.code = code


def _positive(name: str, value: float, app_id: str, allow_zero: bool = False) -> None:
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        need = "0 or more" if allow_zero else "more than 0"
        raise AppError(f"app {app_id}: {name} must be {need}, got {value:g}")


def normalize(app: App) -> App:
    """A validated copy with defaults filled in (version untouched); AppError if unusable."""
    out = App()
    out.CopyFrom(app)
    if not _ID.match(out.id):
        raise AppError(
            f"app id {out.id!r} is not valid: use 1-63 lower-case letters, digits, "
            "'-', '_' or '.', starting with a letter or digit"
        )
    app_id = out.id
    if out.cmd and out.args:
        raise AppError(f"app {app_id}: give cmd (a shell line) or args (argv), not both")
    if not out.cmd.strip() and not (out.args and out.args[0]):
        raise AppError(f"app {app_id} has no command: set cmd (a shell line) or args (argv)")
    if not 0 <= out.instances <= MAX_INSTANCES:
        raise AppError(
            f"app {app_id}: instances must be between 0 and {MAX_INSTANCES}, got {out.instances}"
        )
    _positive("cpus", out.cpus, app_id)
    _positive("mem", out.mem, app_id)
    _positive("disk", out.disk, app_id, allow_zero=True)
    _positive("kill_grace_period_seconds", out.kill_grace_period_seconds, app_id, allow_zero=True)
    if not 0 <= out.ports <= MAX_PORTS:
        raise AppError(f"app {app_id}: ports is a count of ports in 0-{MAX_PORTS}, got {out.ports}")
    out.role = out.role or "*"
    parsed_all = []
    for i, c in enumerate(out.constraints):
        try:
            parsed = Constraint.parse(c.field, c.operator, c.value)
        except ConstraintError as e:
            raise AppError(f"app {app_id}: constraints[{i}]: {e}") from None
        c.field, c.operator, c.value = parsed.field, parsed.operator, parsed.value
        parsed_all.append(parsed)
    try:
        check_pattern_budget(parsed_all, f"app {app_id}")
    except ConstraintError as e:
        raise AppError(str(e)) from None
    _normalize_health(out)
    _check_container(out)
    b = out.backoff
    if not b.HasField("backoff_seconds"):
        b.backoff_seconds = DEFAULT_BACKOFF_SECONDS
    if not b.HasField("backoff_factor"):
        b.backoff_factor = DEFAULT_BACKOFF_FACTOR
    if not b.HasField("max_launch_delay_seconds"):
        b.max_launch_delay_seconds = DEFAULT_MAX_LAUNCH_DELAY
    _positive("backoff.backoff_seconds", b.backoff_seconds, app_id, allow_zero=True)
    _positive(
        "backoff.max_launch_delay_seconds", b.max_launch_delay_seconds, app_id, allow_zero=True
    )
    if not (math.isfinite(b.backoff_factor) and b.backoff_factor >= 1):
        raise AppError(
            f"app {app_id}: backoff.backoff_factor must be 1 or more, got {b.backoff_factor:g}"
        )
    s = out.upgrade_strategy
    if not s.HasField("minimum_health_capacity"):
        s.minimum_health_capacity = 1.0
    if not s.HasField("maximum_over_capacity"):
        s.maximum_over_capacity = 1.0
    for name in ("minimum_health_capacity", "maximum_over_capacity"):
        value = getattr(s, name)
        if not (math.isfinite(value) and 0 <= value <= 1):
            raise AppError(
                f"app {app_id}: upgrade_strategy.{name} must be in [0, 1], got {value:g}"
            )
    if s.minimum_health_capacity == 1 and s.maximum_over_capacity == 0:
        raise AppError(
            f"app {app_id}: upgrade_strategy with minimum_health_capacity 1 and "
            "maximum_over_capacity 0 can never replace an instance; lower the first "
            "or raise the second"
        )
    return out


def _check_container(app: App) -> None:
    if not app.HasField("container"):
        return
    image, network = app.container.image, app.container.network
    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}$", image) or ".." in image:
        raise AppError(
            f"app {app.id}: container.image {image!r} is not an image name (e.g. busybox:latest)"
        )
    if network not in ("", "host", "none"):
        raise AppError(f"app {app.id}: container.network {network!r}: use host or none")


def _normalize_health(app: App) -> None:
    if not app.HasField("health_check"):
        return
    hc = app.health_check
    kind = hc.WhichOneof("check")
    if kind is None:
        raise AppError(f"app {app.id}: health_check needs one of http, tcp or command")
    if kind in ("http", "tcp"):
        index = getattr(hc, kind).port_index
        if index >= app.ports:
            raise AppError(
                f"app {app.id}: the {kind} health check uses PORT{index} but the app "
                f"has {app.ports} port(s); set ports to at least {index + 1}"
            )
        if kind == "http" and not hc.http.path:
            hc.http.path = "/"
        if kind == "http" and not hc.http.path.startswith("/"):
            raise AppError(f"app {app.id}: health_check.http.path must start with '/'")
    elif not (hc.command.shell.strip() or hc.command.argv):
        raise AppError(f"app {app.id}: the command health check has no command")
    for name, default in HEALTH_DEFAULTS.items():
        value = getattr(hc, name)
        if isinstance(value, float) and (not math.isfinite(value) or value < 0):
            raise AppError(f"app {app.id}: health_check.{name} must be 0 or more")
        if value == 0:
            setattr(hc, name, default)
    if hc.delay_seconds < 0 or not math.isfinite(hc.delay_seconds):
        raise AppError(f"app {app.id}: health_check.delay_seconds must be 0 or more")


def strategy_of(app: App) -> Strategy:
    s = app.upgrade_strategy
    return Strategy(s.minimum_health_capacity, s.maximum_over_capacity)


def constraints_of(app: App) -> list[Constraint]:
    return [Constraint(c.field, c.operator, c.value) for c in app.constraints]


def definition_key(app: App) -> bytes:
    """What makes tasks differ: everything but instances and version."""
    copy = App()
    copy.CopyFrom(app)
    copy.instances = 0
    copy.version = ""
    return copy.SerializeToString(deterministic=True)


def new_version(now: float | None = None) -> str:
    """A sortable version string: UTC time with microseconds, as Marathon's."""
    now = time.time() if now is None else now
    micros = int(round(now * 1_000_000))
    return (
        time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(micros // 1_000_000))
        + f".{micros % 1_000_000:06d}Z"
    )


def command_of(app: App) -> common_pb2.CommandInfo:
    env = dict(app.env)
    env.setdefault("AGORA_APP_ID", app.id)
    env.setdefault("AGORA_APP_VERSION", app.version)
    if app.cmd:
        return common_pb2.CommandInfo(shell=app.cmd, environment=env)
    return common_pb2.CommandInfo(argv=list(app.args), environment=env)


# --- app files ---------------------------------------------------------------------------------


def parse_app_text(text: str, source: str = "app file") -> App:
    """An App from JSON or YAML text; AppError saying where the file is wrong."""
    try:
        if source.endswith(".json") or text.lstrip().startswith("{"):
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except json.JSONDecodeError as e:
        raise AppError(
            f"{source}: not valid JSON at line {e.lineno} column {e.colno}: {e.msg}"
        ) from None
    except Exception as e:  # yaml.YAMLError: its str() names the line and column
        raise AppError(f"{source}: not valid YAML: {' '.join(str(e).split())}") from None
    if data is None:
        raise AppError(
            f"{source} is empty: write an app's fields in it (id, cmd, instances, cpus, mem)"
        )
    if not isinstance(data, Mapping):
        raise AppError(
            f"{source}: expected an object of app fields (id, cmd, instances...), "
            f"got {type(data).__name__}"
        )
    app = app_from_mapping(data, source)  # unknown fields and bad values are named first
    # proto3 cannot tell a field left out from one set to 0: a file must say these itself.
    missing = [name for name in REQUIRED_IN_FILES if name not in data]
    if missing:
        raise AppError(
            f"{source}: missing {', '.join(repr(m) for m in missing)}; an app file needs "
            "id, cmd (or args), instances, cpus and mem"
        )
    return app


REQUIRED_IN_FILES = ("id", "instances", "cpus", "mem")


def app_from_mapping(data: Mapping[str, Any], source: str = "app") -> App:
    """An App from a dict: the App message's fields, with conveniences for people:
    `cmd` may be a list (argv), `constraints` a list of [field, OP, value] lists, and a health
    check's `command` a shell string."""
    fields = dict(data)
    if isinstance(fields.get("cmd"), list):
        fields["args"] = fields.pop("cmd")
    constraints = fields.get("constraints")
    if constraints is not None:
        if not isinstance(constraints, list):
            raise AppError(f"{source}: constraints must be a list of [field, OPERATOR, value]")
        out = []
        for i, c in enumerate(constraints):
            if isinstance(c, list | tuple) and 2 <= len(c) <= 3:
                out.append(
                    {
                        "field": str(c[0]),
                        "operator": str(c[1]),
                        "value": "" if len(c) < 3 else str(c[2]),
                    }
                )
            elif isinstance(c, Mapping):
                out.append(dict(c))
            else:
                raise AppError(
                    f"{source}: constraints[{i}] must be [field, OPERATOR] or "
                    f"[field, OPERATOR, value], got {c!r}"
                )
        fields["constraints"] = out
    health = fields.get("health_check")
    if isinstance(health, Mapping):
        health = dict(health)
        command = health.get("command")
        if isinstance(command, str):
            health["command"] = {"shell": command}
        elif isinstance(command, list):
            health["command"] = {"argv": command}
        fields["health_check"] = health
    for name in ("env", "labels"):  # YAML reads `PORT: 80` as a number: keep it as text
        mapping = fields.get(name)
        if isinstance(mapping, Mapping):
            fields[name] = {str(k): str(v) for k, v in mapping.items()}
    try:
        return json_format.ParseDict(fields, App())
    except json_format.ParseError as e:
        text = " ".join(str(e).split())
        unknown = re.search(r'has no field named "([^"]+)"', text)
        bad_value = re.search(r"Failed to parse (\w+) field", text)
        if unknown:
            known = ", ".join(f.name for f in App.DESCRIPTOR.fields if f.name != "version")
            text = f"unknown field {unknown.group(1)!r} (an app has: {known})"
        elif bad_value:
            text = _bad_value(bad_value.group(1), fields)
        raise AppError(f"{source}: {text}") from None


# What a number field of the App message takes, by its protobuf type.
_KINDS = {
    FieldDescriptor.TYPE_INT32: "a whole number",
    FieldDescriptor.TYPE_INT64: "a whole number",
    FieldDescriptor.TYPE_UINT32: "a whole number, 0 or more",
    FieldDescriptor.TYPE_DOUBLE: "a number",
    FieldDescriptor.TYPE_FLOAT: "a number",
    FieldDescriptor.TYPE_BOOL: "true or false",
}


def _bad_value(name: str, fields: Mapping[str, Any]) -> str:
    """A value protobuf could not take, said as "instances must be a whole number, got
    'three'" (not Python's "invalid literal for int()")."""
    field = App.DESCRIPTOR.fields_by_name.get(name)
    kind = _KINDS.get(field.type, "") if field is not None else ""
    given = fields.get(name, "?")
    if not kind:
        return f"{name}: {given!r} is not a value this field takes"
    return f"{name} must be {kind}, got {given!r}"
