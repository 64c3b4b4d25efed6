"""From the command line's options to a running coordinator: every file validated before
anything starts (the configuration, the state file, the token file, TLS), the endpoint secured,
the daemon's options gathered (``pumpd --config FILE``; the parser is the CLI's)."""

from __future__ import annotations

import argparse
import ssl
import sys
from collections.abc import Callable

from .. import exitcodes
from ..config.cluster import group_refusal, with_name
from ..config.parse import ConfigError, load_config
from ..http import access as access_rules
from ..http import tokenfile
from ..http.access import Access
from ..http.control_endpoint import HttpControlEndpoint
from ..http.server import DEFAULT_HOST, DEFAULT_PORT, parse_address
from ..supervisor import confinement, definitions, statefile
from ..supervisor import process_log as daemon_log
from ..supervisor.coordinator import Coordinator, DaemonOptions


def run_daemon(parser: argparse.ArgumentParser, ns: argparse.Namespace) -> int:
    """Validate, secure the endpoint, run the coordinator until it stops; its exit code."""
    try:
        http = parse_address(ns.http if ns.http is not None else f"{DEFAULT_HOST}:{DEFAULT_PORT}")
    except ValueError as exc:
        parser.error(f"--http: {exc}")
    daemon_log.configure(ns.log_format, ns.log_level)

    state_path = str(ns.state_file or statefile.default_path(ns.config))
    # Everything is validated before anything starts: a bad file exits 2 with its error.
    try:
        shovels = definitions.merge(
            definitions.load_file(ns.config, ns.workers),
            definitions.load_runtime(state_path, ns.workers),
            state_path,
        )
        per_process = ns.shovels_per_process or definitions.shovels_per_process(ns.config) or 1
        cluster = with_name(load_config(ns.config).cluster, ns.cluster)
        if cluster is not None:
            # --group on the command line joins shovels the file did not check for a group
            for name, d in shovels.items():
                if (why := group_refusal(d.cfg)) is not None:
                    raise ConfigError(f"shovel {name!r}: {why}")
    except ConfigError as exc:
        print(f"pumpd: {exc}", file=sys.stderr)
        return exitcodes.CONFIG_ERROR
    secured = secure_endpoint(ns, http, state_path)
    if isinstance(secured, str):
        print(f"pumpd: {secured}", file=sys.stderr)
        return exitcodes.CONFIG_ERROR
    access, tls_dirs = secured
    own_files = (state_path, ns.config, access and access.token_file, ns.http_tls_cert,
                 ns.http_tls_key)
    opts = DaemonOptions(
        config_path=ns.config,
        state_path=state_path,
        default_workers=ns.workers,
        drain_timeout=ns.drain_timeout,
        heartbeat_timeout=ns.heartbeat_timeout,
        endpoint=None if http is None else _endpoint(access, http),
        log_format=ns.log_format,
        log_level=ns.log_level,
        shovels_per_process=per_process,
        tls_dirs=tls_dirs,
        protected_files=tuple(f for f in own_files if f),
        cluster=cluster,
    )
    return Coordinator(opts, shovels).run()


def _endpoint(access: Access | None,
              http: tuple[str, int]) -> Callable[[Coordinator], HttpControlEndpoint]:
    # no token: every guarded request is refused
    guard = access or Access(token="")
    return lambda coordinator: HttpControlEndpoint(coordinator, guard, *http)


def secure_endpoint(ns: argparse.Namespace, http: tuple[str, int] | None,
                    state_path: str) -> tuple[Access | None, tuple[str, ...]] | str:
    """The endpoint's access settings (the token file made or read, the TLS context) and the
    resolved --tls-dir directories; or the one-line error that stops the daemon."""
    try:
        tls_dirs = confinement.resolve_dirs(ns.tls_dir)
    except confinement.Refused as exc:
        return str(exc)
    if http is None:
        return None, tls_dirs
    if (ns.http_tls_cert is None) != (ns.http_tls_key is None):
        return "--http-tls-cert and --http-tls-key go together: give both or neither"
    tls = None
    if ns.http_tls_cert is not None:
        try:
            tls = access_rules.server_context(ns.http_tls_cert, ns.http_tls_key)
        except (OSError, ssl.SSLError) as exc:
            return (f"--http-tls-cert {ns.http_tls_cert} / --http-tls-key {ns.http_tls_key}: "
                    f"cannot be used: {getattr(exc, 'strerror', None) or exc}")
    host = http[0]
    if tls is None and not access_rules.is_loopback(host) and not ns.http_insecure_bind:
        return (f"--http {host}:{http[1]} is reachable from other machines: serve it with TLS "
                "(--http-tls-cert and --http-tls-key) or, knowingly, pass --http-insecure-bind")
    token_file = str(ns.http_token_file or tokenfile.default_path(state_path))
    try:
        token = tokenfile.load_or_create(token_file)
    except tokenfile.TokenFileError as exc:
        return str(exc)
    return access_rules.Access(
        token=token, token_file=token_file, open_reads=ns.http_open_reads,
        metrics_open=ns.metrics_open,
        allowed_hosts=frozenset(h.lower() for h in ns.http_allowed_host),
        tls=tls, tls_cert=ns.http_tls_cert, tls_key=ns.http_tls_key), tls_dirs
