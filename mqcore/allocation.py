"""What every queue allocation shares: RocketMQ's rebalance sort and its input checks.

Every member of a consumer group computes its own share locally, from the same inputs, and
a group may mix mqcore consumers with Java or C++ RocketMQ consumers, so the inputs must be
ordered exactly as RocketMQ orders them. RocketMQ's rebalance sorts ``mq_all`` and
``cid_all`` (Java string order) before it calls a strategy, and no strategy sorts again:
:func:`sorted_queues` and :func:`sorted_cids` reproduce that sort, and the consumers, the
``mqcore allocate`` command and anyone calling a strategy directly sort with them.

The strategies themselves are plugins (:mod:`mqcore.plugins.allocate` and its siblings);
:func:`check_allocate_args` and :func:`strategy_factory` are here for them and for
third-party strategies alike.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import attrs

from mqcore.errors import InvalidArgumentError
from mqcore.logs import get_logger
from mqcore.message import MessageQueue

__all__ = [
    "check_allocate_args",
    "java_split",
    "java_string_key",
    "sorted_cids",
    "sorted_queues",
    "strategy_factory",
]

log = get_logger(__name__)

S = TypeVar("S")


# --- RocketMQ's ordering and string helpers -------------------------------------------------


def java_string_key(text: str) -> bytes:
    """A sort key that orders strings as Java's ``String.compareTo`` does.

    Java compares UTF-16 code units, Python compares code points; the two differ only when
    characters above U+FFFF meet characters in U+E000..U+FFFF. Big-endian UTF-16 bytes
    compare in code-unit order, so they make an exact key.
    """
    return text.encode("utf-16-be", "surrogatepass")


def _queue_key(mq: MessageQueue) -> tuple[bytes, bytes, int]:
    return (java_string_key(mq.topic), java_string_key(mq.broker_name), mq.queue_id)


def sorted_queues(mq_all: Iterable[MessageQueue]) -> list[MessageQueue]:
    """``mq_all`` sorted as RocketMQ's rebalance sorts it: topic, broker name, queue id."""
    return sorted(mq_all, key=_queue_key)


def sorted_cids(cid_all: Iterable[str]) -> list[str]:
    """Consumer ids sorted as RocketMQ's rebalance sorts them (Java string order)."""
    return sorted(cid_all, key=java_string_key)


def java_split(text: str, sep: str) -> list[str]:
    """``text.split(sep)`` with Java's ``String.split`` semantics for a literal separator.

    Java drops trailing empty strings, so ``"room@"`` gives one part and ``"a@b@"`` two.
    """
    if sep not in text:
        return [text]
    parts = text.split(sep)
    while parts and not parts[-1]:
        parts.pop()
    return parts


# --- the checks every RocketMQ strategy but CONFIG runs --------------------------------------


def _as_list(value: Any, what: str) -> list[Any]:
    if isinstance(value, (set, frozenset)):
        raise InvalidArgumentError(
            f"{what} is a {type(value).__name__}, which has no order; pass a list sorted as "
            f"the rebalance sorts it (see sorted_queues / sorted_cids)"
        )
    return list(value)


def check_allocate_args(
    strategy: str,
    consumer_group: str,
    current_cid: str,
    mq_all: Sequence[MessageQueue] | None,
    cid_all: Sequence[str] | None,
) -> tuple[list[MessageQueue], list[str]] | None:
    """RocketMQ's input check, shared by the strategies.

    Returns ``mq_all`` and ``cid_all`` as lists, or ``None`` (after logging a warning) when
    ``current_cid`` is not a member of ``cid_all``: that member then owns nothing.

    :raises InvalidArgumentError: ``current_cid``, ``mq_all`` or ``cid_all`` is empty.
    """
    if not current_cid:
        raise InvalidArgumentError(
            f"current_cid is empty ({current_cid!r}); pass this consumer's client id"
        )
    if not mq_all:
        raise InvalidArgumentError(
            f"mq_all is empty ({mq_all!r}); pass every queue of the topic, sorted"
        )
    if not cid_all:
        raise InvalidArgumentError(
            f"cid_all is empty ({cid_all!r}); pass every consumer id of group "
            f"{consumer_group!r}, sorted"
        )
    mqs = _as_list(mq_all, "mq_all")
    cids = _as_list(cid_all, "cid_all")
    if current_cid not in cids:
        # RocketMQ logs this as a bug and hands out nothing; the next rebalance repairs it.
        log.warning(
            "allocate_cid_not_in_group",
            strategy=strategy,
            group=consumer_group,
            cid=current_cid,
            cid_all=cids,
        )
        return None
    return mqs, cids


def strategy_factory(cls: type[S]) -> Callable[..., S]:
    """A ``factory(**options)`` for an attrs strategy class, rejecting unknown options.

    Misspelt options raise :class:`InvalidArgumentError` naming the strategy and the options
    it takes, instead of a bare ``TypeError`` from ``__init__``.
    """
    accepted = sorted(a.alias or a.name for a in attrs.fields(cls) if a.init)  # type: ignore[arg-type]
    label = getattr(cls, "name", cls.__name__)

    def factory(**options: Any) -> S:
        unknown = sorted(set(options) - set(accepted))
        if unknown:
            takes = ", ".join(accepted) if accepted else "no options"
            raise InvalidArgumentError(
                f"allocator {label!r} got unknown option(s) {', '.join(unknown)}; it takes: {takes}"
            )
        return cls(**options)

    factory.__name__ = f"make_{label}"
    factory.__doc__ = f"Build a {cls.__name__} from keyword options ({', '.join(accepted)})."
    return factory
