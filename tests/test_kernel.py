"""Kernel: registries per instance, lookups, duplicates, blocking and configuration."""

from __future__ import annotations

import pytest

from mqcore import Kernel, hookimpl
from mqcore.config import KernelConfig
from mqcore.errors import DuplicateRegistrationError, NotRegisteredError, PluginLoadError


class Strategy:
    """A trivial strategy taking an option."""

    name = "FIRST"

    def __init__(self, n: int = 1) -> None:
        self.n = n

    def allocate(self, group, cid, mq_all, cid_all):  # type: ignore[no-untyped-def]
        return list(mq_all[: self.n])


class FirstPlugin:
    """Registers an allocator and a filter."""

    __name__ = "first-plugin"

    @hookimpl
    def mqcore_register_allocators(self, register):  # type: ignore[no-untyped-def]
        register("First", Strategy)

    @hookimpl
    def mqcore_register_filters(self, register):  # type: ignore[no-untyped-def]
        register("ECHO", lambda expression: ("compiled", expression))


class ClashingPlugin:
    """Registers a name FirstPlugin already has."""

    __name__ = "clashing-plugin"

    @hookimpl
    def mqcore_register_allocators(self, register):  # type: ignore[no-untyped-def]
        register("FIRST", Strategy)


def test_lookup_is_case_insensitive_and_passes_options() -> None:
    k = Kernel(plugins=[FirstPlugin()], autoload=False)
    s = k.allocator("first", n=2)
    assert isinstance(s, Strategy) and s.n == 2
    assert isinstance(k.allocator("FIRST"), Strategy)


def test_unknown_name_lists_registered_names() -> None:
    k = Kernel(plugins=[FirstPlugin()], autoload=False)
    with pytest.raises(NotRegisteredError, match=r"unknown allocator 'nope'.*First") as info:
        k.allocator("nope")
    assert isinstance(info.value, LookupError)
    assert "First" in info.value.known


def test_duplicate_name_names_both_plugins() -> None:
    with pytest.raises(DuplicateRegistrationError, match="first-plugin.*clashing-plugin"):
        Kernel(plugins=[FirstPlugin(), ClashingPlugin()], autoload=False)


def test_two_kernels_do_not_share_plugins() -> None:
    with_plugin = Kernel(plugins=[FirstPlugin()], autoload=False)
    without = Kernel(autoload=False)
    assert "First" in with_plugin.names("allocator")
    assert "First" not in without.names("allocator")


def test_filters_are_compiled_once_and_cached() -> None:
    k = Kernel(plugins=[FirstPlugin()], autoload=False)
    a = k.filter("echo", "x")
    assert a == ("compiled", "x")
    assert k.filter("ECHO", "x") is a


def test_registrations_name_the_plugin() -> None:
    k = Kernel(plugins=[FirstPlugin()], autoload=False)
    regs = {r.name: r for r in k.registrations()["allocator"]}
    assert regs["First"].plugin == "first-plugin"


def test_blocking_by_config_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    k = Kernel(KernelConfig(plugins=[FirstPlugin()], disabled_plugins=["first-plugin"]))
    assert "First" not in k.names("allocator")
    monkeypatch.setenv("MQCORE_DISABLED_PLUGINS", " other , first-plugin")
    assert "First" not in Kernel(plugins=[FirstPlugin()]).names("allocator")


def test_misspelt_hook_is_reported() -> None:
    class Typo:
        __name__ = "typo-plugin"

        @hookimpl
        def mqcore_register_alocators(self, register):  # type: ignore[no-untyped-def]
            register("x", Strategy)

    with pytest.raises(PluginLoadError, match="typo-plugin"):
        Kernel(plugins=[Typo()], autoload=False)


def test_configure_is_historic_and_sees_config() -> None:
    seen = []

    class Configured:
        __name__ = "configured"

        @hookimpl
        def mqcore_configure(self, config):  # type: ignore[no-untyped-def]
            seen.append(config.options["colour"])

    Kernel(KernelConfig(plugins=[Configured()], options={"colour": "blue"}, autoload=False))
    assert seen == ["blue"]


def test_plugin_named_by_module_that_does_not_import() -> None:
    with pytest.raises(PluginLoadError, match="no_such_module_xyz") as info:
        Kernel(plugins=["no_such_module_xyz"], autoload=False)
    assert isinstance(info.value.__cause__, ImportError)


def test_bundled_plugins_are_listed_as_mqcore() -> None:
    k = Kernel(autoload=False)
    for regs in k.registrations().values():
        for reg in regs:
            assert reg.distribution == "mqcore"


def test_options_beside_a_config_are_refused() -> None:
    """Kernel(config=..., plugins=...) would drop the plugins: it is refused instead."""
    from mqcore.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="config"):
        Kernel(KernelConfig(autoload=False), plugins=[FirstPlugin()])
    with pytest.raises(InvalidArgumentError, match="config"):
        Kernel(KernelConfig(autoload=False), autoload=True)
    with pytest.raises(InvalidArgumentError, match="list"):
        Kernel(plugins="mqcore_sticky", autoload=False)  # type: ignore[arg-type]
    with pytest.raises(ValueError):  # InvalidArgumentError is a ValueError too
        Kernel(disabled_plugins="allocate", autoload=False)  # type: ignore[arg-type]


def test_plugin_raising_in_a_registration_hook_is_a_plugin_load_error() -> None:
    """A plugin named in config that raises while registering: PluginLoadError naming it."""

    class Raising:
        __name__ = "raising-plugin"

        @hookimpl
        def mqcore_register_filters(self, register):  # type: ignore[no-untyped-def]
            raise RuntimeError("cannot compile the grammar")

    with pytest.raises(PluginLoadError, match="raising-plugin.*cannot compile") as info:
        Kernel(plugins=[Raising()], autoload=False)
    assert info.value.plugin == "raising-plugin"
    assert isinstance(info.value.__cause__, RuntimeError)


def test_factories_return_the_protocol_types(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """What the kernel builds satisfies mqcore.interfaces' protocols (and the store contract)."""
    from mqcore.interfaces import AllocateStrategy, DelayScheduler, MessageFilter, OffsetStore
    from mqcore.store import Store

    k = Kernel(autoload=False)
    assert isinstance(k.allocator("avg"), AllocateStrategy)
    assert isinstance(k.filter("TAG", "a || b"), MessageFilter)
    assert isinstance(
        k.offset_store("local_file", group="g", client_id="c", store_dir=tmp_path), OffsetStore
    )
    assert isinstance(k.delay_scheduler("delay_levels"), DelayScheduler)
    with k.open_store("mmap", tmp_path / "s") as store:
        assert isinstance(store, Store)
