"""A transactional producer behind a name server is reachable for checks before it sends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mqtest import wait_until

from mqcore import LocalTransactionState, Message, MessageExt, TransactionProducer
from mqcore.server import NamesrvServer, Server

pytestmark = pytest.mark.timeout(60)


class Commits:
    def __init__(self) -> None:
        self.checked: list[str] = []

    def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
        return LocalTransactionState.UNKNOW

    def check_local_transaction(self, msg: MessageExt) -> LocalTransactionState:
        self.checked.append(msg.msg_id)
        return LocalTransactionState.COMMIT_MESSAGE


def test_a_restarted_producer_answers_checks_without_sending(tmp_path: Path) -> None:
    with NamesrvServer("127.0.0.1:0") as ns:
        settings = {
            "namesrv_addr": ns.address,
            "register_name_server_period_ms": 300,
            "transaction_timeout": 200,
            "transaction_check_interval": 200,
        }
        with Server(tmp_path / "a", "127.0.0.1:0", settings=settings) as server:
            # As many queues as the template topic's route gives a topic the name server does
            # not know yet (its registration may come after the first send).
            server.broker.create_topic("T", queue_nums=4)
            with TransactionProducer("txg", namesrv_addr=ns.address, listener=Commits()) as p:
                r = p.send_message_in_transaction(Message("T", b"x"))
            # The producer that sent it is gone; a new member of the group that has sent
            # nothing is asked, and its answer commits.
            answers = Commits()
            with TransactionProducer("txg", namesrv_addr=ns.address, listener=answers):
                assert wait_until(lambda: server.broker.transactions.pending_count() == 0)
            assert answers.checked[0] == r.msg_id
            assert sum(server.broker.get_max_offset("T", q) for q in range(4)) == 1
