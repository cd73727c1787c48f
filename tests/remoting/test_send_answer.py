"""The single send's answer frame in one C call (mqcore.remoting.send_answer) against its
Python reference and the generic answer the processor builds."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqcore import speedups
from mqcore.protocol.codes import ResponseCode
from mqcore.protocol.headers import SendMessageResponseHeader
from mqcore.remoting.command import RemotingCommand
from mqcore.remoting.send_answer import encode_send_answer, py_encode_send_answer

_c = speedups.load("remoting")

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)


def generic(code: int, opaque: int, remark: str | None, msg_id: str, queue_id: int,
            queue_offset: int, txn: str | None) -> bytes:  # fmt: skip
    """What the generic path writes: the response command, through the server's encoder."""
    header = SendMessageResponseHeader(
        msg_id=msg_id, queue_id=queue_id, queue_offset=queue_offset, transaction_id=txn
    )
    cmd = RemotingCommand.response(code, remark, header)
    cmd.opaque = opaque
    return cmd.encode()


@settings(max_examples=300, deadline=None)
@given(
    code=st.sampled_from([int(c) for c in ResponseCode]) | INT32,
    opaque=INT32,
    remark=st.none() | TEXT,
    msg_id=TEXT,
    queue_id=INT32,
    queue_offset=INT64,
    txn=st.none() | TEXT,
)
def test_send_answer_is_the_generic_answer(
    code: int, opaque: int, remark: str | None, msg_id: str, queue_id: int, queue_offset: int,
    txn: str | None,
) -> None:  # fmt: skip
    """C, the reference and the generic command encoder give the same bytes."""
    args = (code, opaque, remark, msg_id, queue_id, queue_offset, txn)
    expected = generic(*args)
    assert py_encode_send_answer(*args) == expected
    assert encode_send_answer(*args) == expected
    decoded = RemotingCommand.decode(expected[4:])
    assert (decoded.code, decoded.opaque, decoded.remark) == (code, opaque, remark)
    assert decoded.is_response


@pytest.mark.skipif(_c is None, reason="the remoting speedups are not in use")
def test_c_leaves_what_it_does_not_write_to_the_reference() -> None:
    """Values out of the plain shape are not guessed at: C answers None."""
    assert _c is not None
    fn = _c.encode_send_answer
    assert fn(0, 3, 401, 1, None, "id", 2**31, 0, None) is None  # queueId over int32
    assert fn(0, 3, 401, 1, 5, "id", 0, 0, None) is None  # a remark that is no str
    assert fn(0, 99, 401, 1, None, "id", 0, 0, None) is None  # no such language
    assert fn(0, 3, 401, 1, None, "id", 0, 0, None) is not None
