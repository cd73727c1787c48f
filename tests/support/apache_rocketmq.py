"""Apache RocketMQ's own name server and broker, from the jars Maven Central ships, as child
processes for tests (importable as ``apache_rocketmq``).

The project writes every file they read: the name server's and the broker's properties and a
logback configuration (``rmq.logback.xml``, first on the classpath, so the jars' own, which
log to ``~/logs``, are never read). Each JVM gets a small heap and ``user.home`` inside the
fixture's directory, so nothing is left outside it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from functools import cache
from pathlib import Path

from mqjava import PROJECT, maven
from mqserve import wait_until_accepting

#: The release whose name server and broker the tests run.
SERVER_VERSION = "5.5.0"

_LOGBACK = """<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by mqcore's tests: warnings and errors of every logger to one file. -->
<configuration>
  <appender name="FILE"
            class="org.apache.rocketmq.logging.ch.qos.logback.core.FileAppender">
    <file>{log}</file>
    <encoder
        class="org.apache.rocketmq.logging.ch.qos.logback.classic.encoder.PatternLayoutEncoder">
      <pattern>%d{{HH:mm:ss.SSS}} %-5level %logger{{24}} - %msg%n</pattern>
    </encoder>
  </appender>
  <root level="WARN">
    <appender-ref ref="FILE"/>
  </root>
</configuration>
"""


@cache
def server_classpath() -> str:
    """Resolve the name server's and broker's jars (into Maven's local repository, once)."""
    maven("dependency:build-classpath", cwd=PROJECT / "rocketmq")
    path = PROJECT / "target" / f"server-{SERVER_VERSION}" / "classpath.txt"
    return path.read_text().strip()


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def broker_port() -> int:
    """A port for a broker: free, with the two more it takes (port - 2, its fast channel, and
    port + 1, replication) free too."""
    for _ in range(200):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port > 1100 and all(_free(p) for p in (port - 2, port + 1)):
            return port
    raise AssertionError("no free port with free neighbours for a broker")


class _BrokerExited(AssertionError):
    """The broker process ended before it registered."""


class ApacheRocketMQ:
    """A name server and one master broker (``broker-a`` of ``DefaultCluster``) on
    ``store_dir``, under ``base`` (configuration, logs, the JVMs' home)."""

    def __init__(
        self,
        base: Path,
        store_dir: Path | None = None,
        broker_heap: str = "384m",
        quick_start: bool = True,
        **broker: str | int,
    ) -> None:
        self.base = base
        self.broker_heap = broker_heap
        #: Tests: the serial collector and the first JIT tier only (JVMs start sooner on a
        #: small machine). A benchmark passes False: the JVM's defaults, full JIT.
        self.quick_start = quick_start
        self.store_dir = store_dir or base / "store"
        self.extra = broker
        self.namesrv_port = 0
        self.broker_port = 0
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.fixed_ports = False

    @property
    def address(self) -> str:
        """The name server's ``host:port``: what clients are given."""
        return f"127.0.0.1:{self.namesrv_port}"

    @property
    def broker_address(self) -> str:
        """The broker's ``host:port``."""
        return f"127.0.0.1:{self.broker_port}"

    def _write_config(self) -> None:
        conf = self.base / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        (conf / "rmq.logback.xml").write_text(_LOGBACK.format(log=self.base / "rocketmq.log"))
        (conf / "namesrv.properties").write_text(f"listenPort={self.namesrv_port}\n")
        settings: dict[str, str | int] = {
            "brokerClusterName": "DefaultCluster",
            "brokerName": "broker-a",
            "brokerId": 0,
            "brokerRole": "ASYNC_MASTER",
            "flushDiskType": "ASYNC_FLUSH",
            "namesrvAddr": self.address,
            "listenPort": self.broker_port,
            "brokerIP1": "127.0.0.1",
            "storePathRootDir": self.store_dir,
            "storePathCommitLog": self.store_dir / "commitlog",
            # SQL92 subscriptions (off by default in Apache RocketMQ, always on in mqcore)
            "enablePropertyFilter": "true",
            "autoCreateTopicEnable": "true",
            "autoCreateSubscriptionGroup": "true",
            **self.extra,
        }
        lines = [f"{k}={v}" for k, v in settings.items()]
        (conf / "broker.conf").write_text("\n".join(lines) + "\n")

    def _launch(self, name: str, main: str, config: str, heap: str) -> subprocess.Popen[bytes]:
        home = self.base / "home"
        home.mkdir(parents=True, exist_ok=True)
        quick = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"] if self.quick_start else []
        cmd = [
            "java", "-Xms64m", f"-Xmx{heap}", f"-XX:MaxDirectMemorySize={heap}", *quick,
            f"-Duser.home={home}",
            "-cp", f"{self.base / 'conf'}{os.pathsep}{server_classpath()}",
            main, "-c", str(self.base / "conf" / config),
        ]  # fmt: skip
        env = dict(os.environ, ROCKETMQ_HOME=str(home), HOME=str(home))
        with (self.base / f"{name}.out").open("ab") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        self.procs[name] = proc
        return proc

    def start(self, timeout: float = 180) -> str:
        """Start the name server, then the broker; return once the broker is registered with
        the name server (its cluster info lists it). The name server's address."""
        # A restart on the same store keeps its ports (clients and offsets name them).
        self.fixed_ports = bool(self.broker_port)
        self.namesrv_port = self.namesrv_port or broker_port()
        self.broker_port = self.broker_port or broker_port()
        self._write_config()
        ns = self._launch(
            "namesrv", "org.apache.rocketmq.namesrv.NamesrvStartup", "namesrv.properties", "128m"
        )
        wait_until_accepting(self.address, ns, timeout)  # type: ignore[arg-type]
        for attempt in range(3):
            broker = self._launch(
                "broker", "org.apache.rocketmq.broker.BrokerStartup", "broker.conf",
                self.broker_heap,
            )  # fmt: skip
            try:
                self._await_registered(broker, timeout)
                return self.address
            except _BrokerExited:
                # One of its three ports was taken between the choice and the bind (other
                # servers start beside it): choose again.
                if attempt == 2 or self.fixed_ports:
                    raise
                self.broker_port = broker_port()
                self._write_config()
        raise AssertionError("unreachable")

    def _await_registered(self, broker: subprocess.Popen[bytes], timeout: float) -> None:
        from mqcore.client.admin import MQAdmin

        deadline = time.monotonic() + timeout
        with MQAdmin(self.address) as admin:
            while True:
                if broker.poll() is not None:
                    raise _BrokerExited(f"the broker exited: {self.output('broker')}")
                try:
                    if admin.brokers().get("broker-a", {}).get(0) == self.broker_address:
                        return
                except Exception:  # not registered yet: asked again
                    pass
                assert time.monotonic() < deadline, f"no broker registered: {self.output('broker')}"
                time.sleep(0.2)

    def output(self, name: str) -> str:
        """The end of a process's console output and of the log file."""
        text = ""
        for path in (self.base / f"{name}.out", self.base / "rocketmq.log"):
            if path.exists():
                text += f"\n--- {path.name}\n" + path.read_text(errors="replace")[-3000:]
        return text

    def stop(self) -> None:
        """SIGTERM the broker (it flushes and persists on the way out), then the name
        server; SIGKILL whatever does not end in 60 s."""
        for name in ("broker", "namesrv"):
            proc = self.procs.pop(name, None)
            if proc is None or proc.poll() is not None:
                continue
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
