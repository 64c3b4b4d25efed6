"""Fixtures and settings for both lanes (``tests/unit`` and ``tests/integration``).

* Hypothesis: ``HYPOTHESIS_PROFILE=thorough`` runs every property test with 10,000 examples
  (:mod:`tests.support.hypothesis_profiles`).

The broker, proxy and daemon fixtures are in ``tests/integration/conftest.py``: a unit test
cannot ask for one.
"""

from __future__ import annotations

from tests.support import hypothesis_profiles  # noqa: F401  # registers the profiles, loads HYPOTHESIS_PROFILE
