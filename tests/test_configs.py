"""The configuration files shipped with the project load and describe a valid fleet."""

from __future__ import annotations

from pathlib import Path

from tangram.service.config import ServiceConfig

ROOT = Path(__file__).resolve().parent.parent


def test_example_service_config_loads_into_a_valid_fleet():
    config = ServiceConfig.from_file(ROOT / "configs" / "service.example.toml")
    fleet = config.fleet()
    assert [n.id for n in fleet.nodes] == ["cpu0", "cpu1"]
    assert {g.domain_id for g in fleet.gpus} == {"nv0", "nv1"}
    assert set(config.model_specs()) == {"unit_tests", "lexical"}
    assert config.controller.objective.resource_seconds == 0.01
