"""Build the optional C speedups; everything else is configured in pyproject.toml.

One extension per owner, each beside its Python reference (see ``mqcore.speedups``, the
loader, for which serves what). All are ``optional``: where no C compiler is available the
build goes on without them and mqcore runs its pure-Python code (same bytes, slower).
Shared helpers are in ``mqcore/speedups.h``; the record and queue layout they read and
write is ``mqcore/record/record.h``.
"""

from setuptools import Extension, setup

HEADERS = ["mqcore/speedups.h", "mqcore/record/record.h", "plugins/store_mmap/keyhash.h"]


def speedups(name: str, source: str) -> Extension:
    """One optional extension, built with the shared headers."""
    return Extension(
        name, sources=[source], include_dirs=["mqcore"], depends=HEADERS, optional=True
    )


setup(
    ext_modules=[
        speedups("mqcore._codec", "mqcore/_codec.c"),
        speedups("mqcore.protocol._protocol", "mqcore/protocol/_protocol.c"),
        speedups("mqcore.remoting._remoting", "mqcore/remoting/_remoting.c"),
        speedups("mqcore.broker._schedule", "mqcore/broker/_schedule.c"),
        speedups("mqcore.plugins._delay_timer", "plugins/_delay_timer.c"),
        speedups("mqcore.contrib.spark._arrow", "contrib/spark/_arrow.c"),
        speedups("mqcore.plugins.store_mmap._keyindex", "plugins/store_mmap/_keyindex.c"),
        speedups("mqcore.plugins.store_mmap._put", "plugins/store_mmap/_put.c"),
    ]
)
