"""Entry-point plugins: a real installed distribution, a broken one, and autoload switches."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mqcore import Kernel, MessageQueue
from mqcore.errors import PluginLoadError
from mqcore.pluginmanager import BUNDLED_PLUGINS

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "docs" / "examples" / "mqcore-allocate-sticky"


def _fake_distribution(where: Path, name: str, entry: str, module_source: str) -> None:
    """Lay out an installed distribution (dist-info + module) the way pip would."""
    mod = entry.split(":")[0]
    (where / f"{mod}.py").write_text(module_source)
    info = where / f"{name.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[mqcore]\n{name} = {entry}\n")


def test_broken_entry_point_raises_plugin_load_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_distribution(
        tmp_path, "mqcore-broken", "mqcore_broken_mod", "raise RuntimeError('boom at import')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginLoadError) as info:
        Kernel()
    err = info.value
    assert err.plugin == "mqcore-broken" and err.distribution == "mqcore-broken"
    assert 'Error importing plugin "mqcore-broken"' in str(err) and "boom at import" in str(err)
    assert isinstance(err.__cause__, RuntimeError)
    # Autoload off (argument or environment) skips the broken distribution.
    assert Kernel(autoload=False) is not None
    monkeypatch.setenv("MQCORE_DISABLE_PLUGIN_AUTOLOAD", "1")
    assert Kernel() is not None
    monkeypatch.delenv("MQCORE_DISABLE_PLUGIN_AUTOLOAD")
    monkeypatch.setenv("MQCORE_DISABLED_PLUGINS", "mqcore-broken")
    assert Kernel() is not None


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_example_distribution_installs_and_registers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pip-install the documented example and use its strategy by name, with no change to mqcore."""
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
            "--no-build-isolation", "--target", str(target), str(EXAMPLE),
        ],
        check=True,
        cwd=tmp_path,
    )  # fmt: skip
    monkeypatch.syspath_prepend(str(target))
    k = Kernel()
    reg = {r.name: r for r in k.registrations()["allocator"]}["sticky"]
    assert reg.distribution == "mqcore-allocate-sticky"
    strategy = k.allocator("STICKY")
    mqs = [MessageQueue("T", "b", i) for i in range(8)]
    cids = ["c1", "c2", "c3"]
    shares = [strategy.allocate("g", c, mqs, cids) for c in cids]
    assert sorted(q for s in shares for q in s) == mqs


def test_plugins_and_contrib_are_not_top_level() -> None:
    import importlib.util

    assert importlib.util.find_spec("plugins") is None
    assert importlib.util.find_spec("contrib") is None


def test_bundled_plugins_import() -> None:
    import importlib

    for name in BUNDLED_PLUGINS:
        assert importlib.import_module(name).__name__ == name


_MISNAMED = """
from mqcore import hookimpl

@hookimpl
def mqcore_register_allocators(registrar):
    registrar("x", object)
"""

_MISSING = """
from mqcore import hookimpl

@hookimpl
def mqcore_register_allocators():
    pass
"""

_RAISING = """
from mqcore import hookimpl

@hookimpl
def mqcore_register_allocators(register):
    raise KeyError("no config for the strategy")
"""


@pytest.mark.parametrize(
    ("source", "says"),
    [
        (_MISNAMED, "registrar"),
        (_MISSING, "TypeError"),
        (_RAISING, "no config for the strategy"),
    ],
    ids=["misnamed-argument", "missing-argument", "raises-while-registering"],
)
def test_bad_hook_implementation_is_a_plugin_load_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str, says: str
) -> None:
    """A hook implementation with a wrong signature, or that raises, names plugin and dist."""
    module = f"mqcore_bad_{says.replace(' ', '_').lower()}"  # each case its own module
    _fake_distribution(tmp_path, "mqcore-bad", module, source)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginLoadError) as info:
        Kernel()
    err = info.value
    assert err.plugin == "mqcore-bad" and err.distribution == "mqcore-bad"
    assert '"mqcore-bad"' in str(err) and "'mqcore-bad'" in str(err) and says in str(err)


def test_cli_prints_a_plugin_load_error_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`mqcore plugins` with a broken plugin: one line on stderr, no traceback, exit 1."""
    _fake_distribution(tmp_path, "mqcore-bad", "mqcore_bad_cli", _MISNAMED)
    env = {"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("mqcore")), "plugins"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 1
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "mqcore-bad" in lines[0] and "Traceback" not in proc.stderr
