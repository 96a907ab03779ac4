"""Python clients of the Tangram service: :class:`Client` (sync) and :class:`AsyncClient` (asyncio), over httpx.

Both speak the same routes with the same arguments and return plain dicts (the
service's JSON). An error response raises :class:`TangramError` (401:
:class:`Unauthorized`, 404: :class:`NotFound`) carrying the status code and the
server's message. An action may be given as an :class:`~tangram.model.instance.Action`
or as its dict.

>>> c = Client("http://127.0.0.1:8470", token)                    # doctest: +SKIP
>>> c.open_trajectory("t1")                                       # doctest: +SKIP
>>> c.submit({"id": "a1", "kind": "cpu", "trajectory": "t1",
...           "modes": [{"duration_s": 1, "cores": 1}]}, payload="print(1)")  # doctest: +SKIP
>>> c.wait("a1")["result"]["stdout"]                              # doctest: +SKIP
'1\\n'
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

from tangram.model.instance import Action

ActionLike = Action | dict[str, Any]


class TangramError(RuntimeError):
    """The service refused a request: ``status`` is the HTTP code, the message is the server's."""

    def __init__(self, status: int, message: str, body: Any = None) -> None:
        super().__init__(f"{status}: {message}")
        self.status, self.message, self.body = status, message, body


class Unauthorized(TangramError):
    pass


class NotFound(TangramError):
    pass


class Rejected(TangramError):
    """Some actions of a batch were rejected; ``accepted`` holds those that were not."""

    def __init__(self, rejected: list[dict[str, Any]], accepted: list[dict[str, Any]]) -> None:
        super().__init__(400, "; ".join(f"actions[{r['index']}] {r['id']}: {r['error']}" for r in rejected), rejected)
        self.rejected, self.accepted = rejected, accepted


def _check(r: httpx.Response) -> Any:
    if r.is_success:
        return r.json() if r.content else None
    try:
        body = r.json()
    except ValueError:
        body = r.text
    detail = body.get("detail", body) if isinstance(body, dict) else body
    if isinstance(detail, list):  # FastAPI validation errors: name the field and the rule
        detail = "; ".join(f"{'.'.join(str(x) for x in d.get('loc', ()))}: {d.get('msg')}" for d in detail)
    cls = {401: Unauthorized, 404: NotFound}.get(r.status_code, TangramError)
    raise cls(r.status_code, str(detail), body)


def _item(action: ActionLike, payload: Any = None, tool: str | None = None) -> dict[str, Any]:
    a = action.model_dump(mode="json", exclude_defaults=True) if isinstance(action, Action) else action
    return {"action": a, "payload": payload, "tool": tool}


def _batch(out: dict[str, Any]) -> list[dict[str, Any]]:
    if out["rejected"]:
        raise Rejected(out["rejected"], out["accepted"])
    return out["accepted"]


def _list_params(**kw: Any) -> dict[str, Any]:
    return {k: v for k, v in kw.items() if v is not None}


class Client:
    """Synchronous client.

    Parameters
    ----------
    url
        The service's base URL, e.g. ``http://127.0.0.1:8470``.
    token
        A bearer token of the service.
    timeout_s
        Per-request timeout, seconds (long polls add their own wait).
    """

    def __init__(self, url: str, token: str, timeout_s: float = 30.0) -> None:
        self.timeout_s = timeout_s
        self._http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=timeout_s)

    def _call(self, method: str, path: str, timeout_s: float | None = None, **kw: Any) -> Any:
        return _check(self._http.request(method, path, timeout=timeout_s or self.timeout_s, **kw))

    def health(self) -> dict[str, Any]:
        return self._call("GET", "/healthz")

    def open_trajectory(self, trajectory_id: str, memory_gb: float = 0.0) -> dict[str, Any]:
        return self._call("POST", "/v1/trajectories", json={"id": trajectory_id, "memory_gb": memory_gb})

    def close_trajectory(self, trajectory_id: str) -> None:
        self._call("DELETE", f"/v1/trajectories/{trajectory_id}")

    def submit(self, action: ActionLike, payload: Any = None, tool: str | None = None) -> dict[str, Any]:
        """Submit one action; returns its record once the service has journaled it."""
        return self._call("POST", "/v1/actions", json=_item(action, payload, tool))

    def submit_many(self, items: list[tuple[ActionLike, Any] | tuple[ActionLike, Any, str | None]]) -> list[dict]:
        """Submit ``(action, payload[, tool])`` items in one request; raises :class:`Rejected` if any is refused."""
        return _batch(self._call("POST", "/v1/actions:batch", json={"actions": [_item(*it) for it in items]}))

    def result(self, action_id: str) -> dict[str, Any]:
        return self._call("GET", f"/v1/actions/{action_id}")

    def wait(self, action_id: str, timeout_s: float = 60.0, poll_s: float = 30.0) -> dict[str, Any]:
        """The action's record once done; raises ``TimeoutError`` after ``timeout_s`` seconds."""
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            rec = self._call("GET", f"/v1/actions/{action_id}/wait", timeout_s=max(left, 0) + self.timeout_s,
                             params={"timeout_s": max(min(left, poll_s), 0)})
            if rec["done"]:
                return rec
            if left <= 0:
                raise TimeoutError(f"{action_id}: not done within {timeout_s} s (state {rec['state']})")

    def cancel(self, action_id: str) -> dict[str, Any]:
        return self._call("POST", f"/v1/actions/{action_id}/cancel")

    def list(self, state: str | None = None, kind: str | None = None, task: str | None = None,
             trajectory: str | None = None, limit: int = 1000, offset: int = 0) -> list[dict[str, Any]]:
        return self._call("GET", "/v1/actions", params=_list_params(state=state, kind=kind, task=task,
                          trajectory=trajectory, limit=limit, offset=offset))

    def status(self) -> dict[str, Any]:
        return self._call("GET", "/v1/status")

    def metrics(self) -> str:
        r = self._http.get("/metrics")
        if not r.is_success:
            _check(r)
        return r.text

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class AsyncClient:
    """Asynchronous client with the methods of :class:`Client` as coroutines."""

    def __init__(self, url: str, token: str, timeout_s: float = 30.0, max_connections: int = 100) -> None:
        self.timeout_s = timeout_s
        self._http = httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=timeout_s,
                                       limits=httpx.Limits(max_connections=max_connections))

    async def _call(self, method: str, path: str, timeout_s: float | None = None, **kw: Any) -> Any:
        return _check(await self._http.request(method, path, timeout=timeout_s or self.timeout_s, **kw))

    async def health(self) -> dict[str, Any]:
        return await self._call("GET", "/healthz")

    async def open_trajectory(self, trajectory_id: str, memory_gb: float = 0.0) -> dict[str, Any]:
        return await self._call("POST", "/v1/trajectories", json={"id": trajectory_id, "memory_gb": memory_gb})

    async def close_trajectory(self, trajectory_id: str) -> None:
        await self._call("DELETE", f"/v1/trajectories/{trajectory_id}")

    async def submit(self, action: ActionLike, payload: Any = None, tool: str | None = None) -> dict[str, Any]:
        return await self._call("POST", "/v1/actions", json=_item(action, payload, tool))

    async def submit_many(self, items) -> list[dict[str, Any]]:
        return _batch(await self._call("POST", "/v1/actions:batch", json={"actions": [_item(*it) for it in items]}))

    async def result(self, action_id: str) -> dict[str, Any]:
        return await self._call("GET", f"/v1/actions/{action_id}")

    async def wait(self, action_id: str, timeout_s: float = 60.0, poll_s: float = 30.0) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            left = deadline - loop.time()
            rec = await self._call("GET", f"/v1/actions/{action_id}/wait", timeout_s=max(left, 0) + self.timeout_s,
                                   params={"timeout_s": max(min(left, poll_s), 0)})
            if rec["done"]:
                return rec
            if left <= 0:
                raise TimeoutError(f"{action_id}: not done within {timeout_s} s (state {rec['state']})")

    async def cancel(self, action_id: str) -> dict[str, Any]:
        return await self._call("POST", f"/v1/actions/{action_id}/cancel")

    async def list(self, state: str | None = None, kind: str | None = None, task: str | None = None,
                   trajectory: str | None = None, limit: int = 1000, offset: int = 0) -> list[dict[str, Any]]:
        return await self._call("GET", "/v1/actions", params=_list_params(state=state, kind=kind, task=task,
                                trajectory=trajectory, limit=limit, offset=offset))

    async def status(self) -> dict[str, Any]:
        return await self._call("GET", "/v1/status")

    async def metrics(self) -> str:
        r = await self._http.get("/metrics")
        if not r.is_success:
            _check(r)
        return r.text

    async def close(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()
