"""RocketMQ's Java clients for the tests: the Maven project in ``tests/java`` built once per
client version, and its scenarios run one JVM each (importable as ``mqjava``).

Maven resolves the jars into its own local repository (``~/.m2/repository``), so a machine
downloads them once; each version compiles into ``tests/java/target/<version>``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest

#: The Maven project of the Java scenarios.
PROJECT = Path(__file__).resolve().parent.parent / "java"

#: The 4.x client of the issue, and the newest 5.x remoting client Maven Central serves.
CLIENT_VERSIONS = ("4.9.8", "5.5.0")

#: Small JVMs: several run beside the servers on a small machine.
JVM_OPTIONS = ("-Xms32m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xss512k")


def require_java() -> None:
    """Skip unless the Java tests were asked for (``MQCORE_JAVA=1``, set by tox's ``java``
    env), where a missing ``java`` or ``mvn`` is a failure, not a skip."""
    if not os.environ.get("MQCORE_JAVA"):
        pytest.skip("the Java clients and Apache RocketMQ run in the tox env java")
    for tool in ("java", "mvn"):
        assert shutil.which(tool), (
            f"{tool} is not on PATH (the tox env java needs a JDK 17 and Maven)"
        )


def maven(*args: str, cwd: Path = PROJECT, timeout: float = 900) -> None:
    """Run Maven in batch mode, failing with its output when it fails."""
    done = subprocess.run(
        ["mvn", "-B", "-q", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"mvn {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"


@cache
def classpath(version: str) -> str:
    """Build the scenarios against client ``version``; the classpath that runs them."""
    maven(f"-Drocketmq.version={version}", "package", "dependency:build-classpath")
    target = PROJECT / "target" / version
    deps = (target / "classpath.txt").read_text().strip()
    return f"{target / 'classes'}{os.pathsep}{deps}"


def run_scenario(
    version: str, work: Path, name: str, *args: str, timeout: float = 120
) -> list[dict[str, Any]]:
    """Run scenario ``name`` in a JVM with client ``version``; its JSON lines (any other
    output, the client's own logging, is dropped). Fails when the JVM fails or a line
    reports an error."""
    work.mkdir(parents=True, exist_ok=True)
    cmd = [
        "java", *JVM_OPTIONS,
        f"-Drocketmq.client.logRoot={work / 'logs'}",
        f"-Drocketmq.client.localOffsetStoreDir={work / 'offsets'}",
        "-Drocketmq.client.logUseSlf4j=false",
        "-cp", classpath(version),
        "mqcore.javaclient.Scenarios", name, *args,
    ]  # fmt: skip
    done = subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, cwd=work, env=_env(work)
    )
    lines = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
    assert done.returncode == 0, (
        f"scenario {name} failed:\n{done.stdout[-5000:]}\n{done.stderr[-5000:]}"
    )
    errors = [x for x in lines if x.get("event") == "error"]
    assert not errors, f"scenario {name} reported errors: {errors}"
    assert lines and lines[-1] == {"event": "done", "scenario": name}, "the scenario did not finish"
    return lines


def _env(work: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["HOME"] = str(work)  # the clients write under ~ (logs, local offsets)
    env.pop("JAVA_TOOL_OPTIONS", None)
    return env


def events(lines: list[dict[str, Any]], event: str, **match: Any) -> list[dict[str, Any]]:
    """The lines of ``event`` whose fields equal ``match``."""
    return [
        x for x in lines if x.get("event") == event and all(x.get(k) == v for k, v in match.items())
    ]
