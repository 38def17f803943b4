"""Routes of the web app; what they show comes from :mod:`evalrunner_assets.http.web.pages`."""

from __future__ import annotations

import hmac
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from evalrunner_assets.errors import EvalrunnerError, InputError, UserError
from evalrunner_assets.github.inbox import DEFAULT_MORE_SAMPLES, MAX_MORE_SAMPLES
from evalrunner_assets.http.web import pages
from evalrunner_assets.pipeline.keys import comparison_key
from evalrunner_assets.report import links
from lake.layout import LAYOUT
from lake.storage import Lake
from lake.viewer import sample_url

HERE = Path(__file__).parent
# Pages never run script and never load anything from elsewhere; forms post only here.
CSP = "default-src 'none'; style-src 'self'; img-src 'self'; base-uri 'none'; form-action 'self'"
# An action's form holds one token field; anything longer is not one.
MAX_ACTION_BODY = 4096
# A pasted trace (chat JSONL, OTel spans JSON) and the report form's other fields.
MAX_REPORT_BODY = 2 * 1024 * 1024
# The bug report's pages show the originals of a trace: never kept by the browser or a proxy.
NO_STORE = {"Cache-Control": "no-store"}


# A running comparison's page reloads itself this often (a meta refresh: the pages run no script).
RUN_REFRESH_S = 5
RUN_REFRESH_ENV = "EVALRUNNER_WEB_REFRESH_S"

# Where people reach Inspect's log viewer over this lake (`evalrunner view`, or the one `serve`
# starts); the trajectory pages link each sample to its raw log there.
INSPECT_VIEW_URL_ENV = "EVALRUNNER_INSPECT_VIEW_URL"
# The same for the viewer over the annotated copies of the raw logs (`evalrunner view
# --annotated`): a sample with notes links there too.
INSPECT_ANNOTATED_VIEW_URL_ENV = "EVALRUNNER_INSPECT_ANNOTATED_VIEW_URL"


def run_refresh_seconds(environ: Mapping[str, str] | None = None) -> int:
    """Seconds between reloads of a running comparison's page: ``EVALRUNNER_WEB_REFRESH_S`` or 5."""
    value = (os.environ if environ is None else environ).get(RUN_REFRESH_ENV, "").strip()
    if not value:
        return RUN_REFRESH_S
    if not value.isdigit() or int(value) < 1:
        raise UserError(f"{RUN_REFRESH_ENV}={value!r} is not a whole number of seconds of at least 1")
    return int(value)


def inspect_view_url_from_env(
    environ: Mapping[str, str] | None = None, *, name: str = INSPECT_VIEW_URL_ENV
) -> str | None:
    """``EVALRUNNER_INSPECT_VIEW_URL`` (or the variable ``name``) checked (an http(s) URL with a
    host and no query or fragment: the viewer's routes go in the fragment), or None when unset."""
    value = (os.environ if environ is None else environ).get(name, "").strip()
    if not value:
        return None
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        raise UserError(
            f"{name}={value!r} is not an http(s) URL with a host and no query or fragment",
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


def create_app(
    lake: Lake,
    *,
    dagster_url: str | None = None,
    inspect_view_url: str | None = None,
    inspect_annotated_view_url: str | None = None,
    action_token: str | None = None,
    activate_finetune: Callable[[str, str], Any] | None = None,
    submit_wild_eval: Callable[[str, Any], Any] | None = None,
) -> Starlette:
    """The web app over ``lake``; ``dagster_url`` (the Dagster UI's base URL) adds links to runs,
    ``inspect_view_url`` (Inspect's log viewer over the same lake) links to each sample's raw log,
    ``inspect_annotated_view_url`` (the viewer over the annotated copies) to the copy of a sample
    that has notes.

    Pages are read-only. The actions need ``action_token``, the run API's token (None: actions
    are refused), given in the form or as ``Authorization: Bearer``: "Ask for more samples" on a
    PR's page queues its ``/eval more N`` in the webhook inbox; "Open PR to activate" a
    fine-tune calls ``activate_finetune(repo, name)``, the bug report's "Submit eval"
    ``submit_wild_eval(repo, submission)`` (either None: GitHub is not configured). The bug
    report's preview is not an action: it reads and redacts in memory and writes nothing."""
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
    env.globals["continuum_list_path"] = links.continuum_list_path
    env.globals["continuum_path"] = links.continuum_path
    env.globals["finetunes_path"] = links.finetunes_path
    env.globals["activate_path"] = links.activate_path
    env.globals["more_samples_path"] = links.more_samples_path
    env.globals["leaderboards_path"] = links.leaderboards_path
    env.globals["leaderboard_path"] = links.leaderboard_path
    env.globals["report_path"] = links.report_path
    env.globals["dagster_comparison"] = lambda doc: dagster_comparison_url(dagster_url, doc)

    def inspect_view_sample(row: Any) -> str | None:
        if not inspect_view_url or row is None or not row.raw_log:
            return None
        return sample_url(inspect_view_url, row.raw_log, row.sample_id, row.epoch)

    def inspect_annotated_view_sample(row: Any) -> str | None:
        if not inspect_annotated_view_url or row is None or not row.raw_log or not row.annotated:
            return None
        return sample_url(inspect_annotated_view_url, row.raw_log, row.sample_id, row.epoch)

    env.globals["inspect_view_sample"] = inspect_view_sample
    env.globals["inspect_annotated_view_sample"] = inspect_annotated_view_sample
    env.globals["inspect_view"] = inspect_view_url is not None or inspect_annotated_view_url is not None
    env.filters["delta"] = lambda v: "–" if v is None else f"{v:+.2f}"
    env.filters["score"] = lambda v: "–" if v is None else f"{v:.2f}"
    env.filters["money"] = lambda v: "unknown" if v is None else f"${v:,.2f}"
    env.filters["percent"] = lambda v: "–" if v is None else f"{v:.0%}"
    # Costs per sample are fractions of a cent: enough digits to tell candidates apart.
    env.filters["unit_cost"] = lambda v: "unknown" if v is None else f"${v:.6f}"

    def render(
        request: Request, name: str, status: int = 200, headers: Mapping[str, str] | None = None, **context: Any
    ) -> HTMLResponse:
        # Links start at the mount point (``evalrunner serve`` mounts the app under /web).
        root = str(request.scope.get("root_path", "")).rstrip("/")
        html = env.get_template(name).render(dagster_url=dagster_url, root=root, **context)
        return HTMLResponse(html, status_code=status, headers={"Content-Security-Policy": CSP, **(headers or {})})

    def authorize(given_in_form: str, request: Request) -> None:
        """The run API's token, from the form or ``Authorization: Bearer``; compared in constant time."""
        if action_token is None:
            raise HTTPException(
                503, "actions are off: set EVALRUNNER_API_TOKEN (or EVALRUNNER_API_TOKEN_FILE) where serve runs"
            )
        given = given_in_form
        header = request.headers.get("authorization", "")
        if header.startswith("Bearer "):
            given = header[len("Bearer ") :]
        if not hmac.compare_digest(given.encode(), action_token.encode()):
            raise HTTPException(401, "missing or wrong token: it is the run API's (EVALRUNNER_API_TOKEN)")

    async def form_fields(request: Request, limit: int) -> dict[str, list[str]]:
        body = await request.body()
        if len(body) > limit:
            raise HTTPException(413, f"request body over {limit:,} bytes")
        return parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)

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
        asked = request.query_params.get("more", "")
        return render(
            request,
            "pr.html",
            doc=doc,
            tasks=[(t, doc.tasks[t]) for t in doc.task_order or sorted(doc.tasks)],
            more_pr=pages.more_samples_pr(doc),
            more_default=DEFAULT_MORE_SAMPLES,
            more_max=MAX_MORE_SAMPLES,
            asked=int(asked) if asked.isdigit() else None,
            actions=action_token is not None,
        )

    async def more_samples(request: Request) -> Response:
        doc = document(request)
        fields = await form_fields(request, MAX_ACTION_BODY)
        authorize((fields.get("token") or [""])[0], request)
        text = (fields.get("n") or [str(DEFAULT_MORE_SAMPLES)])[0].strip()
        if not text.isdigit() or not 0 < int(text) <= MAX_MORE_SAMPLES:
            raise HTTPException(400, f"n={text[:20]!r}: ask for a whole number of samples from 1 to {MAX_MORE_SAMPLES}")
        try:
            await run_in_threadpool(pages.ask_for_more_samples, lake, doc, int(text))
        except pages.StaleHead as exc:
            raise HTTPException(409, str(exc)) from None
        except InputError as exc:  # not a PR comparison, no request to extend
            raise HTTPException(400, str(exc)) from None
        root = str(request.scope.get("root_path", "")).rstrip("/")
        where = links.pull_request_path(doc.repo, doc.pr, doc.head_sha)
        return RedirectResponse(f"{root}{where}?{urlencode({'more': int(text)})}", status_code=303)

    async def budget(request: Request) -> Response:
        doc = document(request)
        return render(request, "budget.html", doc=doc, budget=pages.budget(doc))

    async def run(request: Request) -> Response:
        doc = document(request)
        return render(
            request, "run.html", doc=doc, tasks=pages.run_tasks(doc), live=pages.live(lake, doc), refresh_s=refresh_s
        )

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

    async def continuum_list(request: Request) -> Response:
        return render(request, "continuum_list.html", rows=pages.frontier_list(lake))

    def _continuum(request: Request) -> pages.Continuum:
        p = request.path_params
        try:
            found = pages.continuum(lake, f"{p['owner']}/{p['name']}")
        except EvalrunnerError as exc:
            raise HTTPException(400, str(exc)) from None
        if found is None:
            raise HTTPException(404, "no frontier of that repository: `evalrunner candidates measure` builds one")
        return found

    async def continuum(request: Request) -> Response:
        found = _continuum(request)
        return render(request, "continuum.html", c=found, level=1 - (found.alpha or 0.05))

    async def continuum_chart(request: Request) -> Response:
        found = _continuum(request)
        rel = LAYOUT.continuum_frontier(found.repo, "svg")
        if lake.exists(rel):
            svg = lake.read_bytes(rel)
        else:
            from evalrunner_assets.report.frontier_chart import render_frontier_chart

            svg = render_frontier_chart(pages.continuum_rows(lake, found.repo), found.repo)["svg"]
        return Response(svg, media_type="image/svg+xml", headers={"Content-Security-Policy": CSP})

    async def finetunes(request: Request) -> Response:
        q = request.query_params
        shown = pages.finetunes(lake)
        activated = next((f for f in shown if (f.repo, f.name) == (q.get("repo"), q.get("activated"))), None)
        return render(
            request,
            "finetunes.html",
            rows=shown,
            activated=activated,
            actions=action_token is not None,
            github=activate_finetune is not None,
        )

    async def activate(request: Request) -> Response:
        p = request.path_params
        repo, name = f"{p['owner']}/{p['name']}", p["finetune"]
        fields = await form_fields(request, MAX_ACTION_BODY)
        authorize((fields.get("token") or [""])[0], request)
        if activate_finetune is None:
            raise HTTPException(503, "opening a PR needs GitHub configured where serve runs (EVALRUNNER_GITHUB_TOKEN)")
        try:
            await run_in_threadpool(activate_finetune, repo, name)
        except InputError as exc:  # no such fine-tune, an agent config without a model: line
            raise HTTPException(400, str(exc)) from None
        except EvalrunnerError as exc:  # GitHub refused or is unreachable
            raise HTTPException(502, f"GitHub did not open the PR: {exc}") from None
        root = str(request.scope.get("root_path", "")).rstrip("/")
        where = urlencode({"repo": repo, "activated": name})
        return RedirectResponse(f"{root}{links.finetunes_path()}?{where}", status_code=303)

    async def leaderboards(request: Request) -> Response:
        return render(request, "leaderboards.html", rows=pages.task_sets(lake))

    async def leaderboard(request: Request) -> Response:
        name, reference = request.path_params["task_set"], request.query_params.get("reference") or None
        try:
            board = await run_in_threadpool(pages.leaderboard, lake, name, reference)
        except EvalrunnerError as exc:
            code = 404 if "not registered" in str(exc) else 400
            raise HTTPException(code, str(exc)) from None
        return render(request, "leaderboard.html", board=board)

    def report_page(request: Request, **context: Any) -> Response:
        from evalrunner_assets.wild import default_cohort

        return render(
            request,
            "report.html",
            headers=NO_STORE,
            repos=pages.registered_repos(lake),
            kinds=pages.SCORER_KINDS,
            default_cohort=default_cohort(),
            grader=pages.DEFAULT_GRADER,
            **context,
        )

    async def report(request: Request) -> Response:
        return report_page(request, form=None, problem=None)

    def _report_submission(fields: dict[str, list[str]]) -> tuple[pages.ReportForm, Any]:
        form = pages.report_form(fields)
        return form, pages.report_submission(form)

    async def report_preview(request: Request) -> Response:
        fields = await form_fields(request, MAX_REPORT_BODY)
        try:
            form, submission = await run_in_threadpool(_report_submission, fields)
        except InputError as exc:  # not a trace, no failure in it, a field left out
            return report_page(request, form=fields, problem=str(exc), status=400)
        from evalrunner_assets.wild.preview import previews

        return render(
            request,
            "report_preview.html",
            headers=NO_STORE,
            form=form,
            submission=submission,
            shown=previews(submission.originals, submission.redacted),
            found=sorted(submission.redactor.found.items()),
            can_submit=action_token is not None and submit_wild_eval is not None,
            actions=action_token is not None,
            github=submit_wild_eval is not None,
        )

    async def report_submit(request: Request) -> Response:
        fields = await form_fields(request, MAX_REPORT_BODY)
        authorize((fields.get("token") or [""])[0], request)
        if submit_wild_eval is None:
            raise HTTPException(503, "opening a PR needs GitHub configured where serve runs (EVALRUNNER_GITHUB_TOKEN)")
        try:
            form, submission = await run_in_threadpool(_report_submission, fields)
            opened = await run_in_threadpool(submit_wild_eval, form.repo, submission)
        except InputError as exc:  # the form changed, the repository is unknown, the eval exists
            raise HTTPException(400, str(exc)) from None
        except EvalrunnerError as exc:
            raise HTTPException(502, f"GitHub did not open the PR: {exc}") from None
        return render(
            request, "report_sent.html", headers=NO_STORE, submission=submission, opened=opened, repo=form.repo
        )

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
        Route(P + "/more", more_samples, methods=["POST"]),
        Route("/cohorts", cohorts),
        Route("/cohorts/{owner}/{name}", series),
        Route("/cohorts/{owner}/{name}/chart.svg", series_chart),
        Route(f"/trajectories/{T}", trajectory_list),
        Route(f"/trajectory/{T}", trajectory),
        Route("/continuum", continuum_list),
        Route("/continuum/{owner}/{name}", continuum),
        Route("/continuum/{owner}/{name}/chart.svg", continuum_chart),
        Route("/finetunes", finetunes),
        Route("/leaderboard", leaderboards),
        Route("/leaderboard/{task_set}", leaderboard),
        Route("/report", report),
        Route("/report/preview", report_preview, methods=["POST"]),
        Route("/report/submit", report_submit, methods=["POST"]),
        Route("/finetunes/{owner}/{name}/{finetune}/activate", activate, methods=["POST"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    return Starlette(routes=routes, exception_handlers={HTTPException: not_found})
