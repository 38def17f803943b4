"""Routes of the web app; what they show comes from :mod:`evalrunner_assets.http.web.pages`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from evalrunner_assets.errors import EvalrunnerError, UserError
from evalrunner_assets.http.web import pages
from evalrunner_assets.pipeline.keys import comparison_key
from evalrunner_assets.report import links
from lake.layout import LAYOUT
from lake.storage import Lake
from lake.viewer import sample_url

HERE = Path(__file__).parent
# Pages never run script and never load anything from elsewhere.
CSP = "default-src 'none'; style-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'"


# A running comparison's page reloads itself this often (a meta refresh: the pages run no script).
RUN_REFRESH_S = 5
RUN_REFRESH_ENV = "EVALRUNNER_WEB_REFRESH_S"

# Where people reach Inspect's log viewer over this lake (`evalrunner view`, or the one `serve`
# starts); the trajectory pages link each sample to its raw log there.
INSPECT_VIEW_URL_ENV = "EVALRUNNER_INSPECT_VIEW_URL"


def run_refresh_seconds(environ: Mapping[str, str] | None = None) -> int:
    """Seconds between reloads of a running comparison's page: ``EVALRUNNER_WEB_REFRESH_S`` or 5."""
    value = (os.environ if environ is None else environ).get(RUN_REFRESH_ENV, "").strip()
    if not value:
        return RUN_REFRESH_S
    if not value.isdigit() or int(value) < 1:
        raise UserError(f"{RUN_REFRESH_ENV}={value!r} is not a whole number of seconds of at least 1")
    return int(value)


def inspect_view_url_from_env(environ: Mapping[str, str] | None = None) -> str | None:
    """``EVALRUNNER_INSPECT_VIEW_URL`` checked (an http(s) URL with a host and no query or
    fragment: the viewer's routes go in the fragment), or None when unset."""
    value = (os.environ if environ is None else environ).get(INSPECT_VIEW_URL_ENV, "").strip()
    if not value:
        return None
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        raise UserError(
            f"{INSPECT_VIEW_URL_ENV}={value!r} is not an http(s) URL with a host and no query or fragment",
            hint="set it to where Inspect's viewer over this lake is reached, e.g. http://127.0.0.1:7575",
        )
    return value.rstrip("/")


def dagster_comparison_url(dagster_url: str | None, doc: Any) -> str | None:
    """The Dagster UI's page of the comparison's partition of the ``comparison`` asset: its
    materializations, their runs and metadata."""
    if not dagster_url:
        return None
    key = comparison_key(doc.repo, doc.pr, doc.head_sha)
    return f"{dagster_url.rstrip('/')}/assets/comparison?{urlencode({'view': 'partitions', 'partition': key})}"


def create_app(lake: Lake, *, dagster_url: str | None = None, inspect_view_url: str | None = None) -> Starlette:
    """The web app over ``lake``; ``dagster_url`` (the Dagster UI's base URL) adds links to runs,
    ``inspect_view_url`` (Inspect's log viewer over the same lake) links to each sample's raw log."""
    refresh_s = run_refresh_seconds()
    env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(default=True))
    env.globals["tone"] = pages.tone
    # One definition of every page's path: the reports' deep links use the same (report.links).
    env.globals["pr_path"] = links.pull_request_path
    env.globals["prs_path"] = links.pull_requests_path
    env.globals["budget_path"] = links.budget_path
    env.globals["cohorts_path"] = links.cohorts_path
    env.globals["run_path"] = links.run_path
    env.globals["series_path"] = links.series_path
    env.globals["trajectories_path"] = links.trajectories_path
    env.globals["trajectory_path"] = links.trajectory_path
    env.globals["dagster_comparison"] = lambda doc: dagster_comparison_url(dagster_url, doc)

    def inspect_view_sample(row: Any) -> str | None:
        if not inspect_view_url or row is None or not row.raw_log:
            return None
        return sample_url(inspect_view_url, row.raw_log, row.sample_id, row.epoch)

    env.globals["inspect_view_sample"] = inspect_view_sample
    env.globals["inspect_view"] = inspect_view_url is not None
    env.filters["delta"] = lambda v: "–" if v is None else f"{v:+.2f}"
    env.filters["score"] = lambda v: "–" if v is None else f"{v:.2f}"
    env.filters["money"] = lambda v: "unknown" if v is None else f"${v:,.2f}"
    env.filters["percent"] = lambda v: "–" if v is None else f"{v:.0%}"

    def render(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        # Links start at the mount point (``evalrunner serve`` mounts the app under /web).
        root = str(request.scope.get("root_path", "")).rstrip("/")
        html = env.get_template(name).render(dagster_url=dagster_url, root=root, **context)
        return HTMLResponse(html, status_code=status, headers={"Content-Security-Policy": CSP})

    def document(request: Request) -> Any:
        p = request.path_params
        try:
            return pages.comparison(lake, f"{p['owner']}/{p['name']}", p["pr"], p["head"])
        except FileNotFoundError:
            raise HTTPException(404, "no such comparison") from None
        except EvalrunnerError as exc:
            raise HTTPException(400, str(exc)) from None

    async def home(request: Request) -> Response:
        return RedirectResponse(str(request.scope.get("root_path", "")).rstrip("/") + "/prs")

    async def pull_requests(request: Request) -> Response:
        return render(request, "prs.html", rows=pages.comparisons(lake))

    async def pull_request(request: Request) -> Response:
        doc = document(request)
        return render(
            request, "pr.html", doc=doc, tasks=[(t, doc.tasks[t]) for t in doc.task_order or sorted(doc.tasks)]
        )

    async def budget(request: Request) -> Response:
        doc = document(request)
        return render(request, "budget.html", doc=doc, budget=pages.budget(doc))

    async def run(request: Request) -> Response:
        doc = document(request)
        return render(request, "run.html", doc=doc, tasks=pages.run_tasks(doc), refresh_s=refresh_s)

    async def chart(request: Request) -> Response:
        doc = document(request)
        rel = LAYOUT.comparison_artifact(doc.repo, doc.pr, doc.head_sha, "chart.svg")
        if lake.exists(rel):
            svg = lake.read_bytes(rel)
        else:
            from evalrunner_assets.report.chart import render_chart

            svg = render_chart(doc)["svg"]
        return Response(svg, media_type="image/svg+xml", headers={"Content-Security-Policy": CSP})

    def _where(request: Request) -> tuple[str, str, str]:
        p = request.path_params
        return f"{p['owner']}/{p['name']}", p["commit"], p["task"]

    async def trajectory_list(request: Request) -> Response:
        repo, commit, task = _where(request)
        try:
            rows = pages.trajectories(lake, repo, commit, task)
        except EvalrunnerError as exc:
            raise HTTPException(400, str(exc)) from None
        if not rows:
            raise HTTPException(404, "no trajectories of that task at that commit")
        return render(request, "trajectories.html", repo=repo, commit=commit, task=task, rows=rows,
                      base=request.query_params.get("base"))  # fmt: skip

    async def trajectory(request: Request) -> Response:
        repo, commit, task = _where(request)
        sample, epoch_text = request.query_params.get("sample"), request.query_params.get("epoch", "1")
        if not sample or not epoch_text.isdigit():
            raise HTTPException(400, "?sample=<id>&epoch=<n> names the trajectory")
        epoch = int(epoch_text)
        base = request.query_params.get("base")
        arms = [("head", commit), ("base", base)] if base else [("commit", commit)]
        shown = []
        for arm, sha in arms:
            try:
                listed = {(r.sample_id, r.epoch): r for r in pages.trajectories(lake, repo, sha, task)}
            except EvalrunnerError as exc:
                raise HTTPException(400, str(exc)) from None
            row = listed.get((sample, epoch))
            events = pages.trajectory(lake, repo, sha, task, sample, epoch, failed=row is not None and not row.passed)
            shown.append((arm, sha, row, events))
        if all(row is None for _, _, row, _ in shown):
            raise HTTPException(404, "no such trajectory")
        return render(request, "trajectory.html", repo=repo, task=task, sample=sample, epoch=epoch, arms=shown)

    async def cohorts(request: Request) -> Response:
        return render(request, "cohorts.html", rows=pages.series_list(lake))

    def _series(request: Request) -> tuple[str, str, list[Any]]:
        p = request.path_params
        repo, branch = f"{p['owner']}/{p['name']}", request.query_params.get("branch", "main")
        try:
            points = pages.series_points(lake, repo, branch)
        except EvalrunnerError as exc:
            raise HTTPException(400, str(exc)) from None
        if not points:
            raise HTTPException(404, f"no series of {repo} on {branch}")
        return repo, branch, points

    async def series(request: Request) -> Response:
        repo, branch, points = _series(request)
        level = 1 - float((points[-1].get("settings") or {}).get("alpha", 0.05))
        return render(request, "series.html", repo=repo, branch=branch, rows=pages.series_rows(points), level=level)

    async def series_chart(request: Request) -> Response:
        from evalrunner_assets.report.series_chart import render_series_chart

        repo, branch, points = _series(request)
        svg = render_series_chart(points, repo, branch)["svg"]
        return Response(svg, media_type="image/svg+xml", headers={"Content-Security-Policy": CSP})

    async def not_found(request: Request, exc: Exception) -> Response:
        code = exc.status_code if isinstance(exc, HTTPException) else 500
        detail = exc.detail if isinstance(exc, HTTPException) else "error"
        return render(request, "error.html", status=code, code=code, detail=detail)

    P = "/prs/{owner}/{name}/{pr}/{head}"
    T = "{owner}/{name}/{commit}/{task:path}"
    routes = [
        Route("/", home),
        Route("/prs", pull_requests),
        Route(P, pull_request),
        Route(P + "/budget", budget),
        Route(P + "/run", run),
        Route(P + "/chart.svg", chart),
        Route("/cohorts", cohorts),
        Route("/cohorts/{owner}/{name}", series),
        Route("/cohorts/{owner}/{name}/chart.svg", series_chart),
        Route(f"/trajectories/{T}", trajectory_list),
        Route(f"/trajectory/{T}", trajectory),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    return Starlette(routes=routes, exception_handlers={HTTPException: not_found})
