"""Shared fixtures."""

from __future__ import annotations

import pytest

from cases import FEASIBLE
from tangram.model.instance import Instance


@pytest.fixture(params=FEASIBLE, ids=lambda f: f.__name__)
def feasible_instance(request) -> Instance:
    return request.param()
