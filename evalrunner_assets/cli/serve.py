"""``evalrunner serve``: the GitHub webhook receiver (and the SWE run API) beside ``dagster dev``
on the same home and lake. The Dagster half is the code location the repository's
``pyproject.toml`` names (``[tool.dagster]``, ``[tool.dg.project]``): ``dagster dev`` or ``dg dev``
in the repository root loads the same one; ``serve`` only adds the receiver, the instance's home
and a quiet start."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from evalrunner_assets import home
from evalrunner_assets.cli.options import Add
from evalrunner_assets.errors import UserError

DEFAULT_INSPECT_VIEW_PORT = 7575  # Inspect's own default

# The module holding the Definitions (``defs``); pyproject.toml names the same one.
CODE_LOCATION_MODULE = "evalrunner_assets.definitions"

# `dagster dev` is the documented way to run the UI and daemon together here; its notice that
# `dg dev` supersedes it is not for our users. (-W filters match a message's start; categories
# from packages cannot be named before the package is imported, so messages are used.)
_QUIET_DAGSTER_DEV = ("ignore:Function `dev_command` is superseded",)


def _telemetry_off(dagster_yaml: Path) -> None:
    """No usage telemetry and no telemetry banner, unless the instance file already says."""
    text = dagster_yaml.read_text()
    if not re.search(r"^telemetry:", text, re.MULTILINE):
        sep = "" if not text or text.endswith("\n") else "\n"
        dagster_yaml.write_text(f"{text}{sep}telemetry:\n  enabled: false\n")


def cmd_serve(args: argparse.Namespace) -> int:
    import signal

    from evalrunner_assets.http.webhook import SECRET_ENV, SECRET_FILE_ENV, load_webhook_secret, serve
    from lake import open_lake

    # Before anything starts: a receiver that cannot start should not leave `dagster dev` behind.
    if not args.insecure and load_webhook_secret() is None:
        raise UserError(
            f"no webhook secret: set {SECRET_ENV} (or {SECRET_FILE_ENV}) to the secret of the GitHub webhook",
            hint="or pass --insecure to accept unsigned deliveries on loopback (local testing only)",
        )
    from evalrunner_assets.http.web.app import INSPECT_ANNOTATED_VIEW_URL_ENV, inspect_view_url_from_env
    from evalrunner_assets.report.links import web_links

    web_links()  # a bad EVALRUNNER_WEB_URL is said now, not at the first report
    inspect_view_url = inspect_view_url_from_env()
    annotated_view_url = inspect_view_url_from_env(name=INSPECT_ANNOTATED_VIEW_URL_ENV)
    # Inspect's viewer beside the pages (their links to raw logs open it), unless one is
    # published elsewhere (EVALRUNNER_INSPECT_VIEW_URL) or this is the receiver alone; a second
    # one over the annotated log copies (Inspect's viewer reads one directory) with it.
    view_port = _port(
        args.inspect_view_port, "--inspect-view-port", 0 if args.webhook_only else DEFAULT_INSPECT_VIEW_PORT
    )
    start_viewer = inspect_view_url is None and view_port > 0
    # By default the port after the raw logs' viewer's (7576 beside 7575).
    annotated_port = _port(
        args.annotated_view_port, "--annotated-view-port", view_port + 1 if start_viewer and view_port < 65535 else 0
    )
    start_annotated = annotated_view_url is None and annotated_port > 0
    if start_viewer and start_annotated and annotated_port == view_port:
        raise UserError(f"--annotated-view-port {annotated_port} is the raw logs' viewer's port too: pick another")
    dagster = None
    if not args.webhook_only:
        dagster_home = home.ensure_dagster_home()
        _telemetry_off(dagster_home / "dagster.yaml")
        env = dict(
            os.environ,
            DAGSTER_HOME=str(dagster_home),
            PYTHONWARNINGS=",".join(filter(None, [os.environ.get("PYTHONWARNINGS"), *_QUIET_DAGSTER_DEV])),
        )
        # The `dagster` of this very environment, whatever PATH says (`dagster dev` starts the
        # webserver and the daemon with its own interpreter in turn).
        dagster = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "dagster",
                "dev",
                "-m",
                CODE_LOCATION_MODULE,
                "-p",
                str(args.dagster_port),
            ],
            env=env,
            # It is stopped with SIGINT (below), which a shell leaves ignored in background jobs.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )

    def _stop(signum: int, frame: Any) -> None:
        # Turn SIGTERM into an exception so `finally` runs and `dagster dev` is stopped too.
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, _stop)
    viewers: list[subprocess.Popen[bytes]] = []
    stopping = threading.Event()
    try:
        # The receiver writes the inbox of the same lake the sensors read.
        the_lake = open_lake(home.lake_root())
        from lake.viewer import view_command

        for start, port, annotated in ((start_viewer, view_port, False), (start_annotated, annotated_port, True)):
            if not start:
                continue
            viewer = subprocess.Popen(
                view_command(the_lake, host=args.host, port=port, annotated=annotated),
                stdout=subprocess.DEVNULL,
                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
            )
            viewers.append(viewer)
            threading.Thread(target=_say_if_viewer_exits, args=(viewer, port, annotated, stopping), daemon=True).start()
            if annotated:
                annotated_view_url = f"http://{args.host}:{port}"
            else:
                inspect_view_url = f"http://{args.host}:{port}"
        extra: list[Any] = []
        if not args.no_run_api:
            from evalrunner_assets.driver.swe import api_routes

            extra = api_routes(the_lake)
        from starlette.routing import Mount

        from evalrunner_assets.http.web import create_app

        # The pages people read (pull requests, trajectories) beside the receiver: /web.
        dagster_url = None if args.webhook_only else f"http://{args.host}:{args.dagster_port}"
        pages = create_app(
            the_lake,
            dagster_url=dagster_url,
            inspect_view_url=inspect_view_url,
            inspect_annotated_view_url=annotated_view_url,
            action_token=_action_token(),
            **_github_actions(),
        )
        extra.append(Mount("/web", app=pages))
        serve(host=args.host, port=args.port, insecure=args.insecure, lake=the_lake, extra_routes=extra)
    finally:
        stopping.set()
        for viewer in viewers:
            viewer.terminate()
        for viewer in viewers:
            try:
                viewer.wait(timeout=10)
            except subprocess.TimeoutExpired:
                viewer.kill()
        if dagster is not None:
            # SIGINT, not SIGTERM: `dagster dev` stops its webserver, daemon and code servers on
            # an interrupt; terminated, it leaves them running.
            dagster.send_signal(signal.SIGINT)
            try:
                dagster.wait(timeout=30)
            except subprocess.TimeoutExpired:
                dagster.kill()
    return 0


def _action_token() -> str | None:
    """The pages' actions take the run API's token (EVALRUNNER_API_TOKEN or its file)."""
    from evalrunner_assets.http.swe_api import load_api_token

    try:
        return load_api_token()
    except (OSError, ValueError) as exc:
        raise UserError(f"the run API's token: {exc}") from exc


def _github_actions() -> dict[str, Any]:
    """What the pages' GitHub actions call ("Open PR to activate", "Submit eval"), over one set
    of resources; none when GitHub is not configured here (the pages then say so)."""
    from evalrunner_assets.driver import finetune as finetune_run
    from evalrunner_assets.driver.comparison import default_resources

    resources = default_resources()
    github = resources.get("github")
    if github is None or not github.is_configured():
        return {}

    def submit_wild_eval(repo: str, submission: Any) -> Any:
        from evalrunner_assets.driver.wild import open_wild_pr  # Presidio: imported at first use

        return open_wild_pr(resources, repo, submission)

    return {
        "activate_finetune": lambda repo, name: finetune_run.activate_finetune(resources, repo, name),
        "submit_wild_eval": submit_wild_eval,
    }


def _port(value: int | None, option: str, default: int) -> int:
    port = default if value is None else value
    if port < 0 or port > 65535:
        raise UserError(f"{option} {port} is not a port (0 starts no viewer)")
    return port


def _say_if_viewer_exits(
    viewer: subprocess.Popen[bytes], port: int, annotated: bool, stopping: threading.Event
) -> None:
    # The pages keep running without it; their links to it then lead nowhere, so say why.
    code = viewer.wait()
    if not stopping.is_set():
        links, option = ("annotated-log", "--annotated-view-port") if annotated else ("raw-log", "--inspect-view-port")
        print(
            f"evalrunner serve: Inspect's viewer on port {port} exited ({code}): the pages' {links} links will "
            f"not open (is the port taken? {option} picks another, 0 starts none)",
            file=sys.stderr,
            flush=True,
        )


def add_parsers(add: Add) -> None:
    p = add(
        "serve",
        help="run the GitHub webhook receiver beside `dagster dev`",
        description="Run the GitHub webhook receiver (POST /webhooks/github) and, unless "
        "--webhook-only, the Dagster UI and daemon on the same home and lake.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--host", default="127.0.0.1", help="address the webhook receiver binds")
    p.add_argument("--port", type=int, default=8787, help="port of the webhook receiver")
    p.add_argument("--dagster-port", type=int, default=3000, help="port of the Dagster UI")
    p.add_argument("--webhook-only", action="store_true", help="only the receiver (e.g. in Kubernetes)")
    p.add_argument(
        "--inspect-view-port",
        type=int,
        default=None,
        help=f"port of Inspect's log viewer over the lake, which the trajectory pages link to "
        f"(default {DEFAULT_INSPECT_VIEW_PORT}, none with --webhook-only; 0 starts none; "
        "EVALRUNNER_INSPECT_VIEW_URL links to a viewer published elsewhere instead)",
    )
    p.add_argument(
        "--annotated-view-port",
        type=int,
        default=None,
        help="port of a second Inspect viewer, over the annotated copies of the raw logs (the miner's notes in "
        "the samples' metadata and transcripts), which the trajectory pages link noted samples to (default "
        "the port after --inspect-view-port's when that viewer starts; 0 starts none; "
        "EVALRUNNER_INSPECT_ANNOTATED_VIEW_URL links to one published elsewhere instead)",
    )
    p.add_argument(
        "--no-run-api",
        action="store_true",
        help="do not serve the SWE run API (/v1/runs, /v1/leaderboard; token from EVALRUNNER_API_TOKEN)",
    )
    p.add_argument("--insecure", action="store_true", help="accept unsigned deliveries (loopback only)")
    p.set_defaults(func=cmd_serve)
