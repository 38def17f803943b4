"""A stand-in for the GitHub REST API on loopback, for tests — not GitHub.

It serves, under a GitHub-Enterprise-style ``/api/v3`` prefix, the endpoints evalrunner's
GitHub client calls, with GitHub's response shapes (the fields PyGithub reads, and the ``url``
fields it follows): repos/{o}/{r}, pulls (list, create), pulls/{n}, pulls/{n}/files (paginated
with ``Link``), issues (create), issues/{n}/comments (list/create) and issues/comments/{id}
(edit), check-runs (create, edit, get, list for a ref), GitHub App JWT endpoints (app, repo
installation, installation access token), and /user. State lives in memory; faults (5xx,
primary/secondary rate limits, 429) can be injected for the next N matching requests.

A repository added with ``git_dir`` (a bare repository) also serves its git data as GitHub does:
branches/{b}, contents/{path} (read, and write = one real commit on a branch), git/refs
(create). Commits made through the API are real git commits in that repository, so a pipeline
that fetches from it sees them like any pushed commit; a PR opened through the API gets
``refs/pull/<n>/head`` there, as on GitHub.

``LoopbackServer`` runs any ASGI app with uvicorn on a free loopback port in a thread.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import re
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jwt
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

PREFIX = "/api/v3"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LoopbackServer:
    """An ASGI app served by a real uvicorn server on 127.0.0.1 in a background thread."""

    def __init__(self, app: Any, port: int | None = None) -> None:
        # Bind the listening socket here and hand it to uvicorn, so no other process can take
        # the port between choosing it and serving on it (as with a probed "free" port).
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", port or 0))
        self.port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            lifespan="off",
            backlog=2048,
            limit_concurrency=None,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True)

    def __enter__(self) -> LoopbackServer:
        self._thread.start()
        deadline = time.monotonic() + 60  # a loaded 2-core machine can be slow to start a thread's event loop
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"loopback server on port {self.port} did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()


@dataclass
class Fault:
    remaining: int
    status: int
    kind: str  # "error" | "after" (act, then fail: a lost response) | "primary" | "secondary" | "429"
    method: str | None
    path_re: re.Pattern[str] | None


@dataclass
class StandinState:
    repos: dict[str, dict[str, Any]] = field(default_factory=dict)
    pulls: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    files: dict[tuple[str, int], list[str]] = field(default_factory=dict)
    comments: dict[int, dict[str, Any]] = field(default_factory=dict)
    check_runs: dict[int, dict[str, Any]] = field(default_factory=dict)
    issues: dict[int, dict[str, Any]] = field(default_factory=dict)  # opened through the API
    git_dirs: dict[str, Path] = field(default_factory=dict)  # repo -> its bare git repository
    requests: list[tuple[str, str, int]] = field(default_factory=list)


class GitHubStandin:
    """In-memory GitHub REST stand-in. Credentials: one token, or a GitHub App (id + public key)."""

    def __init__(
        self,
        *,
        token: str | None = "test-token",
        token_login: str = "evalrunner-user",
        app_id: int | None = None,
        app_public_key: str | None = None,
        app_slug: str = "evalrunner",
        installation_id: int = 4242,
    ) -> None:
        self.state = StandinState()
        self.token = token
        self.token_login = token_login
        self.app_id = app_id
        self.app_public_key = app_public_key
        self.app_slug = app_slug
        self.installation_id = installation_id
        self.installation_tokens: dict[str, str] = {}  # token -> bot login
        self.faults: list[Fault] = []
        self._ids = itertools.count(1000)
        self._lock = threading.Lock()
        self.base_url = ""  # set once served
        self.server: LoopbackServer | None = None

    # -- test API ------------------------------------------------------------------------------
    def add_repo(self, full_name: str, default_branch: str = "main", git_dir: str | Path | None = None) -> None:
        """Serve ``full_name``; with ``git_dir`` (a bare repository), its branches, contents and refs too."""
        owner, name = full_name.split("/")
        if git_dir is not None:
            self.state.git_dirs[full_name] = Path(git_dir)
        self.state.repos[full_name] = {
            "id": next(self._ids),
            "name": name,
            "full_name": full_name,
            "owner": {"login": owner, "id": next(self._ids), "type": "User"},
            "private": False,
            "default_branch": default_branch,
        }

    def add_pull(
        self,
        repo: str,
        number: int,
        head_sha: str,
        base_sha: str,
        files: list[str] | None = None,
        base_ref: str = "main",
        head_ref: str = "feature",
    ) -> None:
        self.state.pulls[(repo, number)] = {
            "number": number,
            "head_sha": head_sha,
            "base_sha": base_sha,
            "base_ref": base_ref,
            "head_ref": head_ref,
        }
        self.state.files[(repo, number)] = list(files or [])

    def push(self, repo: str, number: int, head_sha: str) -> None:
        self.state.pulls[(repo, number)]["head_sha"] = head_sha

    def add_comment(self, repo: str, number: int, body: str, login: str = "someone") -> int:
        return self._new_comment(repo, number, body, login)["id"]

    def inject(
        self,
        status: int = 502,
        times: int = 1,
        *,
        kind: str = "error",
        method: str | None = None,
        path: str | None = None,
    ) -> None:
        """Fail the next ``times`` requests matching ``method``/``path`` regex.

        ``kind``: "error" answers ``status``; "after" performs the request, then answers 502;
        "primary"/"secondary" answer GitHub's 403 rate-limit responses; "429" a 429.
        """
        with self._lock:
            self.faults.append(Fault(times, status, kind, method, re.compile(path) if path else None))

    def comments_on(self, repo: str, number: int) -> list[dict[str, Any]]:
        return [c for c in self.state.comments.values() if c["_repo"] == repo and c["_issue"] == number]

    def pulls_on(self, repo: str) -> list[dict[str, Any]]:
        """Every PR of ``repo`` (added by the test or opened through the API), by number."""
        return [self._pull_json(r, n) for (r, n) in sorted(self.state.pulls) if r == repo]

    def git(self, repo: str, *args: str, data: bytes | None = None, env: dict[str, str] | None = None) -> str:
        """Run git in ``repo``'s bare repository (isolated from every user/system config)."""
        git_dir = self.state.git_dirs[repo]
        base_env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(git_dir),
            "LC_ALL": "C",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_TERMINAL_PROMPT": "0",
        }
        proc = subprocess.run(
            ["git", "--git-dir", str(git_dir), *args],
            input=data,
            capture_output=True,
            env={**base_env, **(env or {})},
            check=False,
        )
        if proc.returncode != 0:
            raise _GitFailure(f"git {' '.join(args)}: {proc.stderr.decode(errors='replace').strip()}")
        return proc.stdout.decode().strip()

    def issues_on(self, repo: str) -> list[dict[str, Any]]:
        return [i for i in self.state.issues.values() if i["_repo"] == repo]

    def check_runs_for(self, repo: str, sha: str) -> list[dict[str, Any]]:
        return [r for r in self.state.check_runs.values() if r["_repo"] == repo and r["head_sha"] == sha]

    def calls(self, method: str | None = None, contains: str = "") -> list[tuple[str, str, int]]:
        return [c for c in self.state.requests if (method is None or c[0] == method) and contains in c[1]]

    def __enter__(self) -> GitHubStandin:
        self.server = LoopbackServer(self.app())
        self.server.__enter__()
        self.base_url = self.server.url + PREFIX
        return self

    def __exit__(self, *exc: Any) -> None:
        assert self.server is not None
        self.server.__exit__(*exc)

    # -- shapes --------------------------------------------------------------------------------
    def _api(self, path: str) -> str:
        return f"{self.base_url}{path}"

    def _user(self, login: str) -> dict[str, Any]:
        return {
            "login": login,
            "id": abs(hash(login)) % 10**6,
            "type": "Bot" if login.endswith("[bot]") else "User",
            "url": self._api(f"/users/{login}"),
        }

    def _repo_json(self, full_name: str) -> dict[str, Any]:
        r = self.state.repos[full_name]
        return {**r, "url": self._api(f"/repos/{full_name}"), "html_url": f"https://github.example/{full_name}"}

    def _pull_json(self, repo: str, number: int) -> dict[str, Any]:
        p = self.state.pulls[(repo, number)]
        return {
            "id": number * 7,
            "number": number,
            "state": "open",
            "title": p.get("title") or f"PR {number}",
            "body": p.get("body"),
            "html_url": f"https://github.example/{repo}/pull/{number}",
            "url": self._api(f"/repos/{repo}/pulls/{number}"),
            "issue_url": self._api(f"/repos/{repo}/issues/{number}"),
            "head": {"sha": p["head_sha"], "ref": p["head_ref"], "repo": self._repo_json(repo)},
            "base": {"sha": p["base_sha"], "ref": p["base_ref"], "repo": self._repo_json(repo)},
            "user": self._user("author"),
            "labels": [{"name": n} for n in p.get("labels", [])],
        }

    def _new_comment(self, repo: str, number: int, body: str, login: str) -> dict[str, Any]:
        cid = next(self._ids)
        now = _now()
        c = {
            "id": cid,
            "body": body,
            "user": self._user(login),
            "created_at": now,
            "updated_at": now,
            "url": self._api(f"/repos/{repo}/issues/comments/{cid}"),
            "html_url": f"https://github.example/{repo}/pull/{number}#issuecomment-{cid}",
            "issue_url": self._api(f"/repos/{repo}/issues/{number}"),
            "_repo": repo,
            "_issue": number,
        }
        self.state.comments[cid] = c
        return c

    def _commit_json(self, repo: str, sha: str) -> dict[str, Any]:
        fields = self.git(repo, "show", "-s", "--format=%T%n%P%n%an%n%ae%n%aI%n%cn%n%ce%n%cI%n%B", sha).split("\n", 8)
        tree, parents, an, ae, ad, cn, ce, cd = fields[:8]
        message = fields[8] if len(fields) > 8 else ""
        return {
            "sha": sha,
            "url": self._api(f"/repos/{repo}/commits/{sha}"),
            "html_url": f"https://github.example/{repo}/commit/{sha}",
            "commit": {
                "message": message.strip(),
                "tree": {"sha": tree, "url": self._api(f"/repos/{repo}/git/trees/{tree}")},
                "author": {"name": an, "email": ae, "date": ad},
                "committer": {"name": cn, "email": ce, "date": cd},
            },
            "parents": [{"sha": p, "url": self._api(f"/repos/{repo}/commits/{p}")} for p in parents.split()],
        }

    def _branch_sha(self, repo: str, branch: str) -> str | None:
        try:
            return self.git(repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}^{{commit}}")
        except _GitFailure:
            return None

    def _blob(self, repo: str, ref: str, path: str) -> tuple[str, str] | None:
        """(blob sha, git mode) of ``path`` at ``ref``, or None when it is absent or not a file."""
        line = self.git(repo, "ls-tree", ref, "--", path)
        if not line:
            return None
        mode, kind, sha = line.split("\t", 1)[0].split()
        return (sha, mode) if kind == "blob" else None

    def _content_json(self, repo: str, path: str, blob: str, data: bytes | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "type": "file",
            "name": path.rsplit("/", 1)[-1],
            "path": path,
            "sha": blob,
            "size": int(self.git(repo, "cat-file", "-s", blob)),
            "url": self._api(f"/repos/{repo}/contents/{path}"),
            "html_url": f"https://github.example/{repo}/blob/{blob}/{path}",
            "git_url": self._api(f"/repos/{repo}/git/blobs/{blob}"),
            "download_url": None,
        }
        if data is not None:
            out["encoding"] = "base64"
            out["content"] = base64.encodebytes(data).decode()  # wrapped at 76 columns, as GitHub wraps it
        return out

    def _commit_file(self, repo: str, branch: str, path: str, data: bytes, message: str, login: str) -> str:
        """One real commit on ``branch`` replacing ``path`` with ``data``; its SHA."""
        parent = self._branch_sha(repo, branch)
        assert parent is not None
        blob = self.git(repo, "hash-object", "-w", "--stdin", data=data)
        old = self._blob(repo, parent, path)
        mode = old[1] if old else "100644"
        with tempfile.TemporaryDirectory(prefix="standin-index-") as tmp:
            index = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
            self.git(repo, "read-tree", parent, env=index)
            self.git(repo, "update-index", "--add", "--cacheinfo", f"{mode},{blob},{path}", env=index)
            tree = self.git(repo, "write-tree", env=index)
        who = {
            "GIT_AUTHOR_NAME": login,
            "GIT_AUTHOR_EMAIL": f"{login}@users.noreply.github.example",
            "GIT_COMMITTER_NAME": "GitHub",
            "GIT_COMMITTER_EMAIL": "noreply@github.example",
        }
        sha = self.git(repo, "commit-tree", tree, "-p", parent, data=message.encode(), env=who)
        self.git(repo, "update-ref", f"refs/heads/{branch}", sha, parent)
        return sha

    @staticmethod
    def _public(obj: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in obj.items() if not k.startswith("_")}

    # -- auth & faults -------------------------------------------------------------------------
    def _caller(self, request: Request) -> str | None:
        """The login behind the request's credentials, or None."""
        auth = request.headers.get("authorization", "")
        scheme, _, cred = auth.partition(" ")
        if scheme.lower() in ("token", "bearer") and self.token and cred == self.token:
            return self.token_login
        if cred in self.installation_tokens:
            return self.installation_tokens[cred]
        return None

    def _app_jwt_ok(self, request: Request) -> bool:
        scheme, _, cred = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not self.app_public_key:
            return False
        try:
            claims = jwt.decode(cred, self.app_public_key, algorithms=["RS256"])
        except jwt.PyJWTError:
            return False
        return str(claims.get("iss")) == str(self.app_id)

    def _fault(self, request: Request) -> Response | None:
        with self._lock:
            for f in self.faults:
                if f.remaining <= 0:
                    continue
                if f.method and f.method != request.method:
                    continue
                if f.path_re and not f.path_re.search(request.url.path):
                    continue
                f.remaining -= 1
                reset = str(int(time.time()) + 1)
                if f.kind == "primary":
                    return JSONResponse(
                        {
                            "message": "API rate limit exceeded for installation ID 1.",
                            "documentation_url": "https://docs.github.com/rest/rate-limit",
                        },
                        status_code=403,
                        headers={"x-ratelimit-limit": "5000", "x-ratelimit-remaining": "0", "x-ratelimit-reset": reset},
                    )
                if f.kind == "secondary":
                    return JSONResponse(
                        {
                            "message": "You have exceeded a secondary rate limit. "
                            "Please wait a few minutes before you try again."
                        },
                        status_code=403,
                        headers={"retry-after": "0"},
                    )
                if f.kind == "429":
                    return JSONResponse({"message": "Too Many Requests"}, status_code=429, headers={"retry-after": "0"})
                if f.kind == "after":
                    return _AFTER
                return JSONResponse({"message": "Server Error"}, status_code=f.status)
        return None

    # -- app -----------------------------------------------------------------------------------
    def app(self) -> Starlette:
        s = self

        def endpoint(fn, *, jwt_auth: bool = False):
            async def handler(request: Request) -> Response:
                resp = s._fault(request)
                lose_response = resp is _AFTER
                if lose_response:
                    resp = None
                if resp is None:
                    if jwt_auth:
                        ok = s._app_jwt_ok(request)
                        login = None
                    else:
                        login = s._caller(request)
                        ok = login is not None
                    if not ok:
                        resp = JSONResponse({"message": "Bad credentials"}, status_code=401)
                    else:
                        body = await request.body()
                        data = json.loads(body) if body else None
                        try:
                            with s._lock:
                                resp = fn(request, data, login, **request.path_params)
                        except KeyError:
                            resp = _not_found()
                if lose_response:  # the action happened, but the caller sees a gateway error
                    resp = JSONResponse({"message": "Bad Gateway"}, status_code=502)
                s.state.requests.append(
                    (
                        request.method,
                        request.url.path + (f"?{request.url.query}" if request.url.query else ""),
                        resp.status_code,
                    )
                )
                return resp

            return handler

        def repo(request, data, login, owner, name):
            return JSONResponse(s._repo_json(f"{owner}/{name}"))

        def pull(request, data, login, owner, name, number):
            return JSONResponse(s._pull_json(f"{owner}/{name}", int(number)))

        def pull_files(request, data, login, owner, name, number):
            full = f"{owner}/{name}"
            files = s.state.files[(full, int(number))]
            items = [
                {"sha": "0" * 40, "filename": f, "status": "modified", "additions": 1, "deletions": 0, "changes": 1}
                for f in files
            ]
            return _paginate(request, items)

        def list_or_create_pulls(request, data, login, owner, name):
            full = f"{owner}/{name}"
            if full not in s.state.repos:
                return _not_found()
            if request.method == "GET":
                q = request.query_params
                items = []
                for p in s.pulls_on(full):
                    if q.get("head") not in (None, f"{owner}:{p['head']['ref']}", p["head"]["ref"]):
                        continue
                    if q.get("base") not in (None, p["base"]["ref"]) or q.get("state", "open") not in ("all", "open"):
                        continue
                    items.append(p)
                return _paginate(request, items)
            head_ref = str(data["head"]).split(":", 1)[-1]
            head, base = s._branch_sha(full, head_ref), s._branch_sha(full, data["base"])
            if head is None or base is None:
                return _unprocessable("head or base branch does not exist", field="head" if head is None else "base")
            if any(p["head_ref"] == head_ref for (r, _), p in s.state.pulls.items() if r == full):
                return _unprocessable(f"A pull request already exists for {owner}:{head_ref}.")
            if head == base:
                return _unprocessable(f"No commits between {data['base']} and {head_ref}")
            number = 1 + max(
                [n for (r, n) in s.state.pulls if r == full] + [i["number"] for i in s.issues_on(full)], default=0
            )
            s.git(full, "update-ref", f"refs/pull/{number}/head", head)
            files = s.git(full, "diff", "--name-only", f"{base}...{head}").split()
            s.add_pull(full, number, head, base, files=files, base_ref=data["base"], head_ref=head_ref)
            s.state.pulls[(full, number)].update({"title": data.get("title"), "body": data.get("body")})
            return JSONResponse(s._pull_json(full, number), status_code=201)

        def add_labels(request, data, login, owner, name, number):
            p = s.state.pulls[(f"{owner}/{name}", int(number))]
            names = data if isinstance(data, list) else data["labels"]
            p["labels"] = list(dict.fromkeys([*p.get("labels", []), *names]))
            return JSONResponse([{"name": n} for n in p["labels"]])

        def branch(request, data, login, owner, name, branch):
            full = f"{owner}/{name}"
            sha = s._branch_sha(full, branch)
            if sha is None:
                return JSONResponse({"message": "Branch not found"}, status_code=404)
            return JSONResponse(
                {"name": branch, "commit": s._commit_json(full, sha), "protected": False},
            )

        def contents(request, data, login, owner, name, path):
            full = f"{owner}/{name}"
            default = s.state.repos[full]["default_branch"]
            if request.method == "GET":
                ref = request.query_params.get("ref") or default
                try:
                    found = s._blob(full, ref, path)
                except _GitFailure:
                    found = None
                if found is None:
                    return _not_found()
                raw = _blob_bytes(s, full, found[0])
                return JSONResponse(s._content_json(full, path, found[0], raw))
            branch_name = data.get("branch") or default
            tip = s._branch_sha(full, branch_name)
            if tip is None:
                return _unprocessable(f"Branch {branch_name} not found", field="branch")
            current = s._blob(full, tip, path)
            if current is not None and data.get("sha") != current[0]:
                return JSONResponse({"message": f"{path} does not match {data.get('sha')}"}, status_code=409)
            if current is None and data.get("sha"):
                return _unprocessable(f"{path} does not exist on {branch_name}", field="sha")
            raw = base64.b64decode(data["content"])
            sha = s._commit_file(full, branch_name, path, raw, data["message"], login or "someone")
            blob = s._blob(full, sha, path)
            assert blob is not None
            return JSONResponse(
                {"content": s._content_json(full, path, blob[0]), "commit": s._commit_json(full, sha)},
                status_code=200 if current is not None else 201,
            )

        def create_ref(request, data, login, owner, name):
            full = f"{owner}/{name}"
            ref, sha = str(data["ref"]), str(data["sha"])
            if not ref.startswith("refs/") or ref.count("/") < 2:
                return _unprocessable("Reference name is not valid", field="ref")
            try:
                if s.git(full, "cat-file", "-t", sha) != "commit":
                    return _unprocessable("Object is not a commit", field="sha")
                s.git(full, "update-ref", ref, sha, "")  # "": the ref must not exist yet
            except _GitFailure as exc:
                exists = "Reference already exists" if "exists" in str(exc) else f"Reference update failed: {exc}"
                return _unprocessable(exists)
            return JSONResponse(
                {
                    "ref": ref,
                    "node_id": f"REF_{next(s._ids)}",
                    "url": s._api(f"/repos/{full}/git/{ref}"),
                    "object": {"type": "commit", "sha": sha, "url": s._api(f"/repos/{full}/git/commits/{sha}")},
                },
                status_code=201,
            )

        def create_issue(request, data, login, owner, name):
            full = f"{owner}/{name}"
            if full not in s.state.repos:
                return _not_found()
            number = 1 + max(
                [n for (r, n) in s.state.pulls if r == full] + [i["number"] for i in s.issues_on(full)], default=0
            )
            iid = next(s._ids)
            issue = {
                "_repo": full,
                "id": iid,
                "number": number,
                "title": data["title"],
                "body": data.get("body") or "",
                "state": "open",
                "user": s._user(login or "someone"),
                "url": s._api(f"/repos/{full}/issues/{number}"),
                "html_url": f"{s.base_url}/{full}/issues/{number}",
                "comments_url": s._api(f"/repos/{full}/issues/{number}/comments"),
                "created_at": _now(),
                "updated_at": _now(),
            }
            s.state.issues[iid] = issue
            return JSONResponse(s._public(issue), status_code=201)

        def comments(request, data, login, owner, name, number):
            full = f"{owner}/{name}"
            if (full, int(number)) not in s.state.pulls:
                return _not_found()
            if request.method == "POST":
                c = s._new_comment(full, int(number), data["body"], login)
                return JSONResponse(s._public(c), status_code=201)
            items = sorted(s.comments_on(full, int(number)), key=lambda c: c["id"])
            return _paginate(request, [s._public(c) for c in items])

        def comment(request, data, login, owner, name, cid):
            c = s.state.comments[int(cid)]
            if c["_repo"] != f"{owner}/{name}":
                return _not_found()
            if request.method == "PATCH":
                if c["user"]["login"] != login:
                    return JSONResponse({"message": "Resource not accessible by integration"}, status_code=403)
                c["body"] = data["body"]
                c["updated_at"] = _now()
            return JSONResponse(s._public(c))

        def create_check_run(request, data, login, owner, name):
            full = f"{owner}/{name}"
            s.state.repos[full]
            rid = next(s._ids)
            run = {
                "id": rid,
                "name": data["name"],
                "head_sha": data["head_sha"],
                "status": data.get("status", "queued"),
                "conclusion": data.get("conclusion"),
                "started_at": _now(),
                "completed_at": None,
                "output": {"title": None, "summary": None, "text": None, "annotations_count": 0},
                "url": s._api(f"/repos/{full}/check-runs/{rid}"),
                "html_url": f"https://github.example/{full}/runs/{rid}",
                "details_url": None,
                "app": {"id": s.app_id or 1, "slug": s.app_slug, "name": s.app_slug},
                "_repo": full,
                "_history": [],
            }
            _apply_check(run, data)
            s.state.check_runs[rid] = run
            return JSONResponse(s._public(run), status_code=201)

        def check_run(request, data, login, owner, name, rid):
            run = s.state.check_runs[int(rid)]
            if run["_repo"] != f"{owner}/{name}":
                return _not_found()
            if request.method == "PATCH":
                _apply_check(run, data)
            return JSONResponse(s._public(run))

        def ref_check_runs(request, data, login, owner, name, ref):
            full = f"{owner}/{name}"
            runs = [
                r for r in s.check_runs_for(full, ref) if request.query_params.get("check_name") in (None, r["name"])
            ]
            runs.sort(key=lambda r: -r["id"])  # newest first, as GitHub lists them
            return _paginate(request, [s._public(r) for r in runs], list_key="check_runs")

        def app_info(request, data, login):
            return JSONResponse({"id": s.app_id, "slug": s.app_slug, "name": s.app_slug, "owner": {"login": "owner"}})

        def repo_installation(request, data, login, owner, name):
            s.state.repos[f"{owner}/{name}"]
            return JSONResponse(
                {
                    "id": s.installation_id,
                    "app_id": s.app_id,
                    "target_type": "Organization",
                    "account": {"login": owner},
                    "access_tokens_url": s._api(f"/app/installations/{s.installation_id}/access_tokens"),
                }
            )

        def access_token(request, data, login, iid):
            if int(iid) != s.installation_id:
                return _not_found()
            tok = f"ghs_{next(s._ids)}"
            s.installation_tokens[tok] = f"{s.app_slug}[bot]"
            exp = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
            return JSONResponse(
                {"token": tok, "expires_at": exp, "permissions": {"checks": "write"}, "repository_selection": "all"},
                status_code=201,
            )

        def user(request, data, login):
            return JSONResponse(s._user(login))

        R = f"{PREFIX}/repos/{{owner}}/{{name}}"
        routes = [
            Route(R, endpoint(repo), methods=["GET"]),
            Route(f"{R}/pulls", endpoint(list_or_create_pulls), methods=["GET", "POST"]),
            Route(f"{R}/branches/{{branch:path}}", endpoint(branch), methods=["GET"]),
            Route(f"{R}/contents/{{path:path}}", endpoint(contents), methods=["GET", "PUT"]),
            Route(f"{R}/git/refs", endpoint(create_ref), methods=["POST"]),
            Route(f"{R}/pulls/{{number:int}}", endpoint(pull), methods=["GET"]),
            Route(f"{R}/pulls/{{number:int}}/files", endpoint(pull_files), methods=["GET"]),
            Route(f"{R}/issues", endpoint(create_issue), methods=["POST"]),
            Route(f"{R}/issues/{{number:int}}/comments", endpoint(comments), methods=["GET", "POST"]),
            Route(f"{R}/issues/{{number:int}}/labels", endpoint(add_labels), methods=["POST"]),
            Route(f"{R}/issues/comments/{{cid:int}}", endpoint(comment), methods=["GET", "PATCH"]),
            Route(f"{R}/check-runs", endpoint(create_check_run), methods=["POST"]),
            Route(f"{R}/check-runs/{{rid:int}}", endpoint(check_run), methods=["GET", "PATCH"]),
            Route(f"{R}/commits/{{ref}}/check-runs", endpoint(ref_check_runs), methods=["GET"]),
            Route(f"{R}/installation", endpoint(repo_installation, jwt_auth=True), methods=["GET"]),
            Route(f"{PREFIX}/app", endpoint(app_info, jwt_auth=True), methods=["GET"]),
            Route(
                f"{PREFIX}/app/installations/{{iid:int}}/access_tokens",
                endpoint(access_token, jwt_auth=True),
                methods=["POST"],
            ),
            Route(f"{PREFIX}/user", endpoint(user), methods=["GET"]),
        ]
        return Starlette(routes=routes)


_AFTER: Any = object()  # sentinel: perform the request, then answer 502


class _GitFailure(RuntimeError):
    """A git command in a served repository failed (its stderr is the message)."""


def _blob_bytes(standin: GitHubStandin, repo: str, blob: str) -> bytes:
    """A blob's bytes, unchanged (``GitHubStandin.git`` decodes and strips its output)."""
    git_dir = standin.state.git_dirs[repo]
    return subprocess.run(
        ["git", "--git-dir", str(git_dir), "cat-file", "blob", blob],
        capture_output=True,
        check=True,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(git_dir)},
    ).stdout


def _unprocessable(message: str, field: str | None = None) -> JSONResponse:
    errors = [{"resource": "Request", "code": "invalid", **({"field": field} if field else {})}]
    return JSONResponse({"message": message, "errors": errors}, status_code=422)


def _apply_check(run: dict[str, Any], data: dict[str, Any]) -> None:
    if "status" in data:
        run["status"] = data["status"]
        if data["status"] != "completed":  # re-opened: GitHub clears the conclusion
            run["conclusion"] = run["completed_at"] = None
    if data.get("conclusion"):
        run["conclusion"] = data["conclusion"]
        run["status"] = "completed"  # GitHub: a conclusion completes the run
    if run["status"] == "completed":
        if not run["conclusion"]:
            raise KeyError("completed without conclusion")
        run["completed_at"] = _now()
    if "output" in data:
        run["output"].update({k: data["output"].get(k) for k in ("title", "summary", "text")})
    if "details_url" in data:
        run["details_url"] = data["details_url"]
    run["_history"].append((run["status"], run["conclusion"]))


def _paginate(request: Request, items: list[Any], list_key: str | None = None) -> JSONResponse:
    per_page = min(int(request.query_params.get("per_page", 30)), 100)
    page = int(request.query_params.get("page", 1))
    chunk = items[(page - 1) * per_page : page * per_page]
    last = max(1, -(-len(items) // per_page))
    links = []
    base = str(request.url.remove_query_params("page"))
    sep = "&" if "?" in base else "?"
    if page < last:
        links.append(f'<{base}{sep}page={page + 1}>; rel="next"')
        links.append(f'<{base}{sep}page={last}>; rel="last"')
    headers = {"link": ", ".join(links)} if links else {}
    body: Any = {"total_count": len(items), list_key: chunk} if list_key else chunk
    return JSONResponse(body, headers=headers)


def _not_found() -> JSONResponse:
    return JSONResponse({"message": "Not Found", "documentation_url": "https://docs.github.com/rest"}, status_code=404)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
