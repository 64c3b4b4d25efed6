"""One clause of a static shovel in an Erlang-terms config, as pumpd's JSON: the static form's
clauses, a ``sources`` / ``destinations`` endpoint, its URIs and declarations.

:class:`ClauseReader` is what :mod:`.shovels` reads both static formats' clauses with; every
failure is a :class:`~pumpd.importers.import_errors.ConfigImportError` at the term's line and column.
"""

from __future__ import annotations

from ...config.limits import MAX_DURATION
from ...config.model import AckMode
from ...config.vocabulary import BASIC_PROPERTIES, DECLARATION_METHODS, PUBLISH_FIELDS
from ..import_errors import JSON
from .term_values import TermReader
from .terms import Atom, ErlString, Term, format_term

__all__ = ["ClauseReader"]

_ACK_MODES = tuple(mode.value for mode in AckMode)


class ClauseReader(TermReader):
    """Reads a shovel's clauses, one at a time, into pumpd's JSON."""

    def clause_value(self, where: str, key: str, value: Term, item: Term) -> JSON:
        ctx = f"{where}: clause '{key}'"
        if key in ("sources", "destinations"):
            return self._endpoint(ctx, value, item)
        if key == "queue":
            return self._text(ctx, value, item)
        if key == "prefetch_count":
            # basic.qos carries prefetch_count as a 16-bit field.
            return self._int(ctx, value, item, 0, 0xFFFF)
        if key == "ack_mode":
            if isinstance(value, Atom) and value in _ACK_MODES:
                return str(value)
            self.fail(
                f"{ctx}: expected one of {', '.join(_ACK_MODES)}, found {format_term(value, 40)}",
                value,
                item,
            )
        if key == "publish_properties":
            return self._fields(ctx, value, item, BASIC_PROPERTIES, "basic.properties")
        if key == "publish_fields":
            return self._fields(ctx, value, item, PUBLISH_FIELDS, "basic.publish")
        if key == "delete_after":
            if isinstance(value, Atom) and value in ("never", "queue-length"):
                return str(value)
            if isinstance(value, int) and value >= 0:
                return value
            self.fail(
                f"{ctx}: expected never, 'queue-length' or a non-negative integer, found "
                f"{format_term(value, 40)}",
                value,
                item,
            )
        if key in ("add_forward_headers", "add_timestamp_header"):
            return self._bool(ctx, value, item)
        if key == "delete_after_duration":
            if isinstance(value, Atom) and value == "undefined":
                return None
            return self._int(ctx, value, item, 1, MAX_DURATION, what="a positive integer "
                             "(seconds)")
        assert key == "reconnect_delay"
        # The plugin takes any number here (a negative one, or a fraction, means "never
        # reconnect" to it); pumpd's check says how it reads it.
        if isinstance(value, (int, float)):
            return value
        self.fail(
            f"{ctx}: expected a number of seconds, found {format_term(value, 40)}",
            value,
            item,
        )

    def _endpoint(self, ctx: str, value: Term, item: Term) -> JSON:
        pairs = self._proplist(value, ctx, item)
        keys = {key for key, _, _ in pairs}
        if "brokers" in keys and "broker" in keys:
            self.fail(f"{ctx}: give either brokers or broker, not both", value, item)
        if not keys & {"brokers", "broker"}:
            self.fail(f"{ctx}: the mandatory brokers (or broker) clause is missing", value, item)
        out: dict[str, JSON] = {}
        for key, sub, sub_item in pairs:
            sub_ctx = f"{ctx}: {key}"
            if key == "broker":
                out["broker"] = self.uri(sub_ctx, sub, sub_item)
            elif key == "brokers":
                if isinstance(sub, ErlString):
                    self.fail(
                        f"{sub_ctx}: expected a list of URIs, found the single string "
                        f'{format_term(sub, 60)} (write {{broker, "..."}} for one URI)',
                        sub,
                        sub_item,
                    )
                if not isinstance(sub, list) or not sub:
                    self.fail(
                        f"{sub_ctx}: expected a non-empty list of URIs, found "
                        f"{format_term(sub, 60)}",
                        sub,
                        sub_item,
                    )
                out["brokers"] = [self.uri(sub_ctx, uri, sub) for uri in sub]
            elif key == "declarations":
                out["declarations"] = self.declarations(sub_ctx, sub, sub_item)
            else:
                self.fail(
                    f"{ctx}: unknown clause '{key}' (expected brokers, broker or declarations)",
                    sub_item,
                )
        return out

    def uri(self, ctx: str, value: Term, item: Term) -> str:
        uri = self._text(ctx, value, item, what="an AMQP URI string")
        if any(c.isspace() for c in uri):
            self.fail(f"{ctx}: the URI {uri!r} contains white space", value, item)
        scheme, has_scheme, _rest = uri.partition("://")  # (urlsplit raises on a stray '[')
        if not has_scheme or scheme.lower() not in ("amqp", "amqps"):
            self.fail(f"{ctx}: {uri!r} is not an amqp:// or amqps:// URI", value, item)
        return uri

    def declarations(self, ctx: str, value: Term, item: Term) -> JSON:
        value = self._list(ctx, value, item, "a list of AMQP methods")
        out: list[JSON] = []
        for decl in value:
            if isinstance(decl, Atom):
                self._method(ctx, decl, decl, value)
                if decl == "queue.declare":
                    out.append({"queue.declare": self._durable_unless_exclusive(
                        f"{ctx}: {decl}", {}, decl)})
                else:
                    out.append(str(decl))
            elif isinstance(decl, tuple) and len(decl) == 2 and isinstance(decl[0], Atom):
                fields = self._method(ctx, decl[0], decl, value)
                method_ctx = f"{ctx}: {decl[0]}"
                converted = self._fields(method_ctx, decl[1], decl, fields, "")
                if decl[0] == "queue.declare":
                    converted = self._durable_unless_exclusive(method_ctx, converted, decl)
                out.append({str(decl[0]): converted})
            else:
                self.fail(
                    f"{ctx}: expected a method ('queue.declare') or {{method, [Field, ...]}}, "
                    f"found {format_term(decl, 60)}",
                    decl,
                    value,
                )
        return out

    def _durable_unless_exclusive(self, ctx: str, fields: dict[str, JSON],
                                  at: Term) -> dict[str, JSON]:
        """rabbit_shovel_util:parse_declaration/1 turns a queue.declare that is neither durable
        nor exclusive into a durable one (transient non-exclusive queues are deprecated)."""
        if fields.get("durable") or fields.get("exclusive") or fields.get("passive"):
            return fields
        queue = fields.get("queue")
        if queue:
            self.warn(f"{ctx}: queue {queue!r} is neither durable nor exclusive: imported as "
                      "durable, which is what the plugin declares", at)
            return {**fields, "durable": True}
        # A server-named queue made durable, as the plugin does, is left behind at every
        # reconnect, collecting copies of what its bindings route for ever; exclusive, the
        # broker deletes it with the connection.
        self.warn(f"{ctx}: a server-named queue that is neither durable nor exclusive: imported "
                  "as exclusive (deleted with pumpd's connection); the plugin declares it "
                  "durable, and leaves one such queue behind at every reconnect", at)
        return {**fields, "exclusive": True}

    def _method(self, ctx: str, method: Atom, *at: Term) -> dict[str, str]:
        if method not in DECLARATION_METHODS:
            self.fail(
                f"{ctx}: unknown AMQP method '{method}' (known: {', '.join(DECLARATION_METHODS)})",
                method,
                *at,
            )
        return DECLARATION_METHODS[method]
