"""The data plane implementation pumpd runs on: the native extension when it is built, the
pure-Python reference otherwise (with a warning, and ``IMPLEMENTATION`` says which).

``PUMPD_IMPLEMENTATION=reference`` forces the reference, e.g. to compare the two.
"""

from __future__ import annotations

import os
import warnings
from typing import TYPE_CHECKING

from . import confirms, publish_ref, relay_ref

if TYPE_CHECKING:
    ConfirmWindow = confirms.ConfirmWindow
    Relay = relay_ref.Relay
    PublishPlane = publish_ref.PublishPlane
    IMPLEMENTATION: str
else:
    if os.environ.get("PUMPD_IMPLEMENTATION", "native") == "reference":
        ConfirmWindow, Relay, IMPLEMENTATION = confirms.ConfirmWindow, relay_ref.Relay, "reference"
        PublishPlane = publish_ref.PublishPlane
    else:
        try:
            from .._fastpath import ConfirmWindow, PublishPlane, Relay

            IMPLEMENTATION = "native"
        except ImportError as exc:
            warnings.warn(
                f"pumpd's native extension is not built ({exc}); running on the slower "
                "pure-Python reference. Build it with `pip install -e .` or `make build`.",
                RuntimeWarning,
                stacklevel=2,
            )
            ConfirmWindow, Relay, IMPLEMENTATION = (
                confirms.ConfirmWindow,
                relay_ref.Relay,
                "reference",
            )
            PublishPlane = publish_ref.PublishPlane

__all__ = ["IMPLEMENTATION", "ConfirmWindow", "PublishPlane", "Relay"]
