"""The even-spread rule gives the same answer in every process (string hashing is salted per
process; the rule must not depend on it)."""

from __future__ import annotations

import os
import subprocess
import sys

from pumpd.group.spread import PositionKey, assign


def shovels(n: int, workers: int = 1) -> list[PositionKey]:
    return [PositionKey(f"shovel-{i}", w) for i in range(n) for w in range(workers)]


def test_the_rule_is_the_same_in_every_process() -> None:
    # Python's own hash() is salted per process; the rule must not be. Two interpreters with
    # different hash seeds give the same assignment, and the same as this one.
    script = ("from pumpd.group.spread import PositionKey, assign\n"
              "ms = [f'member-{i}' for i in range(3)]\n"
              "ps = [PositionKey(f'shovel-{i}', w) for i in range(30) for w in range(2)]\n"
              "a = assign(ms, ps)\n"
              "print(sorted((p.shovel, p.worker, m) for p, m in a.items()))\n")
    outputs = set()
    for seed in ("1", "2", "random"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        outputs.add(subprocess.run([sys.executable, "-c", script], env=env, check=True,
                                   capture_output=True, text=True).stdout)
    assert len(outputs) == 1
    here = assign([f"member-{i}" for i in range(3)], shovels(30, 2))
    assert outputs.pop().strip() == str(sorted((p.shovel, p.worker, m) for p, m in here.items()))

