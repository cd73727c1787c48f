"""The options every client command shares for a server with ACL or TLS: ``--access-key``,
``--secret-key``, ``--tls``, ``--tls-ca`` (and ``MQCORE_ACCESS_KEY``, ``MQCORE_SECRET_KEY``,
``MQCORE_TLS``, ``MQCORE_TLS_CA``).

The options keep their values in the command's context; :func:`client_security` gives them
as the ``credentials=`` and ``tls=`` keywords of mqcore's clients. A secret key is never
printed: not in help (no default is shown), nor in any error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from mqcore.remoting.signing import Credentials
from mqcore.remoting.tls import client_context

__all__ = ["client_security", "security_options"]

F = TypeVar("F", bound=Callable[..., Any])
_KEY = "mqcore.security"


def _keep(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    ctx.meta.setdefault(_KEY, {})[param.name] = value
    return value


def security_options(func: F) -> F:
    """Add the ACL and TLS client options to a command (their values go to the context)."""
    options = [
        click.option(
            "--tls-ca",
            envvar="MQCORE_TLS_CA",
            type=click.Path(dir_okay=False, exists=True),
            expose_value=False,
            callback=_keep,
            help="CA certificate the server's certificate is checked against; implies --tls "
            "(env MQCORE_TLS_CA).",
        ),
        click.option(
            "--tls",
            envvar="MQCORE_TLS",
            is_flag=True,
            expose_value=False,
            callback=_keep,
            help="Connect with TLS, checking the server against the system's CAs (env MQCORE_TLS).",
        ),
        click.option(
            "--secret-key",
            envvar="MQCORE_SECRET_KEY",
            metavar="KEY",
            expose_value=False,
            callback=_keep,
            help="The ACL account's secret key (env MQCORE_SECRET_KEY; prefer the variable: a "
            "command line is visible to other users).",
        ),
        click.option(
            "--access-key",
            envvar="MQCORE_ACCESS_KEY",
            metavar="KEY",
            expose_value=False,
            callback=_keep,
            help="Sign every request as this ACL account (env MQCORE_ACCESS_KEY).",
        ),
    ]
    for option in options:
        func = option(func)
    return func


def client_security() -> dict[str, Any]:
    """``credentials=`` and ``tls=`` for a client, from the current command's options.

    :raises click.UsageError: only one of the two keys was given.
    """
    ctx = click.get_current_context(silent=True)
    values = dict(ctx.meta.get(_KEY, {})) if ctx is not None else {}
    access, secret = values.get("access_key"), values.get("secret_key")
    if bool(access) != bool(secret):
        missing = "--secret-key (or MQCORE_SECRET_KEY)" if access else "--access-key"
        raise click.UsageError(f"an ACL account needs both keys: {missing} is missing")
    credentials = Credentials(access, secret) if access and secret else None
    ca = values.get("tls_ca")
    tls = client_context(bool(values.get("tls")) or ca is not None, ca=ca)
    return {"credentials": credentials, "tls": tls}
