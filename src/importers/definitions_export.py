"""``pumpd import-definitions``: the dynamic shovels of a ``rabbitmqctl export_definitions`` file.

The parameters with component ``shovel`` are kept in RabbitMQ's flat names (``src-uri``,
``dest-exchange``, ...), which pumpd's configuration reads as they are, under their
dynamic-shovel names.
"""

from __future__ import annotations

from typing import NoReturn
from urllib.parse import quote

from ..config.redaction import uri_authority
from ..config.vocabulary import LEGACY_DYNAMIC_KEYS, PROTOCOLS
from .import_errors import JSON, ConfigImportError

__all__ = ["explicit_local_uri", "import_definitions"]

def explicit_local_uri(uri: str) -> str:
    """Spell out the virtual host of a host-less ``amqp://`` URI that leaves it out.

    What the plugin does (rabbitmq-server, deps/rabbitmq_shovel): the dynamic shovel's URIs go
    unchanged from rabbit_shovel_parameters (get_uris/2) to the worker, which connects with
    ``amqp_uri:parse(URI)`` -- in rabbit_amqp091_shovel:do_make_conn_and_chan/2, and in
    rabbit_local_shovel for the 4.x local protocol. ``amqp_uri:parse/1`` is
    ``parse(URI, <<"/">>)``: a URI without a path gets the vhost ``/``, and without a host it
    becomes a direct connection (#amqp_params_direct{virtual_host = <<"/">>}). The shovel's own
    vhost is not used for the URI (it only names the shovel, and appears in its forward
    headers), so a host-less ``amqp://`` of a shovel in vhost ``other`` still reaches the local
    broker's vhost ``/``. Hence ``amqp://`` -> ``amqp:///%2F``; a URI that states a path
    (``amqp:///other``, or ``amqp:///`` for the empty vhost) is left as it is, and so is every
    URI with a host.
    """
    scheme, sep, rest = uri.partition("://")
    if not sep or scheme.lower() != "amqp":
        return uri
    authority = uri_authority(rest)
    end = len(authority)
    if rest[end : end + 1] == "/" or authority.rpartition("@")[2]:
        return uri  # the vhost is stated, or there is a host (or a port): not ours to change
    return f"{scheme}://{authority}/{quote('/', safe='')}{rest[end:]}"


def _dynamic_value(value: dict[str, JSON]) -> dict[str, JSON]:
    """The rewrites of :func:`import_definitions`, on an AMQP 0-9-1 side only: an AMQP 1.0
    side has no legacy names (the plugin refuses them there, and so does pumpd's check, by
    name) and no host-less URI."""
    amqp091 = {side: value.get(f"{side}-protocol", PROTOCOLS[0]) == PROTOCOLS[0]
               for side in ("src", "dest")}
    out: dict[str, JSON] = {}
    for key, sub in value.items():
        current = LEGACY_DYNAMIC_KEYS.get(key)
        if current is not None and amqp091[current.partition("-")[0]]:
            if current in value:
                continue  # the current name is set too and takes precedence
            key = current
        if key in ("src-uri", "dest-uri") and amqp091[key.partition("-")[0]]:
            if isinstance(sub, str):
                sub = explicit_local_uri(sub)
            elif isinstance(sub, list):
                sub = [explicit_local_uri(u) if isinstance(u, str) else u for u in sub]
        out[key] = sub
    return out


def import_definitions(obj: dict[str, JSON], *, source: str) -> dict[str, JSON]:
    """Extract the dynamic shovels of a ``rabbitmqctl export_definitions`` document.

    Shovels are the entries of ``"parameters"`` whose ``"component"`` is ``"shovel"``; other
    parameters (federation upstreams, ...) and every other section are ignored. Each shovel's
    ``"value"`` keeps RabbitMQ's flat names (``src-uri``, ``dest-exchange``, ...), which pumpd
    accepts as they are (an AMQP 1.0 side's too), with two rewrites of an AMQP 0-9-1 side that
    keep its meaning:

    - the pre-3.7 names ``prefetch-count``, ``delete-after``, ``add-forward-headers``,
      ``add-timestamp-header`` and ``publish-properties`` become ``src-prefetch-count``,
      ``src-delete-after``, ``dest-add-forward-headers``, ``dest-add-timestamp-header`` and
      ``dest-publish-properties`` (dropped if the current name is also set: it takes precedence
      in the plugin);
    - a host-less ``amqp://`` without a vhost becomes ``amqp:///%2F``: the plugin connects such
      a URI to the local broker's vhost ``/`` whatever the shovel's own vhost (see
      :func:`explicit_local_uri`).

    Naming: shovel names are unique per vhost only. A shovel is named ``NAME`` when no other
    vhost has a shovel of that name, and ``VHOST:NAME`` when several do.

    :param obj: the parsed JSON document.
    :param source: the file's name, for error messages.
    :returns: ``{"shovels": {name: value, ...}}``.
    :raises ConfigImportError: no shovel found, a malformed shovel parameter, or a clash of
        names that the ``VHOST:NAME`` scheme cannot resolve.
    """

    found = _shovel_parameters(obj, source)
    vhosts_per_name: dict[str, int] = {}
    for _, name, _ in found:
        vhosts_per_name[name] = vhosts_per_name.get(name, 0) + 1
    shovels: dict[str, JSON] = {}
    for vhost, name, value in found:
        key = name if vhosts_per_name[name] == 1 else f"{vhost}:{name}"
        if key in shovels:
            _fail(
                source,
                f"shovel {name!r} in vhost {vhost!r} would be named {key!r}, which another "
                "shovel already has",
            )
        shovels[key] = _dynamic_value(value)
    return {"shovels": shovels}


def _shovel_parameters(obj: dict[str, JSON], source: str) -> list[tuple[str, str, dict[str, JSON]]]:
    """The (vhost, name, value) of every shovel parameter, in file order.

    :raises ConfigImportError: no shovel found, or a malformed or repeated shovel parameter.
    """
    if not isinstance(obj, dict):
        _fail(source, "expected a JSON object (the output of rabbitmqctl export_definitions)")
    parameters = obj.get("parameters", [])
    if not isinstance(parameters, list):
        _fail(source, '"parameters" is not a list')
    found: list[tuple[str, str, dict[str, JSON]]] = []
    seen: set[tuple[str, str]] = set()
    for index, param in enumerate(parameters):
        if not isinstance(param, dict) or param.get("component") != "shovel":
            continue
        name, vhost, value = param.get("name"), param.get("vhost"), param.get("value")
        if not isinstance(name, str) or not name:
            _fail(source, f"parameters[{index}]: a shovel parameter without a name")
        if not isinstance(vhost, str):
            _fail(source, f"shovel {name!r}: the parameter has no vhost")
        if not isinstance(value, dict):
            _fail(source, f'shovel {name!r} in vhost {vhost!r}: "value" is not an object')
        if (vhost, name) in seen:
            _fail(source, f"shovel {name!r} in vhost {vhost!r} appears twice")
        seen.add((vhost, name))
        found.append((vhost, name, value))
    if not found:
        _fail(source, 'no shovels found: no entry of "parameters" has "component": "shovel"')
    return found


def _fail(source: str, reason: str) -> NoReturn:
    raise ConfigImportError(reason, source=source)
