"""Cutting a byte stream into remoting frames (RocketMQ's ``NettyDecoder``).

Each frame starts with a 4-byte big-endian length of what follows. A length that would make
the frame (length word included) larger than ``max_frame_size`` is refused before any of it is
buffered, as RocketMQ refuses frames over 16 MiB.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from mqcore import speedups
from mqcore.errors import ProtocolError

__all__ = ["DEFAULT_MAX_FRAME_SIZE", "FrameDecoder"]

DEFAULT_MAX_FRAME_SIZE = 16 * 1024 * 1024  # RocketMQ's com.rocketmq.remoting.frameMaxLength
_LENGTH = struct.Struct(">i")
_MIN_LENGTH = 4  # the header-length word
_speedups = speedups.load("remoting")
_c_cut_decode = None if _speedups is None else getattr(_speedups, "cut_decode", None)

#: What :meth:`FrameDecoder._feed` cuts with: (buffer, start, end, out list) -> next start.
_Cutter = Callable[[Any, int, int, list[Any]], int]


class FrameDecoder:
    """Incremental decoder: :meth:`feed` bytes as they arrive, get complete frames back.

    A frame is returned without its length word, ready for
    :meth:`~mqcore.remoting.command.RemotingCommand.decode`. Not thread-safe: one per
    connection.
    """

    __slots__ = ("_buf", "_pos", "max_frame_size")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self.max_frame_size = max_frame_size
        self._buf = bytearray()
        self._pos = 0

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as a frame."""
        return len(self._buf) - self._pos

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Append ``data``; return every frame now complete, in order.

        ``data`` is not kept: a caller may reuse its buffer once this returns.

        :raises ProtocolError: a length word is negative, below the minimum or over
            ``max_frame_size``; the stream cannot be resynchronised after that.
        """
        return self._feed(data, self._cut)

    def feed_decoded(self, data: bytes | bytearray | memoryview) -> list[Any]:
        """:meth:`feed`, with the headers decoded in the same pass where C can.

        Each complete frame comes as the tuple of
        :meth:`~mqcore.remoting.command.RemotingCommand.decode`'s C reader (code, language,
        version, opaque, flag, remark, ext_fields, body), read where the frame lies in
        ``data``, or as the frame's bytes when that reader leaves it to the Python reference
        (and always without the speedups): whoever serves a bytes frame decodes it with
        ``RemotingCommand.decode``, which decides and words any error.

        :raises ProtocolError: as :meth:`feed`.
        """
        if _c_cut_decode is None:
            return self._feed(data, self._cut)
        if self._buf:  # the start of a frame is buffered
            return self._feed(data, self._cut_decode)
        # Nothing buffered (then _pos is 0 too): _feed's first case, without its calls.
        items: list[Any] = []
        pos = _c_cut_decode(data, 0, len(data), self.max_frame_size, items)
        if pos < 0:
            self._py_cut(data, -1 - pos, len(data), items)  # raises at the bad length word
        elif pos < len(data):
            self._buf += data[pos:]
        return items

    def _feed(self, data: bytes | bytearray | memoryview, cut: _Cutter) -> list[Any]:
        if self._pos == len(self._buf):
            # Nothing buffered (the common case): cut frames straight from ``data`` and keep
            # only an incomplete tail, so each byte is copied once, not twice.
            frames: list[Any] = []
            self._buf.clear()
            self._pos = cut(data, 0, len(data), frames)
            if self._pos < len(data):
                self._buf += data[self._pos :]
            self._pos = 0
            return frames
        buf = self._buf
        buf += data
        frames = []
        pos = cut(buf, self._pos, len(buf), frames)
        # Drop consumed bytes in one go, not per frame (a batch of small frames stays linear).
        if pos == len(buf):
            buf.clear()
            pos = 0
        elif pos > 65536:
            del buf[:pos]
            pos = 0
        self._pos = pos
        return frames

    def _cut(
        self, buf: bytes | bytearray | memoryview, pos: int, end: int, frames: list[bytes]
    ) -> int:
        """Append the complete frames of ``buf[pos:end]`` to ``frames``; return where the
        first incomplete one starts.

        In C when the speedups are built; the C loop stops at a bad length word and leaves
        the error to :meth:`_py_cut`, the reference."""
        if _speedups is not None:
            pos = _speedups.cut(buf, pos, end, self.max_frame_size, frames)
            if pos >= 0:
                return int(pos)
            pos = -1 - pos
        return self._py_cut(buf, pos, end, frames)

    def _cut_decode(
        self, buf: bytes | bytearray | memoryview, pos: int, end: int, items: list[Any]
    ) -> int:
        """:meth:`_cut` with each frame decoded where C can (see :meth:`feed_decoded`)."""
        assert _c_cut_decode is not None
        pos = _c_cut_decode(buf, pos, end, self.max_frame_size, items)
        if pos >= 0:
            return int(pos)
        return self._py_cut(buf, -1 - pos, end, items)  # raises at the bad length word

    def _py_cut(
        self, buf: bytes | bytearray | memoryview, pos: int, end: int, frames: list[bytes]
    ) -> int:
        """The reference of :meth:`_cut`, in Python."""
        limit = self.max_frame_size
        while end - pos >= 4:
            (length,) = _LENGTH.unpack_from(buf, pos)
            if length < _MIN_LENGTH or length + 4 > limit:
                raise ProtocolError(
                    f"frame length {length} is out of range (at least {_MIN_LENGTH}, at most "
                    f"{limit - 4}); the stream is not RocketMQ remoting"
                )
            if end - pos - 4 < length:
                break
            frames.append(bytes(buf[pos + 4 : pos + 4 + length]))
            pos += 4 + length
        return pos
