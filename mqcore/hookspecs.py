"""Hook specifications: every extension point of mqcore. The docstrings are the hook reference.

Plugins implement these with :data:`hookimpl`::

    from mqcore import hookimpl

    @hookimpl
    def mqcore_register_allocators(register):
        register("sticky", StickyStrategy)

Registration hooks receive a ``register(name, factory)`` callback. Names are
case-insensitive; registering a name that another plugin already registered for the same
kind raises :class:`~mqcore.errors.DuplicateRegistrationError` naming both plugins.
Lifecycle hooks are called once per *batch*, never once per message.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    # For the annotations only: the kernel's hook specs name the types they pass, and importing
    # them at run time would make every module they import load with the plugin manager.
    from mqcore.config import KernelConfig
    from mqcore.interfaces import (
        AllocateStrategy,
        DelayScheduler,
        MessageFilter,
        OffsetStore,
        TimerScheduler,
    )
    from mqcore.message import (
        ConsumeConcurrentlyStatus,
        ConsumeOrderlyStatus,
        Message,
        MessageExt,
        MessageQueue,
        SendResult,
    )
    from mqcore.store import PutResult, Store

__all__ = [
    "PROJECT",
    "Register",
    "RegisterAllocators",
    "RegisterDelaySchedulers",
    "RegisterFilters",
    "RegisterOffsetStores",
    "RegisterStores",
    "RegisterTimerSchedulers",
    "hookimpl",
    "hookspec",
]

PROJECT = "mqcore"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

#: A registration callback, ``register(name, factory)``, of any kind.
Register = Callable[[str, Callable[..., Any]], None]
#: ``register(name, factory)`` of :func:`mqcore_register_stores`.
RegisterStores = Callable[[str, Callable[..., "Store"]], None]
#: ``register(name, factory)`` of :func:`mqcore_register_allocators`.
RegisterAllocators = Callable[[str, Callable[..., "AllocateStrategy"]], None]
#: ``register(expression_type, factory)`` of :func:`mqcore_register_filters`.
RegisterFilters = Callable[[str, Callable[[str], "MessageFilter"]], None]
#: ``register(name, factory)`` of :func:`mqcore_register_offset_stores`.
RegisterOffsetStores = Callable[[str, Callable[..., "OffsetStore"]], None]
#: ``register(name, factory)`` of :func:`mqcore_register_delay_schedulers`.
RegisterDelaySchedulers = Callable[[str, Callable[..., "DelayScheduler"]], None]
#: ``register(name, factory)`` of :func:`mqcore_register_timer_schedulers`.
RegisterTimerSchedulers = Callable[[str, Callable[..., "TimerScheduler"]], None]

# --------------------------------------------------------------------------------------
# Registration hooks: called once when a Kernel is created.
# --------------------------------------------------------------------------------------


@hookspec
def mqcore_register_stores(register: RegisterStores) -> None:
    """Register storage backends.

    ``register(name, factory)``; ``factory(path, **options)`` returns an open store that
    follows the store contract of :class:`mqcore.store.Store`.

    :param register: the registration callback.

    .. versionadded:: 0.1
    """


@hookspec
def mqcore_register_allocators(register: RegisterAllocators) -> None:
    """Register queue allocation strategies.

    ``register(name, factory)``; ``factory(**options)`` returns an object with
    ``allocate(consumer_group, current_cid, mq_all, cid_all) -> list[MessageQueue]``
    (see :class:`mqcore.interfaces.AllocateStrategy`).

    :param register: the registration callback.

    .. versionadded:: 0.1
    """


@hookspec
def mqcore_register_filters(register: RegisterFilters) -> None:
    """Register message filters by expression type (``TAG``, ``SQL92``...).

    ``register(expression_type, factory)``; ``factory(expression)`` compiles the expression
    and returns a :class:`mqcore.interfaces.MessageFilter`, raising
    :class:`~mqcore.errors.FilterExpressionError` when it is invalid.

    :param register: the registration callback.

    .. versionadded:: 0.1
    """


@hookspec
def mqcore_register_offset_stores(register: RegisterOffsetStores) -> None:
    """Register consumer offset stores (``broker`` for clustering, ``local_file`` for
    broadcasting...).

    ``register(name, factory)``; ``factory(**options)`` returns a
    :class:`mqcore.interfaces.OffsetStore`.

    :param register: the registration callback.

    .. versionadded:: 0.1
    """


@hookspec
def mqcore_register_delay_schedulers(register: RegisterDelaySchedulers) -> None:
    """Register delay-level schedulers (RocketMQ's 18 levels...).

    ``register(name, factory)``; ``factory(message_delay_level=..., **options)`` returns a
    :class:`mqcore.interfaces.DelayScheduler`, holding messages sent with a delay level (and
    retries). The broker setting ``delay_scheduler`` names it and passes
    ``delay_scheduler_options``. Timer schedulers have their own hook,
    :func:`mqcore_register_timer_schedulers`.

    :param register: the registration callback.

    .. versionadded:: 0.1
    """


@hookspec
def mqcore_register_timer_schedulers(register: RegisterTimerSchedulers) -> None:
    """Register timer schedulers (a timer wheel...).

    ``register(name, factory)``; ``factory(precision_ms=..., max_delay_sec=..., **options)``
    returns a :class:`mqcore.interfaces.TimerScheduler`, holding timer messages (any deliver
    time, RocketMQ 5's ``TIMER_DELIVER_MS``). The broker setting ``timer_scheduler`` names
    it and passes ``timer_scheduler_options``. A broker runs one delay-level scheduler and
    one timer scheduler.

    :param register: the registration callback.

    .. versionadded:: 0.1
    """


# --------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------


@hookspec(historic=True)
def mqcore_configure(config: KernelConfig) -> None:
    """Called with the kernel's configuration once plugins are loaded.

    Historic: a plugin registered later is called with the same configuration at once.

    :param config: the :class:`mqcore.config.KernelConfig` of the kernel.

    .. versionadded:: 0.1
    """


# --------------------------------------------------------------------------------------
# Lifecycle hooks (tracing, metrics): one call per batch.
# --------------------------------------------------------------------------------------


@hookspec
def mqcore_send_before(producer_group: str, messages: Sequence[Message]) -> None:
    """A producer is about to send ``messages`` (one batch).

    :param producer_group: the producer's group.
    :param messages: the :class:`~mqcore.Message` objects of the batch.

    .. versionadded:: 0.1
    """


@hookspec
def mqcore_send_after(
    producer_group: str, messages: Sequence[Message], results: Sequence[SendResult]
) -> None:
    """A producer has sent ``messages``; ``results`` are their :class:`~mqcore.SendResult`.

    :param producer_group: the producer's group.
    :param messages: the batch that was sent.
    :param results: one result per message, in order.

    .. versionadded:: 0.1
    """


@hookspec
def mqcore_messages_stored(topic: str, queue_id: int, results: Sequence[PutResult]) -> None:
    """A store has appended a batch to ``topic``/``queue_id``.

    :param topic: the topic written.
    :param queue_id: the queue written.
    :param results: the :class:`~mqcore.store.PutResult` of each message.

    .. versionadded:: 0.1
    """


@hookspec
def mqcore_consume_before(
    consumer_group: str, message_queue: MessageQueue, messages: Sequence[MessageExt]
) -> None:
    """A consumer is about to hand ``messages`` (one batch) to its listener.

    :param consumer_group: the consumer's group.
    :param message_queue: the :class:`~mqcore.MessageQueue` they came from.
    :param messages: the :class:`~mqcore.MessageExt` objects of the batch.

    .. versionadded:: 0.1
    """


@hookspec
def mqcore_consume_after(
    consumer_group: str,
    message_queue: MessageQueue,
    messages: Sequence[MessageExt],
    status: ConsumeConcurrentlyStatus | ConsumeOrderlyStatus | BaseException,
) -> None:
    """A consumer's listener has returned ``status`` for ``messages``.

    :param consumer_group: the consumer's group.
    :param message_queue: the queue the batch came from.
    :param messages: the batch.
    :param status: the listener's status (a ``Consume*Status``), or the exception it raised.

    .. versionadded:: 0.1
    """
