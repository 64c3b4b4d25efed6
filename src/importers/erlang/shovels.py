"""``pumpd import-erlang``: the static shovels of a ``rabbitmq.config`` / ``advanced.config``.

The ``{rabbitmq_shovel, [{shovels, [...]}]}`` clause, each shovel in the static form
(``sources``, ``destinations``, ``queue``, ``prefetch_count``, ``ack_mode``,
``publish_properties``, ``publish_fields``, ``reconnect_delay``) or in RabbitMQ 3.7+'s current one
(``{source, [{protocol, amqp091}, {uris, [...]}, {queue, ...}, ...]}``, ``{destination, [...]}``,
each side AMQP 0-9-1 or AMQP 1.0: ``{protocol, amqp10}`` with ``source_address`` /
``target_address``), is converted clause by clause into pumpd's JSON, printing only what the
input states plus the current format's own ``ack_mode`` default (no_ack, with a warning).
Anything that cannot be translated faithfully is refused with a
:class:`~pumpd.cli.import_commands.ConfigImportError` naming the shovel and the clause.
"""

from __future__ import annotations

from ...config.vocabulary import (
    AMQP10_STATIC_DEST,
    AMQP10_STATIC_SOURCE,
    PROTOCOLS,
    STATIC_CLAUSES,
    STATIC_EXTRAS,
)
from ..import_errors import JSON, ConfigImportError
from .clause_reader import ClauseReader
from .term_values import Pair
from .terms import (
    Atom,
    ErlangSyntaxError,
    ErlString,
    Positions,
    Term,
    format_term,
    parse_term_with_positions,
)

__all__ = ["import_erlang_config"]

# Clauses the plugin (3.7+) also reads in this format; pumpd's JSON takes them under the same
# names (consumer_args / consumer_name only in the current format, see _CURRENT_SOURCE).
_EXTRA_CLAUSES = STATIC_EXTRAS[:4]
_MANDATORY_CLAUSES = ("sources", "destinations", "queue")
# The clauses the older plugin's ``defaults`` application setting may supply.
_DEFAULTABLE_CLAUSES = STATIC_CLAUSES[3:]

# RabbitMQ 3.7+'s static format (rabbit_shovel_config:parse_current and
# rabbit_amqp091_shovel:parse/2): its top-level clauses, and those of source and destination.
_NEWER_FORMAT_CLAUSES = ("source", "destination")
_CURRENT_TOP = ("source", "destination", "ack_mode", "reconnect_delay")
_CURRENT_SOURCE = ("protocol", "uris", "declarations", "queue", "prefetch_count", "delete_after",
                   "delete_after_duration", "consumer_args", "consumer_name")
_CURRENT_DEST = ("protocol", "uris", "declarations", "publish_properties", "publish_fields",
                 "add_forward_headers", "add_timestamp_header")
# The current format's ack_mode default (parse_current), unlike the legacy format's on_confirm.
CURRENT_FORMAT_ACK_MODE = "no_ack"
# The clauses of each side by its protocol, and those the side cannot do without.
_SIDE_CLAUSES = {
    ("source", "amqp091"): (_CURRENT_SOURCE, ("uris", "queue")),
    ("destination", "amqp091"): (_CURRENT_DEST, ("uris",)),
    ("source", "amqp10"): (AMQP10_STATIC_SOURCE, ("uris", "source_address")),
    ("destination", "amqp10"): (AMQP10_STATIC_DEST, ("uris", "target_address")),
}
# An AMQP 1.0 side's clauses that become an endpoint's, and pumpd's names of those that become
# the shovel's (the others keep their names).
_AMQP10_ENDPOINT = {"source_address": "address", "target_address": "address"}
_AMQP10_SHOVEL = {"properties": "amqp10_properties",
                  "application_properties": "amqp10_application_properties",
                  "message_annotations": "amqp10_message_annotations"}
# Clauses the plugin reads and then never uses: dropped with a warning.
_UNUSED = {"delivery_annotations": "the plugin never sets delivery annotations on a message"}


class _ErlangImporter(ClauseReader):
    """Walks the ``rabbitmq_shovel`` clause into pumpd's JSON."""

    def __init__(self, positions: Positions, source: str) -> None:
        super().__init__(positions, source)
        self._predeclared = False  # the application's {topology, [{predeclared, true}]}

    # -- the file ----------------------------------------------------------------------------

    def run(self, root: Term) -> dict[str, JSON]:
        app_env = self._shovel_app_env(root)
        env = {
            key: (value, item)
            for key, value, item in self._proplist(app_env, "rabbitmq_shovel", app_env)
        }
        if "shovels" not in env:
            self.fail("the rabbitmq_shovel clause has no {shovels, [...]} clause", app_env)
        defaults: list[Pair] = []
        if "defaults" in env:
            value, item = env["defaults"]
            defaults = self._proplist(value, "defaults", item)
            for key, _, where in defaults:
                if key not in _DEFAULTABLE_CLAUSES:
                    self.fail(
                        f"defaults: unknown clause '{key}' (expected one of "
                        f"{', '.join(_DEFAULTABLE_CLAUSES)})",
                        where,
                    )
        shovels_term, shovels_item = env["shovels"]
        if not isinstance(shovels_term, list):
            self.fail(
                f"shovels: expected a list of {{Name, [...]}} shovels, found "
                f"{format_term(shovels_term, 60)}",
                shovels_term,
                shovels_item,
            )
        if "topology" in env:
            value, item = env["topology"]
            for key, sub, where in self._proplist(value, "topology", item):
                if key == "predeclared":
                    self._predeclared = self._bool("topology: predeclared", sub, where)
        if not shovels_term:
            # The plugin starts with no static shovel; so does pumpd with {"shovels": {}}.
            self.warn("the shovels clause is an empty list: no shovels to import", shovels_item)
        shovels: dict[str, JSON] = {}
        for entry in shovels_term:
            if not (isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], Atom)):
                self.fail(
                    "shovels: expected {shovel_name, [...]} with an atom as the name, found "
                    f"{format_term(entry, 60)}",
                    entry,
                    shovels_term,
                )
            name = str(entry[0])
            if name in shovels:
                self.fail(f"shovel '{name}' is defined twice: shovel names must be distinct", entry)
            shovels[name] = self._shovel(name, entry[1], entry, defaults)
        return {"shovels": shovels}

    def _shovel_app_env(self, root: Term) -> Term:
        """The value of the ``{rabbitmq_shovel, Env}`` application clause."""
        if isinstance(root, tuple):
            if len(root) == 2 and root[0] == Atom("rabbitmq_shovel") and isinstance(root[0], Atom):
                return root[1]
            self.fail(
                "expected a list of application clauses ([{rabbit, [...]}, "
                "{rabbitmq_shovel, [...]}]) or a {rabbitmq_shovel, [...]} clause, found "
                f"{format_term(root, 60)}",
                root,
            )
        if not isinstance(root, list):
            self.fail(
                "expected a list of application clauses ([{rabbit, [...]}, "
                f"{{rabbitmq_shovel, [...]}}]), found {format_term(root, 60)}",
                root,
            )
        found: list[tuple[Term, Term]] = []
        apps: list[str] = []
        includes: list[str] = []
        for clause in root:
            if isinstance(clause, ErlString):  # sys.config may name other files to include
                includes.append(str(clause))
                continue
            if not (isinstance(clause, tuple) and len(clause) == 2 and isinstance(clause[0], Atom)):
                self.fail(
                    f"expected an application clause {{app_name, [...]}}, found "
                    f"{format_term(clause, 60)}",
                    clause,
                    root,
                )
            apps.append(str(clause[0]))
            if clause[0] == "rabbitmq_shovel":
                found.append((clause[1], clause))
        if len(found) > 1:
            self.fail("the rabbitmq_shovel clause appears more than once", found[1][1])
        if not found:
            listed = ", ".join(apps) if apps else "none"
            hint = f"; the file includes {', '.join(includes)}: import that" if includes else ""
            self.fail(
                f"no rabbitmq_shovel clause found (application clauses: {listed}){hint}", root
            )
        return found[0][0]

    # -- one shovel --------------------------------------------------------------------------

    def _shovel(self, name: str, body: Term, entry: Term, defaults: list[Pair]) -> JSON:
        where = f"shovel '{name}'"
        clauses = self._proplist(body, where, entry)
        present = {key for key, _, _ in clauses}
        if present & set(_NEWER_FORMAT_CLAUSES):
            return self._current_shovel(where, clauses, body, entry)
        for key, _, item in clauses:
            if key not in STATIC_CLAUSES and key not in _EXTRA_CLAUSES:
                self.fail(
                    f"{where}: unknown clause '{key}' (expected one of "
                    f"{', '.join(STATIC_CLAUSES + _EXTRA_CLAUSES)})",
                    item,
                )
        for key in _MANDATORY_CLAUSES:
            if key not in present:
                self.fail(f"{where}: the mandatory clause '{key}' is missing", body, entry)
        out: dict[str, JSON] = {}
        for key, value, item in clauses:
            out[key] = self.clause_value(where, key, value, item)
        for key, value, item in defaults:
            if key not in present:
                out[key] = self.clause_value(f"{where} (from defaults)", key, value, item)
        self._apply_predeclared(where, out, "sources", entry)
        return out

    def _apply_predeclared(self, where: str, out: dict[str, JSON], side: str, at: Term) -> None:
        """{topology, [{predeclared, true}]}: a source without declarations only checks its
        queue (rabbit_shovel_util:decl_fun/2), a passive declare in pumpd's terms."""
        endpoint = out.get(side)
        if not self._predeclared or not isinstance(endpoint, dict) or "protocol" in endpoint:
            return  # (an AMQP 1.0 side of a static shovel never declares anything)
        if endpoint.get("declarations"):
            return
        queue = out.get("queue")
        if not queue:
            self.fail(f"{where}: topology predeclared needs a named source queue "
                      "(the plugin refuses an empty one)", at)
        endpoint["declarations"] = [{"queue.declare": {"queue": queue, "passive": True}}]

    def _current_shovel(self, where: str, clauses: list[Pair], body: Term, entry: Term) -> JSON:
        """RabbitMQ 3.7+'s ``{source, [...]}`` / ``{destination, [...]}`` format, into pumpd's
        clauses, with this format's own defaults (ack_mode no_ack)."""
        by_key = {key: (value, item) for key, value, item in clauses}
        for key, _, item in clauses:
            if key not in _CURRENT_TOP:
                self.fail(f"{where}: clause '{key}' does not belong to the current static-shovel "
                          f"format (expected one of {', '.join(_CURRENT_TOP)}); write a shovel "
                          "either in this format or in the older sources/destinations one",
                          item)
        for key in _NEWER_FORMAT_CLAUSES:
            if key not in by_key:
                self.fail(f"{where}: the mandatory clause '{key}' is missing", body, entry)
        out: dict[str, JSON] = {}
        src_value, src_item = by_key["source"]
        src = self._current_endpoint(f"{where}: clause 'source'", "source", src_value, src_item)
        dst_value, dst_item = by_key["destination"]
        dst = self._current_endpoint(f"{where}: clause 'destination'", "destination", dst_value,
                                     dst_item)
        out["sources"] = src.pop("endpoint")
        out["destinations"] = dst.pop("endpoint")
        if "queue" in src:
            out["queue"] = src.pop("queue")
        out.update(src)
        out.update(dst)
        if "ack_mode" in by_key:
            value, item = by_key["ack_mode"]
            out["ack_mode"] = self.clause_value(where, "ack_mode", value, item)
        else:
            out["ack_mode"] = CURRENT_FORMAT_ACK_MODE
            self.warn(f"{where}: no ack_mode: the plugin's default for the source/destination "
                      "format is no_ack (the legacy format's is on_confirm), and imported as "
                      "such; no_ack LOSES the messages in flight whenever a connection or the "
                      "shovel fails. Write {ack_mode, on_confirm} to lose none", body, entry)
        if "reconnect_delay" in by_key:
            value, item = by_key["reconnect_delay"]
            out["reconnect_delay"] = self.clause_value(where, "reconnect_delay", value, item)
        self._apply_predeclared(where, out, "sources", entry)
        return out

    def _current_endpoint(self, ctx: str, side: str, value: Term,
                          item: Term) -> dict[str, JSON]:
        """One side of the current format, by its protocol: its endpoint (``"endpoint"``) and the
        shovel's clauses it gives (``"queue"``, ``"prefetch_count"``, ...)."""
        pairs = self._proplist(value, ctx, item)
        protocol = "amqp091"
        for key, sub, sub_item in pairs:
            if key == "protocol":
                protocol = self._protocol(f"{ctx}: {key}", sub, sub_item)
        known, mandatory = _SIDE_CLAUSES[(side, protocol)]
        other = next(p for p in PROTOCOLS if p != protocol)
        other_known = _SIDE_CLAUSES[(side, other)][0]
        keys = {key for key, _, _ in pairs}
        for key, _, sub_item in pairs:
            if key not in known and key not in other_known:
                self.fail(f"{ctx}: unknown clause '{key}' (expected one of {', '.join(known)})",
                          sub_item)
        for key in mandatory:
            if key not in keys:
                self.fail(f"{ctx}: the mandatory clause '{key}' is missing", value, item)
        endpoint: dict[str, JSON] = {} if protocol == "amqp091" else {"protocol": protocol}
        out: dict[str, JSON] = {"endpoint": endpoint}
        for key, sub, sub_item in pairs:
            sub_ctx = f"{ctx}: {key}"
            if key == "protocol":
                continue
            if key not in known:
                # The plugin reads a side's clauses by its protocol and ignores the others.
                self.warn(f"{sub_ctx}: ignored, as the plugin does: it is a clause of an "
                          f"{other} {side}, and this {side}'s protocol is {protocol}", sub_item)
            elif key in _UNUSED:
                self.warn(f"{sub_ctx}: ignored, as the plugin does: {_UNUSED[key]}", sub_item)
            elif key == "uris":
                if not isinstance(sub, list) or not sub or isinstance(sub, ErlString):
                    self.fail(f"{sub_ctx}: expected a non-empty list of URIs, found "
                              f"{format_term(sub, 60)}", sub, sub_item)
                endpoint["brokers"] = [self.uri(sub_ctx, uri, sub) for uri in sub]
            elif key == "declarations":
                endpoint["declarations"] = self.declarations(sub_ctx, sub, sub_item)
            elif key in _AMQP10_ENDPOINT:
                endpoint[_AMQP10_ENDPOINT[key]] = self._text(sub_ctx, sub, sub_item)
            elif key in _AMQP10_SHOVEL:
                out[_AMQP10_SHOVEL[key]] = self._amqp10_map(sub_ctx, sub, sub_item)
            elif key == "consumer_args":
                out[key] = self._table(sub_ctx, sub, sub_item)
            elif key == "consumer_name":
                name = self._text(sub_ctx, sub, sub_item)
                if name:
                    out[key] = name
            else:
                out[key] = self.clause_value(ctx.rsplit(": clause", 1)[0], key, sub, sub_item)
        return out

    def _protocol(self, ctx: str, value: Term, item: Term) -> str:
        if isinstance(value, Atom) and str(value) in PROTOCOLS:
            return str(value)
        if isinstance(value, Atom) and str(value) == "local":
            self.fail(f"{ctx}: local shovels run inside the broker (the plugin's in-broker "
                      f"protocol): pumpd connects over the network; use "
                      f"{' or '.join(PROTOCOLS)}", item)
        self.fail(f"{ctx}: expected {' or '.join(PROTOCOLS)}, found {format_term(value, 40)}",
                  value, item)

    def _amqp10_map(self, ctx: str, value: Term, item: Term) -> dict[str, JSON]:
        """``[{Key, Value}, ...]`` of an AMQP 1.0 destination (properties, application
        properties, message annotations): keys atoms or text, values text or integers."""
        value = self._list(ctx, value, item, "a list [{Key, Value}, ...]")
        out: dict[str, JSON] = {}
        for entry in value:
            if not (isinstance(entry, tuple) and len(entry) == 2):
                self.fail(f"{ctx}: expected {{Key, Value}}, found {format_term(entry, 60)}",
                          entry, value, item)
            key_term, sub = entry
            key = (str(key_term) if isinstance(key_term, Atom)
                   else self._text(ctx, key_term, entry, what="an atom, a binary or a string"))
            if key in out:
                self.fail(f"{ctx}: the key {key!r} is given twice", entry, value, item)
            if isinstance(sub, int) and not isinstance(sub, bool):
                out[key] = sub
            else:
                out[key] = self._text(f"{ctx}: {key}", sub, entry,
                                      what="a binary, a string or an integer")
        return out


def import_erlang_config(
    text: str, *, source: str, warnings: list[str] | None = None
) -> dict[str, JSON]:
    """Convert the static shovels of a RabbitMQ Erlang-terms config file to pumpd's JSON.

    The file is a list of application clauses (``[{rabbit, [...]}, {rabbitmq_shovel, [...]}].``)
    or just the ``{rabbitmq_shovel, [...]}`` clause as the plugin's documentation writes it. Conversion rules:
    property lists become objects, a bare atom in a property list means ``true``, binaries and
    strings become strings, typed table entries (``{<<"x-message-ttl">>, long, 60000}``) become
    plain JSON values (a ``decimal`` becomes a number, a ``timestamp`` its integer seconds,
    ``void`` ``null``), ``ack_mode`` atoms become strings, and each declaration becomes its
    method name or a one-key object ``{"exchange.declare": {...}}``. A ``defaults`` setting of
    the rabbitmq_shovel application (older plugins) fills the optional clauses it names into
    every shovel that lacks them, as the plugin did.

    Besides the static form's clauses, ``delete_after``, ``add_forward_headers`` and
    ``add_timestamp_header`` (which RabbitMQ 3.7+ also reads in this format) are carried over.
    The deprecated ``ticket`` field is dropped; ``immediate`` in
    ``publish_fields`` is refused (RabbitMQ rejects
    immediate). The current ``{source, ...}`` / ``{destination, ...}`` format is read too, with
    its own defaults (see the module's docstring). Unlike
    the plugin, unknown keys in ``sources`` / ``destinations`` are errors, not silently
    ignored: a misspelt ``declaration`` would otherwise vanish.

    :param text: the file's text.
    :param source: the file's name, for error messages.
    :returns: ``{"shovels": {name: {clause: value, ...}, ...}}``.
    :raises ConfigImportError: the text is not a valid term, or the shovel clause has a shape
        the importer does not translate (an unknown clause, a wrongly typed value, a duplicate
        shovel name, ...). The error carries the line and column when known.
    """
    try:
        root, positions = parse_term_with_positions(text)
    except ErlangSyntaxError as exc:
        raise ConfigImportError(
            exc.reason, source=source, line=exc.line, column=exc.column
        ) from exc
    importer = _ErlangImporter(positions, source)
    document = importer.run(root)
    if warnings is not None:
        warnings.extend(importer.warnings)
    return document
