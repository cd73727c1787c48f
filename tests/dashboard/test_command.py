"""``mqcore dashboard`` as an operator runs it: a process that serves the pages until
SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner
from dashboardtest import REQUIRED

from mqcore.cli import main
from mqcore.server import Server

if not REQUIRED:
    for _module in ("starlette", "jinja2", "uvicorn", "multipart"):
        pytest.importorskip(_module)


def test_dashboard_serves_until_sigterm(tmp_path: Path) -> None:
    with Server(tmp_path / "s", "127.0.0.1:0") as srv:
        proc = subprocess.Popen(
            [sys.executable, "-c", "from mqcore.cli import main; main()", "dashboard",
             "--namesrv", srv.address, "--listen", "127.0.0.1:0", "--read-only"],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert proc.stdout is not None
            first = proc.stdout.readline()
            assert first.startswith("mqcore dashboard: http://127.0.0.1:"), first
            assert first.rstrip().endswith(f"for the name server {srv.address} (read-only)")
            url = first.split()[2].rstrip("/")
            with urllib.request.urlopen(url + "/healthz", timeout=30) as resp:
                assert resp.read() == b"ok\n"
            with urllib.request.urlopen(url + "/", timeout=30) as resp:
                assert b"broker-a" in resp.read()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0
            assert proc.stdout.read().strip() == "mqcore dashboard: stopped"
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()


def test_keys_come_in_pairs() -> None:
    result = CliRunner().invoke(
        main, ["dashboard", "--namesrv", "127.0.0.1:9876", "--access-key", "ak"]
    )
    assert result.exit_code == 2
    assert "an ACL account needs both keys: --secret-key" in result.output


def test_a_listen_address_in_use_is_one_line(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = CliRunner().invoke(
            main, ["dashboard", "--namesrv", "127.0.0.1:9876", "--listen", f"127.0.0.1:{port}"]
        )
    assert result.exit_code == 1
    assert f"the dashboard cannot listen on 127.0.0.1:{port}" in result.output


def _first_page(namesrv: str, *options: str) -> tuple[str, int, str]:
    """Run ``mqcore dashboard`` with ``options``: its first line, and the cluster page's
    status and text."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "from mqcore.cli import main; main()", "dashboard",
         "--namesrv", namesrv, "--listen", "127.0.0.1:0", *options],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        url = first.split()[2].rstrip("/")
        try:
            with urllib.request.urlopen(url + "/", timeout=60) as resp:
                status, text = resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            status, text = exc.code, exc.read().decode()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        return first, status, text
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def test_tls_options_reach_the_clients(tmp_path: Path) -> None:
    """--tls-ca makes the dashboard's clients speak TLS to a server that serves TLS only;
    without it the page says the server cannot be reached, in one line of the page."""
    from certs import make_certs

    from mqcore.remoting.tls import server_context

    certs = make_certs(tmp_path / "ca")
    tls = server_context(certs.server_cert, certs.server_key)
    with Server(tmp_path / "s", "127.0.0.1:0", ssl_context=tls) as srv:
        _, status, text = _first_page(srv.address, "--tls-ca", str(certs.ca))
        assert status == 200 and "broker-a" in text, text
        _, status, text = _first_page(srv.address)
        assert status == 502 and "broker-a" not in text
        assert "Traceback" not in text


def test_acl_option_asks_for_a_sign_in(tmp_path: Path) -> None:
    """With --acl the first line says so and the cluster page leads to the sign-in form."""
    with Server(tmp_path / "s", "127.0.0.1:0") as srv:
        first, status, text = _first_page(srv.address, "--acl")
    assert first.rstrip().endswith(f"for the name server {srv.address} (sign-in: ACL)"), first
    assert status == 200 and "<h1>Sign in</h1>" in text and "broker-a" not in text
