"""The run API of SWE-style task sets (served by ``evalrunner serve`` beside the webhook receiver).

    POST /v1/runs                     {agent_version, task_set, samples, budget_usd, ...} → 202 (queued) / 200 (known)
    GET  /v1/runs/{id}                status, per-task results, cost, links to trajectories
    GET  /v1/leaderboard?task_set=…   per agent version: solve rate + interval, paired vs reference, cost per task
    GET  /v1/trajectories/{agent_version}/{task_id}/{sample_idx}
    GET  /v1/openapi.json             this API's OpenAPI 3.1 schema (no token needed)

Every other route needs ``Authorization: Bearer <token>`` (``EVALRUNNER_API_TOKEN`` or the file
named by ``EVALRUNNER_API_TOKEN_FILE``), compared in constant time. Bad input answers 400 with
the field and the problem; an unknown run, task set or trajectory 404.

A submission only records the run and queues it (``SweLauncher.submit``): the daemon's
``swe_run_sensor`` launches its Dagster run, in a process of its own.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Mapping
from typing import Any, Protocol

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from evalrunner_assets.swe import RunSpec, SweError, SweStore
from evalrunner_assets.swe.leaderboard import leaderboard

TOKEN_ENV = "EVALRUNNER_API_TOKEN"
TOKEN_FILE_ENV = "EVALRUNNER_API_TOKEN_FILE"
MAX_BODY = 64 * 1024


class Launcher(Protocol):
    store: SweStore

    def submit(self, spec: RunSpec) -> tuple[dict[str, Any], bool]: ...

    def status(self, run_id: str) -> dict[str, Any]: ...


def load_api_token(env: Mapping[str, str] | None = None) -> str | None:
    env = os.environ if env is None else env
    value, path = env.get(TOKEN_ENV), env.get(TOKEN_FILE_ENV)
    if value and path:
        raise ValueError(f"set only one of {TOKEN_ENV} and {TOKEN_FILE_ENV}, not both")
    if path:
        with open(path, encoding="utf-8") as f:
            value = f.read().strip()
    return value or None


def _error(status: int, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=status)


def openapi_schema() -> dict[str, Any]:
    run_spec = RunSpec.model_json_schema(ref_template="#/components/schemas/{model}")
    bearer: list[dict[str, list[str]]] = [{"bearer": []}]
    obj = {"type": "object"}
    return {
        "openapi": "3.1.0",
        "info": {"title": "evalrunner SWE run API", "version": "1"},
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {"RunSpec": run_spec, "Error": {"type": "object", "properties": {"error": {"type": "string"}}}},
        },
        "paths": {
            "/v1/runs": {
                "post": {
                    "summary": "Submit a run (idempotent: the same request is the same run)",
                    "security": bearer,
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/RunSpec"}}},
                    },
                    "responses": {
                        "202": {
                            "description": "queued: the daemon launches its Dagster run",
                            "content": {"application/json": {"schema": obj}},
                        },
                        "200": {"description": "already queued, running or done; nothing launched"},
                        "400": {"description": "invalid request"},
                        "401": {"description": "missing or wrong token"},
                        "404": {"description": "unknown task set"},
                    },
                }
            },
            "/v1/runs/{run_id}": {
                "get": {
                    "summary": "Status, per-task results, cost and trajectory links of a run",
                    "security": bearer,
                    "parameters": [{"name": "run_id", "in": "path", "required": True, "schema": {"type": "string"}}],
                    "responses": {"200": {"description": "the run"}, "404": {"description": "unknown run"}},
                }
            },
            "/v1/leaderboard": {
                "get": {
                    "summary": "Per agent version: solve rate with interval, paired comparison, cost per task",
                    "security": bearer,
                    "parameters": [
                        {"name": "task_set", "in": "query", "required": True, "schema": {"type": "string"}},
                        {"name": "reference", "in": "query", "required": False, "schema": {"type": "string"}},
                    ],
                    "responses": {
                        "200": {"description": "the leaderboard"},
                        "404": {"description": "unknown task set"},
                    },
                }
            },
            "/v1/trajectories/{agent_version}/{task_id}/{sample_idx}": {
                "get": {
                    "summary": "One attempt's trajectory, patch, policy findings and grading",
                    "security": bearer,
                    "parameters": [
                        {"name": n, "in": "path", "required": True, "schema": {"type": t}}
                        for n, t in (("agent_version", "string"), ("task_id", "string"), ("sample_idx", "integer"))
                    ],
                    "responses": {"200": {"description": "the trajectory"}, "404": {"description": "unknown attempt"}},
                }
            },
        },
    }


def run_view(launcher: Launcher, run_id: str) -> dict[str, Any]:
    """``GET /v1/runs/{id}``: the record plus this run's attempts (its agent version, the task
    set's tasks, sample indexes below ``samples``), cost and trajectory links."""
    record = launcher.status(run_id)
    spec = RunSpec.model_validate(record["spec"])
    store = launcher.store
    task_ids = [t.id for t in store.task_set(spec.task_set).tasks]
    rows = [
        r for r in store.attempts(task_ids=task_ids, agent_version=spec.agent_version) if r["sample_idx"] < spec.samples
    ]
    results = [
        {
            "task_id": r["task_id"],
            "sample_idx": r["sample_idx"],
            "status": r["status"],
            "passed": r["passed"],
            "tests_passed_raw": r["tests_passed_raw"],
            "reason": r["reason"],
            "policy_reason": r["policy_reason"],
            "cost_usd": r["cost_usd"],
            "sandbox_id": r["sandbox_id"],
            "trajectory": f"/v1/trajectories/{r['agent_version']}/{r['task_id']}/{r['sample_idx']}",
            "trajectory_lake": store.lake.url(r["trajectory"]),
        }
        for r in rows
    ]
    costs = [r["cost_usd"] for r in rows if r["cost_usd"] is not None]
    return {
        "id": run_id,
        "status": record.get("status"),
        "spec": record["spec"],
        "submitted_at": record.get("submitted_at"),
        "dagster_runs": record.get("dagster_runs", []),
        "worker": record.get("worker"),
        "outcome": record.get("outcome"),
        "pool": record.get("pool"),
        "attempts_expected": len(task_ids) * spec.samples,
        "attempts_landed": len(rows),
        "cost_usd": round(sum(costs), 6) if costs else None,
        "budget_usd": spec.budget_usd,
        "results": results,
    }


def create_api(launcher: Launcher, token: str | None) -> Starlette:
    """The API as a Starlette app. ``token`` None refuses every authenticated route (503)."""

    def authorized(request: Request) -> JSONResponse | None:
        if token is None:
            return _error(503, f"the run API has no token: set {TOKEN_ENV} (or {TOKEN_FILE_ENV})")
        given = request.headers.get("authorization", "")
        if not given.startswith("Bearer ") or not hmac.compare_digest(given[7:].encode(), token.encode()):
            return _error(401, "missing or wrong bearer token")
        return None

    async def submit(request: Request) -> JSONResponse:
        if (denied := authorized(request)) is not None:
            return denied
        body = await request.body()
        if len(body) > MAX_BODY:
            return _error(413, f"request body over {MAX_BODY} bytes")
        try:
            spec = RunSpec.model_validate_json(body)
        except ValidationError as exc:
            problems = [{"field": ".".join(map(str, e["loc"])), "problem": e["msg"]} for e in exc.errors()]
            return _error(400, "invalid run request", problems=problems)
        try:
            record, launched = await run_in_threadpool(launcher.submit, spec)
        except SweError as exc:
            status = 404 if "not registered" in str(exc) else 400
            return _error(status, str(exc))
        now = "queued" if launched else (await run_in_threadpool(launcher.status, record["id"]))["status"]
        return JSONResponse(
            {"id": record["id"], "launched": launched, "status": now, "status_url": f"/v1/runs/{record['id']}"},
            status_code=202 if launched else 200,
        )

    async def get_run(request: Request) -> JSONResponse:
        if (denied := authorized(request)) is not None:
            return denied
        try:
            return JSONResponse(await run_in_threadpool(run_view, launcher, request.path_params["run_id"]))
        except SweError as exc:
            return _error(404, str(exc))
        except ValueError as exc:  # a malformed id (not a lake path segment)
            return _error(400, str(exc))

    async def get_leaderboard(request: Request) -> JSONResponse:
        if (denied := authorized(request)) is not None:
            return denied
        task_set = request.query_params.get("task_set")
        if not task_set:
            return _error(400, "query parameter task_set is required")
        try:
            board = await run_in_threadpool(
                leaderboard, launcher.store, task_set, request.query_params.get("reference")
            )
        except SweError as exc:
            return _error(404, str(exc))
        except ValueError as exc:
            return _error(400, str(exc))
        return JSONResponse(board)

    async def get_trajectory(request: Request) -> JSONResponse:
        if (denied := authorized(request)) is not None:
            return denied
        p = request.path_params
        try:
            doc = await run_in_threadpool(
                launcher.store.trajectory, p["agent_version"], p["task_id"], int(p["sample_idx"])
            )
        except SweError as exc:
            return _error(404, str(exc))
        except ValueError as exc:
            return _error(400, str(exc))
        return JSONResponse(doc)

    async def schema(request: Request) -> JSONResponse:
        return JSONResponse(openapi_schema())

    async def internal_error(request: Request, exc: Exception) -> JSONResponse:
        # A client parses every answer as JSON; the traceback goes to the server's log.
        return _error(500, f"internal error while serving {request.url.path}: {type(exc).__name__}: {exc}")

    return Starlette(
        routes=[
            Route("/v1/openapi.json", schema, methods=["GET"]),
            Route("/v1/runs", submit, methods=["POST"]),
            Route("/v1/runs/{run_id}", get_run, methods=["GET"]),
            Route("/v1/leaderboard", get_leaderboard, methods=["GET"]),
            Route("/v1/trajectories/{agent_version}/{task_id}/{sample_idx:int}", get_trajectory, methods=["GET"]),
        ],
        exception_handlers={Exception: internal_error},
    )
