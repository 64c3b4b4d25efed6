"""The Spark data source's options are bounded and total: parsed without Spark."""

from __future__ import annotations

from typing import Any

import pytest
from pumpd.spark.write.write_options import parse_options

URI = "amqp://guest:guest@127.0.0.1:5672/%2F"


@pytest.mark.parametrize("options,fragment", [
    ({"declarations": "[" * 100_000 + "]" * 100_000},
     "pumpd option declarations: "),
    ({"declarations": '[{"queue.declare": {"queue": "q", "arguments": '
                      + '{"a":' * 33 + "1" + "}" * 33 + "}}]"},
     "tables and arrays nested more than 32 deep"),
    ({"declarations": '[{"queue.declare": {"queue": "q", "arguments": '
                      + '{"a":' * 2000 + "1" + "}" * 2000 + "}}]"}, "pumpd option declarations: "),
    ({"declarations": "[" + ",".join(['"queue.declare"'] * 257) + "]"},
     "at most 256 declarations, got 257"),
    ({"declarations": [[[[[]]]]]}, "pumpd option declarations: "),
    ({"maxInFlight": "9" * 5000}, "pumpd option maxInFlight: expected an integer"),
    ({"maxInFlight": "1000001"}, "must be from 1 to 1000000, got 1000001"),
    ({"confirmTimeoutMs": "86400001"}, "must be from 1 to 86400000"),
    ({"confirmTimeoutMs": "0"}, "must be from 1 to 86400000, got 0"),
])
def test_bad_options_are_one_value_error(options: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_options({"uri": URI, **options})
    assert fragment in str(info.value)
    assert "\n" not in str(info.value) and len(str(info.value)) < 400


def test_a_deep_python_value_is_a_value_error_too() -> None:
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(ValueError, match="pumpd option declarations: not JSON"):
        parse_options({"uri": URI, "declarations": deep})


def test_the_bounds_are_accepted() -> None:
    opts = parse_options({"uri": URI, "maxInFlight": "1000000", "confirmTimeoutMs": "86400000",
                          "declarations": "[" + ",".join(['"queue.declare"'] * 256) + "]"})
    assert (opts.max_in_flight, opts.confirm_timeout, len(opts.declarations)) == (
        1_000_000, 86_400.0, 256)
