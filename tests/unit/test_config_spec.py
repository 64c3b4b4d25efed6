"""The one config spec (pumpd.config.spec): every clause declared with its doc and default, the
readers accept exactly the spec's clauses with the spec's defaults, and the JSON Schema generated
from it accepts the repository's example configs and refuses what the validator refuses.
Pure parsing: no broker."""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from pumpd.config import spec, vocabulary
from pumpd.config.model import ClusterConfig, ShovelConfig, UndeliverablePolicy
from pumpd.config.parse import ConfigError, parse_config, shovel_to_json
from pumpd.importers.definitions_export import import_definitions
from pumpd.importers.erlang.shovels import import_erlang_config

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"

STATIC: dict[str, Any] = {
    "sources": {"broker": "amqp://src"},
    "destinations": {"broker": "amqp://dst"},
    "queue": "work",
}
DYNAMIC: dict[str, Any] = {"src-uri": "amqp://src", "src-queue": "in", "dest-uri": "amqp://dst"}
OWNER: dict[str, Any] = {"name": "q", "kind": "queue", "virtual_host": "/"}
# What turns a side of STATIC or DYNAMIC into an AMQP 1.0 one.
AMQP10_DESTINATION: dict[str, Any] = {"+": {"destinations": {
    "protocol": "amqp10", "broker": "amqp://dst", "address": "/queues/out"}}}
AMQP10_SOURCE_ENDPOINT: dict[str, Any] = {"+": {"protocol": "amqp10", "address": "/queues/in"},
                                          "shovel-": ["queue"]}
DYNAMIC_AMQP10_DESTINATION: dict[str, Any] = {"+": {"dest-protocol": "amqp10",
                                                    "dest-address": "/queues/out"}}
# What turns the destination of STATIC or DYNAMIC into a stream (an endpoint's clause of a
# destination only is set on "destinations", with these keys beside it).
STREAM_DESTINATION: dict[str, Any] = {"+": {"destinations": {
    "protocol": "stream", "broker": "amqp://dst", "stream": "out"}}}
STREAM_ENDPOINT: dict[str, Any] = {"+": {"protocol": "stream", "stream": "out"}}
DYNAMIC_STREAM_DESTINATION: dict[str, Any] = {"+": {"dest-protocol": "stream",
                                                    "dest-stream": "out"}}

# A valid value other than the default for every clause, with what else the shovel must hold for
# the value to matter ("+": keys to add, "-": keys to remove; for an endpoint's clause,
# "shovel-": the shovel's keys to remove). Written here, not read from the spec: a clause added
# to the spec without a sample fails test_every_clause_has_a_sample.
SAMPLES: dict[tuple[str, str], tuple[Any, dict[str, Any]]] = {
    ("file", "shovels"): ({"other": STATIC}, {}),
    ("file", "shovels_per_process"): (4, {}),
    ("file", "group"): ({"name": "g"}, {}),
    ("file", "cluster"): ({"name": "g"}, {}),
    ("file", "paused"): (["orders"], {}),
    ("cluster", "name"): ("eu-1", {}),
    ("cluster", "coordination_uri"): ("amqp://coord/pumpd", {}),
    ("cluster", "lease_retry"): (0.5, {}),
    ("cluster", "poll_interval"): (0.2, {}),
    ("cluster", "settle"): (0, {}),
    ("cluster", "grace"): (3, {}),
    ("shovel", "sources"): ({"brokers": ["amqp://a", "amqp://b"]}, {}),
    ("shovel", "destinations"): ({"broker": "amqp://elsewhere"}, {}),
    ("shovel", "queue"): ("other", {}),
    ("shovel", "prefetch_count"): (10, {}),
    ("shovel", "ack_mode"): ("on_publish", {}),
    ("shovel", "publish_properties"): ({"delivery_mode": 2}, {}),
    ("shovel", "publish_fields"): ({"exchange": "x"}, {}),
    ("shovel", "reconnect_delay"): (1, {}),
    ("shovel", "delete_after"): ("queue-length", {}),
    ("shovel", "add_forward_headers"): (True, {}),
    ("shovel", "add_timestamp_header"): (True, {}),
    ("shovel", "delete_after_duration"): (3600, {}),
    ("shovel", "consumer_args"): ({"x-priority": 5}, {}),
    ("shovel", "consumer_name"): ("tag", {}),
    ("shovel", "workers"): (3, {}),
    ("shovel", "source_read_hold_ms"): (0, {}),
    ("shovel", "undeliverable"): ("stop", {}),
    ("shovel", "own_process"): (True, {}),
    ("shovel", "stall_timeout"): (5, {}),
    ("shovel", "amqp10_properties"): ({"user_id": "guest"}, AMQP10_DESTINATION),
    ("shovel", "amqp10_application_properties"): ({"k": "v"}, AMQP10_DESTINATION),
    ("shovel", "amqp10_message_annotations"): ({"x-opt-k": "v"}, AMQP10_DESTINATION),
    ("shovel", "publishing_id"): ("header:seq", STREAM_DESTINATION),
    ("shovel", "source_stream_port"): (5553, {}),
    ("endpoint", "protocol"): ("amqp10", AMQP10_SOURCE_ENDPOINT),
    ("endpoint", "brokers"): (["amqp://a", "amqp://b"], {"-": ["broker"]}),
    ("endpoint", "broker"): ("amqp://other", {}),
    ("endpoint", "declarations"): (["queue.declare"], {}),
    ("endpoint", "address"): ("/queues/other", AMQP10_SOURCE_ENDPOINT),
    ("endpoint", "predeclared"): (False, AMQP10_SOURCE_ENDPOINT),
    ("endpoint", "stream"): ("other", STREAM_ENDPOINT),
    ("endpoint", "stream_port"): (5553, STREAM_ENDPOINT),
    ("endpoint", "super_stream"): ("parts", {"+": {"protocol": "stream"}}),
    ("publish_fields", "exchange"): ("x", {}),
    ("publish_fields", "routing_key"): ("k", {}),
    ("publish_fields", "mandatory"): (False, {}),
    ("undeliverable", "policy"): ("dead-letter", {}),
    ("undeliverable", "park_queue"): ("parked", {}),
    ("undeliverable", "unroutable"): ("park", {}),
    ("dynamic", "src-uri"): (["amqp://a", "amqp://b"], {}),
    ("dynamic", "src-protocol"): ("amqp10", {"+": {"src-address": "/queues/in"},
                                             "-": ["src-queue"]}),
    ("dynamic", "src-address"): ("/queues/other", {"+": {"src-protocol": "amqp10"},
                                                   "-": ["src-queue"]}),
    ("dynamic", "src-queue"): ("other", {}),
    ("dynamic", "src-queue-args"): ({"x-queue-type": "quorum"}, {}),
    ("dynamic", "src-exchange"): ("x", {"-": ["src-queue"]}),
    ("dynamic", "src-exchange-key"): ("k", {"+": {"src-exchange": "x"}, "-": ["src-queue"]}),
    ("dynamic", "src-predeclared"): (True, {}),
    ("dynamic", "dest-uri"): (["amqp://a", "amqp://b"], {}),
    ("dynamic", "dest-protocol"): ("amqp10", {"+": {"dest-address": "/queues/out"}}),
    ("dynamic", "dest-address"): ("/queues/other", {"+": {"dest-protocol": "amqp10"}}),
    ("dynamic", "dest-queue"): ("out", {}),
    ("dynamic", "dest-queue-args"): ({"x-queue-type": "quorum"}, {"+": {"dest-queue": "out"}}),
    ("dynamic", "dest-exchange"): ("x", {}),
    ("dynamic", "dest-exchange-key"): ("k", {}),
    ("dynamic", "dest-predeclared"): (True, {"+": {"dest-queue": "out"}}),
    ("dynamic", "dest-stream"): ("other", {"+": {"dest-protocol": "stream"}}),
    ("dynamic", "dest-stream-port"): (5553, DYNAMIC_STREAM_DESTINATION),
    ("dynamic", "dest-super-stream"): ("parts", {"+": {"dest-protocol": "stream"}}),
    ("dynamic", "internal"): (True, {}),
    ("dynamic", "internal_owner"): (OWNER, {}),
    ("internal_owner", "name"): ("other", {}),
    ("internal_owner", "kind"): ("exchange", {}),
    ("internal_owner", "virtual_host"): ("vh", {}),
}
# Clauses whose only valid value is the default, or that a configuration file carries without
# effect: a sample cannot change what is read.
BASES: dict[str, dict[str, Any]] = {"file": {"shovels": {"orders": STATIC}}, "shovel": STATIC,
                                    "dynamic": DYNAMIC, "cluster": {"name": "g"},
                                    "internal_owner": OWNER}
NO_EFFECT = {("file", "paused")}
# Clauses that choose a side's protocol: their sample brings what that protocol needs, and the
# default is compared without it.
PROTOCOL_SWITCHES = {("endpoint", "protocol"), ("dynamic", "src-protocol"),
                     ("dynamic", "dest-protocol")}
# A second valid value of a clause that its side's protocol requires (leaving it out is no
# comparison: it is refused).
ALTERNATES: dict[tuple[str, str], Any] = {
    ("shovel", "queue"): "work", ("endpoint", "address"): "/queues/in",
    ("dynamic", "src-address"): "/queues/in", ("dynamic", "dest-address"): "/queues/out",
    ("endpoint", "stream"): "out", ("dynamic", "dest-stream"): "out"}
# A clause that one other clause replaces (one of the two is required): that other clause and a
# value of it, for the comparison.
INSTEAD: dict[tuple[str, str], tuple[str, Any]] = {
    ("endpoint", "super_stream"): ("stream", "out"),
    ("dynamic", "dest-super-stream"): ("dest-stream", "out")}
# The dynamic form's keys of a clause that needs an AMQP 1.0 side.
DYNAMIC_EXTRAS: dict[str, dict[str, Any]] = {
    "amqp10_properties": DYNAMIC_AMQP10_DESTINATION,
    "amqp10_application_properties": DYNAMIC_AMQP10_DESTINATION,
    "amqp10_message_annotations": DYNAMIC_AMQP10_DESTINATION,
    "publishing_id": DYNAMIC_STREAM_DESTINATION,
}


def patched(base: dict[str, Any], key: str, value: Any, extra: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in copy.deepcopy(base).items() if k not in extra.get("-", ())}
    out.update(copy.deepcopy(extra.get("+", {})))
    out[key] = copy.deepcopy(value)
    return out


def document(group: str, name: str, value: Any, extra: dict[str, Any]) -> dict[str, Any]:
    """A whole configuration file with ``name`` of ``group`` set to ``value``."""
    if group == "file":
        doc = {"shovels": {"orders": copy.deepcopy(STATIC)}}
        doc[name] = copy.deepcopy(value)
        return doc
    if group == "cluster":
        return {"shovels": {"orders": STATIC}, "cluster": patched({"name": "g"}, name, value, extra)}
    if group == "shovel":
        shovel = patched(STATIC, name, value, extra)
    elif group == "endpoint":
        shovel = {k: v for k, v in STATIC.items() if k not in extra.get("shovel-", ())}
        side = _endpoint_side(name)
        shovel[side] = patched(STATIC[side], name, value, extra)
    elif group in ("publish_fields", "undeliverable"):
        shovel = {**STATIC, group: {name: value}}
    elif group == "dynamic":
        shovel = patched(DYNAMIC, name, value, extra)
    else:
        assert group == "internal_owner"
        shovel = {**DYNAMIC, "internal_owner": patched(OWNER, name, value, extra)}
    return {"shovels": {"orders": shovel}}


def _endpoint_side(name: str) -> str:
    """Where an endpoint's clause is set: "destinations" for a destination's only."""
    known = name in spec.ENDPOINT.names()
    return "destinations" if known and spec.ENDPOINT[name].side == "destination" else "sources"


def clauses() -> list[tuple[str, spec.Clause]]:
    return [(g.key, c) for g in spec.GROUPS for c in g]


def ids(item: tuple[str, spec.Clause]) -> str:
    return f"{item[0]}.{item[1].name}"


# --- every clause is declared whole --------------------------------------------------------------


@pytest.mark.parametrize("item", clauses(), ids=ids)
def test_every_clause_has_a_doc_and_a_declared_default(item: tuple[str, spec.Clause]) -> None:
    clause = item[1]
    assert clause.default is not spec.UNDECLARED, "declare a default, REQUIRED or NoDefault(...)"
    if isinstance(clause.default, spec.NoDefault):
        assert clause.default.meaning, "say what leaving the clause out means"
    assert clause.doc and "\n" not in clause.doc and clause.doc.endswith("."), clause.doc
    assert clause.type in spec.TYPES
    assert re.fullmatch(r"\d+\.\d+\.\d+", clause.since)
    if clause.type in ("object", "undeliverable"):
        assert clause.group in {g.key for g in spec.GROUPS}
    if clause.type == "enum":
        assert clause.enum
    if clause.has_value_default and clause.enum:
        assert clause.default in clause.enum


def test_a_clause_without_a_default_is_caught() -> None:
    bare = spec.Clause("x", "integer", "A clause.")
    assert bare.default is spec.UNDECLARED


def test_every_clause_has_a_sample() -> None:
    assert {(g, c.name) for g, c in clauses()} == set(SAMPLES)


# --- the readers accept exactly the spec's clauses, with its defaults ----------------------------


@pytest.mark.parametrize("item", clauses(), ids=ids)
def test_the_reader_reads_each_clause(item: tuple[str, spec.Clause]) -> None:
    """The sample is accepted, and changes what is read (the reader does not ignore it)."""
    group, clause = item
    value, extra = SAMPLES[(group, clause.name)]
    given = document(group, clause.name, value, extra)
    with_sample = parse_config(given)
    if (group, clause.name) in NO_EFFECT:
        return
    if (group, clause.name) in PROTOCOL_SWITCHES:
        other = document(group, clause.name, clause.default, {})
    elif clause.has_value_default:
        other = document(group, clause.name, clause.default, extra)
    elif clause.required_with_protocol:
        other = document(group, clause.name, ALTERNATES[(group, clause.name)], extra)
    elif (group, clause.name) in INSTEAD:
        key, value = INSTEAD[(group, clause.name)]
        other = document(group, key, value, extra)
    elif clause.required:
        other = document(group, clause.name, BASES[group][clause.name], extra)
    elif any(clause.name in names for names in spec_group(group).exactly_one):
        other = BASES["file"] if group == "endpoint" else {"shovels": {"orders": DYNAMIC}}
    else:
        other = _without(given, group, clause.name)
    assert parse_config(other) != with_sample


def spec_group(key: str) -> spec.Group:
    return next(g for g in spec.GROUPS if g.key == key)


def _without(doc: dict[str, Any], group: str, name: str) -> dict[str, Any]:
    """``doc`` with ``name`` of ``group`` removed."""
    if group == "file":
        return {k: v for k, v in doc.items() if k != name}
    if group == "cluster":
        return {**doc, "cluster": {k: v for k, v in doc["cluster"].items() if k != name}}
    shovel = doc["shovels"]["orders"]
    if group == "endpoint":
        side = _endpoint_side(name)
        shovel = {**shovel, side: {k: v for k, v in shovel[side].items() if k != name}}
    elif group in ("publish_fields", "undeliverable"):
        shovel = {**shovel, group: {}}
    else:
        shovel = {k: v for k, v in shovel.items() if k != name}
    return {"shovels": {"orders": shovel}}


@pytest.mark.parametrize("item", [i for i in clauses() if i[1].has_value_default], ids=ids)
def test_the_spec_default_is_what_leaving_the_clause_out_reads(
        item: tuple[str, spec.Clause]) -> None:
    group, clause = item
    _, extra = SAMPLES[(group, clause.name)]
    if (group, clause.name) in PROTOCOL_SWITCHES:
        extra = {}
    given = document(group, clause.name, clause.default, extra)
    assert parse_config(given) == parse_config(_without(given, group, clause.name))


@pytest.mark.parametrize("item", [i for i in clauses() if i[1].dynamic], ids=ids)
def test_each_clause_reads_alike_under_its_dynamic_and_legacy_names(
        item: tuple[str, spec.Clause]) -> None:
    _, clause = item
    value, _ = SAMPLES[("shovel", clause.name)]
    if clause.dynamic_enum:
        value = value.replace("_", "-")
    assert clause.dynamic is not None
    extra = DYNAMIC_EXTRAS.get(clause.name, {})
    current = parse_config(document("dynamic", clause.dynamic, value, extra))
    if clause.legacy is not None:
        assert parse_config(document("dynamic", clause.legacy, value, extra)) == current
    if clause.has_value_default:
        default = clause.dynamic_default() if clause.dynamic_enum else clause.default
        assert parse_config(document("dynamic", clause.dynamic, default, extra)) != current
        assert parse_config(document("dynamic", clause.dynamic, default, extra)) == parse_config(
            {"shovels": {"orders": patched(DYNAMIC, "src-uri", DYNAMIC["src-uri"], extra)}})


@pytest.mark.parametrize("group", [g for g in spec.GROUPS], ids=lambda g: g.key)
def test_a_key_outside_the_spec_is_refused(group: spec.Group) -> None:
    first = group.clauses[0]
    doc = document(group.key, first.name + "s", 1, {})
    with pytest.raises(ConfigError, match=r"unknown|not a publish field"):
        parse_config(doc)


def model_fields(obj: Any, prefix: str = "") -> dict[str, Any]:
    """The model's values by field path, nested dataclasses flattened."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value) and f.name != "coordination_uri":
            out.update(model_fields(value, f"{prefix}{f.name}."))
        else:
            out[prefix + f.name] = value
    return out


def test_every_field_of_the_model_is_set_by_a_clause_of_the_spec() -> None:
    """A field the readers fill from a key the spec lacks is caught here: no sample moves it."""
    base_shovel = model_fields(parse_config({"shovels": {"orders": STATIC}}).shovels["orders"])
    base_cluster = model_fields(parse_config(document("file", "cluster", {"name": "g"}, {})).cluster)
    moved: set[str] = set()
    for (group, name), (value, extra) in SAMPLES.items():
        config = parse_config(document(group, name, value, extra))
        if config.cluster is not None:
            fields = model_fields(config.cluster)
            moved |= {f"cluster.{k}" for k, v in fields.items() if base_cluster[k] != v}
        if "orders" not in config.shovels:
            continue
        shovel = config.shovels["orders"]
        changed = {k for k, v in model_fields(shovel).items()
                   if k not in base_shovel or base_shovel[k] != v}
        moved |= changed | {k.split(".")[0] for k in changed}  # internal_owner: None to a value
    expected = {f for f in model_fields(parse_config({"shovels": {"orders": STATIC}})
                                        .shovels["orders"]) if f not in ("name", "warnings")}
    expected |= {f"cluster.{f.name}" for f in dataclasses.fields(ClusterConfig)}
    expected -= {"source.stream", "source.super_stream"}  # destinations'

    assert expected - moved == set()
    assert {f.name for f in dataclasses.fields(ShovelConfig)} >= {"undeliverable"}
    assert {f.name for f in dataclasses.fields(UndeliverablePolicy)} == set(
        spec.UNDELIVERABLE.names())


def test_the_plugins_vocabulary_is_in_the_spec() -> None:
    static = set(spec.SHOVEL.names())
    assert set(vocabulary.STATIC_CLAUSES) | set(vocabulary.STATIC_EXTRAS) <= static
    dynamic = set(spec.dynamic_names())
    assert set(vocabulary.DYNAMIC_KEYS) | set(vocabulary.LEGACY_DYNAMIC_KEYS) <= dynamic
    assert set(vocabulary.AMQP10_KEYS) <= dynamic
    assert set(spec.side_keys("source", "amqp091", dynamic=True)) == set(
        vocabulary.AMQP091_SOURCE_KEYS) | set(vocabulary.PUMPD_AMQP091_SOURCE_KEYS)
    assert set(spec.side_keys("destination", "amqp091", dynamic=True)) == set(vocabulary.AMQP091_DEST_KEYS)
    assert set(spec.side_keys("source", "amqp10", dynamic=True)) == set(vocabulary.AMQP10_SOURCE_KEYS)
    assert set(spec.side_keys("destination", "amqp10", dynamic=True)) == set(vocabulary.AMQP10_DEST_KEYS)
    assert spec.DYNAMIC["src-protocol"].enum == vocabulary.PROTOCOLS
    assert spec.ENDPOINT["protocol"].enum == spec.DYNAMIC["dest-protocol"].enum == \
        (*vocabulary.PROTOCOLS, vocabulary.STREAM_PROTOCOL)
    assert set(spec.PUBLISH_FIELDS.names()) == set(vocabulary.PUBLISH_FIELDS)
    assert spec.INTERNAL_OWNER.names() == vocabulary.INTERNAL_OWNER_FIELDS
    for legacy, current in vocabulary.LEGACY_DYNAMIC_KEYS.items():
        assert any(c.legacy == legacy and c.dynamic == current for c in spec.SHOVEL)


# --- the example configs of the repository -------------------------------------------------------


def documented_examples() -> list[tuple[str, Any]]:
    """The JSON blocks of the README and the docs that are configuration files (``{...}``
    stands for the shovels)."""
    out = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]:
        text = path.read_text()
        for i, block in enumerate(re.findall(r"```json\n(.*?)```", text, re.S)):
            block = block.replace('"shovels": {...}', '"shovels": {}')
            try:
                doc = json.loads(block)
            except json.JSONDecodeError:
                continue
            if isinstance(doc, dict) and "shovels" in doc:
                out.append((f"{path.relative_to(ROOT)}[{i}]", doc))
    return out


def example_configs() -> list[tuple[str, Any]]:
    examples = [("contrib/pumpd.json", json.loads((ROOT / "contrib/pumpd.json").read_text()))]
    examples += documented_examples()
    for name in ("plugin_docs_example.config", "advanced.config"):
        examples.append((f"tests/data/{name}", import_erlang_config(
            (DATA / name).read_text(), source=name)))
    examples.append(("tests/data/definitions.json", import_definitions(
        json.loads((DATA / "definitions.json").read_text()), source="definitions.json")))
    return examples


def test_the_examples_are_found() -> None:
    names = [name for name, _ in example_configs()]
    assert len([n for n in names if n.endswith("]")]) >= 4, names


def keys_of(doc: dict[str, Any]) -> set[tuple[str, str]]:
    """Every (group, key) a configuration file uses."""
    out = {("file", k) for k in doc}
    for k in doc.get("cluster", {}):
        out.add(("cluster", k))
    for shovel in doc["shovels"].values():
        dynamic = "src-uri" in shovel
        for k, v in shovel.items():
            out.add(("dynamic" if dynamic else "shovel", k))
            if k in ("sources", "destinations"):
                out |= {("endpoint", e) for e in v}
            elif k in ("publish_fields", "undeliverable", "internal_owner") and isinstance(v, dict):
                out |= {(k, e) for e in v}
    return out


def spec_keys() -> set[tuple[str, str]]:
    out = {(g.key, c.name) for g in spec.GROUPS for c in g}
    out |= {("dynamic", n) for n in spec.dynamic_names()}
    return out


@pytest.mark.parametrize("example", example_configs(), ids=lambda e: e[0])
def test_every_key_of_an_example_is_in_the_spec(example: tuple[str, Any]) -> None:
    _, doc = example
    parse_config(doc)
    assert keys_of(doc) - spec_keys() == set()


def test_every_key_the_state_file_writes_is_in_the_spec() -> None:
    full = {**STATIC, "delete_after_duration": 60, "consumer_args": {"x-priority": 1},
            "consumer_name": "t", "own_process": True, "publish_fields": {"mandatory": False}}
    written = shovel_to_json(parse_config({"shovels": {"orders": full}}).shovels["orders"])
    assert keys_of({"shovels": {"orders": written}}) - spec_keys() == set()


# --- the JSON Schema -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def validator() -> jsonschema.protocols.Validator:
    schema = spec.json_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)
    json.dumps(schema)  # plain JSON, for `pumpd schema`
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize("example", example_configs(), ids=lambda e: e[0])
def test_the_schema_accepts_the_examples(validator: jsonschema.protocols.Validator,
                                         example: tuple[str, Any]) -> None:
    validator.validate(example[1])


@pytest.mark.parametrize("key", sorted(SAMPLES), ids=lambda k: ".".join(k))
def test_the_schema_accepts_every_sample(validator: jsonschema.protocols.Validator,
                                         key: tuple[str, str]) -> None:
    value, extra = SAMPLES[key]
    doc = document(*key, value, extra)
    parse_config(doc)
    validator.validate(doc)


@pytest.mark.parametrize("item", [i for i in clauses() if i[1].has_value_default], ids=ids)
def test_the_schema_accepts_every_default(validator: jsonschema.protocols.Validator,
                                          item: tuple[str, spec.Clause]) -> None:
    group, clause = item
    extra = {} if (group, clause.name) in PROTOCOL_SWITCHES else SAMPLES[(group, clause.name)][1]
    doc = document(group, clause.name, clause.default, extra)
    validator.validate(doc)
    if clause.dynamic:
        default = clause.dynamic_default() if clause.dynamic_enum else clause.default
        validator.validate(document("dynamic", clause.dynamic, default,
                                    DYNAMIC_EXTRAS.get(clause.name, {})))


BAD: list[tuple[str, dict[str, Any]]] = [
    ("unknown clause", {"shovels": {"o": {**STATIC, "prefetch": 1}}}),
    ("unknown top-level key", {"shovels": {}, "shovel": {}}),
    ("missing queue", {"shovels": {"o": {k: v for k, v in STATIC.items() if k != "queue"}}}),
    ("prefetch past its bound", {"shovels": {"o": {**STATIC, "prefetch_count": 65536}}}),
    ("workers 0", {"shovels": {"o": {**STATIC, "workers": 0}}}),
    ("ack mode misspelt", {"shovels": {"o": {**STATIC, "ack_mode": "always"}}}),
    ("dynamic ack mode in the static spelling",
     {"shovels": {"o": {**DYNAMIC, "ack-mode": "on_confirm"}}}),
    ("both forms", {"shovels": {"o": {**STATIC, "src-uri": "amqp://x"}}}),
    ("broker and brokers", {"shovels": {"o": {**STATIC, "sources": {
        "broker": "amqp://a", "brokers": ["amqp://b"]}}}}),
    ("no broker", {"shovels": {"o": {**STATIC, "sources": {}}}}),
    ("not an AMQP URI", {"shovels": {"o": {**STATIC, "sources": {"broker": "http://a"}}}}),
    ("unknown declaration", {"shovels": {"o": {**STATIC, "sources": {
        "broker": "amqp://a", "declarations": ["queue.declares"]}}}}),
    ("exchange.declare without its exchange", {"shovels": {"o": {**STATIC, "sources": {
        "broker": "amqp://a", "declarations": ["exchange.declare"]}}}}),
    ("delivery mode 3", {"shovels": {"o": {**STATIC, "publish_properties": {"delivery_mode": 3}}}}),
    ("undeliverable drop", {"shovels": {"o": {**STATIC, "undeliverable": "drop"}}}),
    ("empty park queue", {"shovels": {"o": {**STATIC, "undeliverable": {"park_queue": ""}}}}),
    ("src-queue and src-exchange", {"shovels": {"o": {**DYNAMIC, "src-exchange": "x"}}}),
    ("dest-queue and dest-exchange", {"shovels": {"o": {**DYNAMIC, "dest-queue": "q",
                                                        "dest-exchange": "x"}}}),
    ("legacy and current name", {"shovels": {"o": {**DYNAMIC, "prefetch-count": 1,
                                                   "src-prefetch-count": 2}}}),
    ("amqp10 protocol", {"shovels": {"o": {**DYNAMIC, "src-protocol": "amqp10"}}}),
    ("owner without its vhost", {"shovels": {"o": {**DYNAMIC, "internal_owner": {
        "name": "q", "kind": "queue"}}}}),
    ("a group's name with a dot", {"shovels": {}, "cluster": {"name": "eu.1"}}),
    ("a group without a name", {"shovels": {}, "cluster": {"lease_retry": 1}}),
    ("lease retry under its bound", {"shovels": {}, "cluster": {"name": "g", "lease_retry": 0.05}}),
    ("settle past its bound", {"shovels": {}, "cluster": {"name": "g", "settle": 3601}}),
    ("delete_after_duration 0", {"shovels": {"o": {**STATIC, "delete_after_duration": 0}}}),
    ("shovels_per_process 0", {"shovels": {}, "shovels_per_process": 0}),
]


@pytest.mark.parametrize("bad", BAD, ids=lambda b: b[0])
def test_the_schema_refuses_what_the_validator_refuses(validator: jsonschema.protocols.Validator,
                                                       bad: tuple[str, dict[str, Any]]) -> None:
    with pytest.raises(ConfigError):
        parse_config(bad[1])
    assert not validator.is_valid(bad[1])


def test_the_schema_carries_each_clauses_doc_and_default() -> None:
    props = spec.json_schema()["$defs"]["static_shovel"]["properties"]
    assert props["prefetch_count"]["default"] == 1000
    assert props["prefetch_count"]["maximum"] == 65535
    assert props["prefetch_count"]["description"] == spec.SHOVEL["prefetch_count"].doc
    dynamic = spec.json_schema()["$defs"]["dynamic_shovel"]["properties"]
    assert dynamic["ack-mode"]["enum"] == ["on-confirm", "on-publish", "no-ack"]
    assert dynamic["prefetch-count"]["default"] == 1000


# --- the reference page --------------------------------------------------------------------------


def test_the_reference_page_has_every_clause_with_its_doc_default_and_names() -> None:
    page = spec.reference_markdown()
    for group in spec.GROUPS:
        assert f"## {group.title}\n" in page
        part = page.split(f"## {group.title}\n", 1)[1].split("\n## ", 1)[0]
        for clause in group:
            section = part.split(f"### `{clause.name}`\n", 1)[1].split("\n### ", 1)[0]
            assert clause.doc in section
            assert "- Default: " in section and "- Since: 0.1.0" in section
            if clause.dynamic and clause.dynamic != clause.name:
                assert f"`{clause.dynamic}`" in section
            if clause.legacy:
                assert f"`{clause.legacy}`" in section
    assert "- Default: `1000`" in page
    assert "- Default: `5`" in page  # reconnect_delay, as a user writes it
    assert "- Bound: 0 to 65535 messages" in page


def test_the_command_lines_options_name_their_clauses() -> None:
    assert spec.cli_clause("--workers") is spec.SHOVEL["workers"]
    assert spec.cli_clause("--shovels-per-process") is spec.FILE["shovels_per_process"]
    assert spec.cli_clause("--group") is spec.CLUSTER["name"]
    assert spec.cli_clause("--cluster") is spec.CLUSTER["name"]
    with pytest.raises(KeyError):
        spec.cli_clause("--http")


def test_the_reference_pages_links_reach_a_heading() -> None:
    page = spec.reference_markdown()
    anchors = {spec._anchor(title) for title in re.findall(r"^## (.*)$", page, re.M)}
    for target in re.findall(r"\]\(#([^)]*)\)", page):
        assert target in anchors


def test_no_two_shovels_share_a_default_container() -> None:
    config = parse_config({"shovels": {"a": STATIC, "b": STATIC, "c": DYNAMIC}})
    a, b, c = (config.shovels[n] for n in "abc")
    assert a.consumer_arguments == b.consumer_arguments == {}
    assert a.consumer_arguments is not b.consumer_arguments
    assert b.consumer_arguments is not c.consumer_arguments
    assert spec.SHOVEL["consumer_args"].default == {}
