"""The ``mqcore`` command: version and plugin listing."""

from __future__ import annotations

from click.testing import CliRunner

import mqcore
from mqcore.cli import main


def test_version() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0
    assert mqcore.__version__ in result.output


def test_plugins_table_lists_bundled_plugins() -> None:
    result = CliRunner().invoke(main, ["plugins"])
    assert result.exit_code == 0, result.output
    assert "kind" in result.output and "distribution" in result.output
    k = mqcore.Kernel()
    for regs in k.registrations().values():
        for reg in regs:
            assert reg.name in result.output
