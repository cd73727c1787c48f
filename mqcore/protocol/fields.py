"""The machinery under the custom headers: typed fields read from and written to extFields.

RocketMQ carries a request's arguments in ``extFields``, a map of strings. Clients differ in
what they put there: the Java client writes every value as a string, the C++ core writes some
ints as JSON numbers and its booleans as ``"true"``/``"false"`` (or ``"0"``/``"1"`` in older
code). Each field therefore accepts a number or its decimal string, and a boolean in any of
those spellings; an empty string counts as absent. Values always go out as strings.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar

import attrs

from mqcore import speedups
from mqcore.errors import ProtocolError

__all__ = ["CommandHeader", "Kind", "field_reader", "wire_field"]

_META = "mqcore.wire"

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class Kind(enum.Enum):
    """The Java type of a header field, which decides how its value is read and written."""

    STRING = "String"
    INT = "Integer"
    LONG = "Long"
    BOOLEAN = "Boolean"


def wire_field(name: str, kind: Kind, *, required: bool = False, default: Any = None) -> Any:
    """An attrs field carried in extFields under the RocketMQ name ``name``.

    ``required`` mirrors RocketMQ's ``@CFNotNull`` on a field without a Java default: an
    absent value is an error when the header is read.
    """
    metadata = {_META: (name, kind)}
    if required:
        return attrs.field(metadata=metadata)
    return attrs.field(default=default, metadata=metadata)


def _bad(header: str, name: str, kind: Kind, value: Any) -> ProtocolError:
    return ProtocolError(
        f"{header}: field {name!r} must be a {kind.value}, got {value!r}; "
        f"send it as a JSON number or its decimal string",
        field=name,
    )


def _read_str(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return None


def _read_int(value: Any, low: int, high: int) -> int | None:
    if value.__class__ is int:
        number = value
    elif isinstance(value, str):
        try:
            number = int(value.strip(), 10)
        except ValueError:
            return None
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    else:
        return None
    return number if low <= number <= high else None


_TRUE = frozenset({"true", "1"})
_FALSE = frozenset({"false", "0"})


def _read_bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        return None
    if value.__class__ is int and value in (0, 1):
        return bool(value)
    return None


def field_reader(kind: Kind) -> Callable[[Any], Any]:
    """How a header reads a value of ``kind``: the value, or None when it is not one."""
    return _reader(kind)


def _reader(kind: Kind) -> Callable[[Any], Any]:
    if kind is Kind.STRING:
        return _read_str
    if kind is Kind.INT:
        return lambda v: _read_int(v, INT32_MIN, INT32_MAX)
    if kind is Kind.LONG:
        return lambda v: _read_int(v, INT64_MIN, INT64_MAX)
    return _read_bool


@attrs.frozen
class _Spec:
    wire: str
    attr: str
    kind: Kind
    read: Callable[[Any], Any]
    required: bool


H = TypeVar("H", bound="CommandHeader")


class CommandHeader:
    """Base of every custom header (RocketMQ's ``CommandCustomHeader``).

    Subclasses are ``attrs.frozen(kw_only=True)`` classes whose fields are made with
    :func:`wire_field`; attribute names are snake case, wire names RocketMQ's.
    """

    __slots__ = ()

    # Wire names replaced in a subclass (the V2 send header's one-letter names).
    WIRE_RENAME: ClassVar[Mapping[str, str]] = {}
    _specs_cache: ClassVar[dict[type, tuple[_Spec, ...]]] = {}

    @classmethod
    def _specs(cls) -> tuple[_Spec, ...]:
        specs = CommandHeader._specs_cache.get(cls)
        if specs is None:
            built = []
            for f in attrs.fields(cls):  # type: ignore[arg-type]
                name, kind = f.metadata[_META]
                wire = cls.WIRE_RENAME.get(name, name)
                required = f.default is attrs.NOTHING
                built.append(_Spec(wire, f.name, kind, _reader(kind), required))
            specs = CommandHeader._specs_cache[cls] = tuple(built)
        return specs

    @classmethod
    def wire_names(cls) -> tuple[str, ...]:
        """The extFields names this header reads and writes, in declaration order."""
        return tuple(s.wire for s in cls._specs())

    @classmethod
    def from_ext_fields(cls: type[H], ext: Mapping[str, Any] | None) -> H:
        """Read the header from a command's extFields.

        Values may be strings or JSON numbers/booleans; unknown names (ACL's ``AccessKey``,
        ``Signature``, ``OnsChannel``, fields of newer RocketMQ versions) are ignored.

        :raises ProtocolError: a required field is absent, or a value has the wrong type or
            is out of the Java type's range.
        """
        if _c_read_fields is not None and ext.__class__ is dict:
            # In C when every value has the plain shape clients write; any other header
            # (a field missing, a value to convert or refuse) is the generated reader's.
            kw = cls.read_plain(ext)
            if kw is not None:
                return cls(**kw)
        read = _CODECS.get(cls)
        if read is None:
            read = _build_codecs(cls)[0]
        return read(ext or {})  # type: ignore[no-any-return]

    @classmethod
    def read_plain(cls, ext: Any) -> dict[str, Any] | None:
        """The header's fields (attribute name -> value; absent optional ones left out) read
        in C from ``ext`` when it is a dict of values in the plain shape clients write; None
        when :meth:`from_ext_fields` must read it (no C speedups, a field missing, a value to
        convert or refuse). The same values :meth:`from_ext_fields` gives, without the object.
        """
        if _c_read_fields is None or ext.__class__ is not dict:
            return None
        kw: dict[str, Any] | None = _c_read_fields(ext, _PLANS.get(cls) or cls.read_plan())
        return kw

    @classmethod
    def read_plan(cls) -> tuple[tuple[str, str, int, bool], ...]:
        """What the C reader of :meth:`read_plain` reads: (wire name, attribute, kind, required)
        per field, the kind as a number (0 String, 1 Integer, 2 Long, 3 Boolean)."""
        plan = _PLANS.get(cls)
        if plan is None:
            plan = _PLANS[cls] = tuple(
                (s.wire, s.attr, _KIND_NUMBERS[s.kind], s.required) for s in cls._specs()
            )
        return plan

    def to_ext_fields(self) -> dict[str, str]:
        """The header as extFields: every field that is not None, as a string."""
        write = _WRITERS.get(type(self)) or _build_codecs(type(self))[1]
        return write(self)

    @classmethod
    def _read_slowly(cls: type[H], ext: Mapping[str, Any]) -> H:
        """The reference reading of :meth:`from_ext_fields`, field by field (the generated
        reader must agree with it; see tests/protocol)."""
        values: dict[str, Any] = {}
        for spec in cls._specs():
            raw = ext.get(spec.wire)
            if raw is None or (raw == "" and spec.kind is not Kind.STRING):
                if spec.required:
                    raise _missing(cls.__name__, spec.wire)
                continue
            value = spec.read(raw)
            if value is None:
                raise _bad(cls.__name__, spec.wire, spec.kind, raw)
            values[spec.attr] = value
        return cls(**values)


def _missing(header: str, name: str) -> ProtocolError:
    return ProtocolError(
        f"{header}: required field {name!r} is missing; the command must carry it in extFields",
        field=name,
    )


# Per header class, a reader and a writer generated from its fields: headers are read and
# written once per request and answer, and a loop over field specs costs several times the
# straight-line code (see _build_codecs).
_CODECS: dict[type, Callable[[Mapping[str, Any]], Any]] = {}
_WRITERS: dict[type, Callable[[Any], dict[str, str]]] = {}

_RANGES = {Kind.INT: (INT32_MIN, INT32_MAX), Kind.LONG: (INT64_MIN, INT64_MAX)}

# The C reader (mqcore.protocol._protocol.read_fields) takes a plan per header class: (wire
# name, attribute, kind number, required) per field.
_speedups = speedups.load("protocol")
_c_read_fields = None if _speedups is None else _speedups.read_fields
_KIND_NUMBERS = {Kind.STRING: 0, Kind.INT: 1, Kind.LONG: 2, Kind.BOOLEAN: 3}
_PLANS: dict[type, tuple[tuple[str, str, int, bool], ...]] = {}


def _build_codecs(
    cls: type[CommandHeader],
) -> tuple[Callable[[Mapping[str, Any]], Any], Callable[[Any], dict[str, str]]]:
    """Generate ``cls``'s extFields reader and writer: the same checks, values and errors as
    :meth:`CommandHeader._read_slowly` and the field loop, written out field by field."""
    specs = cls._specs()
    env: dict[str, Any] = {
        "cls": cls,
        "_bad": _bad,
        "_missing": _missing,
        "Kind": Kind,
        "name": cls.__name__,
    }
    read = ["def read(ext):", "    get = ext.get", "    kw = {}"]
    write = ["def write(self):", "    out = {}"]
    for i, spec in enumerate(specs):
        env[f"r{i}"] = spec.read
        wire, kind = repr(spec.wire), f"Kind.{spec.kind.name}"
        read.append(f"    raw = get({wire})")
        if spec.kind is Kind.STRING:
            read.append("    if raw is None:")
        else:
            read.append("    if raw is None or raw == '':")
        read.append(f"        {'raise _missing(name, ' + wire + ')' if spec.required else 'pass'}")
        if spec.kind is Kind.STRING:
            read.append("    elif raw.__class__ is str:")
            read.append(f"        kw[{spec.attr!r}] = raw")
        elif spec.kind in _RANGES:
            low, high = _RANGES[spec.kind]
            # int() of a str strips whitespace itself, as the reference's int(v.strip(), 10)
            read.append("    elif raw.__class__ is str or raw.__class__ is int:")
            read.append("        try:")
            read.append("            v = int(raw)")
            read.append("        except ValueError:")
            read.append(f"            raise _bad(name, {wire}, {kind}, raw) from None")
            read.append(f"        if not {low} <= v <= {high}:")
            read.append(f"            raise _bad(name, {wire}, {kind}, raw)")
            read.append(f"        kw[{spec.attr!r}] = v")
        read.append("    else:")
        read.append(f"        v = r{i}(raw)")
        read.append("        if v is None:")
        read.append(f"            raise _bad(name, {wire}, {kind}, raw)")
        read.append(f"        kw[{spec.attr!r}] = v")
        write.append(f"    v = self.{spec.attr}")
        write.append("    if v is not None:")
        if spec.kind is Kind.BOOLEAN:
            write.append(f"        out[{wire}] = 'true' if v else 'false'")
        elif spec.kind is Kind.STRING:
            write.append(f"        out[{wire}] = v")
        else:
            write.append(f"        out[{wire}] = str(int(v))")
    read.append("    return cls(**kw)")
    write.append("    return out")
    exec("\n".join(read) + "\n\n" + "\n".join(write), env)  # our own generated source
    _CODECS[cls], _WRITERS[cls] = env["read"], env["write"]
    return env["read"], env["write"]
