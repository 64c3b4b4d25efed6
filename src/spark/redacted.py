"""Errors leave the data source redacted: what a task raises ends up in the driver's log, the
Spark UI and the event log, and what the driver raises in the user's notebook.

:func:`redacting` wraps the data source's entry points (driver and executor): an exception is
raised again as one of the same type (or a :class:`RuntimeError` when that type cannot be built
from a message) whose message, and its causes' messages, went through
:func:`pumpd.config.redaction.redact`; the original is not chained, since Spark prints a chain
whole.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from ..config.redaction import redact

F = TypeVar("F", bound=Callable[..., Any])


def redacted_error(exc: BaseException) -> BaseException:
    """``exc`` again, its message and its causes' messages redacted."""
    parts = [str(exc)]
    cause = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    for _ in range(4):  # a chain is short; a cycle must not hang the task
        if cause is None:
            break
        if str(cause) not in parts[0]:  # "cannot connect: {exc}" says it already
            parts.append(f"{type(cause).__name__}: {cause}")
        cause = cause.__cause__ or (None if cause.__suppress_context__ else cause.__context__)
    message = redact(" (caused by ".join(parts) + ")" * (len(parts) - 1))
    try:
        new = type(exc)(message)
        if str(new) != message:
            raise TypeError("a message is not all it takes")
    except Exception:
        new = RuntimeError(f"{type(exc).__name__}: {message}")
    return new


def redacting(fn: F) -> F:
    """``fn``, raising only redacted errors (KeyboardInterrupt and the like pass as they are)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            raise redacted_error(exc) from None

    return wrapper  # type: ignore[return-value]
