"""What a user without the Spark extra is told: which package is missing, and how to install."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _import_without(module: str) -> str:
    """The ImportError message of ``import mqcore.contrib.spark`` with ``module`` missing."""
    code = (
        f"import sys; sys.modules[{module!r}] = None\n"
        "try:\n"
        "    import mqcore.contrib.spark\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return out.stdout.strip()


@pytest.mark.parametrize("module", ["pyspark", "pyarrow"])
def test_the_import_error_names_the_missing_package(module: str) -> None:
    """Both install commands (index and clone), the missing package, and Java."""
    message = _import_without(module)
    other = "pyarrow" if module == "pyspark" else "pyspark"
    if importlib.util.find_spec(other) is None:  # without the extra: both are named
        assert "pyspark and pyarrow are missing" in message
    else:
        assert f"{module} is missing" in message
    assert "pip install 'mqcore[spark]'" in message and "pip install '.[spark]'" in message
    assert "Java 17" in message


def test_docs_give_both_install_commands_for_the_extra() -> None:
    """docs/spark.md installs the extra that pyproject.toml defines, from the index and a clone."""
    extra = re.search(r"^spark = \[(.*)\]$", (ROOT / "pyproject.toml").read_text(), re.M)
    assert extra is not None and '"pyspark' in extra.group(1) and '"pyarrow' in extra.group(1)
    text = (ROOT / "docs" / "spark.md").read_text(encoding="utf-8")
    assert "pip install 'mqcore[spark]'" in text and "pip install '.[spark]'" in text
