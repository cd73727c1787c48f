"""The dashboard in headless Chromium against a name server with two broker groups: each
page loads, and each action works as an operator would use it (issue 34, criterion 4)."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from dashboardtest import REQUIRED, Cluster, wait_for

from mqcore import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    Message,
    Producer,
    PushConsumer,
)
from mqcore.client.admin import MQAdmin

if not REQUIRED:  # the tox env dashboard has the extra; elsewhere these tests skip
    for _module in ("starlette", "jinja2", "uvicorn", "multipart", "playwright"):
        pytest.importorskip(_module)

from mqcore.dashboard import Dashboard

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def dashboard(cluster: Cluster) -> Iterator[Dashboard]:
    with Dashboard(cluster.address, "127.0.0.1:0", sample_interval=0.5) as dash:
        yield dash


def reload_until(page: Any, selector: str, pattern: str, timeout: float = 60.0) -> str:
    """Reload ``page`` until the text of ``selector`` matches ``pattern``; that text."""
    seen: list[str] = []

    def matches() -> bool:
        page.reload()
        text = page.locator(selector).inner_text()
        seen.append(text)
        return re.search(pattern, text) is not None

    wait_for(matches, timeout, f"{selector} matching {pattern!r} (last seen {seen[-1:]})")
    return seen[-1]


def create_topic(cluster: Cluster, topic: str) -> None:
    with MQAdmin(cluster.address) as admin:
        admin.create_topic(topic, 2)
    wait_for(lambda: cluster.routed(topic), what=f"route of {topic}")


class Gate:
    """A listener that records what it gets and holds each batch while closed; ``fail``
    names keys whose first delivery it refuses (to send them to the dead-letter queue)."""

    def __init__(self, *, fail: tuple[str, ...] = ()) -> None:
        self.open = threading.Event()
        self.open.set()
        self.got: list[Any] = []
        self.fail = set(fail)
        self.changed = threading.Condition()

    def __call__(self, msgs: list[Any], ctx: Any) -> ConsumeConcurrentlyStatus:
        self.open.wait(60)
        with self.changed:
            self.got.extend(msgs)
            self.changed.notify_all()
        for m in msgs:
            if m.keys in self.fail:
                self.fail.discard(m.keys)
                return ConsumeConcurrentlyStatus.RECONSUME_LATER
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def count(self, key: str) -> int:
        with self.changed:
            return sum(1 for m in self.got if m.keys == key)


def start_consumer(cluster: Cluster, group: str, topic: str, gate: Gate, **options: Any) -> Any:
    c = PushConsumer(
        group,
        namesrv_addr=cluster.address,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        persist_consumer_offset_interval=0.2,
        **options,
    )
    c.subscribe(topic, "*")
    c.register_message_listener(gate)
    c.start()
    wait_for(lambda: len(c.assigned_queues(topic)) == 4, what=f"{group} owning 4 queues")
    return c


def test_pages_load_with_both_broker_groups(page: Any, dashboard: Dashboard) -> None:
    """Every page answers, and the cluster page shows both broker groups' masters."""
    for path, heading in [
        ("/", "Cluster"),
        ("/topics", "Topics"),
        ("/groups", "Consumer groups"),
        ("/messages", "Messages"),
        ("/dlq", "Dead letters"),
    ]:
        response = page.goto(dashboard.url + path)
        assert response.status == 200, path
        assert page.locator("h1").inner_text() == heading
    page.goto(dashboard.url + "/")
    rows = page.locator("#brokers tr").all_inner_texts()
    assert any("broker-a" in r and "ASYNC_MASTER" in r for r in rows), rows
    assert any("broker-b" in r and "ASYNC_MASTER" in r for r in rows), rows
    # Charts are drawn on the server, as SVG in the page.
    assert page.locator("svg.chart").count() == 2
    # A note in the query string is shown as text, never as markup.
    page.goto(dashboard.url + "/topics?note=<b id=injected>x</b>")
    assert page.inner_text("#note") == "<b id=injected>x</b>"
    assert page.locator("#injected").count() == 0


def test_create_topic_send_a_message_and_find_it_by_key(
    page: Any, dashboard: Dashboard, cluster: Cluster
) -> None:
    """A topic created from the page lands on both groups; a test message sent from its
    page is found by its key and shows its properties and body."""
    page.goto(dashboard.url + "/topics")
    page.fill("#create-topic input[name=topic]", "DashT")
    page.fill("#create-topic input[name=queues]", "2")
    page.click("#create-topic button")
    assert page.locator("h1").inner_text() == "Topic DashT"
    assert "topic DashT created with 4 queues on broker-a, broker-b" in page.inner_text("#note")
    assert page.locator("#queues tr").count() == 1 + 4
    wait_for(lambda: cluster.routed("DashT"), what="route of DashT")

    page.fill("#send-message input[name=tags]", "TagA")
    page.fill("#send-message input[name=keys]", "order-17")
    page.fill("#send-message textarea[name=body]", "a test message from the page")
    page.click("#send-message button")
    note = page.inner_text("#note")
    assert note.startswith("sent message "), note
    msg_id = note.split()[2]

    page.goto(dashboard.url + "/messages")
    page.select_option("#by-key select[name=topic]", "DashT")
    page.fill("#by-key input[name=key]", "order-17")
    page.click("#by-key button")
    assert page.locator("h2").first.inner_text() == "1 found"
    assert page.locator("#found td.keys").inner_text() == "order-17"
    page.click(f"#found a:text('{msg_id}')")
    assert page.locator("h1").inner_text() == f"Message {msg_id}"
    assert page.inner_text("#body") == "a test message from the page"
    fields = page.inner_text("#fields")
    assert "keys\torder-17" in fields and "tags\tTagA" in fields, fields
    assert f"UNIQ_KEY\t{msg_id}" in page.inner_text("#properties")

    # The same message by topic and time range, and by id.
    page.goto(dashboard.url + "/messages?topic=DashT&begin=-10m&end=now")
    assert msg_id in page.inner_text("#found")
    page.goto(dashboard.url + f"/messages?id={msg_id}")
    assert page.locator("#found tr").count() == 2

    page.goto(dashboard.url + "/topics")
    row = page.locator("#topics tr[data-topic=DashT]")
    assert row.locator("td.messages").inner_text() == "1"


def test_group_lag_grows_shrinks_and_its_offset_resets(
    page: Any, dashboard: Dashboard, cluster: Cluster
) -> None:
    """A held consumer's lag grows on the group page, shrinks once it consumes, and a
    reset from the page makes it consume the messages again."""
    create_topic(cluster, "LagT")
    gate = Gate()
    gate.open.clear()
    consumer = start_consumer(cluster, "cg-lag", "LagT", gate)
    try:
        with Producer("pg-lag", namesrv_addr=cluster.address) as producer:
            for i in range(12):
                producer.send(Message(topic="LagT", body=b"x", keys=f"lag-{i}"))
        page.goto(dashboard.url + "/groups/cg-lag")
        reload_until(page, "#total-lag", r"^12$")
        assert "broker-a" in page.inner_text("#lag") and "broker-b" in page.inner_text("#lag")

        gate.open.set()
        reload_until(page, "#total-lag", r"^0$")
        assert all(gate.count(f"lag-{i}") == 1 for i in range(12))

        page.select_option("#reset-offset select[name=topic]", "LagT")
        page.fill("#reset-offset input[name=timestamp]", "-1h")
        page.click("#reset-offset button")
        note = page.inner_text("#note")
        assert note.startswith("offsets of cg-lag in LagT reset to "), note
        assert "broker-a/0=0" in note and "broker-b/1=0" in note, note
        with gate.changed:
            assert gate.changed.wait_for(
                lambda: all(gate.count(f"lag-{i}") >= 2 for i in range(12)), 60
            ), "the group did not consume the messages again after the reset"
        reload_until(page, "#total-lag", r"^0$")
        # The lag chart has the samples of the last minute: a line, or a first point.
        assert page.locator("svg.chart polyline, svg.chart circle").count() >= 1

        # A message's page says which groups consumed it, and resends it to one of them.
        page.goto(dashboard.url + "/messages?topic=LagT&key=lag-3")
        page.click("#found a")
        assert "cg-lag\tconsumed" in page.inner_text("#consumed")
        before = gate.count("lag-3")
        page.select_option("#resend-message select[name=group]", "cg-lag")
        page.click("#resend-message button")
        assert page.inner_text("#note").endswith("resent to group cg-lag")
        with gate.changed:
            assert gate.changed.wait_for(lambda: gate.count("lag-3") == before + 1, 60), (
                "the message resent from its page did not reach the group"
            )
    finally:
        consumer.shutdown()


def test_dead_letter_is_browsed_and_resent(
    page: Any, dashboard: Dashboard, cluster: Cluster
) -> None:
    """A message its group refused lands in the group's dead letters, shows on the page,
    and the page's resend gives it back to the group."""
    create_topic(cluster, "DlqT")
    gate = Gate(fail=("poison",))
    # No retries: the first refusal sends the message to %DLQ%cg-dlq.
    consumer = start_consumer(cluster, "cg-dlq", "DlqT", gate, max_reconsume_times=0)
    try:
        with Producer("pg-dlq", namesrv_addr=cluster.address) as producer:
            producer.send(Message(topic="DlqT", body=b"bad input", keys="poison"))
        page.goto(dashboard.url + "/dlq?group=cg-dlq")
        reload_until(page, "#letters", "poison")
        assert "DlqT" in page.inner_text("#letters")

        page.goto(dashboard.url + "/dlq")
        assert "cg-dlq" in page.inner_text("#dlq-groups")
        page.click("#dlq-groups a:text('cg-dlq')")
        page.click("#resend-dlq button")
        assert page.inner_text("#note") == "resent 1 dead letter(s) of group cg-dlq"
        with gate.changed:
            assert gate.changed.wait_for(lambda: gate.count("poison") == 2, 60), (
                "the resent dead letter did not reach its group again"
            )
        # Resent: no longer among those not resent yet.
        assert page.locator("#letters tr").count() == 1
    finally:
        consumer.shutdown()


def test_read_only_shows_no_action_and_refuses_them(
    page: Any, cluster: Cluster, dashboard: Dashboard
) -> None:
    """--read-only: no form of an action on any page, and a posted action gets 403."""
    create_topic(cluster, "RoT")
    gate = Gate(fail=("ro-poison",))
    consumer = start_consumer(cluster, "cg-ro", "RoT", gate, max_reconsume_times=0)
    try:
        with Producer("pg-ro", namesrv_addr=cluster.address) as producer:
            sent = producer.send(Message(topic="RoT", body=b"x", keys="ro-poison"))
        with Dashboard(cluster.address, "127.0.0.1:0", read_only=True, sample_interval=5) as ro:
            page.goto(ro.url + "/dlq?group=cg-ro")
            reload_until(page, "#letters", "ro-poison")
            for path in [
                "/",
                "/topics",
                "/topics/RoT",
                "/groups",
                "/groups/cg-ro",
                "/dlq?group=cg-ro",
                f"/messages/{sent.msg_id}?topic=RoT",
            ]:
                assert page.goto(ro.url + path).status == 200, path
                assert page.locator("form.action, form[method=post]").count() == 0, path
            assert "read-only" in page.inner_text("header")
            for path in [
                "/topics",
                "/topics/RoT/delete",
                "/topics/RoT/send",
                "/groups/cg-ro/reset",
                "/dlq/cg-ro/resend",
                f"/messages/{sent.msg_id}/resend",
            ]:
                response = page.request.post(ro.url + path, form={"topic": "Evil"})
                assert response.status == 403, path
    finally:
        consumer.shutdown()
    with MQAdmin(cluster.address) as admin:
        assert "Evil" not in [t.topic for t in admin.topics()]
        assert admin.topic("RoT").write_queue_nums == 4


def test_delete_topic_from_its_page(page: Any, dashboard: Dashboard, cluster: Cluster) -> None:
    """The topic page's delete removes the topic from both broker groups."""
    create_topic(cluster, "GoneT")
    page.goto(dashboard.url + "/topics/GoneT")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#delete-topic button")
    assert page.inner_text("#note") == "topic GoneT deleted"
    assert page.locator("#topics tr[data-topic=GoneT]").count() == 0
    assert page.goto(dashboard.url + "/topics/GoneT").status == 404
    # An action that fails goes back to its page with the error.
    page.goto(dashboard.url + "/topics")
    page.fill("#create-topic input[name=topic]", "bad topic!")
    page.click("#create-topic button")
    assert page.locator("h1").inner_text() == "Topics"
    assert "[bad topic!] contains illegal characters" in page.inner_text("#error")
    back = page.request.post(dashboard.url + "/dlq/cg-nobody/resend")
    assert back.url.startswith(dashboard.url + "/dlq?group=cg-nobody&error=consumer+group")
    # An action posted from another site (a forged form) is refused, and changes nothing.
    forged = page.request.post(
        dashboard.url + "/topics", form={"topic": "Forged"}, headers={"Origin": "http://evil.test"}
    )
    assert forged.status == 403
    sandboxed = page.request.post(
        dashboard.url + "/topics", form={"topic": "Forged"}, headers={"Origin": "null"}
    )
    assert sandboxed.status == 403
    with MQAdmin(cluster.address) as admin:
        assert "Forged" not in [t.topic for t in admin.topics()]


def test_pages_load_against_a_single_serve(page: Any, tmp_path: Any) -> None:
    """The same pages against one ``mqcore serve`` (its own name server)."""
    from mqcore.server import Server

    with (
        Server(tmp_path / "s", "127.0.0.1:0") as srv,
        Dashboard(srv.address, "127.0.0.1:0", sample_interval=5) as dash,
    ):
        for path in ["/", "/topics", "/groups", "/messages", "/dlq"]:
            assert page.goto(dash.url + path).status == 200, path
        page.goto(dash.url + "/")
        assert "broker-a" in page.inner_text("#brokers")


def test_a_name_server_list_with_one_down(page: Any, cluster: Cluster) -> None:
    """``--namesrv`` lists several name servers; one that does not answer is passed over."""
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        down = f"127.0.0.1:{s.getsockname()[1]}"
    with Dashboard(f"{down};{cluster.address}", "127.0.0.1:0", sample_interval=5) as dash:
        assert page.goto(dash.url + "/").status == 200
        brokers = page.inner_text("#brokers")
        assert "broker-a" in brokers and "broker-b" in brokers
        assert page.goto(dash.url + "/topics").status == 200
