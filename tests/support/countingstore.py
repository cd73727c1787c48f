"""A store wrapper that records the size of each ``put_many`` and ``put_many_prepared`` the
broker makes (group commit)."""

from __future__ import annotations

from typing import Any

from mqcore.storecaps import MultiQueuePut, PreparedMultiPut


class CountingStore:
    """The broker's store, with its put_many and put_many_prepared calls counted (a
    MultiQueuePut whatever the store: one put a request when the store has no put_many of
    its own; a PreparedMultiPut, for the bundled stores that are)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        #: the number of requests of each put_many or put_many_prepared, in order
        self.groups: list[int] = []
        #: the number of requests of each put_many_prepared, in order
        self.prepared_groups: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def put_many_prepared(self, requests: Any) -> list[Any]:
        assert isinstance(self._inner, PreparedMultiPut), "a bundled store has it"
        self.groups.append(len(requests))
        self.prepared_groups.append(len(requests))
        return self._inner.put_many_prepared(requests)

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
