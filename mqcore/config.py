"""Configuration values (attrs, keyword-only), with RocketMQ's defaults and names in snake case."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

__all__ = ["KernelConfig"]


def _tuple(items: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(items)


@attrs.frozen(kw_only=True)
class KernelConfig:
    """How a :class:`~mqcore.kernel.Kernel` loads plugins.

    :param plugins: extra plugins: module names to import, or objects with hook
        implementations; registered after bundled and entry-point plugins.
    :param disabled_plugins: plugin names to block (bundled or third-party), added to
        ``MQCORE_DISABLED_PLUGINS``.
    :param autoload: load entry points of group ``mqcore``; ``None`` follows
        ``MQCORE_DISABLE_PLUGIN_AUTOLOAD``.
    :param options: free-form settings handed to plugins through ``mqcore_configure``.
    """

    plugins: tuple[Any, ...] = attrs.field(default=(), converter=_tuple)
    disabled_plugins: tuple[str, ...] = attrs.field(default=(), converter=_tuple)
    autoload: bool | None = None
    options: dict[str, Any] = attrs.field(factory=dict)
