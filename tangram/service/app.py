"""The HTTP API (FastAPI): trajectories, actions, long polls, status and Prometheus metrics.

Every route but ``/healthz`` needs ``Authorization: Bearer <token>`` with one of
the service's tokens (401 otherwise). Request bodies are frozen pydantic models
that forbid unknown fields: a malformed body gets 422 with the field's location
and the rule; a well-formed request the scheduler cannot take (duplicate id, no
resource fits, unknown model) gets 400 with the rule; an unknown id gets 404.
An action is acknowledged only after the policy has journaled it.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field

from tangram.model.instance import Action, Frozen, GiB, Id
from tangram.service.runner import Runner

_bearer = HTTPBearer(auto_error=False)
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
State = Literal["pending", "running", "ok", "failed", "timeout", "cancelled", "done"]


class TrajectoryRequest(Frozen):
    """Open a trajectory: its sandbox is placed and reserves ``memory_gb`` on its node."""

    id: Id
    memory_gb: GiB = Field(default=0.0, description="Sandbox memory reserved while it lives, GiB.")


class SubmitRequest(Frozen):
    """One action and what to run. ``action.release_s`` is raised to the arrival time."""

    action: Action
    payload: Any = Field(default=None, description="cpu: command dict or Python code; gpu: {requests}; "
                                                   "api: {call, args}.")
    tool: str | None = Field(default=None, max_length=100, description="Estimator key; the action's kind if None.")


class BatchRequest(Frozen):
    actions: tuple[SubmitRequest, ...] = Field(min_length=1, max_length=10_000)


class ActionView(BaseModel):
    """An action as the service sees it (times in epoch seconds)."""

    id: str
    kind: str
    task: str
    trajectory: str | None
    state: str
    done: bool
    submitted_at: float
    dispatched_at: float | None
    finished_at: float | None
    act_s: float | None = Field(description="Completion time: release to end, s.")
    node: str | None
    cores: int
    gpus: list[str]
    quota: str | None
    duration_s: float | None
    result: Any
    signals: dict[str, Any]


class Rejected(BaseModel):
    index: int
    id: str
    error: str


class BatchView(BaseModel):
    accepted: list[ActionView]
    rejected: list[Rejected]


class TrajectoryView(BaseModel):
    id: str
    node: str | None


def create_app(runner: Runner, tokens: Iterable[str]) -> FastAPI:
    """The API of one runner; ``tokens`` are the accepted bearer tokens."""
    allowed = [t for t in tokens if t]
    if not allowed:
        raise ValueError("tokens: the service needs at least one token")

    def auth(cred: Credentials) -> None:
        if cred is None or not any(secrets.compare_digest(cred.credentials, t) for t in allowed):
            raise HTTPException(401, "unauthorized: missing or unknown bearer token",
                                headers={"WWW-Authenticate": "Bearer"})

    app = FastAPI(title="Tangram", version="1", description=__doc__)

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        return {"ok": True, "policy": runner.name, "epochs": runner.epochs}

    app.include_router(_trajectory_routes(runner), dependencies=[Depends(auth)])
    app.include_router(_action_routes(runner), dependencies=[Depends(auth)])
    return app


def _trajectory_routes(runner: Runner) -> APIRouter:
    api = APIRouter()

    @api.post("/v1/trajectories", response_model=TrajectoryView, status_code=201)
    def open_trajectory(req: TrajectoryRequest) -> dict[str, Any]:
        try:
            return {"id": req.id, "node": runner.open_trajectory(req.id, req.memory_gb)}
        except ValueError as e:
            raise HTTPException(400, str(e)) from None

    @api.delete("/v1/trajectories/{trajectory_id}", status_code=204)
    def close_trajectory(trajectory_id: str) -> Response:
        if not runner.close_trajectory(trajectory_id):
            raise HTTPException(404, f"trajectories: unknown id {trajectory_id!r}")
        return Response(status_code=204)

    @api.get("/v1/status")
    def status() -> dict[str, Any]:
        return runner.status()

    @api.get("/metrics")
    def metrics() -> Response:
        return Response(runner.metrics.render(), media_type="text/plain; version=0.0.4")

    return api


def _action_routes(runner: Runner) -> APIRouter:
    api = APIRouter()

    def found(action_id: str):
        try:
            return runner.get(action_id)
        except KeyError as e:
            raise HTTPException(404, e.args[0]) from None

    @api.post("/v1/actions", response_model=ActionView, status_code=202)
    def submit(req: SubmitRequest) -> dict[str, Any]:
        out = runner.submit_many([(req.action, req.payload, req.tool)])[0]
        if isinstance(out, ValueError):
            raise HTTPException(400, str(out))
        return out.view()

    @api.post("/v1/actions:batch", response_model=BatchView, status_code=202)
    def submit_many(req: BatchRequest) -> dict[str, Any]:
        outs = runner.submit_many([(r.action, r.payload, r.tool) for r in req.actions])
        return {"accepted": [o.view() for o in outs if not isinstance(o, ValueError)],
                "rejected": [{"index": k, "id": req.actions[k].action.id, "error": str(o)}
                             for k, o in enumerate(outs) if isinstance(o, ValueError)]}

    @api.get("/v1/actions", response_model=list[ActionView])
    def list_actions(state: State | None = None, kind: str | None = None, task: str | None = None,
                     trajectory: str | None = None, limit: int = Query(1000, ge=1, le=100_000),
                     offset: int = Query(0, ge=0)) -> list[dict[str, Any]]:
        return [r.view() for r in runner.list(state, kind, task, trajectory, limit, offset)]

    @api.get("/v1/actions/{action_id}", response_model=ActionView)
    def result(action_id: str) -> dict[str, Any]:
        return found(action_id).view()

    @api.get("/v1/actions/{action_id}/wait", response_model=ActionView)
    async def wait(action_id: str, timeout_s: float = Query(30.0, ge=0, le=600)) -> dict[str, Any]:
        found(action_id)
        return (await runner.wait(action_id, timeout_s)).view()

    @api.post("/v1/actions/{action_id}/cancel", response_model=ActionView)
    def cancel(action_id: str) -> dict[str, Any]:
        found(action_id)
        return runner.cancel(action_id).view()

    return api
