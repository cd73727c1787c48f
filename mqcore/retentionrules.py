"""When a store deletes old data: the rules both bundled stores share.

They are RocketMQ's (``CleanCommitLogService`` in ``DefaultMessageStore``), with its option
names in brackets:

- data older than ``file_reserved_time_hours`` (``fileReservedTime``) is *expired*. The
  cleaner deletes expired data in the hours listed in ``delete_when`` (``deleteWhen``,
  ``"04"``: from 04:00 to 04:59 local time), or at any hour while the disk holding the store
  is fuller than ``disk_max_used_space_ratio`` percent (``diskMaxUsedSpaceRatio``, 75). A
  manual delete (a direct ``delete_expired_files()``, RocketMQ's ``deleteExpiredCommitLog``)
  deletes expired data at any hour.
- only while the disk is fuller than ``disk_space_clean_forcibly_ratio`` percent
  (``diskSpaceCleanForciblyRatio``, 85) is the oldest data deleted whatever its age, until the
  disk is back within that ratio.

The stores apply :func:`plan` to what they measure; each keeps its own unit of deletion
(a segment file, a put batch) and never deletes the one being written.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from mqcore.errors import InvalidArgumentError

__all__ = [
    "DEFAULT_CLEAN_FORCIBLY_RATIO",
    "DEFAULT_DELETE_WHEN",
    "DEFAULT_MAX_USED_RATIO",
    "Plan",
    "delete_hours",
    "normalize_delete_when",
    "plan",
]

DEFAULT_MAX_USED_RATIO = 75  # RocketMQ's diskMaxUsedSpaceRatio
DEFAULT_CLEAN_FORCIBLY_RATIO = 85  # RocketMQ's diskSpaceCleanForciblyRatio
DEFAULT_DELETE_WHEN = "04"  # RocketMQ's deleteWhen


def delete_hours(value: Any) -> frozenset[int]:
    """The hours (0..23) of a ``delete_when`` value: ``"04"``, ``"04;16"`` or an int.

    :raises InvalidArgumentError: for anything else, naming the value.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        parts: list[Any] = [value]
    elif isinstance(value, str):
        parts = value.split(";")
    else:
        parts = [None]
    hours: set[int] = set()
    for part in parts:
        try:
            hour = part if isinstance(part, int) else int(str(part).strip(), 10)
        except ValueError:
            hour = -1
        if not 0 <= hour <= 23:
            raise InvalidArgumentError(
                f"option delete_when={value!r} is invalid; it is an hour of the day (0..23) "
                'or hours separated by ";", e.g. "04" or "04;16"'
            )
        hours.add(hour)
    return frozenset(hours)


def normalize_delete_when(value: Any) -> str:
    """``delete_when`` checked and written as RocketMQ writes it (``"04;16"``)."""
    return ";".join(f"{h:02d}" for h in sorted(delete_hours(value)))


@dataclass(frozen=True)
class Plan:
    """What one retention pass may delete.

    ``expired``: data older than the reserved time may go; ``force_over``: bytes to free
    whatever the data's age (``<= 0``: none); ``reason``: why expired data may go
    (``"manual"``, ``"delete_when"``, ``"disk_ratio"``) or ``""``.
    """

    expired: bool
    force_over: float
    reason: str


def plan(
    *,
    used: float,
    capacity: float,
    now: float,
    manual: bool,
    max_used_ratio: float,
    clean_forcibly_ratio: float,
    delete_when: str,
) -> Plan:
    """The pass's plan for a disk with ``used`` of ``capacity`` bytes at time ``now``.

    ``manual``: a direct call (expired data goes at any hour); otherwise the cleaner's pass.
    """
    ratio = 100.0 * used / capacity if capacity > 0 else 0.0
    if manual:
        reason = "manual"
    elif ratio > max_used_ratio:
        reason = "disk_ratio"
    elif time.localtime(now).tm_hour in delete_hours(delete_when):
        reason = "delete_when"
    else:
        reason = ""
    force_over = used - capacity * clean_forcibly_ratio / 100.0 if capacity > 0 else 0.0
    return Plan(expired=bool(reason), force_over=force_over, reason=reason)
