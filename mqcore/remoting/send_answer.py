"""A single send's answer frame in one call (the server's direct send path).

:func:`encode_send_answer` gives the bytes ``RemotingCommand.response(code, remark,
SendMessageResponseHeader(...))`` encodes to with the request's opaque and JSON
serialisation, written in C when the speedups are built; :func:`py_encode_send_answer` is
the Python reference it is held to (tests/remoting).
"""

from __future__ import annotations

from mqcore import speedups
from mqcore.protocol.headers import SendMessageResponseHeader
from mqcore.remoting.command import DEFAULT_VERSION, FLAG_RESPONSE, LanguageCode, RemotingCommand

__all__ = ["encode_send_answer", "py_encode_send_answer"]

_speedups = speedups.load("remoting")
_c_encode_send_answer = None if _speedups is None else _speedups.encode_send_answer
_LANGUAGE = int(LanguageCode.PYTHON)  # an answer's language, as RemotingCommand's default


def encode_send_answer(
    code: int,
    opaque: int,
    remark: str | None,
    msg_id: str,
    queue_id: int,
    queue_offset: int,
    transaction_id: str | None,
) -> bytes:
    """The whole answer frame (length words, JSON header, no body) of a single send.

    :raises ProtocolError: a value does not fit the frame (as the command's encoder).
    """
    if _c_encode_send_answer is not None:
        frame: bytes | None = _c_encode_send_answer(
            code,
            _LANGUAGE,
            DEFAULT_VERSION,
            opaque,
            remark,
            msg_id,
            queue_id,
            queue_offset,
            transaction_id,
        )
        if frame is not None:
            return frame
    return py_encode_send_answer(
        code, opaque, remark, msg_id, queue_id, queue_offset, transaction_id
    )


def py_encode_send_answer(
    code: int,
    opaque: int,
    remark: str | None,
    msg_id: str,
    queue_id: int,
    queue_offset: int,
    transaction_id: str | None,
) -> bytes:
    """The reference of :func:`encode_send_answer`: the generic answer, encoded in Python."""
    header = SendMessageResponseHeader(
        msg_id=msg_id, queue_id=queue_id, queue_offset=queue_offset, transaction_id=transaction_id
    )
    cmd = RemotingCommand.response(code, remark, header)
    cmd.opaque = opaque
    cmd.flag |= FLAG_RESPONSE
    head, body = cmd.py_encode_parts()
    return head + bytes(body)
