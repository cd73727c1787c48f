"""Plugin loading: bundled plugins, then entry points (group ``mqcore``), then config.

:data:`BUNDLED_PLUGINS` is the source of truth for the plugins shipped with mqcore.
Entry points are loaded one by one so a broken third-party distribution is reported as a
:class:`~mqcore.errors.PluginLoadError` naming it, instead of aborting everything.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
from collections.abc import Iterable
from types import ModuleType
from typing import Any

import pluggy

from mqcore import hookspecs
from mqcore.errors import PluginLoadError
from mqcore.logs import get_logger

__all__ = [
    "BUNDLED_PLUGINS",
    "ENTRY_POINT_GROUP",
    "create_plugin_manager",
    "disabled_from_env",
]

log = get_logger(__name__)

ENTRY_POINT_GROUP = "mqcore"

#: Modules registered in every kernel, in this order (names are the part after the last dot).
BUNDLED_PLUGINS: tuple[str, ...] = (
    "mqcore.plugins.allocate",
    "mqcore.plugins.allocate_consistent_hash",
    "mqcore.plugins.allocate_nearby",
    "mqcore.plugins.store_mmap",
    "mqcore.plugins.store_lmdb",
    "mqcore.plugins.offset_broker",
    "mqcore.plugins.offset_local_file",
    "mqcore.plugins.filter_tag",
    "mqcore.plugins.filter_sql92",
    "mqcore.plugins.delay_levels",
    "mqcore.plugins.delay_timer_wheel",
)

ENV_DISABLE_AUTOLOAD = "MQCORE_DISABLE_PLUGIN_AUTOLOAD"
ENV_DISABLED_PLUGINS = "MQCORE_DISABLED_PLUGINS"


def disabled_from_env() -> set[str]:
    """Plugin names listed in ``MQCORE_DISABLED_PLUGINS`` (comma-separated)."""
    raw = os.environ.get(ENV_DISABLED_PLUGINS, "")
    return {name.strip() for name in raw.split(",") if name.strip()}


def autoload_from_env() -> bool:
    """False when ``MQCORE_DISABLE_PLUGIN_AUTOLOAD`` is set to a true value."""
    return os.environ.get(ENV_DISABLE_AUTOLOAD, "").strip().lower() not in {"1", "true", "yes"}


def _register(pm: pluggy.PluginManager, plugin: Any, name: str, dist: str | None) -> None:
    try:
        pm.register(plugin, name=name)
    except (ValueError, pluggy.PluginValidationError) as exc:
        # pluggy refuses a second plugin with the same name (or the same object), and a hook
        # implementation whose arguments the hook's specification does not have.
        where = f" from distribution {dist!r}" if dist else ""
        text = " ".join(str(exc).split())  # pluggy's message spans lines; keep one
        raise PluginLoadError(
            f'Error registering plugin "{name}"{where}: {text}', plugin=name, distribution=dist
        ) from exc


def _load_bundled(pm: pluggy.PluginManager, blocked: set[str]) -> None:
    for modname in BUNDLED_PLUGINS:
        short = modname.rsplit(".", 1)[-1]
        if short in blocked or modname in blocked:
            pm.set_blocked(short)
            continue
        # A bundled module that fails to import is a broken installation: let it raise.
        _register(pm, importlib.import_module(modname), short, "mqcore")


def _load_entry_points(pm: pluggy.PluginManager, blocked: set[str]) -> None:
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = ep.dist.name if ep.dist is not None else None
        if ep.name in blocked or pm.is_blocked(ep.name):
            log.debug("plugin_blocked", plugin=ep.name, distribution=dist)
            continue
        if pm.get_plugin(ep.name) is not None:
            # The same distribution can be visible twice on sys.path; load it once.
            continue
        try:
            plugin = ep.load()
        except Exception as exc:
            raise PluginLoadError(
                f'Error importing plugin "{ep.name}" (entry point {ep.value!r}) '
                f"from distribution {dist!r}: {type(exc).__name__}: {exc}",
                plugin=ep.name,
                distribution=dist,
            ) from exc
        _register(pm, plugin, ep.name, dist)


def _load_named(pm: pluggy.PluginManager, plugins: Iterable[str | ModuleType | object]) -> None:
    for item in plugins:
        if isinstance(item, str):
            try:
                plugin: Any = importlib.import_module(item)
            except Exception as exc:
                raise PluginLoadError(
                    f'Error importing plugin "{item}" named in the configuration: '
                    f"{type(exc).__name__}: {exc}",
                    plugin=item,
                ) from exc
            name = item
        else:
            plugin = item
            name = getattr(item, "__name__", None) or f"{type(item).__name__}-{id(item):x}"
        if pm.is_blocked(name):
            continue
        _register(pm, plugin, name, None)


def create_plugin_manager(
    *,
    plugins: Iterable[str | ModuleType | object] = (),
    disabled_plugins: Iterable[str] = (),
    autoload: bool | None = None,
) -> pluggy.PluginManager:
    """A fresh plugin manager with bundled, entry-point and named plugins registered."""
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    blocked = set(disabled_plugins) | disabled_from_env()
    for name in blocked:
        pm.set_blocked(name)
    _load_bundled(pm, blocked)
    if autoload if autoload is not None else autoload_from_env():
        _load_entry_points(pm, blocked)
    _load_named(pm, plugins)
    try:
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        name = pm.get_name(exc.plugin) or repr(exc.plugin)
        dist = plugin_distribution(pm, exc.plugin)
        unknown = sorted(
            caller.name for caller in pm.get_hookcallers(exc.plugin) or () if caller.spec is None
        )
        where = f" from distribution {dist!r}" if dist else ""
        hooks = ", ".join(unknown) or " ".join(str(exc).split())
        raise PluginLoadError(
            f'Plugin "{name}"{where} implements a hook mqcore does not define: {hooks} '
            f"(see the hook reference for the names); fix the name, or disable the plugin "
            f"with MQCORE_DISABLED_PLUGINS={name}",
            plugin=name,
            distribution=dist,
        ) from exc
    return pm


def plugin_distribution(pm: pluggy.PluginManager, plugin: object) -> str | None:
    """The distribution that provided ``plugin`` (``"mqcore"`` for bundled plugins)."""
    name = pm.get_name(plugin)
    if name is None:
        return None
    if isinstance(plugin, ModuleType) and plugin.__name__.startswith("mqcore."):
        return "mqcore"
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == name:
            return ep.dist.name if ep.dist is not None else None
    return None
