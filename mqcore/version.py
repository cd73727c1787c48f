"""mqcore's version, as its installed distribution names it.

Below everything else, so that any module may name the version (a client reports it to the
broker) without importing the :mod:`mqcore` facade, which imports the broker and the clients.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["__version__"]

try:
    __version__ = version("mqcore")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0"
