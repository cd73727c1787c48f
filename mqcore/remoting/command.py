"""RocketMQ's ``RemotingCommand``: the unit of the remoting protocol, and its two encodings.

A frame on the wire::

    int32 BE  total length  (4 + header length + body length; the length field itself excluded)
    int32 BE  serialisation type << 24 | header length
    header    JSON (type 0) or RocketMQ's binary layout (type 1, ``RocketMQSerializable``)
    body      the rest

The binary header is: code int16, language int8, version int16, opaque int32, flag int32,
remark (int32 length + UTF-8; length 0 = none), extFields (int32 length of the entries, then
per entry: int16 key length + key, int32 value length + value). Everything is big-endian.
A response is written in the serialisation its request used.
"""

from __future__ import annotations

import enum
import itertools
import json
import re
import struct
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import attrs

from mqcore import speedups
from mqcore.errors import ProtocolError
from mqcore.protocol.fields import CommandHeader, Kind, field_reader

__all__ = [
    "DEFAULT_VERSION",
    "FLAG_ONEWAY",
    "FLAG_RESPONSE",
    "AnswerPlan",
    "LanguageCode",
    "PreparedRequest",
    "RemotingCommand",
    "SerializeType",
    "decode_answer",
    "encode_request_head",
    "next_opaque",
    "py_decode_answer",
    "py_encode_request_head",
    "salvage_opaque",
]

FLAG_RESPONSE = 0x1  # RPC_TYPE bit: 0 request, 1 response
FLAG_ONEWAY = 0x2  # RPC_ONEWAY bit: no response expected

# RocketMQ 4.9.4's MQVersion ordinal: brokers gate some features on the client's version.
DEFAULT_VERSION = 401

_INT = struct.Struct(">i")
_BIN_FIXED = struct.Struct(">hbhii")  # code, language, version, opaque, flag
_FRAME_PREFIX = struct.Struct(">ii")  # total length, type|header length
_SHORT = struct.Struct(">h")
_HEADER_LEN_MASK = 0xFFFFFF
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1

H = TypeVar("H", bound=CommandHeader)


class SerializeType(enum.IntEnum):
    """How a frame's header is encoded (the high byte of the header-length word)."""

    JSON = 0
    ROCKETMQ = 1


class LanguageCode(enum.IntEnum):
    """The sender's language (RocketMQ's ``LanguageCode``): a name in JSON, a byte in binary."""

    JAVA = 0
    CPP = 1
    DOTNET = 2
    PYTHON = 3
    DELPHI = 4
    ERLANG = 5
    RUBY = 6
    OTHER = 7
    HTTP = 8
    GO = 9
    PHP = 10
    OMS = 11
    RUST = 12
    NODE_JS = 13


_LANGUAGE_BY_NAME = {m.name: m for m in LanguageCode}
_LANGUAGES = tuple(LanguageCode)  # by value: the C decoder gives the language's number
_speedups = speedups.load("remoting")
_c_decode_json_frame = None if _speedups is None else _speedups.decode_json_frame
_c_encode_json_head = None if _speedups is None else _speedups.encode_json_head
_c_encode_request_head = None if _speedups is None else _speedups.encode_request_head
_c_decode_answer = None if _speedups is None else _speedups.decode_answer
_escape: Callable[[str], str] = json.encoder.encode_basestring
# extFields of strings only (what headers write) go through json's C encoder in one call;
# the same bytes as escaping each name and value (non-ASCII kept as UTF-8, no spaces).
_make_encoder = getattr(json.encoder, "c_make_encoder", None)
if _make_encoder is not None:
    # json's C encoder, made once (JSONEncoder.encode makes a new one per call).
    _c_encode = _make_encoder(
        None, None, json.encoder.encode_basestring, None, ":", ",", False, False, True
    )

    def _encode_strings(ext: dict[str, str]) -> str:
        return "".join(_c_encode(ext, 0))

else:  # pragma: no cover - CPython always has the C encoder
    _py_encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), check_circular=False)

    def _encode_strings(ext: dict[str, str]) -> str:
        return _py_encoder.encode(ext)


_json_decode = json.JSONDecoder().decode
_opaque_counter = itertools.count(1)
_STR = frozenset({str})


def next_opaque() -> int:
    """A fresh request id (positive int32, wrapping), unique within this process for a while."""
    return next(_opaque_counter) & _INT32_MAX


def _language(value: Any) -> LanguageCode:
    if isinstance(value, str):
        return _LANGUAGE_BY_NAME.get(value, LanguageCode.OTHER)
    if value.__class__ is int:
        try:
            return LanguageCode(value)
        except ValueError:
            return LanguageCode.OTHER
    raise ProtocolError(f"command header: 'language' must be a name or a number, got {value!r}")


def _int32(obj: Mapping[str, Any], key: str, default: int) -> int:
    value = obj.get(key, default)
    if value.__class__ is int and _INT32_MIN <= value <= _INT32_MAX:
        return int(value)
    raise ProtocolError(f"command header: {key!r} must be a 32-bit integer, got {value!r:.60}")


def _ext_str(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@attrs.define(slots=True, eq=True)
class RemotingCommand:
    """One request or response (RocketMQ's ``RemotingCommand``).

    ``ext_fields`` holds a custom header's fields (values as received: strings, or numbers
    from clients that send JSON numbers); ``body`` is bytes-like and never copied on encode.
    """

    code: int
    language: LanguageCode = LanguageCode.PYTHON
    version: int = DEFAULT_VERSION
    opaque: int = attrs.field(factory=next_opaque)
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, Any] | None = None
    body: bytes | bytearray | memoryview | None = None
    serialize_type: SerializeType = SerializeType.JSON

    # --- building -------------------------------------------------------------------------

    @classmethod
    def request(
        cls,
        code: int,
        header: CommandHeader | None = None,
        body: bytes | bytearray | memoryview | None = None,
        *,
        oneway: bool = False,
        serialize_type: SerializeType = SerializeType.JSON,
    ) -> RemotingCommand:
        """A request with a fresh opaque, the header's fields as extFields."""
        return cls(
            code,
            ext_fields=header.to_ext_fields() if header is not None else None,
            body=body,
            flag=FLAG_ONEWAY if oneway else 0,
            serialize_type=serialize_type,
        )

    @classmethod
    def response(
        cls,
        code: int,
        remark: str | None = None,
        header: CommandHeader | None = None,
        body: bytes | bytearray | memoryview | None = None,
        *,
        to: RemotingCommand | None = None,
    ) -> RemotingCommand:
        """A response; with ``to``, it carries that request's opaque and serialisation.

        (The server sets both anyway when it sends a processor's answer.)
        """
        cmd = cls(
            code,
            remark=remark,
            ext_fields=header.to_ext_fields() if header is not None else None,
            body=body,
            flag=FLAG_RESPONSE,
            opaque=to.opaque if to is not None else 0,
        )
        if to is not None:
            cmd.serialize_type = to.serialize_type
        return cmd

    @property
    def is_response(self) -> bool:
        """Flag bit 0: this is a response."""
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        """Flag bit 1: the sender expects no response."""
        return bool(self.flag & FLAG_ONEWAY)

    def read_header(self, cls: type[H]) -> H:
        """The custom header ``cls`` read from ``ext_fields``. :raises ProtocolError: see
        :meth:`CommandHeader.from_ext_fields`."""
        return cls.from_ext_fields(self.ext_fields)

    # --- encoding -------------------------------------------------------------------------

    def encode_header(self) -> bytes:
        """The header in this command's serialisation (no length words).

        :raises ProtocolError: a value does not fit the binary layout (code or version
            outside int16, opaque or flag outside int32, a key over 32767 bytes).
        """
        if self.serialize_type == SerializeType.ROCKETMQ:
            try:
                return self._binary_header()
            except struct.error as exc:
                raise ProtocolError(
                    f"command code {self.code} does not fit RocketMQ's binary header: {exc}"
                ) from None
        return self._json_header()

    def _json_header(self) -> bytes:
        # Written by hand rather than through json.dumps: this runs once per request and
        # answer, and the fixed part needs no escaping (the strings go through json's own
        # C escaper). The output is what json.dumps would give.
        parts = [
            f'{{"code":{int(self.code)},"language":"{self.language.name}",'
            f'"version":{int(self.version)},"opaque":{int(self.opaque)},"flag":{int(self.flag)}'
        ]
        if self.remark is not None:
            parts.append(f',"remark":{_escape(self.remark)}')
        ext = self.ext_fields
        if ext is not None:
            if set(map(type, ext)) <= _STR and set(map(type, ext.values())) <= _STR:
                parts.append(',"extFields":' + _encode_strings(ext))
            else:
                parts.append(
                    ',"extFields":{'
                    + ",".join(f"{_escape(str(k))}:{_escape(_ext_str(v))}" for k, v in ext.items())
                    + "}"
                )
        parts.append(',"serializeTypeCurrentRPC":"JSON"}')
        return "".join(parts).encode()

    def _binary_header(self) -> bytes:
        parts = [
            _BIN_FIXED.pack(self.code, int(self.language), self.version, self.opaque, self.flag)
        ]
        remark = self.remark.encode() if self.remark else b""
        parts.append(_INT.pack(len(remark)))
        parts.append(remark)
        entries: list[bytes] = []
        for key, value in (self.ext_fields or {}).items():
            if value is None:
                continue
            k, v = key.encode(), _ext_str(value).encode()
            entries += (_SHORT.pack(len(k)), k, _INT.pack(len(v)), v)
        ext = b"".join(entries)
        parts.append(_INT.pack(len(ext)))
        parts.append(ext)
        return b"".join(parts)

    def encode_parts(self) -> tuple[bytes, bytes | bytearray | memoryview]:
        """The frame as (length words + header, body): write both, the body is not copied.

        A JSON header is written in C when the speedups are built (:meth:`py_encode_parts`
        is the reference, and writes whatever the C code leaves to it)."""
        if (
            _c_encode_json_head is not None
            and self.serialize_type is SerializeType.JSON
            and self.language.__class__ is LanguageCode
        ):
            body = self.body if self.body is not None else b""
            head = _c_encode_json_head(
                self.code,
                self.language,
                self.version,
                self.opaque,
                self.flag,
                self.remark,
                self.ext_fields,
                len(body),
            )
            if head is not None:
                return head, body
        return self.py_encode_parts()

    def py_encode_parts(self) -> tuple[bytes, bytes | bytearray | memoryview]:
        """The reference of :meth:`encode_parts`, in Python."""
        header = self.encode_header()
        if len(header) > _HEADER_LEN_MASK:
            raise ProtocolError(f"command header of {len(header)} bytes exceeds 16 MiB")
        body = self.body if self.body is not None else b""
        prefix = _FRAME_PREFIX.pack(
            4 + len(header) + len(body), (int(self.serialize_type) << 24) | len(header)
        )
        return prefix + header, body

    def encode(self) -> bytes:
        """The whole frame, total-length word included."""
        head, body = self.encode_parts()
        return head + bytes(body)

    # --- decoding -------------------------------------------------------------------------

    @classmethod
    def decode(cls, frame: bytes | bytearray | memoryview) -> RemotingCommand:
        """Decode one frame *without* its total-length word (what a frame decoder yields).

        A JSON header of the shape clients write is read in C when the speedups are built
        (:meth:`py_decode` is the reference, and decides every other frame).

        :raises ProtocolError: bad header length, unknown serialisation, malformed header.
        """
        if _c_decode_json_frame is not None:
            fields = _c_decode_json_frame(frame)
            if fields is not None:
                code, language, version, opaque, flag, remark, ext, body = fields
                return cls(
                    code,
                    language=_LANGUAGES[language],
                    version=version,
                    opaque=opaque,
                    flag=flag,
                    remark=remark,
                    ext_fields=ext,
                    body=body,
                    serialize_type=SerializeType.JSON,
                )
        return cls.py_decode(frame)

    @classmethod
    def py_decode(cls, frame: bytes | bytearray | memoryview) -> RemotingCommand:
        """The reference of :meth:`decode`, in Python."""
        view = memoryview(frame)
        if len(view) < 4:
            raise ProtocolError(f"frame of {len(view)} bytes has no header-length word")
        (word,) = _INT.unpack_from(view, 0)
        header_len = word & _HEADER_LEN_MASK
        kind = (word >> 24) & 0xFF
        if header_len > len(view) - 4:
            raise ProtocolError(
                f"header length {header_len} exceeds the frame's {len(view) - 4} bytes"
            )
        header = view[4 : 4 + header_len]
        if kind == SerializeType.JSON:
            cmd = cls._decode_json(header)
        elif kind == SerializeType.ROCKETMQ:
            cmd = cls._decode_binary(header)
        else:
            raise ProtocolError(f"unknown serialisation type {kind} (0 JSON, 1 ROCKETMQ)")
        if len(view) > 4 + header_len:
            cmd.body = bytes(view[4 + header_len :])
        return cmd

    @classmethod
    def _decode_json(cls, header: memoryview) -> RemotingCommand:
        try:
            obj = _json_decode(str(header, "utf-8"))
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            raise ProtocolError(f"command header is not JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise ProtocolError("command header must be a JSON object")
        ext = obj.get("extFields")
        if ext is not None and not isinstance(ext, dict):
            raise ProtocolError("command header: 'extFields' must be a JSON object")
        remark = obj.get("remark")
        if remark is not None and not isinstance(remark, str):
            raise ProtocolError("command header: 'remark' must be a string")
        if "code" not in obj:
            raise ProtocolError("command header has no 'code'")
        get = obj.get
        code, version, opaque, flag = (
            get("code"),
            get("version", 0),
            get("opaque", 0),
            get("flag", 0),
        )
        # The four numbers as every client writes them (plain ints in range) in one test; the
        # checks that name the bad one otherwise.
        if not (
            code.__class__ is version.__class__ is opaque.__class__ is flag.__class__ is int
            and _INT32_MIN <= code <= _INT32_MAX
            and _INT32_MIN <= version <= _INT32_MAX
            and _INT32_MIN <= opaque <= _INT32_MAX
            and _INT32_MIN <= flag <= _INT32_MAX
        ):
            code = _int32(obj, "code", -1)
            version = _int32(obj, "version", 0)
            opaque = _int32(obj, "opaque", 0)
            flag = _int32(obj, "flag", 0)
        language = get("language", "JAVA")
        language = _LANGUAGE_BY_NAME.get(language) if language.__class__ is str else None
        return cls(
            code,
            language=language if language is not None else _language(get("language", "JAVA")),
            version=version,
            opaque=opaque,
            flag=flag,
            remark=remark,
            ext_fields=ext,
            serialize_type=SerializeType.JSON,
        )

    @classmethod
    def _decode_binary(cls, header: memoryview) -> RemotingCommand:
        size = len(header)
        if size < _BIN_FIXED.size + 8:
            raise ProtocolError(f"binary command header of {size} bytes is truncated")
        code, language, version, opaque, flag = _BIN_FIXED.unpack_from(header, 0)
        pos = _BIN_FIXED.size
        remark, pos = _read_str(header, pos, _INT, "remark")
        (ext_len,) = _INT.unpack_from(header, pos) if pos + 4 <= size else (-1,)
        pos += 4
        if ext_len < 0 or pos + ext_len > size:
            raise ProtocolError(
                f"binary command header: extFields length {ext_len} is out of range"
            )
        ext: dict[str, Any] | None = None
        if ext_len:
            ext = _read_ext(bytes(header[pos : pos + ext_len]))
        return cls(
            code,
            language=_language(language),
            version=version,
            opaque=opaque,
            flag=flag,
            remark=remark,
            ext_fields=ext,
            serialize_type=SerializeType.ROCKETMQ,
        )


_ENTRY_KEY = struct.Struct(">h")
_ENTRY_VALUE = struct.Struct(">i")


def _read_ext(data: bytes) -> dict[str, Any]:
    """The extFields entries (int16 key length, key, int32 value length, value)."""
    ext: dict[str, Any] = {}
    pos, end = 0, len(data)
    key_len_at, value_len_at = _ENTRY_KEY.unpack_from, _ENTRY_VALUE.unpack_from
    try:
        while pos < end:
            (n,) = key_len_at(data, pos)
            pos += 2
            if n < 0 or pos + n > end:
                raise ProtocolError(
                    f"binary command header: extFields key length {n} is out of range"
                )
            key = data[pos : pos + n].decode()
            pos += n
            (m,) = value_len_at(data, pos)
            pos += 4
            if m < 0 or pos + m > end:
                raise ProtocolError(
                    f"binary command header: extFields value length {m} is out of range"
                )
            # As RocketMQ: a zero length reads as null, so the entry carries nothing.
            if n and m:
                ext[key] = data[pos : pos + m].decode()
            pos += m
    except struct.error:
        raise ProtocolError("binary command header: extFields truncated") from None
    except UnicodeDecodeError:
        raise ProtocolError("binary command header: extFields entry is not UTF-8") from None
    return ext


def _read_str(
    buf: memoryview, pos: int, length: struct.Struct, what: str
) -> tuple[str | None, int]:
    if pos + length.size > len(buf):
        raise ProtocolError(f"binary command header: truncated before the {what} length")
    (n,) = length.unpack_from(buf, pos)
    pos += length.size
    if n < 0 or pos + n > len(buf):
        raise ProtocolError(f"binary command header: {what} length {n} is out of range")
    if n == 0:
        return None, pos
    try:
        return bytes(buf[pos : pos + n]).decode(), pos + n
    except UnicodeDecodeError:
        raise ProtocolError(f"binary command header: {what} is not UTF-8") from None


_JSON_OPAQUE = re.compile(rb'"opaque"\s*:\s*(-?\d{1,10})')


def salvage_opaque(frame: bytes | bytearray | memoryview) -> int | None:
    """The opaque of a frame whose header failed to decode, when it can still be read.

    Used to answer a malformed request instead of closing the connection.
    """
    view = memoryview(frame)
    if len(view) < 4:
        return None
    (word,) = _INT.unpack_from(view, 0)
    kind, header_len = (word >> 24) & 0xFF, word & _HEADER_LEN_MASK
    header = view[4 : 4 + min(header_len, len(view) - 4)]
    if kind == SerializeType.ROCKETMQ and len(header) >= 9:
        return int(_INT.unpack_from(header, 5)[0])
    if kind == SerializeType.JSON:
        m = _JSON_OPAQUE.search(bytes(header))
        if m is not None:
            value = int(m.group(1))
            if _INT32_MIN <= value <= _INT32_MAX:
                return value
    return None


# --- the client's one-call request encode and answer decode --------------------------------


def _field_text(value: Any) -> str:
    """A header field's value as extFields text (as a header's generated writer gives it)."""
    if value.__class__ is bool:
        return "true" if value else "false"
    if value.__class__ is str:
        return value
    return str(int(value))


def py_encode_request_head(
    code: int,
    opaque: int,
    names: tuple[str, ...],
    values: tuple[Any, ...],
    body_len: int,
    language: LanguageCode = LanguageCode.PYTHON,
    version: int = DEFAULT_VERSION,
    flag: int = 0,
) -> bytes:
    """The reference of :func:`encode_request_head`: the request built as a
    :class:`RemotingCommand` and encoded."""
    ext = {n: _field_text(v) for n, v in zip(names, values, strict=True) if v is not None}
    cmd = RemotingCommand(
        code, language=language, version=version, opaque=opaque, flag=flag, ext_fields=ext
    )
    header = cmd.encode_header()
    if len(header) > _HEADER_LEN_MASK:
        raise ProtocolError(f"command header of {len(header)} bytes exceeds 16 MiB")
    return _FRAME_PREFIX.pack(4 + len(header) + body_len, len(header)) + header


def encode_request_head(
    code: int,
    opaque: int,
    names: tuple[str, ...],
    values: tuple[Any, ...],
    body_len: int,
    language: LanguageCode = LanguageCode.PYTHON,
    version: int = DEFAULT_VERSION,
    flag: int = 0,
) -> bytes:
    """A JSON request's length words and header, its extFields ``names[i]: values[i]`` for
    each value that is not None (a str as is, a bool as ``true``/``false``, an int in
    decimal: what a header's ``to_ext_fields`` writes), for a body of ``body_len`` bytes.

    One C call when the speedups are built (no header object, no extFields dict);
    :func:`py_encode_request_head` is the reference and writes what the C code leaves."""
    if _c_encode_request_head is not None:
        try:
            head = _c_encode_request_head(
                code, language, version, opaque, flag, names, values, body_len
            )
        except OverflowError:  # a number past int64: the reference writes it
            head = None
        if head is not None:
            return head  # type: ignore[no-any-return]
    return py_encode_request_head(code, opaque, names, values, body_len, language, version, flag)


AnswerPlan = tuple[tuple[str, int, bool], ...]
"""Header fields to read from an answer: (wire name, kind: 0 str, 1 int32, 2 int64, required)."""

_PLAN_KINDS = {0: Kind.STRING, 1: Kind.INT, 2: Kind.LONG}


def py_decode_answer(
    frame: bytes | bytearray | memoryview, plan: AnswerPlan
) -> tuple[int, int, int, str | None, tuple[Any, ...], bytes | None]:
    """The reference of :func:`decode_answer`: :meth:`RemotingCommand.decode`, then the
    plan's fields read as a header's reader reads them.

    :raises ProtocolError: a malformed frame, a required field absent, a value of the wrong
        type."""
    cmd = RemotingCommand.py_decode(frame)
    ext = cmd.ext_fields or {}
    values: list[Any] = []
    for name, kind, required in plan:
        raw = ext.get(name)
        if raw is None or (raw == "" and kind != 0):
            if required:
                raise ProtocolError(
                    f"answer to request: required field {name!r} is missing", field=name
                )
            values.append(None)
            continue
        value = _PLAN_READERS[kind](raw)
        if value is None:
            raise ProtocolError(
                f"answer to request: field {name!r} must be a {_PLAN_KINDS[kind].value}, "
                f"got {raw!r}",
                field=name,
            )
        values.append(value)
    body = None if cmd.body is None else bytes(cmd.body)
    return cmd.code, cmd.opaque, cmd.flag, cmd.remark, tuple(values), body


def decode_answer(
    frame: bytes | bytearray | memoryview, plan: AnswerPlan
) -> tuple[int, int, int, str | None, tuple[Any, ...], bytes | None]:
    """An answer frame (without its total-length word) as (code, opaque, flag, remark, the
    plan's field values, body), in one C call when the speedups are built;
    :func:`py_decode_answer` is the reference and decides what the C code leaves.

    :raises ProtocolError: see :func:`py_decode_answer`."""
    if _c_decode_answer is not None:
        fields = _c_decode_answer(frame, plan)
        if fields is not None:
            return fields  # type: ignore[no-any-return]
    return py_decode_answer(frame, plan)


class PreparedRequest:
    """A request encoded ahead (:func:`encode_request_head`), written as it is, and the plan
    its answer is read with (:meth:`RemotingClient.invoke_prepared
    <mqcore.remoting.client.RemotingClient.invoke_prepared>`)."""

    __slots__ = ("body", "code", "head", "opaque", "plan")

    def __init__(
        self,
        code: int,
        opaque: int,
        head: bytes,
        body: bytes | bytearray | memoryview,
        plan: AnswerPlan,
    ) -> None:
        self.code = code
        self.opaque = opaque
        self.head = head
        self.body = body
        self.plan = plan

    def encode_parts(self) -> tuple[bytes, bytes | bytearray | memoryview]:
        """The frame as (length words + header, body), as :meth:`RemotingCommand.encode_parts`."""
        return self.head, self.body


_PLAN_READERS = {number: field_reader(kind) for number, kind in _PLAN_KINDS.items()}
