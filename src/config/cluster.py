"""The ``group`` clause (earlier name ``cluster``): the group of daemons this one belongs to
(docs/groups.md).

``{"group": {"name": NAME, "coordination_uri": AMQP_URI, "lease_retry": SECONDS,
"poll_interval": SECONDS, "settle": SECONDS, "grace": SECONDS}}`` beside ``"shovels"``;
``pumpd --group NAME`` gives (or overrides) the name. Every daemon started with
the same configuration and the same name runs each position (shovel x worker index) in one member
at a time: the one that holds the position's lease (``engine/lease.py``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from typing import Any

from .clauses import read_uri
from .limits import MAX_CLUSTER_NAME
from .model import DEFAULT_LEASE_RETRY, BrokerURI, ClusterConfig, Protocol, ShovelConfig
from .spec import CLUSTER
from .values import Context, check_keys, seconds_value, show

__all__ = ["CLUSTER_KEYS", "DEFAULT_LEASE_RETRY", "MAX_CLUSTER_NAME", "ClusterConfig",
           "check_cluster_name", "coordination_heartbeat", "group_refusal", "parse_cluster",
           "with_name"]

CLUSTER_KEYS = CLUSTER.names()
# Letters, digits, '_' and '-': the name goes into queue names and log lines unquoted, and the
# group's queue names (pumpd.lease.<cluster>.<shovel>.<i>, pumpd.member.<cluster>.<k>) use dots
# as separators: a dot in the name would make two groups' names read alike.
_NAME = re.compile(CLUSTER["name"].pattern or "")


def check_cluster_name(name: object) -> str | None:
    """Why ``name`` cannot be a cluster name, or None when it can."""
    if not isinstance(name, str):
        return f"must be a string, got {show(name)}"
    if not _NAME.fullmatch(name):
        return (f"must be 1 to {MAX_CLUSTER_NAME} characters of letters, digits, '_' and '-' "
                f"(no dots: they separate the parts of the group's queue names), got {show(name)}")
    return None


def parse_cluster(ctx: Context, value: object, key: str = "group") -> ClusterConfig:
    """The ``group`` clause (``key``: the name the file gave it, ``group`` or ``cluster``),
    validated.

    :raises ConfigError: naming the clause (``group.name``, ...) and what is wrong with it
    """
    if not isinstance(value, dict):
        ctx.fail(key, f'must be an object {{"name": ...}}, got {show(value)}')
    obj: dict[str, Any] = value
    check_keys(ctx, f"{key}.", obj, CLUSTER_KEYS, "unknown key")
    if not all(c.name in obj for c in CLUSTER if c.required):
        ctx.fail(key, 'missing "name" (the group\'s name, the same on every member)')
    why = check_cluster_name(obj["name"])
    if why is not None:
        ctx.fail(f"{key}.name", why)
    uri = (read_uri(ctx, f"{key}.coordination_uri", obj["coordination_uri"])
           if "coordination_uri" in obj else None)
    # the group's timing (group/handover.py): defaults for production, short ones for tests
    timing = {name: _seconds(ctx, f"{key}.{name}", name, obj[name])
              for name in ("lease_retry", "poll_interval", "settle", "grace") if name in obj}
    return ClusterConfig(name=obj["name"], coordination_uri=uri, **timing)


def _seconds(ctx: Context, where: str, name: str, value: object) -> float:
    """A number clause of the group, within the spec's bounds."""
    clause = CLUSTER[name]
    seconds = seconds_value(ctx, where, value, clause.high())
    if seconds < clause.low():
        ctx.fail(where, f"must be at least {clause.low():g} seconds, got "
                                   f"{show(seconds)}")
    return seconds


def group_refusal(shovel: ShovelConfig) -> str | None:
    """Why ``shovel`` cannot run in a group of daemons, or None when it can.

    Every position of a group needs its lease (engine/lease.py): an exclusive queue declared on
    the position's source connection, which only an AMQP 0-9-1 source has.
    """
    if shovel.source.protocol is Protocol.AMQP10:
        return ("a group's lease is an exclusive queue declared on the source broker over AMQP "
                "0-9-1, and this shovel's source is AMQP 1.0: run it on a daemon that is not in "
                "the group")
    return None


def with_name(clause: ClusterConfig | None, name: str | None) -> ClusterConfig | None:
    """The group a daemon is in: the file's ``cluster`` clause, its name replaced by
    ``--cluster NAME`` when given."""
    if name is None:
        return clause
    return ClusterConfig(name=name) if clause is None else dataclasses.replace(clause, name=name)


def coordination_heartbeat(coordination: BrokerURI, sources: Iterable[BrokerURI]) -> int | None:
    """The heartbeat (seconds) a member's coordination connection asks for: the coordination
    URI's own ``heartbeat`` when it gives one; else half the smallest source heartbeat of the
    member's shovels (at least 1 s); None (the broker's proposal) when no source sets one.

    Why: a frozen or cut-off member leaves the group when the coordination broker closes its
    connection, and its leases go when the source brokers close its source connections. Until
    it has left, its record still lists its positions and the others wait for it; once it has
    left, the survivors meant for its positions ask for their leases every ``lease_retry``. With
    half the source heartbeat, it has left before its leases go, so the source heartbeat alone
    decides when its positions run elsewhere.
    """
    if coordination.heartbeat is not None:
        return coordination.heartbeat
    beats = [b.heartbeat for b in sources if b.heartbeat]
    return max(1, min(beats) // 2) if beats else None
