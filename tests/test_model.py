"""Validation of the instance format: invalid inputs, round trips, the compiled form."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from tangram.io.files import InputError, instance_schema, read_instance, write_model
from tangram.model.compiled import compile_instance
from tangram.model.instance import Instance

from cases import FEASIBLE, chain_with_lag, gpu_residency

BASE = {"nodes": [{"id": "n0", "cores": 4, "memory_gb": 8}],
        "actions": [{"id": "a", "kind": "cpu", "modes": [{"duration_s": 1, "cores": 1}]}]}


def with_(path: str, value):
    """BASE with one field replaced; path like 'actions.0.modes.0.duration_s'."""
    data = json.loads(json.dumps(BASE))
    *parents, last = path.split(".")
    node = data
    for p in parents:
        node = node[int(p)] if p.isdigit() else node.setdefault(p, {})
    node[int(last) if last.isdigit() else last] = value
    return data


INVALID = [
    # (field path, value, rule the message must name)
    ("actions.0.modes.0.duration_s", -1, "greater than or equal to 0"),
    ("actions.0.bogus", 1, "Extra inputs are not permitted"),
    ("actions.0.kind", "fpga", "Input should be 'cpu', 'gpu', 'api' or 'generic'"),
    ("actions.0.sandbox", "nope", "unknown sandbox 'nope'"),
    ("actions.0.model", "rm", "unknown model 'rm'"),
    ("actions.0.modes.0.cores", 64, "infeasible capacity"),
    ("actions.0.deadline_s", 0.5, None),  # valid: release 0 <= deadline
    ("actions.0.release_s", 2.0, None),
    ("nodes.0.cores", 0, "greater than or equal to 1"),
    ("actions.0.weight", 0, "greater than 0"),
    ("actions.0.after", [{"action": "ghost"}], "unknown action 'ghost'"),
    ("actions.0.after", [{"action": "a"}], "precedence cycle"),
    ("schema_version", 2, "Input should be 1"),
    ("actions.0.elastic", {"base_s": 1, "parallel_fraction": 0.5}, "give exactly one of modes, elastic, work_s"),
]


@pytest.mark.parametrize("path,value,rule", INVALID, ids=[f"{p}={v}" for p, v, _ in INVALID])
def test_validation_names_field_and_rule(path, value, rule, tmp_path):
    f = tmp_path / "instance.json"
    f.write_text(json.dumps(with_(path, value)))
    if rule is None:
        read_instance(f)
        return
    with pytest.raises(InputError) as err:
        read_instance(f)
    message = str(err.value)
    assert message.startswith(f"{f}: ")
    assert rule in message
    assert "\n" not in message


def test_duplicate_ids_and_deadline_before_release():
    data = with_("actions.0.deadline_s", 1.0)
    data["actions"][0]["release_s"] = 2.0
    data["actions"].append(dict(data["actions"][0]))
    with pytest.raises(ValidationError) as err:
        Instance.model_validate(data)
    assert "duplicate id 'a'" in str(err.value)
    assert "deadline 1 is before release 2" in str(err.value)


def test_malformed_json_and_missing_file(tmp_path):
    f = tmp_path / "bad.json"
    f.write_text('{"actions": [')
    with pytest.raises(InputError, match="malformed JSON"):
        read_instance(f)
    with pytest.raises(InputError, match="cannot read"):
        read_instance(tmp_path / "missing.json")


@pytest.mark.parametrize("make", FEASIBLE, ids=lambda f: f.__name__)
def test_json_round_trip_is_lossless(make, tmp_path):
    instance = make()
    write_model(instance, tmp_path / "i.json")
    again = read_instance(tmp_path / "i.json")
    assert again == instance
    assert again.model_dump_json() == instance.model_dump_json()


def test_models_are_frozen():
    instance = FEASIBLE[0]()
    with pytest.raises(ValidationError):
        instance.nodes[0].cores = 3


def test_schema_describes_units():
    schema = json.loads(instance_schema())
    assert "Action" in schema["$defs"]
    assert "seconds" in json.dumps(schema["$defs"]["Mode"])


def test_compiled_ticks_round_durations_up_and_deadlines_down():
    c = compile_instance(chain_with_lag(), tick_s=0.25)
    assert [o.duration for o in c.options(0)] == [2, 2]  # 0.4 s and 0.3 s both need 2 ticks
    assert c.release[1] == 0 and c.preds[1] == [(0, 2)]  # lag 0.3 s rounds up to 2 ticks
    assert c.busy[0].end == 2 and c.busy[0].cores == 1


def test_compiled_gpu_options_are_blocks_of_one_domain():
    c = compile_instance(gpu_residency(), tick_s=0.1)
    gpus = sorted(o.gpus for o in c.options(0))
    assert gpus == [(0,), (0, 1), (1,)]
    assert c.resident[0].tolist() == [True, False]
    assert int(c.model_load[0]) == 5
