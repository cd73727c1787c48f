"""A store wrapper that records the size of each ``put_many`` the broker makes (group commit)."""

from __future__ import annotations

from typing import Any

from mqcore.storecaps import MultiQueuePut


class CountingStore:
    """The broker's store, with its put_many calls counted (a MultiQueuePut whatever the
    store: one put a request when the store has no put_many of its own)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.groups: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def put_many(self, requests: Any) -> list[Any]:
        self.groups.append(len(requests))
        if isinstance(self._inner, MultiQueuePut):
            return self._inner.put_many(requests)
        out: list[Any] = []
        for r in requests:
            try:
                out.append(
                    self._inner.put(
                        r.topic, r.queue_id, r.messages, born_timestamp=r.born_timestamp,
                        born_host=r.born_host, reconsume_times=r.reconsume_times,
                        **({"sys_flag": r.sys_flag} if r.sys_flag else {}),
                    )
                )  # fmt: skip
            except Exception as exc:  # the slot's own error
                out.append(exc)
        return out
