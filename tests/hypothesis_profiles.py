"""Hypothesis profiles, chosen with HYPOTHESIS_PROFILE: ``default`` (100 examples per property,
every run) and ``thorough`` (10,000, for a run by hand). No deadline in either: two cores shared
with brokers make a per-example time limit a source of flaky failures, not of findings."""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("default", max_examples=100, deadline=None)
settings.register_profile("thorough", max_examples=10_000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
