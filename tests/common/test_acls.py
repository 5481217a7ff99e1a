"""ACL decisions, pure: who ANY and ANONYMOUS match, reserved framework names, and the actions
the framework daemons and /metrics check."""

from __future__ import annotations

import pytest

from agora.common.acls import AclError, parse_acls
from agora.common.authz import Action


def acls(text: str):
    import yaml

    return parse_acls(yaml.safe_load(text), "acls.yaml")


def test_any_matches_every_named_caller_but_never_an_anonymous_one():
    rules = acls("read_state: [{principals: [ANY]}]")
    assert rules.authorize("alice", Action.READ_STATE, "").allowed
    refused = rules.authorize("", Action.READ_STATE, "")
    assert not refused.allowed and "no rule of acls.yaml allows it" in refused.reason
    opened = acls("read_state: [{principals: [ANY, ANONYMOUS]}]")
    assert opened.authorize("", Action.READ_STATE, "").allowed
    only_anonymous = acls("read_metrics: [{principals: [ANONYMOUS]}]")
    assert only_anonymous.authorize("", Action.READ_METRICS, "").allowed
    assert not only_anonymous.authorize("alice", Action.READ_METRICS, "").allowed


def test_a_reserved_name_is_for_its_principals_and_other_names_for_anyone_allowed_a_role():
    rules = acls(
        "register_frameworks: [{principals: [batch], roles: ['*'], names: [batch]},"
        " {principals: [ANY], roles: [dev]}]"
    )
    assert rules.authorize("batch", Action.USE_FRAMEWORK_NAME, "batch").allowed
    refused = rules.authorize("mallory", Action.USE_FRAMEWORK_NAME, "batch")
    assert not refused.allowed and "reserves the name for batch" in refused.reason
    assert rules.authorize("mallory", Action.USE_FRAMEWORK_NAME, "tools").allowed
    assert rules.authorize("mallory", Action.REGISTER_FRAMEWORK, "dev").allowed


def test_framework_daemon_actions_deny_everyone_unless_a_rule_allows():
    rules = acls("submit_jobs: [{principals: [alice], roles: ['*']}]")
    assert rules.authorize("alice", Action.SUBMIT_JOB, "*").allowed
    assert not rules.authorize("alice", Action.SUBMIT_JOB, "prod").allowed
    assert not rules.authorize("alice", Action.MANAGE_APP, "*").allowed  # no manage_apps rule


@pytest.mark.parametrize(
    "text, message",
    [
        ("register_frameworks: [{principals: [a], roles: [x], names: [ANY]}]", "not ANY"),
        ("submit_jobs: [{principals: [a]}]", "name the roles"),
        ("read_metrics: [{principals: [a], roles: [x]}]", "unknown field(s) roles"),
    ],
)
def test_malformed_rules_say_what_to_write(text, message):
    with pytest.raises(AclError) as e:
        acls(text)
    assert message in str(e.value)


def test_a_name_reserved_for_any_named_caller_is_not_an_anonymous_ones():
    rules = acls(
        "register_frameworks: [{principals: [ANY], roles: ['*'], names: [shared]},"
        " {principals: [ANONYMOUS], roles: ['*'], names: [open]}]"
    )
    assert rules.authorize("alice", Action.USE_FRAMEWORK_NAME, "shared").allowed
    assert not rules.authorize("", Action.USE_FRAMEWORK_NAME, "shared").allowed
    assert rules.authorize("", Action.USE_FRAMEWORK_NAME, "open").allowed
    assert not rules.authorize("alice", Action.USE_FRAMEWORK_NAME, "open").allowed
