"""Shared fixtures."""

from __future__ import annotations

import pytest

from tangram.model.instance import Instance

from cases import FEASIBLE


@pytest.fixture(params=FEASIBLE, ids=lambda f: f.__name__)
def feasible_instance(request) -> Instance:
    return request.param()
