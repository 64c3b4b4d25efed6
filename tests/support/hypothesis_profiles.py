"""Hypothesis profiles for every property test, chosen with ``HYPOTHESIS_PROFILE``:

* ``default``: enough examples to catch a regression while the file stays under a minute;
* ``fast``: Hypothesis' own 100 examples, for ``make test-fast`` (the unit lane while editing;
  ``make test`` runs the same properties with the default profile);
* ``thorough``: at least 10,000 examples per property (the target), for a run by hand:
  ``HYPOTHESIS_PROFILE=thorough .venv/bin/python -m pytest tests/unit/test_input_properties.py``.

Imported by ``tests/conftest.py``, so that any test module can rely on the profile.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile("default", max_examples=300, deadline=None)
settings.register_profile("fast", max_examples=100, deadline=None)
settings.register_profile("thorough", max_examples=10_000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
