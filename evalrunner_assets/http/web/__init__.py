"""The web app: pages people read (pull requests, trajectories) over the lake.

Server-rendered (Starlette + Jinja2, autoescaped: repository content is text, never markup), one
small stylesheet, no JavaScript and nothing fetched from elsewhere, so it works offline. Read-only.
``create_app(lake)`` builds it; ``evalrunner serve`` mounts it (see docs/web.md).
"""

from evalrunner_assets.http.web.app import create_app

__all__ = ["create_app"]
