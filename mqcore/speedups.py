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

#: Owner name -> the extension module that serves it (its source is the ``.c`` file beside
#: the owner's Python reference; shared helpers in ``mqcore/speedups.h``, the record layout
#: in ``mqcore/record/record.h``).
EXTENSIONS = {
    "codec": "mqcore._codec",  # codec.prepare and pack, batch.units and put_results
    "protocol": "mqcore.protocol._protocol",  # the sent checks, the SEND_BATCH_MESSAGE body
    "remoting": "mqcore.remoting._remoting",  # frame cutting, JSON command headers
    "schedule": "mqcore.broker._schedule",  # the broker's timer hold (broker.schedule)
    "timer": "mqcore.plugins._delay_timer",  # the timer wheel's enqueue loop and slots
    "spark": "mqcore.contrib.spark._arrow",  # the Spark source's columns, the sink's records
    "keyindex": "mqcore.plugins.store_mmap._keyindex",  # the mmap store's key-index entries
    "storeput": "mqcore.plugins.store_mmap._put",  # the mmap store's records and units of a put
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
