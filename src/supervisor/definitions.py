"""What the daemon runs: the configuration file's shovels and the state file's, each with its
effective number of workers.

``--workers N`` is the default for every shovel without its own ``workers`` clause; a shovel's
clause always wins (so ``"workers": 1`` keeps a shovel ordered whatever the command line says).
More than one worker per shovel needs a shared, named, non-exclusive source queue, and no
``delete_after`` (each worker would count its own limit).

A name may be defined in the configuration file or at run time, never both: at start that is a
configuration error; on reload the new file is refused and the running set kept.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ..config.json_input import JsonInputError, read_json
from ..config.limits import MAX_DOCUMENT_BYTES, MAX_POSITIONS, MAX_SHOVELS, MAX_WORKERS
from ..config.model import DeleteAfter, ShovelConfig
from ..config.parse import ConfigError, load_config, located, parse_config, read_config
from ..config.redaction import register_uri_secrets
from . import statefile

Origin = Literal["config", "runtime"]


@dataclass(frozen=True)
class ShovelDefinition:
    """One shovel as the daemon runs it."""

    cfg: ShovelConfig  # with its effective ``workers``
    origin: Origin
    definition: Mapping[str, Any]  # the JSON as written (kept in the state file for runtime)


def _apply_workers(cfg: ShovelConfig, raw: Mapping[str, Any], default_workers: int | None,
                   source: str) -> ShovelConfig:
    """The shovel with its effective worker count, checked.

    :raises ConfigError: when several workers cannot share this shovel's source queue.
    """
    if default_workers is not None and "workers" not in raw:
        if not 1 <= default_workers <= MAX_WORKERS:
            raise ConfigError(f"--workers {default_workers}: at most {MAX_WORKERS}",
                              source=source, shovel=cfg.name, clause="workers")
        cfg = dataclasses.replace(cfg, workers=default_workers)
    if cfg.workers > 1:
        how = "its 'workers' clause" if "workers" in raw else f"--workers {cfg.workers}"
        exclusive = any(d.method == "queue.declare" and d.arguments.get("exclusive")
                        for d in cfg.source.declarations)
        if cfg.queue == "" or exclusive:
            raise ConfigError(f"{how} needs a shared, named, non-exclusive source queue; "
                              "give this shovel \"workers\": 1", source=source, shovel=cfg.name,
                              clause="workers")
        if cfg.delete_after != DeleteAfter.NEVER:
            raise ConfigError(f"{how}: delete_after would be counted by each worker separately; "
                              "give this shovel \"workers\": 1", source=source, shovel=cfg.name,
                              clause="workers")
    return cfg


def load_file(path: str | os.PathLike[str],
              default_workers: int | None) -> dict[str, ShovelDefinition]:
    """The configuration file's shovels, from one read of the file.

    :raises ConfigError: on any error in the file.
    """
    source = os.fspath(path)
    pump_config, document = read_config(path)
    raw = document["shovels"]  # the clauses as given: which ones were, for --workers
    out = {name: ShovelDefinition(_apply_workers(cfg, raw[name], default_workers, source),
                                  "config", raw[name])
           for name, cfg in pump_config.shovels.items()}
    check_totals(out, source)
    return out


def check_totals(shovels: Mapping[str, ShovelDefinition], source: str) -> None:
    """The daemon's totals, with --workers applied: shovels, and worker positions.

    :raises ConfigError: naming the bound that is passed.
    """
    if len(shovels) > MAX_SHOVELS:
        raise ConfigError(f"at most {MAX_SHOVELS} shovels in one daemon, got {len(shovels)}",
                          source=source)
    positions = sum(d.cfg.workers for d in shovels.values())
    if positions > MAX_POSITIONS:
        raise ConfigError(f"at most {MAX_POSITIONS} workers in one daemon (the sum of every "
                          f"shovel's workers), got {positions}", source=source)


def shovels_per_process(path: str | os.PathLike[str]) -> int | None:
    """The file's ``shovels_per_process`` (None when absent).

    :raises ConfigError: on any error in the file.
    """
    return load_config(path).shovels_per_process


def parse_runtime(name: str, definition: object, default_workers: int | None,
                  source: str) -> ShovelDefinition:
    """One run-time shovel (a PUT body, or an entry of the state file).

    :raises ConfigError: when the definition is not valid.
    """
    cfg = parse_config({"shovels": {name: definition}}, source=source).shovels[name]
    assert isinstance(definition, dict)  # parse_config has checked it
    return ShovelDefinition(_apply_workers(cfg, definition, default_workers, source), "runtime",
                            definition)


class BodyNotJson(ConfigError):
    """A PUT body that is not JSON at all."""


def parse_put_body(name: str, body: bytes, default_workers: int | None) -> ShovelDefinition:
    """A run-time shovel from the body of ``PUT /api/shovels/NAME``: the definition itself, or
    the management API's parameter form ``{"value": {...definition...}}``.

    :raises BodyNotJson: when the body is not JSON.
    :raises ConfigError: when the JSON reader refuses it (:mod:`pumpd.config.json_input`: a
        key given twice, an integer past 64 bits, ...), as the configuration file's would be,
        or it is not a valid definition.
    """
    source = f"PUT /api/shovels/{name}"
    register_uri_secrets(body.decode("utf-8", "replace"))  # before an error can quote the body
    try:
        definition = read_json(body, max_bytes=MAX_DOCUMENT_BYTES)
    except JsonInputError as exc:
        if exc.line is not None:
            raise BodyNotJson(f"the body is not valid JSON: {exc}", source=source) from None
        raise located(exc, source, name) from None
    if isinstance(definition, dict) and set(definition) <= {"value", "component", "vhost",
                                                             "name"} and "value" in definition:
        definition = definition["value"]
    return parse_runtime(name, definition, default_workers, source)


def load_runtime(path: str | os.PathLike[str],
                 default_workers: int | None) -> dict[str, ShovelDefinition]:
    """The state file's shovels.

    :raises ConfigError: when the state file cannot be read or holds an invalid definition.
    """
    try:
        raw = statefile.load(path)
    except statefile.StateFileError as exc:
        raise ConfigError(str(exc), source=os.fspath(path)) from None
    return {name: parse_runtime(name, definition, default_workers, os.fspath(path))
            for name, definition in raw.items()}


def merge(file_shovels: Mapping[str, ShovelDefinition],
          runtime: Mapping[str, ShovelDefinition], state_path: str) -> dict[str, ShovelDefinition]:
    """Both sets together, the file's first.

    :raises ConfigError: when a name is in both.
    """
    both = sorted(set(file_shovels) & set(runtime))
    if both:
        raise ConfigError("defined both in the configuration file and at run time (in the state "
                          "file); remove it from one of the two",
                          source=os.fspath(state_path), shovel=both[0])
    merged = {**file_shovels, **runtime}
    check_totals(merged, os.fspath(state_path))
    return merged
