"""``pumpd plan-migration`` packs many queues into shared processes, and its option overrides
the packing."""

from __future__ import annotations

from typing import Any

from pumpd.config.parse import parse_config
from pumpd.importers.migration_plan import plan_migration


def test_many_queues_share_processes_and_the_option_overrides() -> None:
    def queues(n: int) -> list[dict[str, Any]]:
        return [{"name": f"q{i:04d}", "durable": True, "type": "classic", "arguments": {}}
                for i in range(n)]

    uri = "amqp://guest:guest@127.0.0.1/v"
    few = plan_migration(queues(24), source=uri, destination=uri + "2").document
    assert "shovels_per_process" not in few
    assert plan_migration(queues(25), source=uri, destination=uri + "2"
                          ).document["shovels_per_process"] == 25
    # at most 16 processes
    many = plan_migration(queues(1000), source=uri, destination=uri + "2").document
    assert many["shovels_per_process"] == 63
    assert parse_config(many).shovels_per_process == 63  # what pumpd check reads
    assert plan_migration(queues(3), source=uri, destination=uri + "2", shovels_per_process=2
                          ).document["shovels_per_process"] == 2
    # names stay unique and usable as shovel names
    odd = [{"name": "a\tb", "durable": True}, {"name": "a_b", "durable": True}]
    names = list(plan_migration(odd, source=uri, destination=uri + "2").document["shovels"])
    assert sorted(names) == ["a_b", "a_b~2"]

