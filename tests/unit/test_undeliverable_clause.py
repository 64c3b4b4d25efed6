"""The ``undeliverable`` clause: its validation, the policies each ack mode allows, and its
round trip through the dynamic form."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.harness import shovel


def test_unroutable_park_needs_mandatory() -> None:
    from pumpd.config.parse import ConfigError
    with pytest.raises(ConfigError, match="mandatory"):
        shovel(sources={"broker": "amqp://"}, destinations={"broker": "amqp://"}, queue="q",
               publish_fields={"mandatory": False}, undeliverable={"unroutable": "park"})


@pytest.mark.parametrize("clause, message", [
    ({"policy": "bounce"}, "must be one of park, dead-letter, stop"),
    ({"unroutable": "dead-letter"}, "must be one of drop, park, stop"),
    ({"park_queue": ""}, "must name a queue"),
    ({"parkqueue": "x"}, "did you mean 'park_queue'"),
    (7, "must be an object"),
])
def test_undeliverable_clause_is_validated(clause: Any, message: str) -> None:
    from pumpd.config.parse import ConfigError
    with pytest.raises(ConfigError, match=message):
        shovel(sources={"broker": "amqp://"}, destinations={"broker": "amqp://"}, queue="q",
               undeliverable=clause)


def test_no_ack_allows_only_park() -> None:
    from pumpd.config.parse import ConfigError
    with pytest.raises(ConfigError, match="no_ack"):
        shovel(sources={"broker": "amqp://"}, destinations={"broker": "amqp://"}, queue="q",
               ack_mode="no_ack", undeliverable="dead-letter")


def test_undeliverable_clause_in_the_dynamic_form_and_round_trip() -> None:
    from pumpd.config.parse import parse_config, shovel_to_json
    cfg = parse_config({"shovels": {"d": {
        "src-uri": "amqp://", "src-queue": "a", "dest-uri": "amqp://", "dest-queue": "b",
        "undeliverable": {"policy": "stop", "unroutable": "park", "park_queue": "held"}}}})
    u = cfg.shovels["d"].undeliverable
    assert (u.policy.value, u.unroutable.value, u.park_queue) == ("stop", "park", "held")
    again = parse_config({"shovels": {"d": shovel_to_json(cfg.shovels["d"])}}).shovels["d"]
    assert again.undeliverable == u

