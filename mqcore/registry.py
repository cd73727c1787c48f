"""Registry[T]: named implementations of one kind (stores, allocators, filters...)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

import attrs

from mqcore.errors import DuplicateRegistrationError, InvalidArgumentError, NotRegisteredError

__all__ = ["Registration", "Registry"]

T = TypeVar("T")


@attrs.frozen
class Registration(Generic[T]):
    """One registered implementation: its name, factory and the plugin that provided it."""

    kind: str
    name: str
    factory: Callable[..., T]
    plugin: str
    distribution: str | None = None


class Registry(Generic[T]):
    """Names -> factories for one kind; lookup is case-insensitive.

    Unknown names raise :class:`NotRegisteredError` listing the registered names; a second
    registration of a name raises :class:`DuplicateRegistrationError` naming both plugins.
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, Registration[T]] = {}

    def register(
        self,
        name: str,
        factory: Callable[..., T],
        *,
        plugin: str,
        distribution: str | None = None,
    ) -> None:
        """Add ``factory`` under ``name`` on behalf of ``plugin``."""
        if not isinstance(name, str) or not name.strip():
            raise DuplicateRegistrationError(
                f"plugin {plugin!r} registered a {self.kind} with an empty or non-string name"
            )
        if not callable(factory):
            raise DuplicateRegistrationError(
                f"plugin {plugin!r} registered {self.kind} {name!r} with a non-callable factory"
            )
        key = name.strip().lower()
        existing = self._items.get(key)
        if existing is not None:
            raise DuplicateRegistrationError(
                f"{self.kind} {name!r} is registered twice: by plugin {existing.plugin!r} and by "
                f"plugin {plugin!r}; uninstall or block one of them (MQCORE_DISABLED_PLUGINS)"
            )
        self._items[key] = Registration(self.kind, name.strip(), factory, plugin, distribution)

    def get(self, name: str) -> Registration[T]:
        """The registration for ``name`` (case-insensitive)."""
        item = self._items.get(str(name).strip().lower())
        if item is None:
            raise NotRegisteredError(self.kind, str(name), self.names())
        return item

    def create(self, name: str, *args: object, **options: object) -> T:
        """Look ``name`` up and call its factory.

        Options the factory does not take raise :class:`InvalidArgumentError` naming them,
        the plugin, and the options it takes (a third-party factory need not check them).
        """
        item = self.get(name)
        try:
            signature = inspect.signature(item.factory)
        except (TypeError, ValueError):  # a builtin or C factory: let it check for itself
            signature = None
        if signature is not None:
            try:
                signature.bind(*args, **options)
            except TypeError as exc:
                where = f" from distribution {item.distribution!r}" if item.distribution else ""
                takes = [
                    p.name
                    for p in signature.parameters.values()
                    if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
                ]
                raise InvalidArgumentError(
                    f"{self.kind} {item.name!r} (plugin {item.plugin!r}{where}) cannot take "
                    f"options {sorted(options)}: {exc}; it takes: {', '.join(takes) or 'none'}"
                ) from None
        return item.factory(*args, **options)

    def names(self) -> list[str]:
        """Registered names, sorted."""
        return sorted(r.name for r in self._items.values())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.strip().lower() in self._items

    def __iter__(self) -> Iterator[Registration[T]]:
        return iter(sorted(self._items.values(), key=lambda r: r.name.lower()))

    def __len__(self) -> int:
        return len(self._items)
