"""The dashboard in headless Chromium against a two-group ``mqcore namesrv`` cluster whose
brokers check ACL (issue 34, criterion 4): it asks for credentials, signs each request
with the signed-in account, shows an account without admin no action and the broker's
refusal of one posted anyway, and a wrong secret cannot sign in."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dashboardtest import FAST, REQUIRED, Cluster, wait_for
from structlog.testing import capture_logs

from mqcore.client.admin import MQAdmin
from mqcore.remoting.signing import Credentials
from mqcore.server import NamesrvServer, Server

if not REQUIRED:  # the tox env dashboard has the extra; elsewhere these tests skip
    for _module in ("starlette", "jinja2", "uvicorn", "multipart", "playwright"):
        pytest.importorskip(_module)

from mqcore.dashboard import Dashboard
from mqcore.dashboard.sessions import COOKIE

pytestmark = pytest.mark.timeout(240)

ADMIN = ("dash-admin", "admin-secret-9f2c")
READER = ("dash-reader", "reader-secret-41aa")
ACL = f"""\
accounts:
  - accessKey: {ADMIN[0]}
    secretKey: {ADMIN[1]}
    admin: true
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: PUB|SUB
  - accessKey: {READER[0]}
    secretKey: {READER[1]}
    defaultTopicPerm: SUB
    defaultGroupPerm: SUB
"""
SECRETS = (ADMIN[1], READER[1], "not-the-secret")


@pytest.fixture(scope="module")
def acl_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """``mqcore namesrv`` with broker groups broker-a and broker-b, both checking ACL."""
    root: Path = tmp_path_factory.mktemp("acl-cluster")
    acl = root / "plain_acl.yml"
    acl.write_text(ACL)
    with NamesrvServer("127.0.0.1:0") as ns:
        a_settings = {**FAST, "namesrv_addr": ns.address, "broker_name": "broker-a"}
        b_settings = {**a_settings, "broker_name": "broker-b"}
        with (
            Server(root / "a", "127.0.0.1:0", settings=a_settings, acl=acl) as a,
            Server(root / "b", "127.0.0.1:0", settings=b_settings, acl=acl) as b,
        ):
            wait_for(lambda: len(ns.tables.cluster_info()["brokerAddrTable"]) == 2)
            with MQAdmin(ns.address, credentials=ADMIN) as admin:
                admin.create_topic("Seen", 1)
            yield Cluster(ns.address, {"broker-a": a, "broker-b": b})


@pytest.fixture(scope="module")
def dashboard(acl_cluster: Cluster) -> Iterator[Dashboard]:
    with Dashboard(
        acl_cluster.address, "127.0.0.1:0", acl=True, credentials=ADMIN, sample_interval=0.5
    ) as dash:
        yield dash


def sign_in(page: Any, dashboard: Dashboard, account: tuple[str, str], path: str = "/") -> Any:
    """Open ``path``, get sent to the sign-in page, sign in; the response of the last page."""
    page.goto(dashboard.url + path)
    assert page.url.startswith(dashboard.url + "/signin?"), page.url
    page.fill("#signin input[name=access_key]", account[0])
    page.fill("#signin input[name=secret_key]", account[1])
    with page.expect_navigation() as nav:
        page.click("#signin button")
    return nav.value


def test_pages_ask_for_credentials(page: Any, dashboard: Dashboard) -> None:
    """Without a session every page leads to the sign-in form and an action is refused."""
    for path in ("/", "/topics", "/groups", "/messages", "/dlq", "/topics/Seen"):
        page.goto(dashboard.url + path)
        assert page.locator("h1").inner_text() == "Sign in", path
        assert page.locator("#create-topic, #send-message, #signout").count() == 0
    resp = page.request.post(dashboard.url + "/topics", form={"topic": "Sneaky", "queues": "1"})
    assert resp.status == 401
    assert "sign in first" in resp.text()
    # Nor does another site sign a browser in, even with good keys.
    resp = page.request.post(
        dashboard.url + "/signin",
        form={"access_key": ADMIN[0], "secret_key": ADMIN[1]},
        headers={"Origin": "http://elsewhere.example"},
        max_redirects=0,
    )
    assert resp.status == 403
    assert page.context.cookies() == []


def test_wrong_secret_cannot_sign_in(page: Any, dashboard: Dashboard) -> None:
    """The broker's refusal is shown on the sign-in page; no cookie, no secret anywhere."""
    with capture_logs() as logs:
        response = sign_in(page, dashboard, (ADMIN[0], "not-the-secret"), "/topics")
    assert response.status == 401
    assert page.locator("h1").inner_text() == "Sign in"
    error = page.inner_text("#error")
    assert error.startswith("sign-in refused: "), error
    assert "signature" in error.lower(), error
    assert page.context.cookies() == []
    html = page.content()
    assert "not-the-secret" not in html and "not-the-secret" not in page.url
    assert page.input_value("#signin input[name=secret_key]") == ""
    assert not any("not-the-secret" in repr(e) for e in logs), logs
    # Still not signed in.
    page.goto(dashboard.url + "/topics")
    assert page.locator("h1").inner_text() == "Sign in"


def test_admin_sees_and_uses_actions(page: Any, dashboard: Dashboard, acl_cluster: Cluster) -> None:
    """An admin account signs in (a signed HttpOnly SameSite cookie, no secret in it),
    creates a topic and sends a test message from the pages, and signs out."""
    with capture_logs() as logs:
        response = sign_in(page, dashboard, ADMIN, "/topics")
    assert response.status == 200
    assert page.url == dashboard.url + "/topics"
    assert page.inner_text("#account") == f"{ADMIN[0]} (admin)"
    (cookie,) = page.context.cookies()
    assert cookie["name"] == COOKIE
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"
    assert all(s not in cookie["value"] for s in SECRETS)
    assert any(e["event"] == "dashboard_signed_in" for e in logs), logs
    assert not any(s in repr(e) for e in logs for s in SECRETS), logs

    page.fill("#create-topic input[name=topic]", "AclT")
    page.fill("#create-topic input[name=queues]", "2")
    page.click("#create-topic button")
    assert page.locator("h1").inner_text() == "Topic AclT"
    assert "topic AclT created with 4 queues on broker-a, broker-b" in page.inner_text("#note")
    wait_for(lambda: acl_cluster.routed("AclT"), what="route of AclT")
    page.fill("#send-message input[name=keys]", "acl-1")
    page.fill("#send-message textarea[name=body]", "sent by the admin account")
    page.click("#send-message button")
    assert page.inner_text("#note").startswith("sent message "), page.inner_text("#note")
    assert page.locator("#delete-topic").count() == 1
    assert all(s not in page.content() for s in SECRETS)

    assert Credentials(*ADMIN) in dashboard.state._clients
    page.click("#signout")
    assert page.locator("h1").inner_text() == "Sign in"
    assert page.context.cookies() == []
    # The account's clients are closed with its last session.
    assert Credentials(*ADMIN) not in dashboard.state._clients
    page.goto(dashboard.url + "/topics/AclT")
    assert page.locator("h1").inner_text() == "Sign in"


def test_reader_sees_no_action_and_a_posted_one_is_refused(page: Any, dashboard: Dashboard) -> None:
    """A SUB-only account without admin reads the pages, sees no form, and an action it
    posts anyway comes back with the broker's refusal, not a stack trace."""
    sign_in(page, dashboard, READER)
    assert page.inner_text("#account") == READER[0]
    for path, heading in [
        ("/", "Cluster"),
        ("/topics", "Topics"),
        ("/topics/Seen", "Topic Seen"),
        ("/groups", "Consumer groups"),
        ("/dlq", "Dead letters"),
    ]:
        response = page.goto(dashboard.url + path)
        assert response.status == 200, path
        assert page.locator("h1").inner_text() == heading
        assert page.locator("form.action[method=post]").count() == 0, path
        if path == "/":
            brokers = page.inner_text("#brokers")
            assert "broker-a" in brokers and "broker-b" in brokers, brokers

    resp = page.request.post(dashboard.url + "/topics", form={"topic": "NotYours", "queues": "1"})
    assert resp.status == 200  # the page again, after the redirect
    page.goto(resp.url)
    error = page.inner_text("#error")
    assert error.startswith("the broker refused this account: "), error
    assert "Traceback" not in page.content()
    with MQAdmin(dashboard.state.namesrv, credentials=ADMIN) as admin:
        assert "NotYours" not in {t.topic for t in admin.topics()}


def test_read_only_hides_the_admins_actions(page: Any, acl_cluster: Cluster) -> None:
    """--read-only hides every action from an admin account too, and refuses a posted one;
    with no account for the charts, sampling stays off."""
    with capture_logs() as logs:
        dash = Dashboard(acl_cluster.address, "127.0.0.1:0", acl=True, read_only=True).start()
    try:
        assert any(e["event"] == "dashboard_charts_off" for e in logs), logs
        sign_in(page, dash, ADMIN, "/topics/Seen")
        assert page.inner_text("#account") == f"{ADMIN[0]} (admin)"
        assert page.locator("h1").inner_text() == "Topic Seen"
        assert page.locator("form.action[method=post]").count() == 0
        resp = page.request.post(dash.url + "/topics", form={"topic": "RO", "queues": "1"})
        assert resp.status == 403 and "--read-only" in resp.text()
    finally:
        dash.close()
