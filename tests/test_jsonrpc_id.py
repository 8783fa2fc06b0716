"""``sharedos.jsonrpc_id``: the id read from a message's edges is one the peer sent, or none.

The id of a frame that cannot be parsed whole is what its answer goes to. The
reader took the longest JSON prefix of the value: ``"id":01`` (not JSON) was
read as ``0`` and ``"id":12abc`` as ``12``, so the bridge's parse error went to
request 0 or 12 — on stdio, where the id is the only way a client matches an
answer, another request's (the SDK clients number ``initialize`` 0).
"""

from __future__ import annotations

from typing import Any

import pytest

from sharedos.jsonrpc_id import has_member, message_id, request_id

CALL = b'"method":"tools/call","params":{"name":"files.read","arguments":{"path":"/a"}}}'


@pytest.mark.parametrize(
    "value",
    [b"01", b"00", b"-01", b"12abc", b"1x", b"0x10", b'"a"b', b"1 2", b"7\x0c", b"\x0c7"],
)
def test_a_value_that_is_not_json_names_no_request(value: bytes) -> None:
    head = b'{"jsonrpc":"2.0","id":' + value + b"," + CALL
    assert message_id(head, head) is None
    last = b'{"jsonrpc":"2.0",' + CALL[:-1] + b',"id":' + value + b"}"
    assert message_id(last, last) is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [(b"0", 0), (b"-0", 0), (b"12", 12), (b' "a" ', "a"), (b"\r\n 7\t", 7), (b"-5", -5)],
)
def test_a_json_id_is_read_wherever_it_stands(value: bytes, expected: Any) -> None:
    head = b'{"jsonrpc":"2.0","id":' + value + b"," + CALL
    assert message_id(head, b"") == expected
    last = b'{"jsonrpc":"2.0",' + CALL[:-1] + b',"id":' + value + b"}"
    assert message_id(b"{", last) == expected


@pytest.mark.parametrize(
    ("head", "tail"),
    [
        (b'{"jsonrpc":"2.0","id":1,"result":{"action":"acc', b""),
        (b'{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"', b""),
        (b'{"result":{"content":"', b'"},"jsonrpc":"2.0","id":1}'),
        (
            b'{"jsonrpc":"2.0","id":1,"result":{"a":1}} x',
            b'{"jsonrpc":"2.0","id":1,"result":{"a":1}} x',
        ),
    ],
)
def test_an_answer_names_no_request(head: bytes, tail: bytes) -> None:
    """An answer's id is one of the other side's requests: answering it with an error
    reached the peer as the answer to its own request of that id."""
    assert message_id(head, tail) == 1
    assert request_id(head, tail) is None


@pytest.mark.parametrize(
    ("head", "tail"),
    [
        (b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"result":"', b""),
        (b'{"params":{"error":{"x":"', b'"}},"method":"tools/call","id":1}'),
        # a request with a result member is still a request (the bridge answers it)
        (b'{"jsonrpc":"2.0","id":1,"method":"ping","result":{"x":"', b""),
        # neither shows: answered, as before
        (b'{"jsonrpc":"2.0","id":1,"params":{"x":"', b""),
    ],
)
def test_a_request_is_still_named(head: bytes, tail: bytes) -> None:
    assert request_id(head, tail) == 1


def test_a_member_is_top_level_only() -> None:
    nested = b'{"jsonrpc":"2.0","id":1,"params":{"result":1,"error":2,"x":"'
    assert not has_member(nested, b"", "result") and not has_member(nested, b"", "error")
    assert has_member(nested, b"", "params") and has_member(nested, b"", "id")
    assert has_member(b"", b'"a"},"result":{"b":1},"id":1}', "result")
    assert not has_member(b"", b'"a","result":{"b":1}},"id":1}', "result")
