"""``mqcore demo`` runs the whole story and checks its own outcome."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from mqcore.cli import main


@pytest.mark.timeout(120)
def test_demo_runs_on_each_store(tmp_path: Path, store_name: str) -> None:
    result = CliRunner().invoke(
        main, ["demo", "--store", store_name, "--messages", "300", "--data-dir", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "demo complete" in text
    assert "consumed 225 'paid' messages" in text
    assert "%DLQ%demo-group (1 there)" in text
    assert "committed offsets of demo-group add up to 301" in text
    assert (tmp_path / "config" / "topics.json").exists()


def test_demo_unknown_store_is_a_clean_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["demo", "--store", "nope", "--data-dir", str(tmp_path)])
    assert result.exit_code != 0
    assert "unknown store 'nope'" in result.output
