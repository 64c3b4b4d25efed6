"""The two implementations of the data plane, for tests parametrised over both.

The native one must be built (``pip install -e .``) — a missing extension fails its tests rather
than skipping them, unless PUMPD_ALLOW_NO_EXT=1 (for working on the reference alone).
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any

import pytest
from pumpd.dataplane import confirm_window_ref, relay_ref

IMPLEMENTATIONS = ["reference", "native"]


def native() -> ModuleType:
    try:
        from pumpd import _fastpath
    except ImportError as exc:
        if os.environ.get("PUMPD_ALLOW_NO_EXT") == "1":
            pytest.skip(f"native extension not built: {exc}")
        raise
    return _fastpath


def confirm_window_class(impl: str) -> Any:
    return confirm_window_ref.ConfirmWindow if impl == "reference" else native().ConfirmWindow


def relay_class(impl: str) -> Any:
    return relay_ref.Relay if impl == "reference" else native().Relay


def delivery_reader_class(impl: str) -> Any:
    from pumpd.dataplane import delivery_reader_ref

    return delivery_reader_ref.DeliveryReader if impl == "reference" else native().DeliveryReader
