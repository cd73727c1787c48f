"""The web dashboard (``mqcore dashboard``, the ``mqcore[dashboard]`` extra): pages about a
cluster reached through its name server, drawn on the server (Starlette and Jinja2), with
the last hour's TPS and lag kept in memory.

It talks the admin protocol only, so it works against ``mqcore serve``, a ``mqcore namesrv``
cluster and an Apache RocketMQ cluster alike. See docs/operations.md.
"""

from __future__ import annotations

__all__ = ["Dashboard"]


def __getattr__(name: str) -> object:
    # The web stack is an extra: importing the package must not need it.
    if name == "Dashboard":
        from mqcore.dashboard.server import Dashboard

        return Dashboard
    raise AttributeError(name)
