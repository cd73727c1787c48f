"""Options of the mmap store: the keyword arguments of ``Kernel().open_store("mmap", path, ...)``.

Defaults are RocketMQ's (``MessageStoreConfig``) where RocketMQ has one.
"""

from __future__ import annotations

from typing import Any

import attrs

from mqcore.errors import InvalidArgumentError
from mqcore.retentionrules import normalize_delete_when
from mqcore.store import DEFAULT_MESSAGE_DELAY_LEVEL, FlushMode, parse_delay_levels

__all__ = ["MAX_BODY_SIZE", "MIN_SEGMENT_SIZE", "MmapStoreOptions"]

MAX_BODY_SIZE = 4 * 1024 * 1024  # RocketMQ's maxMessageSize
MIN_SEGMENT_SIZE = 256


def _flush_mode(value: FlushMode | str) -> FlushMode:
    try:
        return FlushMode.parse(value)
    except ValueError as exc:
        raise InvalidArgumentError(str(exc)) from None


def _at_least(minimum: float) -> Any:
    def check(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < minimum:
            raise InvalidArgumentError(
                f"option {attribute.name}={value!r} is invalid; it must be a number >= {minimum}"
            )

    return check


def _ratio(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 100:
        raise InvalidArgumentError(
            f"option {attribute.name}={value!r} is invalid; it is a percentage in (0, 100]"
        )


@attrs.frozen(kw_only=True)
class MmapStoreOptions:
    """Validated options of :class:`~mqcore.plugins.store_mmap.store.MmapStore`."""

    flush_mode: FlushMode = attrs.field(default=FlushMode.ASYNC_FLUSH, converter=_flush_mode)
    read_only: bool = attrs.field(default=False, converter=bool)
    store_host: str = "127.0.0.1:10911"
    segment_size: int = attrs.field(default=1 << 30, validator=_at_least(MIN_SEGMENT_SIZE))
    consume_queue_units: int = attrs.field(default=300_000, validator=_at_least(1))
    flush_interval_ms: int = attrs.field(default=500, validator=_at_least(1))
    sync_flush_timeout_ms: int = attrs.field(default=5000, validator=_at_least(1))
    #: SYNC_FLUSH: longest hold of a group commit waiting for the usual number of concurrent
    #: writers (0 = flush as soon as one waits, as RocketMQ's GroupCommitService)
    group_commit_delay_ms: float = attrs.field(default=1.0, validator=_at_least(0))
    file_reserved_time_hours: float = attrs.field(default=72, validator=_at_least(0))
    #: Above this disk usage (percent) expired segments go at any hour, not only in the
    #: ``delete_when`` hours (RocketMQ's ``diskMaxUsedSpaceRatio``).
    disk_max_used_space_ratio: float = attrs.field(default=75, validator=_ratio)
    #: Above this disk usage (percent) the oldest segments go whatever their age (RocketMQ's
    #: ``diskSpaceCleanForciblyRatio``).
    disk_space_clean_forcibly_ratio: float = attrs.field(default=85, validator=_ratio)
    #: Hours (local time) in which the cleaner deletes expired segments, "HH" or "HH;HH"
    #: (RocketMQ's ``deleteWhen``).
    delete_when: str = attrs.field(default="04", converter=normalize_delete_when)
    transient_store_pool: bool = attrs.field(default=False, converter=bool)
    #: Prefault commit-log pages ahead of the writer on a background thread (RocketMQ's
    #: ``warmMappedFileEnable``, also off by default): on kernels that map file pages in
    #: large folios the writer takes few faults, and the warming thread then only contends
    #: with it (see docs/benchmarks.md).
    warm_mapped_file: bool = attrs.field(default=False, converter=bool)
    index_hash_slots: int = attrs.field(default=5_000_000, validator=_at_least(1))
    index_max_entries: int = attrs.field(default=20_000_000, validator=_at_least(2))
    #: RocketMQ's ``messageDelayLevel``: a message held in SCHEDULE_TOPIC_XXXX gets its
    #: deliver time (store timestamp + its level's delay) as consume-queue tags code.
    message_delay_level: str = attrs.field(default=DEFAULT_MESSAGE_DELAY_LEVEL)
    #: Check each record's body CRC when it is read (RocketMQ checks only on recovery): damage
    #: older than the recovery window is reported with file and offset instead of served.
    check_crc_on_read: bool = attrs.field(default=False, converter=bool)

    def __attrs_post_init__(self) -> None:
        parse_delay_levels(self.message_delay_level)  # a bad table fails at open
        if self.transient_store_pool and self.flush_mode is FlushMode.SYNC_FLUSH:
            raise InvalidArgumentError(
                "transient_store_pool=True needs flush_mode=ASYNC_FLUSH (as RocketMQ): a sync "
                "flush must reach the file, which the pool's buffers defer"
            )

    @classmethod
    def names(cls) -> list[str]:
        """Every option name, sorted."""
        return sorted(a.name for a in attrs.fields(cls))

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> MmapStoreOptions:
        """Build from keyword options; unknown names raise an error listing the valid ones."""
        unknown = sorted(set(options) - set(cls.names()))
        if unknown:
            raise InvalidArgumentError(
                f"unknown option(s) for the mmap store: {', '.join(unknown)}; valid options: "
                f"{', '.join(cls.names())}"
            )
        try:
            return cls(**options)
        except InvalidArgumentError:
            raise
        except (TypeError, ValueError) as exc:
            raise InvalidArgumentError(f"invalid mmap store option: {exc}") from exc
