"""The Kernel: one plugin manager and one registry per kind, per instance.

Several kernels can live in one process without seeing each other's plugins.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any, cast

import pluggy

from mqcore.config import KernelConfig
from mqcore.errors import InvalidArgumentError, MQError, PluginLoadError
from mqcore.interfaces import (
    AllocateStrategy,
    DelayScheduler,
    MessageFilter,
    OffsetStore,
    TimerScheduler,
)
from mqcore.logs import get_logger
from mqcore.pluginmanager import create_plugin_manager, plugin_distribution
from mqcore.registry import Registration, Registry
from mqcore.store import Store

__all__ = ["KINDS", "Kernel"]

log = get_logger(__name__)

#: kind -> the registration hook that fills its registry
KINDS: dict[str, str] = {
    "store": "mqcore_register_stores",
    "allocator": "mqcore_register_allocators",
    "filter": "mqcore_register_filters",
    "offset_store": "mqcore_register_offset_stores",
    "delay_scheduler": "mqcore_register_delay_schedulers",
    "timer_scheduler": "mqcore_register_timer_schedulers",
}

_FILTER_CACHE_SIZE = 256


class Kernel:
    """Plugins and their registries; the factory for stores, allocators, filters and more.

    >>> k = Kernel()                     # bundled plugins + entry points of group "mqcore"
    >>> k.allocator("avg")               # doctest: +SKIP
    """

    def __init__(
        self,
        config: KernelConfig | None = None,
        *,
        plugins: Iterable[Any] = (),
        disabled_plugins: Iterable[str] = (),
        autoload: bool | None = None,
    ) -> None:
        if isinstance(plugins, (str, bytes)) or isinstance(disabled_plugins, (str, bytes)):
            raise InvalidArgumentError(
                f"plugins= and disabled_plugins= take a list of names, got the string "
                f"{plugins if isinstance(plugins, (str, bytes)) else disabled_plugins!r}; "
                "wrap it in a list"
            )
        if config is not None and (plugins or disabled_plugins or autoload is not None):
            raise InvalidArgumentError(
                "Kernel(config=...) takes its plugins, disabled_plugins and autoload from the "
                "config; set them there (attrs.evolve(config, plugins=...)), not as keywords too"
            )
        if config is None:
            config = KernelConfig(
                plugins=tuple(plugins), disabled_plugins=tuple(disabled_plugins), autoload=autoload
            )
        self.config = config
        self.pm: pluggy.PluginManager = create_plugin_manager(
            plugins=config.plugins,
            disabled_plugins=config.disabled_plugins,
            autoload=config.autoload,
        )
        self.registries: dict[str, Registry[Any]] = {kind: Registry(kind) for kind in KINDS}
        for kind, hookname in KINDS.items():
            self._collect(kind, getattr(self.pm.hook, hookname))
        self.pm.hook.mqcore_configure.call_historic(kwargs={"config": config})
        self._filters: OrderedDict[tuple[str, str], Any] = OrderedDict()
        self._filters_lock = threading.Lock()

    def _collect(self, kind: str, hook: Any) -> None:
        registry = self.registries[kind]
        # Call each implementation on its own, in registration order (bundled first), so
        # every registration knows its plugin.
        for impl in hook.get_hookimpls():
            dist = plugin_distribution(self.pm, impl.plugin)

            def register(
                name: str, factory: Any, _p: str = impl.plugin_name, _d: str | None = dist
            ) -> None:
                registry.register(name, factory, plugin=_p, distribution=_d)

            try:
                impl.function(register=register)
            except MQError:
                raise  # mqcore's own complaint (a duplicate name...), already naming the plugin
            except Exception as exc:
                where = f" from distribution {dist!r}" if dist else ""
                raise PluginLoadError(
                    f'Plugin "{impl.plugin_name}"{where} failed in {hook.name}: '
                    f"{type(exc).__name__}: {exc}",
                    plugin=impl.plugin_name,
                    distribution=dist,
                ) from exc

    # -- lookups --------------------------------------------------------------------------

    @property
    def hook(self) -> Any:
        """The plugin manager's hook caller (lifecycle hooks: ``k.hook.mqcore_send_after(...)``)."""
        return self.pm.hook

    def allocator(self, name: str, **options: Any) -> AllocateStrategy:
        """A new allocation strategy ``name`` built with ``options``."""
        return cast(AllocateStrategy, self.registries["allocator"].create(name, **options))

    def filter(self, expression_type: str, expression: str | None) -> MessageFilter:
        """A compiled filter; compiled filters are cached per (type, expression)."""
        key = (str(expression_type).upper(), expression or "")
        with self._filters_lock:
            found = self._filters.get(key)
            if found is not None:
                self._filters.move_to_end(key)
                return cast(MessageFilter, found)
        compiled = self.registries["filter"].create(expression_type, expression)
        with self._filters_lock:
            self._filters[key] = compiled
            while len(self._filters) > _FILTER_CACHE_SIZE:
                self._filters.popitem(last=False)
        return cast(MessageFilter, compiled)

    def open_store(self, name: str, path: Any, **options: Any) -> Store:
        """Open (or create) a store of backend ``name`` at ``path``."""
        return cast(Store, self.registries["store"].create(name, path, **options))

    def offset_store(self, name: str, **options: Any) -> OffsetStore:
        """A new consumer offset store ``name``."""
        return cast(OffsetStore, self.registries["offset_store"].create(name, **options))

    def delay_scheduler(self, name: str, **options: Any) -> DelayScheduler:
        """A new delay scheduler ``name``."""
        return cast(DelayScheduler, self.registries["delay_scheduler"].create(name, **options))

    def timer_scheduler(self, name: str, **options: Any) -> TimerScheduler:
        """A new timer scheduler ``name``."""
        return cast(TimerScheduler, self.registries["timer_scheduler"].create(name, **options))

    def registrations(self) -> dict[str, list[Registration[Any]]]:
        """Everything registered, per kind, sorted by name."""
        return {kind: list(reg) for kind, reg in self.registries.items()}

    def names(self, kind: str) -> list[str]:
        """Names registered for ``kind`` (``store``, ``allocator``, ``filter``...)."""
        return self.registries[kind].names()
