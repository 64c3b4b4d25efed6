"""Fixtures and settings for both lanes (``tests/unit`` and ``tests/integration``).

* ``impl``: each test once per data plane implementation, ``"reference"`` and ``"native"`` (the
  native one must be built: :func:`tests.support.impls.native`).
* Hypothesis: ``HYPOTHESIS_PROFILE=thorough`` runs every property test with 10,000 examples
  (:mod:`tests.support.hypothesis_profiles`).

The broker, proxy and daemon fixtures are in ``tests/integration/conftest.py``: a unit test
cannot ask for one.
"""

from __future__ import annotations

import pytest

from tests.support import hypothesis_profiles  # noqa: F401  # registers the profiles, loads HYPOTHESIS_PROFILE
from tests.support.impls import IMPLEMENTATIONS, native


@pytest.fixture(params=IMPLEMENTATIONS)
def impl(request: pytest.FixtureRequest) -> str:
    if request.param == "native":
        native()
    return str(request.param)
