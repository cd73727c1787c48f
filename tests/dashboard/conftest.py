"""Fixtures of the dashboard tests: a name server with two broker groups, the dashboard in
front of it, and headless Chromium driven by Playwright (Debian's ``chromium``)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dashboardtest import FAST, REQUIRED, Cluster, chromium_path, wait_for

from mqcore.server import NamesrvServer, Server


@pytest.fixture(autouse=True)
def no_thread_leaks() -> Iterator[None]:
    """Here the cluster, the dashboard and the browser serve a whole module (starting them
    per test would take most of the run): their threads are checked when the module ends,
    by :func:`module_thread_leaks`, instead of after each test."""
    yield


@pytest.fixture(scope="module", autouse=True)
def module_thread_leaks() -> Iterator[None]:
    """Every thread the module's tests and fixtures started is stopped when it ends."""
    before = set(threading.enumerate())
    yield
    leaked = []
    for t in set(threading.enumerate()) - before:
        t.join(timeout=10)
        if t.is_alive():
            leaked.append(t.name)
    assert not leaked, f"threads left running: {leaked}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """``mqcore namesrv`` with broker groups broker-a and broker-b registered."""
    root: Path = tmp_path_factory.mktemp("cluster")
    with NamesrvServer("127.0.0.1:0") as ns:
        a_settings = {**FAST, "namesrv_addr": ns.address, "broker_name": "broker-a"}
        b_settings = {**a_settings, "broker_name": "broker-b"}
        with (
            Server(root / "a", "127.0.0.1:0", settings=a_settings) as a,
            Server(root / "b", "127.0.0.1:0", settings=b_settings) as b,
        ):
            wait_for(lambda: len(ns.tables.cluster_info()["brokerAddrTable"]) == 2)
            yield Cluster(ns.address, {"broker-a": a, "broker-b": b})


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium (Playwright's own browser builds are not used: Debian's is)."""
    if REQUIRED:
        from playwright import sync_api
    else:
        sync_api = pytest.importorskip("playwright.sync_api")
    path = chromium_path()
    if path is None:
        if REQUIRED:
            pytest.fail("no chromium on the PATH: the tox env dashboard installs Debian's")
        pytest.skip("no chromium on the PATH (Debian: apt-get install chromium)")
    with sync_api.sync_playwright() as pw:
        # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start;
        # --disable-dev-shm-usage: a container's small /dev/shm crashes its renderers.
        b = pw.chromium.launch(
            executable_path=path,
            headless=True,
            args=["--no-sandbox", "--disable-dev-shm-usage"],
        )
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh browser page (its own context: no cookie or cache shared between tests)."""
    context = browser.new_context()
    context.set_default_timeout(30_000)
    try:
        yield context.new_page()
    finally:
        context.close()
