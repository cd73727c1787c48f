"""The transaction check service: asks producers about undecided halves
(RocketMQ's ``TransactionalMessageCheckService`` and its check listener).

Every ``transaction_check_interval`` ms one thread runs a check pass of the broker's
:class:`~mqcore.broker.transaction.TransactionService` and sends each request it returns to a
live producer of the half's group, through the channel the producer left with its heartbeat:
a Python call into a producer of this process, CHECK_TRANSACTION_STATE (39) over a remote
producer's own connection. A group with no live producer is counted as checked all the same
(as RocketMQ's), so a half whose producer never answers is given up after
``transaction_check_max`` checks. The progress is persisted after every pass.
"""

from __future__ import annotations

import threading

from mqcore.broker.producers import ProducerManager
from mqcore.broker.transaction import TransactionService
from mqcore.logs import get_logger

__all__ = ["CHECK_METHOD", "TransactionCheckService"]

log = get_logger(__name__)

#: The channel method a producer that can be asked about its transactions has.
CHECK_METHOD = "check_transaction_state"


class TransactionCheckService:
    """The thread of check passes.

    :param transactions: the broker's half bookkeeping.
    :param producers: the live producers, by group.
    :param interval_ms: time between passes (``transaction_check_interval``).
    :param name: used in the thread's name.
    """

    def __init__(
        self,
        transactions: TransactionService,
        producers: ProducerManager,
        interval_ms: int = 60_000,
        *,
        name: str = "broker",
    ) -> None:
        self.transactions = transactions
        self.producers = producers
        self.interval_ms = interval_ms
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"mqcore-transaction-check-{name}", daemon=True
        )

    def start(self) -> None:
        """Start the thread (its first pass one interval from now)."""
        self._thread.start()

    def close(self) -> None:
        """Stop the thread, then persist the progress."""
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
        self.transactions.persist()

    def check_now(self) -> None:
        """Run the next pass now rather than at the end of the interval."""
        self._wake.set()

    def _run(self) -> None:
        while True:
            self._wake.wait(self.interval_ms / 1000)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.run_pass()
            except Exception:  # keep checking; the next pass retries
                log.exception("transaction_check_pass_failed")

    def run_pass(self) -> int:
        """One pass: the checks due are sent; returns how many were sent to a producer."""
        requests = self.transactions.check_pass()
        sent = 0
        missing: set[str] = set()
        for req in requests:
            found = self.producers.channel(req.group, CHECK_METHOD)
            if found is None:
                missing.add(req.group)
                continue
            client_id, channel = found
            try:
                getattr(channel, CHECK_METHOD)(req.header, req.message)
                sent += 1
            except Exception as exc:  # one producer's channel must not stop the pass
                log.warning(
                    "transaction_check_send_failed", group=req.group, client_id=client_id,
                    error=str(exc),
                )  # fmt: skip
        for group in sorted(missing):
            log.warning("transaction_check_no_producer", group=group)
        if requests:
            log.info("transaction_check_pass", checks=len(requests), sent=sent)
        self.transactions.persist()
        return sent
