"""mqcore's loggers: structlog on top of the standard :mod:`logging` module.

Every module logs through ``log = get_logger(__name__)``. Events go to the stdlib logger of
the same name (``mqcore.broker.broker``...), so the application's logging configuration
decides what is shown and where; with none, Python's last-resort handler shows warnings
and errors on stderr and nothing at all on stdout. The library never calls
:func:`structlog.configure` nor touches the root logger.

How an event is turned into a log record:

- the stdlib logger's level is checked first, so a disabled debug event costs one call;
- the message is ``event key=value ...``; the record also carries the event name and its
  context as ``record.mqcore_event`` and ``record.mqcore_context`` (for JSON handlers, or
  ``structlog.stdlib.ProcessorFormatter``, which renders such "foreign" records too);
- inside :func:`structlog.testing.capture_logs` the events are captured instead, at every
  level, as for any structlog logger.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, MutableMapping
from typing import Any

from structlog._config import _CONFIG  # read per event; get_config() builds a dict
from structlog.stdlib import BoundLogger
from structlog.testing import LogCapture

__all__ = ["get_logger"]


def _text(value: Any) -> str:
    text = str(value)
    return repr(value) if isinstance(value, str) and (" " in text or not text) else text


def _render(logger: Any, method_name: str, event_dict: MutableMapping[str, Any]) -> Any:
    """Last processor: ``(args, kwargs)`` for the stdlib logger's method."""
    kwargs: dict[str, Any] = {}
    for name in ("exc_info", "stack_info"):
        if name in event_dict:
            kwargs[name] = event_dict.pop(name)
    event = str(event_dict.pop("event", ""))
    context = dict(event_dict)
    parts = [event, *(f"{k}={_text(v)}" for k, v in context.items())]
    kwargs["extra"] = {"mqcore_event": event, "mqcore_context": context}
    return (" ".join(parts),), kwargs


_OWN = (_render,)
_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "exception": logging.ERROR,
    "critical": logging.CRITICAL,
}


def _capturing() -> bool:
    processors: Any = _CONFIG.default_processors  # capture_logs keeps a list here
    return bool(processors) and isinstance(processors[-1], LogCapture)  # capture_logs: last


class _Processors:
    """The processor chain, looked at per event: capture_logs swaps structlog's global
    processors for a LogCapture while it runs, and mqcore's events must reach it too."""

    def __iter__(self) -> Iterator[Any]:
        return iter(_CONFIG.default_processors if _capturing() else _OWN)


class _Logger(BoundLogger):
    """structlog's stdlib logger, checking the stdlib level before doing anything else."""

    def _proxy_to_logger(
        self, method_name: str, event: str | None = None, *event_args: Any, **event_kw: Any
    ) -> Any:
        level = _LEVELS.get(method_name, logging.INFO)
        if not self._logger.isEnabledFor(level) and not _capturing():
            return None
        return super()._proxy_to_logger(method_name, event, *event_args, **event_kw)


_PROCESSORS = _Processors()


def get_logger(name: str) -> Any:
    """A structlog logger for module ``name`` that writes to ``logging.getLogger(name)``."""
    # Built directly, not through structlog.wrap_logger: its lazy proxy re-binds on each call.
    return _Logger(logging.getLogger(name), processors=_PROCESSORS, context={})
