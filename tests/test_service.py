"""The service over real HTTP: real code on embedded Ray, auth, validation, cancel, metrics and restart recovery."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tangram.model.instance import Action, CpuNode, Gpu, RewardModel
from tangram.model.schedule import Assignment
from tangram.runtime.controller import Fleet, Job, WallClock
from tangram.runtime.sim.baselines import TrajectoryBoundPolicy, replicas_of

TOKEN = "s3cret"


def mbpp_program(task_id: int) -> str:
    from tangram.workload.traces import mbpp

    p = next(p for p in mbpp() if p["task_id"] == task_id)
    return "\n".join([p["test_setup_code"], p["code"], *p["test_list"]]) + "\nprint('passed')"


def cpu(aid: str, trajectory: str | None = None, duration_s: float = 0.5) -> dict:
    return {"id": aid, "kind": "cpu", "trajectory": trajectory, "modes": [{"duration_s": duration_s, "cores": 1}]}


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    """One in-process service (embedded Ray, uvicorn on a thread) for the module."""
    from tangram.service.config import default_config
    from tangram.service.server import Service

    svc = Service(default_config(cores=2), journal=tmp_path_factory.mktemp("svc") / "journal.jsonl")
    url = svc.start_http([TOKEN])
    yield svc, url
    svc.close(shutdown_ray=True)


@pytest.fixture
def http(service):
    with httpx.Client(base_url=service[1], headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as c:
        yield c


@pytest.mark.ray
def test_real_code_runs_through_the_api_and_scores_on_the_gpu_pool(service, http):
    assert http.post("/v1/trajectories", json={"id": "t1"}).status_code == 201
    r = http.post("/v1/actions", json={"action": cpu("t1.run", "t1"), "payload": {"code": mbpp_program(3)}})
    assert r.status_code == 202 and r.json()["state"] in ("pending", "running")
    rec = http.get("/v1/actions/t1.run/wait", params={"timeout_s": 60}).json()
    assert rec["state"] == "ok" and rec["result"]["stdout"].strip() == "passed" and rec["result"]["exit_code"] == 0
    assert rec["node"] == "n0" or rec["node"] == "n1"
    assert rec["act_s"] > 0 and rec["dispatched_at"] >= rec["submitted_at"]
    bad = http.post("/v1/actions", json={"action": cpu("t1.bad", "t1"), "payload": "assert 1 + 1 == 3"}).json()
    assert http.get(f"/v1/actions/{bad['id']}/wait").json()["state"] == "failed"
    score = http.post("/v1/actions", json={"action": {"id": "t1.score", "kind": "gpu", "model": "unit_tests",
                                                      "work_s": 0.05},
                                           "payload": {"requests": [{"exit_code": 0}, {"passed": 1, "total": 4}]}})
    assert score.status_code == 202
    assert http.get("/v1/actions/t1.score/wait").json()["result"]["scores"] == [1.0, 0.25]
    assert http.delete("/v1/trajectories/t1").status_code == 204
    assert [a["id"] for a in http.get("/v1/actions", params={"trajectory": "t1", "state": "failed"}).json()] == [
        "t1.bad"]


@pytest.mark.ray
def test_every_route_but_healthz_needs_a_known_token(service):
    url = service[1]
    assert httpx.get(f"{url}/healthz").status_code == 200
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic " + TOKEN}):
        assert httpx.get(f"{url}/v1/actions", headers=headers).status_code in (401, 403)
        r = httpx.post(f"{url}/v1/actions", headers=headers, json={"action": cpu("x")})
        assert r.status_code in (401, 403), r.text
        assert httpx.get(f"{url}/metrics", headers=headers).status_code in (401, 403)
    assert httpx.get(f"{url}/v1/actions", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert "/v1/actions/{action_id}/wait" in httpx.get(f"{url}/openapi.json").json()["paths"]


@pytest.mark.ray
@pytest.mark.parametrize("body, field, rule", [
    ({"action": {**cpu("m1"), "kind": "quantum"}}, "kind", "literal_error"),
    ({"action": {"kind": "cpu", "modes": [{"duration_s": 1, "cores": 1}]}}, "id", "missing"),
    ({"action": cpu("m2"), "colour": "red"}, "colour", "extra_forbidden"),
    ({"action": {**cpu("m3"), "modes": [{"duration_s": -1, "cores": 1}]}}, "duration_s", "greater_than_equal"),
    ({"action": {"id": "m4", "kind": "cpu"}}, "action", "value_error"),
])
def test_malformed_bodies_get_422_naming_the_field_and_rule(http, body, field, rule):
    r = http.post("/v1/actions", json=body)
    assert r.status_code == 422
    errors = r.json()["detail"]
    assert any(field in map(str, e["loc"]) and e["type"] == rule for e in errors), errors


@pytest.mark.ray
def test_well_formed_but_unrunnable_actions_get_400_with_the_rule(http):
    r = http.post("/v1/actions", json={"action": {"id": "nope", "kind": "gpu", "model": "gpt-judge", "work_s": 1}})
    assert r.status_code == 400 and "gpt-judge" in r.json()["detail"]
    assert http.post("/v1/actions", json={"action": cpu("dup"), "payload": "pass"}).status_code == 202
    r = http.post("/v1/actions", json={"action": cpu("dup"), "payload": "pass"})
    assert r.status_code == 400 and "duplicate" in r.json()["detail"]
    assert http.get("/v1/actions/never-submitted").status_code == 404
    batch = http.post("/v1/actions:batch", json={"actions": [{"action": cpu("b1"), "payload": "pass"},
                                                             {"action": cpu("dup"), "payload": "pass"}]}).json()
    assert [a["id"] for a in batch["accepted"]] == ["b1"] and batch["rejected"][0]["index"] == 1


@pytest.mark.ray
def test_cancel_stops_a_running_action_and_drops_a_pending_one(service, http):
    runner = service[0].runner
    http.post("/v1/actions", json={"action": cpu("long", duration_s=30), "payload": {"argv": ["sleep", "30"]}})
    deadline = time.time() + 20
    while http.get("/v1/actions/long").json()["state"] != "running" and time.time() < deadline:
        time.sleep(0.05)
    assert http.post("/v1/actions/long/cancel").status_code == 200
    rec = http.get("/v1/actions/long/wait", params={"timeout_s": 30}).json()
    assert rec["state"] == "cancelled" and rec["finished_at"] - rec["dispatched_at"] < 15
    with runner.lock:  # a pending one: accepted, then cancelled before any epoch may dispatch it
        runner.submit(Action(id="never", kind="cpu", modes=({"duration_s": 1, "cores": 1},)), "pass")
        assert runner.cancel("never").state == "cancelled"
    assert http.get("/v1/actions/never").json()["state"] == "cancelled"


@pytest.mark.ray
def test_metrics_and_status_report_queues_act_and_epochs(service, http):
    http.post("/v1/actions", json={"action": cpu("metered"), "payload": "print(1)"})
    http.get("/v1/actions/metered/wait")
    text = http.get("/metrics").text
    for name in ("tangram_pending_actions", "tangram_act_seconds_bucket", "tangram_pool_utilisation",
                 "tangram_solve_seconds_count", "tangram_epoch_lag_seconds", "tangram_solver_fallbacks_total",
                 "tangram_model_loads_total"):
        assert name in text, name
    s = http.get("/v1/status").json()
    assert s["epochs"] > 0 and s["recent_act"]["count"] > 0 and set(s["pools"]["nodes"]) == {"n0", "n1"}
    assert s["max_epoch_lag_s"] < 1.0


# --------------------------------------------------------------------------- restart recovery (a real process)


def _start(tmp: Path, port: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tangram.cli", "serve", "--config", str(tmp / "svc.toml"),
                             "--port", str(port), "--token-file", str(tmp / "token"), "--journal",
                             str(tmp / "journal.jsonl")], start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=open(tmp / "serve.log", "a"))


def _healthy(url: str, proc: subprocess.Popen, timeout_s: float = 90) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        assert proc.poll() is None, "service exited"
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError("service did not come up")


@pytest.mark.ray
@pytest.mark.slow
def test_a_killed_service_resumes_every_accepted_action_from_its_journal(tmp_path):
    """Kill the whole service process group mid-run; the restarted service finishes every accepted action."""
    from tangram.client import Client
    from tangram.service.server import free_port

    (tmp_path / "svc.toml").write_text('[[nodes]]\nid = "n0"\ncores = 1\n\n[controller]\nsolver = "greedy"\n')
    (tmp_path / "token").write_text(TOKEN + "\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = _start(tmp_path, port)
    try:
        _healthy(url, proc)
        c = Client(url, TOKEN)
        c.open_trajectory("tr")
        c.submit(cpu("quick", "tr"), "print('first')")
        assert c.wait("quick")["state"] == "ok"
        ids = [f"slow{k}" for k in range(4)]
        c.submit_many([(cpu(a, "tr", 1.0), {"code": f"import time; time.sleep(1.0); print('{a}')"}) for a in ids])
        deadline = time.time() + 20
        while c.result("slow0")["state"] != "running" and time.time() < deadline:
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)  # abrupt: no shutdown hook runs
        proc.wait(10)
        c.close()
        accepted = [e["action"]["id"] for e in map(json.loads, (tmp_path / "journal.jsonl").open())
                    if e["type"] == "accepted"]
        assert set(ids) <= set(accepted)

        proc = _start(tmp_path, port)
        _healthy(url, proc)
        with Client(url, TOKEN) as c:
            assert c.status()["resumed"] == 4
            done = {a: c.wait(a, timeout_s=60) for a in ids}
            assert all(r["state"] == "ok" and r["result"]["stdout"].strip() == a for a, r in done.items())
            before = c.result("quick")  # finished before the crash: still there, with its result
            assert before["state"] == "ok" and before["result"]["stdout"].strip() == "first"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


# --------------------------------------------------------------------------- the baseline policy, without Ray


class Launches:
    def __init__(self) -> None:
        self.launched: list[tuple[str, Assignment]] = []

    def launch(self, job: Job, assignment: Assignment) -> None:
        self.launched.append((job.action.id, assignment))

    def cancel(self, action_id: str) -> None:
        pass


def test_trajectory_bound_binds_cores_for_life_and_dedicates_replicas():
    fleet = Fleet(nodes=(CpuNode(id="n0", cores=2, memory_gb=8), CpuNode(id="n1", cores=1, memory_gb=8)),
                  gpus=tuple(Gpu(id=f"g{k}", type="L40", memory_gb=48, machine="m") for k in range(4)),
                  models=(RewardModel(id="rm", memory_gb=10, load_s=0),))
    ex = Launches()
    p = TrajectoryBoundPolicy(fleet, ex, WallClock(), cores=1, replicas=replicas_of(fleet, {"a": ("g2", "g3")}))
    assert TrajectoryBoundPolicy.bindable(fleet, 1) == 3
    for t in ("t1", "t2", "t3", "t4"):
        p.open_trajectory(t, memory_gb=0.5)
    assert len(p.admitted) == 3 and p.waiting == ["t4"]  # every core is bound: t4 waits for admission
    p.submit(Action(id="c", kind="cpu", trajectory="t4", modes=({"duration_s": 1, "cores": 1},)))
    for k in range(3):
        p.submit(Action(id=f"s{k}", kind="gpu", model="rm", task="a", work_s=1))
    p.submit(Action(id="other", kind="gpu", model="rm", task="b", work_s=1))
    p.epoch(0.0)
    placed = {a: asg.placement for a, asg in ex.launched}
    assert "c" not in placed  # its trajectory holds no cores yet
    assert {placed["s0"].gpus, placed["s1"].gpus} == {("g2",), ("g3",)} and "s2" not in placed  # replicas busy
    assert placed["other"].gpus[0] in ("g0", "g1")  # a task without replicas uses any GPU
    node = p.sandboxes["t4"].node
    p.close_trajectory(next(t for t in p.admitted if p.sandboxes[t].node == node))
    assert "t4" in p.admitted
    p.epoch(0.1)
    assert dict((a, asg.placement) for a, asg in ex.launched)["c"].node == node
