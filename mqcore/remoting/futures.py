"""Completing a request's future from the I/O side without racing its caller."""

from __future__ import annotations

import concurrent.futures
from typing import TypeVar

__all__ = ["settle"]

T = TypeVar("T")


def settle(
    future: concurrent.futures.Future[T],
    result: T | None = None,
    error: BaseException | None = None,
) -> None:
    """Complete ``future`` with ``error`` or ``result``, unless it is already done.

    Its caller may cancel it at any moment from another thread (a pull given up on), so a
    look at ``done()`` before ``set_result`` is not enough: the set itself may fail.
    """
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)  # type: ignore[arg-type]
    except concurrent.futures.InvalidStateError:
        pass  # cancelled or completed meanwhile: nobody waits for this answer
