"""The dashboard's web application (Starlette, pages rendered with Jinja2 on the server).

Pages read through the admin client; actions are HTML forms that POST and redirect back
with a note (or an error) in the query string. ``--read-only`` hides the forms and refuses
their requests with 403. With ``--acl`` every page but the sign-in page needs a signed-in
session (:mod:`mqcore.dashboard.sessions`); requests are signed with its account's keys, an
account without admin sees no action, and what a broker refuses shows as its message.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Receive, Scope, Send

from mqcore.client.admin import DLQ_PREFIX, MQAdmin
from mqcore.dashboard.charts import line_chart
from mqcore.dashboard.forms import parse_count, parse_time
from mqcore.dashboard.sampler import is_system_topic
from mqcore.dashboard.sessions import COOKIE, Account
from mqcore.dashboard.state import DashboardState
from mqcore.errors import InvalidArgumentError, MQError, NoPermissionError, TopicNotExistError
from mqcore.logs import get_logger
from mqcore.message import Message, MessageExt

__all__ = ["create_app"]

log = get_logger(__name__)

_TEMPLATES = Jinja2Templates(directory=str(Path(__file__).with_name("templates")))
_PREVIEW = 4096  # body bytes shown on a message's page


def _local(ms: int) -> str:
    if ms <= 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


_TEMPLATES.env.filters["localtime"] = _local
_TEMPLATES.env.filters["perm"] = lambda p: ("R" if p & 4 else "-") + ("W" if p & 2 else "-")
_TEMPLATES.env.filters["rate"] = lambda r: "-" if r is None else f"{r:,.1f}"


def _body_preview(msg: MessageExt) -> tuple[str, str]:
    body = msg.body[:_PREVIEW]
    try:
        return body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(body).decode("ascii"), "base64"


def _state(request: Request) -> DashboardState:
    state: DashboardState = request.app.state.dashboard
    return state


def _account(request: Request) -> Account | None:
    """The signed-in account (None without ACL)."""
    account: Account | None = getattr(request.state, "account", None)
    return account


async def _admin(request: Request, work: Callable[[MQAdmin], Any]) -> Any:
    state = _state(request)
    return await run_in_threadpool(state.call, work, _account(request))


def _page(request: Request, template: str, status_code: int = 200, **context: Any) -> Response:
    state = _state(request)
    account = _account(request)
    context.update(
        request=request,
        # An account the brokers would refuse every action sees none.
        read_only=state.read_only or (account is not None and not account.admin),
        account=account,
        namesrv=state.namesrv,
        note=request.query_params.get("note"),
        error=context.get("error") or request.query_params.get("error"),
    )
    return _TEMPLATES.TemplateResponse(request, template, context, status_code=status_code)


def _back(path: str, **query: str) -> RedirectResponse:
    """See ``path`` again (303), with ``query`` (a note or an error) added to its own."""
    if query:
        path += ("&" if "?" in path else "?") + urlencode(query)
    return RedirectResponse(path, status_code=303)


def _error_text(exc: MQError) -> str:
    return " ".join(str(exc).split())


def _refused(exc: NoPermissionError) -> str:
    return f"the broker refused this account: {_error_text(exc)}"


Endpoint = Callable[[Request], Awaitable[Response]]


def _page_errors(endpoint: Endpoint) -> Endpoint:
    """A page whose admin calls fail shows the error instead (404 for an unknown topic)."""

    async def wrapped(request: Request) -> Response:
        try:
            return await endpoint(request)
        except TopicNotExistError as exc:
            return _page(request, "error.html", 404, error=_error_text(exc))
        except NoPermissionError as exc:
            return _page(request, "error.html", 403, error=_refused(exc))
        except MQError as exc:
            return _page(request, "error.html", 502, error=_error_text(exc))

    wrapped.__name__ = endpoint.__name__
    wrapped.__doc__ = endpoint.__doc__
    return wrapped


def _foreign(request: Request) -> Response | None:
    """A 403 for a form posted from another site; None for this dashboard's own."""
    origin = request.headers.get("origin")
    # A browser names the page a form was posted from; "null" (a sandboxed frame, a file)
    # is not this dashboard either.
    if origin and urlsplit(origin).netloc != request.url.netloc:
        return PlainTextResponse(
            f"refused an action posted from another site ({origin})", status_code=403
        )
    return None


def _action(back: Callable[[Request], str]) -> Callable[[Endpoint], Endpoint]:
    """An action (a POST from a form): refused when read-only or posted from another site;
    an error goes back to the page (``back``) in the query string."""

    def decorate(endpoint: Endpoint) -> Endpoint:
        async def wrapped(request: Request) -> Response:
            if _state(request).read_only:
                return PlainTextResponse(
                    "this dashboard runs --read-only: actions are refused", status_code=403
                )
            foreign = _foreign(request)
            if foreign is not None:
                return foreign
            try:
                return await endpoint(request)
            except NoPermissionError as exc:
                return _back(back(request), error=_refused(exc))
            except MQError as exc:
                return _back(back(request), error=_error_text(exc))

        wrapped.__name__ = endpoint.__name__
        wrapped.__doc__ = endpoint.__doc__
        return wrapped

    return decorate


async def _form(request: Request) -> Mapping[str, str]:
    form = await request.form()
    return {k: v for k, v in form.items() if isinstance(v, str)}


# -- cluster ------------------------------------------------------------------------------------


@_page_errors
async def cluster(request: Request) -> Response:
    """Broker groups, their members and roles, replication lag, TPS in and out."""
    state = _state(request)
    rows = await run_in_threadpool(state.cluster_status, _account(request))
    sampler = state.sampler
    names = sorted({r["broker_name"] for r in rows})
    tps = {
        n: (sampler.latest_rate("broker_put", n), sampler.latest_rate("broker_consumed", n))
        for n in names
    }
    chart_in = line_chart(
        {n: sampler.rate("broker_put", n) for n in names}, title="TPS in", unit="msg/s"
    )
    chart_out = line_chart(
        {n: sampler.rate("broker_consumed", n) for n in names}, title="TPS out", unit="msg/s"
    )
    return _page(
        request, "cluster.html", rows=rows, tps=tps, chart_in=chart_in, chart_out=chart_out
    )


# -- topics -------------------------------------------------------------------------------------


@_page_errors
async def topics(request: Request) -> Response:
    """Every topic: queues, messages held, TPS; a form to create one."""
    show_system = request.query_params.get("system") == "1"

    def work(admin: MQAdmin) -> list[dict[str, Any]]:
        out = []
        for info in admin.topics():
            if is_system_topic(info.topic) and not show_system:
                continue
            stats = admin.topic_stats(info.topic).offset_table
            out.append(
                {
                    "info": info,
                    "messages": sum(o.max_offset - o.min_offset for o in stats.values()),
                }
            )
        return out

    rows = await _admin(request, work)
    sampler = _state(request).sampler
    for row in rows:
        row["tps"] = sampler.latest_rate("topic_put", row["info"].topic)
    return _page(request, "topics.html", rows=rows, show_system=show_system)


@_action(lambda r: "/topics")
async def topic_create(request: Request) -> Response:
    """Create a topic (or update its queue count) on every broker group."""
    form = await _form(request)
    name = form.get("topic", "").strip()
    queues = parse_count(form.get("queues", "8"), "queue count")
    if not name:
        raise InvalidArgumentError("give the new topic a name")
    info = await _admin(request, lambda a: a.create_topic(name, queues))
    log.info("dashboard_topic_created", topic=name, queues=queues)
    return _back(
        f"/topics/{quote(name, safe='')}",
        note=f"topic {name} created with {info.write_queue_nums} queues on "
        f"{', '.join(info.brokers)}",
    )


@_page_errors
async def topic_page(request: Request) -> Response:
    """One topic: its queues, the groups that read it, its TPS; send a test message, delete."""
    name = request.path_params["name"]

    def work(admin: MQAdmin) -> tuple[Any, Any, list[str]]:
        info = admin.topic(name)
        return info, admin.topic_stats(name), admin.topic_groups(name)

    info, stats, groups = await _admin(request, work)
    chart = line_chart(
        {name: _state(request).sampler.rate("topic_put", name)}, title="TPS in", unit="msg/s"
    )
    queues = sorted(stats.offset_table.items())
    return _page(request, "topic.html", info=info, queues=queues, groups=groups, chart=chart)


@_action(lambda r: f"/topics/{quote(r.path_params['name'], safe='')}")
async def topic_delete(request: Request) -> Response:
    """Delete a topic from every broker group."""
    name = request.path_params["name"]
    await _admin(request, lambda a: a.delete_topic(name))
    log.info("dashboard_topic_deleted", topic=name)
    return _back("/topics", note=f"topic {name} deleted")


@_action(lambda r: f"/topics/{quote(r.path_params['name'], safe='')}")
async def topic_send(request: Request) -> Response:
    """Send a test message to the topic."""
    name = request.path_params["name"]
    form = await _form(request)
    message = Message(
        topic=name,
        body=form.get("body", "").encode("utf-8"),
        tags=form.get("tags", "").strip() or None,
        keys=form.get("keys", "").strip() or None,
    )
    state = _state(request)
    account = _account(request)
    result = await _admin(request, lambda a: state.producer(account).send(message))
    return _back(
        f"/topics/{quote(name, safe='')}",
        note=f"sent message {result.msg_id} to {result.message_queue.broker_name} queue "
        f"{result.message_queue.queue_id} at offset {result.queue_offset}",
    )


# -- consumer groups ------------------------------------------------------------------------------


@_page_errors
async def groups(request: Request) -> Response:
    """Every consumer group: members online, model, subscriptions, lag, consume TPS."""

    def work(admin: MQAdmin) -> list[dict[str, Any]]:
        out = []
        for name in admin.groups():
            conns = admin.connections(name)
            try:
                lag = admin.consume_stats(name).total_lag()
            except MQError:
                lag = None
            out.append(
                {
                    "group": name,
                    "online": len(conns.connection_set) if conns else 0,
                    "model": conns.message_model if conns else None,
                    "subscriptions": sorted(conns.subscription_table) if conns else [],
                    "lag": lag,
                }
            )
        return out

    rows = await _admin(request, work)
    sampler = _state(request).sampler
    for row in rows:
        row["tps"] = sampler.latest_rate("group_consumed", row["group"])
    return _page(request, "groups.html", rows=rows)


@_page_errors
async def group_page(request: Request) -> Response:
    """One group: members, their queues and lag per queue; lag and TPS charts; reset offsets."""
    name = request.path_params["name"]

    def work(admin: MQAdmin) -> tuple[Any, Any, list[str]]:
        conns = admin.connections(name)
        try:
            rows = admin.lag(name)
        except MQError:
            rows = []  # a group with members but no offsets yet
        topic_names = sorted({r.queue.topic for r in rows if not is_system_topic(r.queue.topic)})
        if conns is not None:
            topic_names = sorted(
                set(topic_names) | {t for t in conns.subscription_table if not is_system_topic(t)}
            )
        return conns, rows, topic_names

    conns, rows, topic_names = await _admin(request, work)
    sampler = _state(request).sampler
    lag_chart = line_chart({name: sampler.level("group_lag", name)}, title="lag", unit="messages")
    tps_chart = line_chart(
        {name: sampler.rate("group_consumed", name)}, title="consume TPS", unit="msg/s"
    )
    return _page(
        request,
        "group.html",
        group=name,
        conns=conns,
        rows=rows,
        total_lag=sum(r.lag for r in rows),
        topics=topic_names,
        lag_chart=lag_chart,
        tps_chart=tps_chart,
        reset=request.query_params.get("reset"),
    )


@_action(lambda r: f"/groups/{quote(r.path_params['name'], safe='')}")
async def group_reset(request: Request) -> Response:
    """Move the group's offsets in a topic to the first message stored at or after a time."""
    name = request.path_params["name"]
    form = await _form(request)
    topic = form.get("topic", "").strip()
    if not topic:
        raise InvalidArgumentError("choose the topic whose offsets to reset")
    when = parse_time(form.get("timestamp", ""), "reset time")
    offsets = await _admin(request, lambda a: a.reset_offset(name, topic, when))
    log.info("dashboard_offset_reset", group=name, topic=topic, timestamp=when)
    moved = ", ".join(
        f"{mq.broker_name}/{mq.queue_id}={off}" for mq, off in sorted(offsets.items())
    )
    return _back(
        f"/groups/{quote(name, safe='')}",
        note=f"offsets of {name} in {topic} reset to {_local(when)}: {moved or 'no queue'}",
    )


# -- messages ------------------------------------------------------------------------------------


@_page_errors
async def messages(request: Request) -> Response:
    """Search messages by topic and time range, by key or by id."""
    q = request.query_params
    topic = q.get("topic", "").strip()
    key = q.get("key", "").strip()
    msg_id = q.get("id", "").strip()
    found: list[MessageExt] | None = None
    error = None
    try:
        if msg_id:
            found = await _admin(request, lambda a: a.view_message(msg_id, topic or None))
        elif key:
            if not topic:
                raise InvalidArgumentError("a search by key needs the topic")
            found = await _admin(request, lambda a: a.query_by_key(topic, key))
        elif topic:
            now = int(time.time() * 1000)
            begin = parse_time(q.get("begin") or "-1h", "begin", now)
            end = parse_time(q.get("end") or "now", "end", now)
            limit = parse_count(q.get("limit") or "64", "limit", high=1000)
            found = await _admin(
                request, lambda a: a.messages_by_time(topic, begin, end, limit=limit)
            )
    except InvalidArgumentError as exc:
        error = _error_text(exc)
    topic_names = await _admin(
        request, lambda a: [t.topic for t in a.topics() if not is_system_topic(t.topic)]
    )
    return _page(
        request,
        "messages.html",
        found=found,
        topics=topic_names,
        query=q,
        error=error,
        preview=lambda m: _body_preview(m)[0][:80],
    )


@_page_errors
async def message_page(request: Request) -> Response:
    """One message: properties, body preview, the groups that consumed it; resend it."""
    msg_id = request.path_params["msg_id"]
    topic = request.query_params.get("topic") or None

    def work(admin: MQAdmin) -> tuple[list[MessageExt], dict[str, bool], list[str]]:
        found = admin.view_message(msg_id, topic)
        chosen = [m for m in found if topic is None or m.topic == topic] or found
        consumed = admin.consumed_by(chosen[0]) if chosen else {}
        groups = sorted(set(consumed) | set(admin.topic_groups(chosen[0].topic))) if chosen else []
        return chosen, consumed, groups

    found, consumed, group_names = await _admin(request, work)
    if not found:
        return _page(request, "error.html", 404, error=f"no message with id {msg_id}")
    msg = found[0]
    body, encoding = _body_preview(msg)
    return _page(
        request,
        "message.html",
        msg=msg,
        copies=found[1:],
        body=body,
        encoding=encoding,
        truncated=len(msg.body) > _PREVIEW,
        consumed=consumed,
        groups=group_names,
    )


@_action(lambda r: f"/messages/{quote(r.path_params['msg_id'], safe='')}")
async def message_resend(request: Request) -> Response:
    """Send the message again to one consumer group (through its retry topic)."""
    msg_id = request.path_params["msg_id"]
    form = await _form(request)
    group = form.get("group", "").strip()
    topic = form.get("topic") or None
    if not group:
        raise InvalidArgumentError("choose the consumer group to resend the message to")

    def work(admin: MQAdmin) -> None:
        found = [m for m in admin.view_message(msg_id, topic) if topic in (None, m.topic)]
        if not found:
            raise InvalidArgumentError(f"no message with id {msg_id}")
        admin.resend_to_group(group, found[0])

    await _admin(request, work)
    log.info("dashboard_message_resent", msg_id=msg_id, group=group)
    return _back(
        f"/messages/{quote(msg_id, safe='')}", note=f"message {msg_id} resent to group {group}"
    )


# -- dead letters ------------------------------------------------------------------------------


@_page_errors
async def dlq(request: Request) -> Response:
    """Dead letters per group: the groups with a dead-letter topic, or one group's letters."""
    group = request.query_params.get("group", "").strip()
    include_resent = request.query_params.get("all") == "1"
    if not group:

        def counts(admin: MQAdmin) -> list[tuple[str, int]]:
            out = []
            for info in admin.topics():
                if info.topic.startswith(DLQ_PREFIX):
                    held = admin.topic_stats(info.topic).offset_table.values()
                    out.append(
                        (
                            info.topic[len(DLQ_PREFIX) :],
                            sum(o.max_offset - o.min_offset for o in held),
                        )
                    )
            return out

        return _page(request, "dlq.html", group=None, groups=await _admin(request, counts))
    letters = await _admin(
        request, lambda a: list(a.dead_letters(group, include_resent=include_resent, limit=500))
    )
    return _page(
        request,
        "dlq.html",
        group=group,
        letters=letters,
        include_resent=include_resent,
        preview=lambda m: _body_preview(m)[0][:80],
    )


@_action(lambda r: f"/dlq?group={quote(r.path_params['group'], safe='')}")
async def dlq_resend(request: Request) -> Response:
    """Send the group's dead letters not resent yet back to the group."""
    group = request.path_params["group"]
    result = await _admin(request, lambda a: a.resend_dead_letters(group))
    log.info("dashboard_dead_letters_resent", group=group, resent=result.resent)
    note = f"resent {result.resent} dead letter(s) of group {group}"
    if result.skipped:
        note += f"; skipped {result.skipped} without an original topic"
    return _back(f"/dlq?{urlencode({'group': group})}", note=note)


# -- signing in (ACL) ---------------------------------------------------------------------------


def _next(request: Request) -> str:
    """Where to go after signing in: a path of this dashboard only."""
    target = request.query_params.get("next", "/")
    return target if target.startswith("/") and not target.startswith("//") else "/"


async def signin_page(request: Request) -> Response:
    """The sign-in form (ACL): access key and secret key."""
    if not _state(request).acl:
        return _back("/")
    return _page(request, "signin.html", next=_next(request))


async def signin(request: Request) -> Response:
    """Check the keys with the brokers; a session cookie on success, the refusal otherwise.
    The secret key is never echoed, logged or put in a URL."""
    state = _state(request)
    if not state.acl:
        return _back("/")
    foreign = _foreign(request)  # nor a sign-in into another's account from another site
    if foreign is not None:
        return foreign
    form = await _form(request)
    access_key = form.get("access_key", "").strip()
    secret_key = form.get("secret_key", "")
    target = _next(request)
    if not access_key or not secret_key:
        return _page(
            request, "signin.html", 400, next=target, error="give an access key and its secret key"
        )
    try:
        _, cookie = await run_in_threadpool(state.sign_in, access_key, secret_key)
    except NoPermissionError as exc:
        log.info("dashboard_sign_in_refused", access_key=access_key)
        return _page(
            request,
            "signin.html",
            401,
            next=target,
            access_key=access_key,
            error=f"sign-in refused: {_error_text(exc)}",
        )
    except MQError as exc:
        return _page(request, "signin.html", 502, next=target, error=_error_text(exc))
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(COOKIE, cookie, httponly=True, samesite="strict", path="/")
    return response


async def signout(request: Request) -> Response:
    """Close this browser's session (and its account's clients when no one else uses them)."""
    state = _state(request)
    foreign = _foreign(request)
    if foreign is not None:
        return foreign
    await run_in_threadpool(state.sign_out, request.cookies.get(COOKIE))
    response = RedirectResponse("/signin", status_code=303)
    response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
    return response


_OPEN_PATHS = frozenset({"/signin", "/healthz"})


class _SignedIn:
    """With ACL on, a request without a signed-in session goes to the sign-in page (a
    page) or is refused (an action); a signed-in request carries its account."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state: DashboardState = scope["app"].state.dashboard
        if not state.acl or scope["path"] in _OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        account = state.sessions.account(request.cookies.get(COOKIE))
        if account is None:
            response: Response
            if request.method in ("GET", "HEAD"):
                target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                response = _back("/signin?" + urlencode({"next": target}))
            else:
                response = PlainTextResponse(
                    "sign in first: this dashboard's brokers check ACL", status_code=401
                )
            await response(scope, receive, send)
            return
        scope.setdefault("state", {})["account"] = account
        await self.app(scope, receive, send)


async def healthz(request: Request) -> Response:
    """Alive (for a supervisor or a load balancer)."""
    return PlainTextResponse("ok\n")


def create_app(state: DashboardState) -> Starlette:
    """The dashboard's application over ``state`` (started and stopped by the caller)."""
    routes = [
        Route("/", cluster),
        Route("/topics", topics),
        Route("/topics", topic_create, methods=["POST"]),
        Route("/topics/{name:path}/delete", topic_delete, methods=["POST"]),
        Route("/topics/{name:path}/send", topic_send, methods=["POST"]),
        Route("/topics/{name:path}", topic_page),
        Route("/groups", groups),
        Route("/groups/{name:path}/reset", group_reset, methods=["POST"]),
        Route("/groups/{name:path}", group_page),
        Route("/messages", messages),
        Route("/messages/{msg_id}/resend", message_resend, methods=["POST"]),
        Route("/messages/{msg_id}", message_page),
        Route("/dlq", dlq),
        Route("/dlq/{group:path}/resend", dlq_resend, methods=["POST"]),
        Route("/signin", signin_page),
        Route("/signin", signin, methods=["POST"]),
        Route("/signout", signout, methods=["POST"]),
        Route("/healthz", healthz),
    ]
    app = Starlette(routes=routes, middleware=[Middleware(_SignedIn)])
    app.state.dashboard = state
    return app
