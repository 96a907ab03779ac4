"""The Python clients, sync and async, against a real service (embedded Ray, uvicorn on a thread)."""

from __future__ import annotations

import asyncio

import pytest

from tangram.client import AsyncClient, Client, NotFound, Rejected, TangramError, Unauthorized
from tangram.model.instance import Action

TOKEN = "client-token"
pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def url():
    from tangram.service.config import default_config
    from tangram.service.server import Service

    svc = Service(default_config(cores=2))
    yield svc.start_http([TOKEN])
    svc.close(shutdown_ray=True)


def code(aid: str, trajectory: str | None = None) -> Action:
    return Action(id=aid, kind="cpu", trajectory=trajectory, modes=({"duration_s": 0.3, "cores": 1},))


def test_sync_client_round_trip(url):
    with Client(url, TOKEN) as c:
        assert c.health()["ok"]
        assert c.open_trajectory("s1")["node"] in ("n0", "n1")
        c.submit(code("s1.a", "s1"), "print(sum(range(10)))")
        assert c.wait("s1.a")["result"]["stdout"] == "45\n"
        recs = c.submit_many([(code(f"s1.b{k}"), f"print({k})") for k in range(3)])  # own sandboxes: concurrent
        assert [r["id"] for r in recs] == ["s1.b0", "s1.b1", "s1.b2"]
        assert [c.wait(r["id"])["result"]["stdout"] for r in recs] == ["0\n", "1\n", "2\n"]
        api = c.submit({"id": "s1.q", "kind": "api", "quota": "local", "modes": [{"duration_s": 0.01}]},
                       {"call": "echo", "args": {"q": 1}})
        assert c.wait(api["id"])["result"] == {"q": 1}
        assert {r["id"] for r in c.list(state="ok")} >= {"s1.a", "s1.b0", "s1.b1", "s1.b2"}
        assert [r["id"] for r in c.list(trajectory="s1")] == ["s1.a"]
        assert "tangram_act_seconds" in c.metrics() and c.status()["states"]["ok"] >= 5
        c.close_trajectory("s1")
        with pytest.raises(NotFound, match="unknown id"):
            c.result("nothing")
        with pytest.raises(TangramError, match="action.kind"):
            c.submit({"id": "x", "kind": "teleport", "modes": [{"duration_s": 1}]})
        with pytest.raises(Rejected, match="duplicate") as e:
            c.submit_many([(code("s1.new"), "pass"), (code("s1.a"), "pass")])
        assert [r["id"] for r in e.value.accepted] == ["s1.new"]
        slow = c.submit(code("s1.slow"), {"argv": ["sleep", "5"]})
        with pytest.raises(TimeoutError):
            c.wait(slow["id"], timeout_s=0.3)
        assert c.cancel("s1.slow")["id"] == "s1.slow"
        assert c.wait("s1.slow", timeout_s=30)["state"] == "cancelled"
    with Client(url, "wrong") as bad, pytest.raises(Unauthorized, match="401"):
        bad.list()


def test_async_client_runs_trajectories_concurrently(url):
    async def one(c: AsyncClient, k: int) -> str:
        await c.open_trajectory(f"a{k}")
        await c.submit(code(f"a{k}.run", f"a{k}"), f"print({k} * {k})")
        rec = await c.wait(f"a{k}.run")
        await c.close_trajectory(f"a{k}")
        return rec["result"]["stdout"].strip()

    async def main():
        async with AsyncClient(url, TOKEN) as c:
            assert (await c.health())["ok"]
            outs = await asyncio.gather(*(one(c, k) for k in range(6)))
            listed = await c.list(state="ok", limit=1000)
            metrics, status = await c.metrics(), await c.status()
            with pytest.raises(NotFound):
                await c.wait("missing")
            return outs, listed, metrics, status

    outs, listed, metrics, status = asyncio.run(main())
    assert outs == [str(k * k) for k in range(6)]
    assert {f"a{k}.run" for k in range(6)} <= {r["id"] for r in listed}
    assert "tangram_epochs_total" in metrics and status["pending"] == 0
