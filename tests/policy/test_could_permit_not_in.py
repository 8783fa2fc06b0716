"""could_permit is True when some arguments make decide allow: `VALUE not in args.p` included."""

from __future__ import annotations

import pytest

from sharedos.policy import compile_source

FILES = "namespace files\nrequirement files.read { action read; resource path(args.path) }\n"
ALICE = {"principal": "alice", "roles": []}


@pytest.mark.parametrize(
    "condition",
    [
        '"a" not in args.tags',
        'not ("a" in args.tags)',
        "context.principal not in args.tags",
        "action not in args.tags",
        "context.roles not in args.tags",
    ],
)
def test_a_permit_on_a_value_missing_from_an_argument_list_can_permit(condition: str) -> None:
    policy = compile_source(FILES + f'permit read on "/d/**" when {condition}\n', "p.sos")
    decision = policy.decide("files.read", {"path": "/d/x", "tags": []}, ALICE)
    assert decision.allowed
    assert policy.could_permit("files.read", ALICE)


def test_a_forbid_unless_a_value_is_in_an_argument_list_still_lists_the_tool() -> None:
    policy = compile_source(
        FILES + 'permit read on "/d/**"\nforbid read on "/d/**" when "secret" in args.tags\n',
        "p.sos",
    )
    assert policy.decide("files.read", {"path": "/d/x", "tags": ["public"]}, ALICE).allowed
    assert policy.could_permit("files.read", ALICE)
