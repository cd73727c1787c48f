"""Fixtures for the gRPC endpoint's tests: ``mqcore serve --grpc-listen`` and the official
RocketMQ 5 Python client (``rocketmq-python-client``), run by the tox env ``grpc``."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

if not os.environ.get("MQCORE_REQUIRE_GRPC"):  # the tox env grpc must run them
    pytest.importorskip("rocketmq.grpc_protocol", reason="the mqcore[grpc] extra: tox -e grpc")
    pytest.importorskip("grpc", reason="the mqcore[grpc] extra: tox -e grpc")

from grpcserve import GrpcServe


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[GrpcServe]:
    """A running ``mqcore serve --grpc-listen 127.0.0.1:0`` (stopped at the end)."""
    srv = GrpcServe(tmp_path / "data")
    srv.start_grpc()
    try:
        yield srv
    finally:
        srv.stop()
