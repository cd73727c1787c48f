"""Check that the built wheel ships only the ``mqcore`` package (plus its dist-info)."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

wheels = sorted(Path(sys.argv[1]).glob("mqcore-*.whl"))
if len(wheels) != 1:
    sys.exit(f"expected one mqcore wheel in {sys.argv[1]}, found {wheels}")
names = zipfile.ZipFile(wheels[0]).namelist()
tops = {n.split("/", 1)[0] for n in names}
stray = {t for t in tops if t != "mqcore" and not t.endswith((".dist-info", ".data"))}
if stray:
    sys.exit(f"wheel {wheels[0].name} has unexpected top-level entries: {sorted(stray)}")
for required in (
    "mqcore/py.typed",
    "mqcore/plugins/__init__.py",
    "mqcore/contrib/__init__.py",
    "mqcore/dashboard/templates/base.html",  # package data: the dashboard's pages
):
    if required not in names:
        sys.exit(f"wheel {wheels[0].name} is missing {required}")
# The C speedups are optional for an install, but the wheel this project ships must have them:
# without a compiler the build quietly falls back to the (slower) pure-Python loops.
# One extension per owner (mqcore.speedups.EXTENSIONS names them).
EXTENSIONS = (
    "mqcore/_codec",
    "mqcore/protocol/_protocol",
    "mqcore/broker/_schedule",
    "mqcore/plugins/_delay_timer",
    "mqcore/contrib/spark/_arrow",
    "mqcore/plugins/store_mmap/_keyindex",
    "mqcore/plugins/store_mmap/_put",
)
for ext in EXTENSIONS:
    if not any(n.startswith(f"{ext}.") and n.endswith((".so", ".pyd")) for n in names):
        module = ext.replace("/", ".")
        sys.exit(
            f"wheel {wheels[0].name} lacks the compiled {module} extension; install a C "
            f"compiler and the Python headers (e.g. gcc and python3-dev) and build again"
        )
print(f"{wheels[0].name}: {len(names)} files, top level {sorted(tops)}")
