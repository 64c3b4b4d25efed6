"""Reading and validating a pumpd configuration file into :class:`pumpd.config.model.PumpConfig`.

The file is JSON: ``{"shovels": {"NAME": {...}, ...}}``, optionally with ``"shovels_per_process":
K`` and ``"cluster": {...}`` (a group of daemons, ``config/cluster.py``) beside ``"shovels"``.
Each shovel is written in one of two forms, never a mix of both: the clauses of the plugin's
static shovels (rabbit_shovel_config) with pumpd's own, or the flat names of a RabbitMQ dynamic
shovel, normalised the way the plugin's ``parse_source/parse_dest`` do (rabbit_amqp091_shovel for
an AMQP 0-9-1 side, rabbit_amqp10_shovel for an AMQP 1.0 one). Every clause of both forms, with
its default and bound, is declared in :mod:`.spec`.

Validation stops at the first error (shovels in file order, a shovel's clauses in a fixed order):
one :class:`ConfigError` naming the file, the shovel and the clause.

What the plugin accepts but ignores, or reads differently from pumpd, is accepted with a warning
in :attr:`ShovelConfig.warnings` (``pumpd check`` and the importers print them).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from .clauses import COMMON_CLAUSES, STATIC_ALL, read_static_shovel
from .cluster import group_refusal, parse_cluster
from .dynamic import DYNAMIC_ALL, read_dynamic_shovel
from .json_input import JsonInputError, path_text, read_json
from .limits import (
    MAX_DOCUMENT_BYTES,
    MAX_POSITIONS,
    MAX_SHOVEL_NAME,
    MAX_SHOVELS,
    MAX_SHOVELS_PER_PROCESS,
)
from .model import (
    AckMode,
    DeleteAfter,
    Disposition,
    Endpoint,
    Protocol,
    PumpConfig,
    ShovelConfig,
    reads_stream,
)
from .redaction import register_uri_secrets
from .uri import format_uri
from .values import (
    ConfigError,
    Context,
    check_keys,
    check_nesting,
    int_value,
    path_part,
    show,
    utf8_size,
)

__all__ = ["ConfigError", "load_config", "located", "parse_config",
           "parse_document", "read_config", "shovel_to_json"]


def _delete_after_name(definition: Mapping[str, Any]) -> str:
    return "delete-after" if "delete-after" in definition else "src-delete-after"


def _check_shovel(ctx: Context, shovel: ShovelConfig, delete_after_clause: str,
                  ack_mode_clause: str) -> None:
    """Rules across clauses.

    :raises ConfigError: when clauses that are each valid do not go together.
    """
    amqp091_source = shovel.source.protocol is Protocol.AMQP091
    source_declares = [d for d in shovel.source.declarations if d.method == "queue.declare"]
    if amqp091_source and shovel.queue == "" and not source_declares:
        ctx.fail("queue", '"" means the most recently declared queue, but the source declarations '
                          "declare none")
    if isinstance(shovel.delete_after, int) and shovel.ack_mode is AckMode.NO_ACK:
        # The plugin's rule: with no acks it cannot count what was transferred.
        ctx.fail(delete_after_clause,
                 "a number of messages cannot be combined with ack mode no_ack")
    if shovel.ack_mode is AckMode.NO_ACK and shovel.undeliverable.policy is not Disposition.PARK:
        # With no_ack the source has let go of every message before pumpd sees it: it can
        # neither be rejected to a dead-letter exchange nor left in the queue.
        if not amqp091_source:
            ctx.fail(ack_mode_clause, "no_ack cannot go with an AMQP 1.0 source: the source "
                                      "settles each message as it sends it, so one that pumpd "
                                      "cannot forward could be neither rejected nor left at the "
                                      "source, nor parked (an AMQP 0-9-1 source's queue): use "
                                      "on_confirm or on_publish")
        ctx.fail("undeliverable", f"policy {shovel.undeliverable.policy.value!r} needs acks "
                                  "(ack mode no_ack leaves nothing to reject or keep): use park")
    if shovel.undeliverable.unroutable is not Disposition.DROP and not shovel.publish_mandatory:
        ctx.fail("undeliverable", f"unroutable {shovel.undeliverable.unroutable.value!r} needs "
                                  "publish_fields.mandatory true: without it the destination "
                                  "drops unroutable messages without telling")
    if shovel.destination.protocol is Protocol.STREAM:
        if shovel.publishing_id == "source-offset" and not reads_stream(
                shovel.queue, shovel.consumer_arguments, shovel.source.declarations):
            ctx.fail("publishing_id", "source-offset needs a stream source (consumer_args with "
                                      "x-stream-offset, or the queue declared with x-queue-type "
                                      "stream): a queue's messages carry no offset")
        if shovel.publishing_id in ("", "source-offset") and shovel.workers > 1 and reads_stream(
                shovel.queue, shovel.consumer_arguments, shovel.source.declarations):
            ctx.fail("workers", "a stream source gives every worker every message, and each "
                                "worker's producer would store them again: use one worker")
        for clause, given in (("add_forward_headers", shovel.add_forward_headers),
                              ("add_timestamp_header", shovel.add_timestamp_header)):
            if given:
                ctx.fail(clause, "a stream destination adds no headers: a RabbitMQ 3.x stream "
                                 "would not give the x-shovelled table back")
    if shovel.workers > 1 and amqp091_source:
        # Competing consumers must share one named queue; a server-named or exclusive queue
        # would give each worker its own copy of every message, or lock the others out.
        exclusive = any(d.arguments.get("exclusive") for d in source_declares)
        if shovel.queue == "" or exclusive:
            ctx.fail("workers", "more than one worker needs a shared, named, non-exclusive source "
                                "queue")


def parse_config(obj: Any, *, source: str = "<config>") -> PumpConfig:
    """Validate a decoded configuration and normalise it.

    :param obj: the decoded JSON, ``{"shovels": {"NAME": {...}, ...}}``.
    :param source: how errors name the configuration (usually its file name).
    :returns: every shovel, in file order.
    :raises ConfigError: at the first error found (shovels in file order).
    """
    ctx = Context(source)
    if not isinstance(obj, dict):
        ctx.fail(None, f'the top level must be an object {{"shovels": {{...}}}}, got {show(obj)}')
    check_nesting(obj, source)  # before any step that recurses
    # "paused": the shovels paused at run time, which a daemon's state file keeps beside its
    # shovels (supervisor/statefile.py); the daemon reads it from there only
    check_keys(ctx, "", obj, ("shovels", "shovels_per_process", "group", "cluster", "paused"),
               "unknown top-level key")
    if "group" in obj and "cluster" in obj:
        ctx.fail(None, 'give "group" or its earlier name "cluster", not both')
    group_key = "group" if "group" in obj else "cluster"
    cluster = parse_cluster(ctx, obj[group_key], group_key) if group_key in obj else None
    per_process = (int_value(ctx, "shovels_per_process", obj["shovels_per_process"], 1,
                             MAX_SHOVELS_PER_PROCESS)
                   if "shovels_per_process" in obj else None)
    if "shovels" not in obj:
        ctx.fail(None, 'missing "shovels" at the top level')
    shovels_obj = obj["shovels"]
    if not isinstance(shovels_obj, dict):
        ctx.fail("shovels", f"must be an object mapping shovel names to definitions, got "
                            f"{show(shovels_obj)}")
    if len(shovels_obj) > MAX_SHOVELS:
        ctx.fail("shovels", f"at most {MAX_SHOVELS} shovels, got {len(shovels_obj)}")
    shovels: dict[str, ShovelConfig] = {}
    for name, definition in shovels_obj.items():
        sctx = Context(source, name)
        if not isinstance(name, str) or not name.strip():
            sctx.fail(None, "a shovel name must not be empty")
        if utf8_size(sctx, None, name) > MAX_SHOVEL_NAME:
            Context(source, path_part(name)).fail(
                None, f"a shovel name must be at most {MAX_SHOVEL_NAME} bytes in UTF-8")
        if any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
            sctx.fail(None, "a shovel name must not contain control characters")
        if not isinstance(definition, dict):
            sctx.fail(None, f"a shovel definition must be an object, got {show(definition)}")
        static_keys = [k for k in definition if k in STATIC_ALL and k not in COMMON_CLAUSES]
        flat_keys = [k for k in definition if k in DYNAMIC_ALL and k not in COMMON_CLAUSES]
        if static_keys and flat_keys:
            sctx.fail(flat_keys[0], f"mixes dynamic-shovel names ({flat_keys[0]!r}) with the "
                                    f"static form's clauses ({static_keys[0]!r}): use one form per shovel")
        # Neither form recognised: guess from the spelling, for the "did you mean" hint.
        dynamic = bool(flat_keys) or (not static_keys and any("-" in k for k in definition))
        shovel = (read_dynamic_shovel if dynamic else read_static_shovel)(sctx, definition)
        _check_shovel(sctx, shovel, _delete_after_name(definition) if dynamic else "delete_after",
                      "ack-mode" if dynamic else "ack_mode")
        if cluster is not None and (why := group_refusal(shovel)) is not None:
            sctx.fail(None, f"cannot run in the group of daemons ({group_key!r}): {why}")
        if sctx.warnings:
            shovel = dataclasses.replace(shovel, warnings=tuple(sctx.warnings))
        shovels[name] = shovel
    positions = sum(s.workers for s in shovels.values())
    if positions > MAX_POSITIONS:
        ctx.fail("shovels", f"at most {MAX_POSITIONS} workers in all (the sum of every shovel's "
                            f"'workers'), got {positions}")
    return PumpConfig(shovels=shovels, shovels_per_process=per_process, cluster=cluster)


def located(exc: JsonInputError, source: str, shovel: str | None = None) -> ConfigError:
    """The reader's refusal as a configuration error, at its shovel and clause.

    :param shovel: the shovel the whole document defines (a PUT body); None for a file,
        ``{"shovels": {NAME: {...}}}``, whose path names the shovel.
    """
    if exc.line is not None:
        return ConfigError(f"invalid JSON at line {exc.line}, column {exc.column}: {exc.reason}",
                           source=source, shovel=shovel)
    path: tuple[str | int, ...] = exc.path
    if shovel is None and len(path) >= 2 and path[0] == "shovels" and isinstance(path[1], str):
        if exc.duplicate and len(path) == 2:
            return ConfigError("this shovel name is given twice (shovel names must be distinct)",
                               source=source, shovel=path[1])
        shovel, path = path[1], path[2:]
    elif shovel is None:
        if exc.duplicate:
            return ConfigError(f"{exc.reason} at {path_text(path[:-1]) or 'the top level'}",
                               source=source)
        return ConfigError((f"at {path_text(path)}: " if path else "") + exc.reason,
                           source=source)
    if not path:
        return ConfigError(exc.reason, source=source, shovel=shovel)
    clause_steps = 1
    while clause_steps < len(path) and isinstance(path[clause_steps], int):
        clause_steps += 1  # an endpoint's brokers[0]: the clause is the list's item
    if exc.duplicate:  # the key given twice is the clause, however deep
        return ConfigError(exc.reason, source=source, shovel=shovel, clause=path_text(path))
    rest = path[clause_steps:]
    return ConfigError((f"at {path_text(rest)}: " if rest else "") + exc.reason, source=source,
                       shovel=shovel, clause=path_text(path[:clause_steps]))


def load_config(path: str | os.PathLike[str]) -> PumpConfig:
    """Read, parse and validate a configuration file.

    :raises ConfigError: when the file cannot be read, or :func:`parse_document` refuses it.
    """
    return read_config(path)[0]


def read_config(path: str | os.PathLike[str]) -> tuple[PumpConfig, dict[str, Any]]:
    """Like :func:`load_config`, with the decoded document as well: both come from one read of
    the file, so they always agree (a reload must not see two versions of a file being
    replaced).

    :raises ConfigError: as :func:`load_config`.
    """
    source = os.fspath(path)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_DOCUMENT_BYTES + 1)  # one byte more: the reader refuses the size
    except OSError as exc:
        raise ConfigError(f"cannot read the file: {exc.strerror or exc}", source=source) from None
    except (ValueError, MemoryError) as exc:  # an embedded NUL in the path, a huge file
        raise ConfigError(f"cannot read the file: {exc}", source=source) from None
    return parse_document(data, source)


def parse_document(data: bytes, source: str) -> tuple[PumpConfig, dict[str, Any]]:
    """A configuration file's bytes, decoded, checked and validated.

    :raises ConfigError: when the reader refuses them (:mod:`.json_input`: not JSON, with the
        line and column; a key given twice, an integer past 64 bits, nesting too deep, ...,
        with its shovel and clause), or they fail validation (see :func:`parse_config`).
    """
    # Every password in the file is known before any message can quote a piece of it.
    register_uri_secrets(data.decode("utf-8", "replace"))
    try:
        obj = read_json(data, max_bytes=MAX_DOCUMENT_BYTES)
    except JsonInputError as exc:
        raise located(exc, source) from None
    config = parse_config(obj, source=source)
    assert isinstance(obj, dict)  # parse_config has checked it
    return config, obj


# --- back to JSON ---------------------------------------------------------------------------


def shovel_to_json(shovel: ShovelConfig) -> dict[str, Any]:
    """The shovel in the static form, which :func:`parse_config` reads back to an equal shovel.

    Passwords included: for the daemon's state file, never for logs.
    """

    def endpoint(ep: Endpoint) -> dict[str, Any]:
        if ep.protocol is Protocol.AMQP10:
            return {"protocol": ep.protocol.value,
                    "brokers": [format_uri(u) for u in ep.amqp10_brokers],
                    "address": ep.address, "predeclared": not ep.declare_address_queue}
        if ep.protocol is Protocol.STREAM:
            return {"protocol": ep.protocol.value,
                    "brokers": [format_uri(u) for u in ep.brokers],
                    **({"stream": ep.stream} if ep.stream is not None
                       else {"super_stream": ep.super_stream}),
                    **({"stream_port": ep.stream_port} if ep.stream_port is not None else {})}
        out: dict[str, Any] = {"brokers": [format_uri(u) for u in ep.brokers]}
        decls: list[Any] = []
        for d in ep.declarations:
            if not d.arguments and not d.if_missing:
                decls.append(d.method)
            else:
                item: dict[str, Any] = {d.method: dict(d.arguments)}
                if d.if_missing:
                    item["if_missing"] = True
                decls.append(item)
        if decls:
            out["declarations"] = decls
        return out

    amqp091_source = shovel.source.protocol is Protocol.AMQP091
    amqp091_destination = shovel.destination.protocol is Protocol.AMQP091
    fields: dict[str, Any] = {
        k: v for k, v in (("exchange", shovel.publish_exchange),
                          ("routing_key", shovel.publish_routing_key)) if v is not None}
    if not shovel.publish_mandatory:
        fields["mandatory"] = False
    delete_after = shovel.delete_after
    undeliverable = {"policy": shovel.undeliverable.policy.value,
                     "park_queue": shovel.undeliverable.park_queue,
                     "unroutable": shovel.undeliverable.unroutable.value}
    if not amqp091_source:  # no park queue: an AMQP 1.0 source cannot park
        del undeliverable["park_queue"]
    return {
        "sources": endpoint(shovel.source),
        "destinations": endpoint(shovel.destination),
        **({"queue": shovel.queue} if amqp091_source else {}),
        "prefetch_count": shovel.prefetch_count,
        "ack_mode": shovel.ack_mode.value,
        **({"publish_properties": dict(shovel.publish_properties),
            "publish_fields": fields} if amqp091_destination else {}),
        "reconnect_delay": shovel.reconnect_delay,
        "stall_timeout": shovel.stall_timeout,
        "workers": shovel.workers,
        "source_read_hold_ms": shovel.source_read_hold_ms,
        **({"own_process": True} if shovel.own_process else {}),
        "delete_after": delete_after.value if isinstance(delete_after, DeleteAfter)
        else delete_after,
        "add_forward_headers": shovel.add_forward_headers,
        "add_timestamp_header": shovel.add_timestamp_header,
        **({"delete_after_duration": int(shovel.delete_after_duration)}
           if shovel.delete_after_duration is not None else {}),
        **({"consumer_args": dict(shovel.consumer_arguments)}
           if shovel.consumer_arguments else {}),
        **({"consumer_name": shovel.consumer_tag} if shovel.consumer_tag else {}),
        **{name: dict(value) for name, value in (
            ("amqp10_properties", shovel.amqp10_properties),
            ("amqp10_application_properties", shovel.amqp10_application_properties),
            ("amqp10_message_annotations", shovel.amqp10_message_annotations)) if value},
        **({"publishing_id": shovel.publishing_id} if shovel.publishing_id else {}),
        **({"source_stream_port": shovel.source.stream_port}
           if shovel.source.protocol is Protocol.AMQP091 and shovel.source.stream_port is not None
           else {}),
        "undeliverable": undeliverable,
    }
