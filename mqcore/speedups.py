"""The optional C speedups: one extension per owner, each beside its Python reference.

Each hot loop of mqcore has a Python reference and, when a C compiler was at hand at
install time, a C version that the tests hold to the same results. A module asks for its
extension by the owner's name::

    from mqcore import speedups

    _c = speedups.load("codec")  # None: run the Python reference

:func:`load` returns ``None`` when the extension was not built, or when the environment
variable ``MQCORE_NO_SPEEDUPS`` is set to anything but an empty string (to run and test the
pure-Python code).
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

from mqcore.errors import InvalidArgumentError

__all__ = ["EXTENSIONS", "disabled", "load"]

#: Owner name -> the extension module that serves it.
EXTENSIONS = {
    "codec": "mqcore._speedups",  # codec.prepare and pack, batch.units and put_results
    "protocol": "mqcore._speedups",  # the SEND_BATCH_MESSAGE body and the sent checks
    "schedule": "mqcore._speedups",  # the broker's timer hold (broker.schedule)
    "timer": "mqcore._speedups",  # the timer wheel plugin's enqueue loop and slots
    "spark": "mqcore._speedups",  # the Spark source's columns and the sink's records
    "keyindex": "mqcore._keyindex",  # the mmap store's key-index entries
}


def disabled() -> bool:
    """Whether ``MQCORE_NO_SPEEDUPS`` turns every extension off."""
    return bool(os.environ.get("MQCORE_NO_SPEEDUPS"))


def load(name: str) -> ModuleType | None:
    """The C extension of owner ``name`` (one of :data:`EXTENSIONS`), or ``None`` when it was
    not built or the speedups are turned off."""
    module = EXTENSIONS.get(name)
    if module is None:
        raise InvalidArgumentError(
            f"no speedups named {name!r}; known: {', '.join(sorted(EXTENSIONS))}"
        )
    if disabled():
        return None
    try:
        return importlib.import_module(module)
    except ImportError:  # built without a C compiler: the Python reference serves
        return None
