"""A STAND-IN for the Kubernetes API server and kubelet, on loopback, for tests only.

It is not Kubernetes. It serves the REST endpoints the official ``kubernetes`` Python client
calls for pods -- create, read, list (label/field selectors), delete, log (follow/timestamps),
and the websocket ``attach``/``exec`` subresources (channel protocol v5/v4) -- with the real
response shapes, so the controller's code runs unmodified against it. Also PersistentVolumeClaims
(create, read, list by label, merge-patch -- a JSON-patch Content-Type with an object body is
refused as the API server refuses it -- and delete, honouring ``preconditions`` on
``resourceVersion``/``uid``: each one a directory that outlives the pods that mount it, ``subPath``
honoured; a pod naming a missing claim stays Pending, unschedulable, as with a real scheduler) and batch/v1 Jobs (create, read with a status derived from its pod, delete with its
pod): a Job's pod is created from its template at once, named ``<job>-<random>``.

Its "kubelet" runs each container's command as a local process: every emptyDir becomes a
temporary directory, mount paths in the command are rewritten to those directories, and
``python`` is this interpreter; an ``exec`` runs its command the same way, with stdin relayed
as it arrives. It does NOT enforce what only a real node enforces: read-only
mounts and root filesystem, uids, seccomp, capabilities, cgroup limits, network policy.
Scenarios a test can ask for: images that fail to pull, eviction, a namespace pod quota;
``activeDeadlineSeconds`` is honoured (the pod fails with ``DeadlineExceeded``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

_WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _log_ts() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f000Z")


class _Container:
    def __init__(self, spec: dict, init: bool):
        self.spec, self.init = spec, init
        self.name = spec["name"]
        self.proc: subprocess.Popen | None = None
        self.state: dict = {"waiting": {"reason": "PodInitializing" if not init else "ContainerCreating"}}
        self.ready = False
        self.log: list[tuple[str, bytes]] = []
        self.log_cond = threading.Condition()
        self.pump: threading.Thread | None = None
        self.started = False

    def status(self) -> dict:
        return {
            "name": self.name,
            "image": self.spec.get("image", ""),
            "imageID": "",
            "ready": self.ready,
            "restartCount": 0,
            "started": self.started,
            "state": self.state,
        }


def _descendants(roots: list[int]) -> list[int]:
    """Every live process below ``roots`` (from /proc's parent links)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found: list[int] = []
    todo = list(roots)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.append(child)
                todo.append(child)
    return found


class _Pod:
    def __init__(self, standin: KubernetesStandIn, manifest: dict):
        self.standin = standin
        self.manifest = manifest
        self.name = manifest["metadata"]["name"]
        self.namespace = manifest["metadata"]["namespace"]
        self.phase, self.reason, self.message = "Pending", None, None
        self.inits = [_Container(c, True) for c in manifest["spec"].get("initContainers", [])]
        self.mains = [_Container(c, False) for c in manifest["spec"]["containers"]]
        self.dir = Path(tempfile.mkdtemp(prefix=f"standin-{self.name}-"))
        self.volumes: dict[str, Path] = {}
        self.missing_claim: str | None = None
        for v in manifest["spec"].get("volumes", []):
            claim = v.get("persistentVolumeClaim")
            if claim is None:
                self.volumes[v["name"]] = self.dir / v["name"]
                self.volumes[v["name"]].mkdir()
            elif (self.namespace, claim["claimName"]) in standin.claims:
                self.volumes[v["name"]] = standin.claim_dir(self.namespace, claim["claimName"])
            else:
                self.missing_claim = claim["claimName"]
        self.start_time = None
        # Processes started by `exec` into this pod: a real kubelet kills everything in a
        # container when the pod goes, so these must not outlive it either.
        self.exec_procs: list[subprocess.Popen] = []
        self.lock = threading.RLock()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._kubelet, daemon=True)
        self.thread.start()

    # -- the API view

    def to_json(self) -> dict:
        with self.lock:
            m = json.loads(json.dumps(self.manifest))
            scheduled = {"type": "PodScheduled", "status": "True"}
            if self.missing_claim:
                scheduled = {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": f'persistentvolumeclaim "{self.missing_claim}" not found',
                }
            status: dict = {"phase": self.phase, "conditions": [scheduled], "qosClass": "Guaranteed"}
            if self.start_time:
                status["startTime"] = self.start_time
            if self.reason:
                status["reason"], status["message"] = self.reason, self.message
            if self.inits:
                status["initContainerStatuses"] = [c.status() for c in self.inits]
            status["containerStatuses"] = [c.status() for c in self.mains]
            m["status"] = status
            return m

    def container(self, name: str | None) -> _Container | None:
        everything = self.inits + self.mains
        if name is None:
            return self.mains[0] if len(self.mains) == 1 else None
        return next((c for c in everything if c.name == name), None)

    # -- the kubelet

    def _map(self, container: _Container) -> tuple[list[str], str]:
        mounts = {
            m["mountPath"]: str(self.volumes[m["name"]] / m.get("subPath", "")).rstrip("/")
            for m in container.spec.get("volumeMounts", [])
        }
        pattern = (
            re.compile(
                "(?<![\\w/.])(" + "|".join(re.escape(p) for p in sorted(mounts, key=len, reverse=True)) + ")(?=/|\\b|$)"
            )
            if mounts
            else None
        )

        def sub(arg: str) -> str:
            return pattern.sub(lambda m: mounts[m.group(1)], arg) if pattern else arg

        argv = [sub(a) for a in container.spec.get("command", []) + container.spec.get("args", [])]
        cwd = sub(container.spec["workingDir"]) if "workingDir" in container.spec else str(self.dir)
        return argv, cwd

    def _start(self, container: _Container, stdin: bool) -> None:
        argv, cwd = self._map(container)
        env = {"PATH": f"{self.standin.bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
        for item in container.spec.get("env", []):
            env[item["name"]] = item.get("value", "")
        container.proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        container.started = True
        container.state = {"running": {"startedAt": _now()}}
        container.ready = not container.init
        container.pump = threading.Thread(target=self._pump_log, args=(container,), daemon=True)
        container.pump.start()

    def _pump_log(self, container: _Container) -> None:
        for line in container.proc.stdout:
            with container.log_cond:
                container.log.append((_log_ts(), line))
                container.log_cond.notify_all()

    def _wait(self, container: _Container) -> int | None:
        deadline = self.manifest["spec"].get("activeDeadlineSeconds")
        while True:
            if self.stopped.is_set():
                return None
            rc = container.proc.poll()
            if rc is not None:
                # As a kubelet does: the log is complete once the container shows terminated
                # (the pump ends at EOF of the container's output, however loaded the machine).
                container.pump.join(timeout=30)
                with self.lock:
                    container.state = {
                        "terminated": {
                            "exitCode": rc if rc >= 0 else 128 - rc,
                            "reason": "Completed" if rc == 0 else "Error",
                            "startedAt": self.start_time,
                            "finishedAt": _now(),
                        }
                    }
                    container.ready = False
                with container.log_cond:
                    container.log_cond.notify_all()
                return rc
            if deadline and time.monotonic() - self._t0 > deadline:
                self._fail("DeadlineExceeded", "Pod was active on the node longer than the specified deadline")
                return None
            time.sleep(0.02)

    def _kubelet(self) -> None:
        self._t0 = time.monotonic()
        if self.missing_claim:
            return  # never scheduled
        with self.lock:
            self.start_time = _now()
        images = {c.spec.get("image") for c in self.inits + self.mains}
        if images & self.standin.bad_images:
            first = (self.inits + self.mains)[0]
            with self.lock:
                first.state = {
                    "waiting": {
                        "reason": "ErrImagePull",
                        "message": f'rpc error: code = NotFound desc = failed to pull and unpack image "{first.spec["image"]}": not found',
                    }
                }
            time.sleep(0.3)
            with self.lock:
                first.state = {
                    "waiting": {
                        "reason": "ImagePullBackOff",
                        "message": f'Back-off pulling image "{first.spec["image"]}"',
                    }
                }
            return
        for c in self.inits:
            self._start(c, stdin=bool(c.spec.get("stdin")))
            rc = self._wait(c)
            if rc is None:
                return
            if rc != 0:
                with self.lock:
                    self.phase = "Failed"
                return
        with self.lock:
            for c in self.mains:
                self._start(c, stdin=bool(c.spec.get("stdin")))
            self.phase = "Running"
        waits = [threading.Thread(target=self._wait, args=(c,), daemon=True) for c in self.mains]
        for t in waits:
            t.start()
        for t in waits:
            t.join()
        with self.lock:
            if self.phase == "Running" and all("terminated" in c.state for c in self.mains):
                codes = [c.state["terminated"]["exitCode"] for c in self.mains]
                self.phase = "Succeeded" if not any(codes) else "Failed"

    def _kill_all(self) -> None:
        # A kubelet kills every process of the pod's containers, whatever its session: collect
        # the whole tree first (a worker started in a session of its own is reparented away
        # once its parent dies), then kill it, execs included (each reaped by its _exec).
        with self.lock:
            execs = [p.pid for p in self.exec_procs if p.poll() is None]
        containers = [c.proc for c in self.inits + self.mains if c.proc and c.proc.poll() is None]
        for pid in execs + _descendants([p.pid for p in containers] + execs):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for proc in containers:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()

    def _fail(self, reason: str, message: str) -> None:
        with self.lock:
            self.stopped.set()
            self._kill_all()
            self.phase, self.reason, self.message = "Failed", reason, message
            for c in self.inits + self.mains:
                if "terminated" not in c.state:
                    c.state = {"terminated": {"exitCode": 137, "reason": "Error", "finishedAt": _now()}}
                    c.ready = False

    def delete(self) -> None:
        self.stopped.set()
        self._kill_all()
        shutil.rmtree(self.dir, ignore_errors=True)


class KubernetesStandIn:
    """Start with :meth:`start`, point a client at :meth:`write_kubeconfig`, stop with :meth:`stop`."""

    def __init__(self, *, validate_pods: bool = True):
        self.pods: dict[tuple[str, str], _Pod] = {}
        self.deleted: list[str] = []
        self.created: list[dict] = []
        self.bad_images: set[str] = set()
        self.pod_quota: int | None = None
        self.validate_pods = validate_pods
        self.requests: list[tuple[str, str]] = []
        self.execs: list[tuple[str, str, list[str]]] = []  # (pod, container, command) of every exec
        self.claims: dict[tuple[str, str], dict] = {}
        self.jobs: dict[tuple[str, str], dict] = {}
        self.jobs_created: list[dict] = []
        self.claims_root = Path(tempfile.mkdtemp(prefix="standin-claims-"))
        self.lock = threading.Lock()
        self.bin_dir = Path(tempfile.mkdtemp(prefix="standin-bin-"))
        shim = self.bin_dir / "python"  # the image's `python` is this interpreter (a venv needs exec, not a symlink)
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
        shim.chmod(0o755)
        self._server: ThreadingHTTPServer | None = None

    # -- lifecycle

    def start(self) -> str:
        handler = type("Handler", (_Handler,), {"standin": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self.url

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def stop(self) -> None:
        for pod in list(self.pods.values()):
            pod.delete()
        if self._server:
            self._server.shutdown()
            self._server.server_close()
        shutil.rmtree(self.bin_dir, ignore_errors=True)
        shutil.rmtree(self.claims_root, ignore_errors=True)

    def claim_dir(self, namespace: str, name: str) -> Path:
        path = self.claims_root / namespace / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def create_pod(self, ns: str, body: dict) -> tuple[int, dict]:
        """What POST .../pods answers (also used for a Job's pod)."""
        body.setdefault("apiVersion", "v1")
        body.setdefault("kind", "Pod")
        if self.validate_pods:
            import kubernetes_validate

            try:
                kubernetes_validate.validate(body, "1.31", strict=True)
            except Exception as exc:
                return 422, _status(422, "Invalid", f"Pod is invalid: {exc}")
        with self.lock:
            live = [p for (n, _), p in self.pods.items() if n == ns and p.phase in ("Pending", "Running")]
            if self.pod_quota is not None and len(live) >= self.pod_quota:
                return 403, _status(
                    403,
                    "Forbidden",
                    f'pods "{body["metadata"].get("name")}" is forbidden: exceeded quota: sandbox-quota, requested: pods=1, used: pods={len(live)}, limited: pods={self.pod_quota}',
                )
            meta = body.setdefault("metadata", {})
            if not meta.get("name"):
                meta["name"] = meta.get("generateName", "pod-") + uuid.uuid4().hex[:5]
            if (ns, meta["name"]) in self.pods:
                return 409, _status(409, "AlreadyExists", f'pods "{meta["name"]}" already exists')
            meta.update(
                {"namespace": ns, "uid": str(uuid.uuid4()), "creationTimestamp": _now(), "resourceVersion": "1"}
            )
            self.created.append(json.loads(json.dumps(body)))
            pod = _Pod(self, body)
            self.pods[(ns, meta["name"])] = pod
        return 201, pod.to_json()

    def job_json(self, ns: str, name: str) -> dict:
        job = json.loads(json.dumps(self.jobs[(ns, name)]))
        phases = [
            p.phase
            for (n, _), p in list(self.pods.items())
            if n == ns and p.manifest["metadata"]["labels"].get("job-name") == name
        ]
        job["status"] = {
            "active": sum(ph in ("Pending", "Running") for ph in phases) or None,
            "succeeded": sum(ph == "Succeeded" for ph in phases) or None,
            "failed": sum(ph == "Failed" for ph in phases) or None,
        }
        return job

    def list_claims(self, ns: str, q: dict) -> dict:
        items = [c for (n, _), c in list(self.claims.items()) if n == ns]
        for sel in q.get("labelSelector", []):
            for term in sel.split(","):
                k, _, v = term.partition("=")
                items = [c for c in items if (c["metadata"].get("labels") or {}).get(k) == v]
        return {
            "kind": "PersistentVolumeClaimList",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": "1"},
            "items": json.loads(json.dumps(items)),
        }

    def write_kubeconfig(self, path: Path, namespace: str = "evalrunner-sandbox") -> Path:
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "standin",
                    "clusters": [{"name": "standin", "cluster": {"server": self.url}}],
                    "users": [{"name": "standin", "user": {"token": "stand-in-token"}}],
                    "contexts": [
                        {
                            "name": "standin",
                            "context": {"cluster": "standin", "user": "standin", "namespace": namespace},
                        }
                    ],
                }
            )
        )
        return path

    # -- scenario knobs

    def evict(self, name: str, namespace: str = "evalrunner-sandbox") -> None:
        self.pods[(namespace, name)]._fail("Evicted", "The node was low on resource: memory.")

    def wait_for_pod(self, timeout: float = 10.0) -> _Pod:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.pods:
                return next(iter(self.pods.values()))
            time.sleep(0.02)
        raise TimeoutError("no pod was created")


def _status(code: int, reason: str, message: str) -> dict:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


_POD_PATH = re.compile(r"^/api/v1/namespaces/([^/]+)/pods(?:/([^/]+))?(?:/(log|exec|attach))?$")
_CLAIM_PATH = re.compile(r"^/api/v1/namespaces/([^/]+)/persistentvolumeclaims(?:/([^/]+))?$")
_JOB_PATH = re.compile(r"^/apis/batch/v1/namespaces/([^/]+)/jobs(?:/([^/]+))?$")


def _merge(into: dict, patch: dict) -> None:
    for k, v in patch.items():
        if v is None:
            into.pop(k, None)
        elif isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        else:
            into[k] = v


class _Handler(BaseHTTPRequestHandler):
    standin: KubernetesStandIn
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:  # quiet
        pass

    def _json(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _route(self):
        url = urlparse(self.path)
        m = _POD_PATH.match(url.path)
        self.standin.requests.append((self.command, url.path))
        return m, parse_qs(url.query)

    def _body(self) -> dict:
        return json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")

    def do_POST(self) -> None:
        url = urlparse(self.path)
        claim, job = _CLAIM_PATH.match(url.path), _JOB_PATH.match(url.path)
        if claim or job:
            self.standin.requests.append((self.command, url.path))
            return self._post_claim(claim.group(1)) if claim else self._post_job(job.group(1))
        m, _ = self._route()
        body = self._body()
        if not m or m.group(2):
            return self._json(404, _status(404, "NotFound", f"the server could not find {self.path}"))
        self._json(*self.standin.create_pod(m.group(1), body))

    def _validated(self, body: dict, kind: str) -> bool:
        if self.standin.validate_pods:
            import kubernetes_validate

            try:
                kubernetes_validate.validate(body, "1.31", strict=True)
            except Exception as exc:
                self._json(422, _status(422, "Invalid", f"{kind} is invalid: {exc}"))
                return False
        return True

    def _post_claim(self, ns: str) -> None:
        st, body = self.standin, self._body()
        body.setdefault("apiVersion", "v1")
        body.setdefault("kind", "PersistentVolumeClaim")
        if not self._validated(body, "PersistentVolumeClaim"):
            return
        name = body["metadata"]["name"]
        with st.lock:
            if (ns, name) in st.claims:
                return self._json(409, _status(409, "AlreadyExists", f'persistentvolumeclaims "{name}" already exists'))
            body["metadata"].update(
                {"namespace": ns, "uid": str(uuid.uuid4()), "creationTimestamp": _now(), "resourceVersion": "1"}
            )
            body["status"] = {"phase": "Bound", "accessModes": body["spec"].get("accessModes", [])}
            st.claims[(ns, name)] = body
            st.claim_dir(ns, name)
        self._json(201, body)

    def _post_job(self, ns: str) -> None:
        st, body = self.standin, self._body()
        body.setdefault("apiVersion", "batch/v1")
        body.setdefault("kind", "Job")
        if not self._validated(body, "Job"):
            return
        name = body["metadata"]["name"]
        with st.lock:
            if (ns, name) in st.jobs:
                return self._json(409, _status(409, "AlreadyExists", f'jobs.batch "{name}" already exists'))
            body["metadata"].update({"namespace": ns, "uid": str(uuid.uuid4()), "creationTimestamp": _now()})
            st.jobs[(ns, name)] = body
            st.jobs_created.append(json.loads(json.dumps(body)))
        template = json.loads(json.dumps(body["spec"]["template"]))
        labels = {**template["metadata"].get("labels", {}), "job-name": name, "batch.kubernetes.io/job-name": name}
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{name}-{uuid.uuid4().hex[:5]}",
                "labels": labels,
                "annotations": template["metadata"].get("annotations", {}),
            },
            "spec": template["spec"],
        }
        code, created = st.create_pod(ns, pod)
        if code != 201:  # as the Job controller: the Job exists, its pod was refused
            body["metadata"].setdefault("annotations", {})["standin/pod-refused"] = created.get("message", "")
        self._json(201, st.job_json(ns, name))

    def do_PATCH(self) -> None:
        url = urlparse(self.path)
        self.standin.requests.append((self.command, url.path))
        m = _CLAIM_PATH.match(url.path)
        patch = self._body()
        kind = self.headers.get("Content-Type", "").split(";")[0].strip()
        if kind == "application/json-patch+json" and not isinstance(patch, list):
            # What the API server answers when a merge patch is sent as a JSON patch.
            return self._json(
                400, _status(400, "BadRequest", "json: cannot unmarshal object into Go value of type jsonpatch.Patch")
            )
        if kind not in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
            return self._json(415, _status(415, "UnsupportedMediaType", f"the stand-in merges only, not {kind!r}"))
        claim = self.standin.claims.get((m.group(1), m.group(2))) if m and m.group(2) else None
        if claim is None:
            return self._json(404, _status(404, "NotFound", f"the server could not find {self.path}"))
        with self.standin.lock:
            _merge(claim, patch)
            meta = claim["metadata"]
            meta["resourceVersion"] = str(int(meta.get("resourceVersion", "1")) + 1)
        self._json(200, claim)

    def do_DELETE(self) -> None:
        url = urlparse(self.path)
        claim, job = _CLAIM_PATH.match(url.path), _JOB_PATH.match(url.path)
        if claim or job:
            self.standin.requests.append((self.command, url.path))
            options = self._body() if self.headers.get("Content-Length") else {}
            return self._delete_claim_or_job(claim, job, options)
        m, _ = self._route()
        st = self.standin
        if self.headers.get("Content-Length"):
            self.rfile.read(int(self.headers["Content-Length"]))
        pod = st.pods.pop((m.group(1), m.group(2)), None) if m and m.group(2) else None
        if pod is None:
            return self._json(404, _status(404, "NotFound", f'pods "{m.group(2) if m else "?"}" not found'))
        body = pod.to_json()
        pod.delete()
        st.deleted.append(pod.name)
        body["metadata"]["deletionTimestamp"] = _now()
        self._json(200, body)

    def _delete_claim_or_job(self, claim, job, options: dict) -> None:
        st = self.standin
        ns, name = (claim or job).groups()
        if claim:
            with st.lock:
                body = st.claims.get((ns, name))
                if body is None:
                    return self._json(404, _status(404, "NotFound", f'persistentvolumeclaims "{name}" not found'))
                meta, pre = body["metadata"], options.get("preconditions") or {}
                for field, shown in (("resourceVersion", "ResourceVersion"), ("uid", "UID")):
                    if pre.get(field) is not None and pre[field] != meta.get(field):
                        why = f"Precondition failed: {shown} in precondition: {pre[field]}, {shown} in object meta: {meta.get(field)}"
                        return self._json(409, _status(409, "Conflict", why))
                del st.claims[(ns, name)]
            shutil.rmtree(st.claims_root / ns / name, ignore_errors=True)
            return self._json(200, body)
        if (ns, name) not in st.jobs:
            return self._json(404, _status(404, "NotFound", f'jobs.batch "{name}" not found'))
        body = st.job_json(ns, name)
        del st.jobs[(ns, name)]
        for key, pod in list(st.pods.items()):  # propagation: its pods go too
            if key[0] == ns and pod.manifest["metadata"]["labels"].get("job-name") == name:
                st.pods.pop(key, None)
                pod.delete()
                st.deleted.append(pod.name)
        self._json(200, body)

    def do_GET(self) -> None:
        url = urlparse(self.path)
        claim, job = _CLAIM_PATH.match(url.path), _JOB_PATH.match(url.path)
        if claim and not claim.group(2):
            self.standin.requests.append((self.command, url.path))
            return self._json(200, self.standin.list_claims(claim.group(1), parse_qs(url.query)))
        if (claim and claim.group(2)) or (job and job.group(2)):
            self.standin.requests.append((self.command, url.path))
            ns, name = (claim or job).groups()
            if claim:
                found = self.standin.claims.get((ns, name))
                if found is None:
                    return self._json(404, _status(404, "NotFound", f'persistentvolumeclaims "{name}" not found'))
                return self._json(200, found)
            if (ns, name) not in self.standin.jobs:
                return self._json(404, _status(404, "NotFound", f'jobs.batch "{name}" not found'))
            return self._json(200, self.standin.job_json(ns, name))
        m, q = self._route()
        st = self.standin
        if not m:
            return self._json(404, _status(404, "NotFound", self.path))
        ns, name, sub = m.groups()
        if name is None:
            return self._json(
                200,
                {
                    "kind": "PodList",
                    "apiVersion": "v1",
                    "metadata": {"resourceVersion": "1"},
                    "items": [p.to_json() for p in self._select(ns, q)],
                },
            )
        pod = st.pods.get((ns, name))
        if pod is None:
            return self._json(404, _status(404, "NotFound", f'pods "{name}" not found'))
        if sub is None:
            return self._json(200, pod.to_json())
        container = pod.container(q.get("container", [None])[0])
        if container is None:
            return self._json(400, _status(400, "BadRequest", f"a container name must be specified for pod {name}"))
        if sub == "log":
            return self._log(container, q)
        if self.headers.get("Upgrade", "").lower() != "websocket":
            return self._json(400, _status(400, "BadRequest", "Upgrade request required"))
        if sub == "attach":
            return self._attach(container)
        return self._exec(pod, container, q.get("command", []), q.get("stdin", ["false"])[0].lower() in ("true", "1"))

    def _select(self, ns: str, q: dict) -> list[_Pod]:
        pods = [p for (n, _), p in list(self.standin.pods.items()) if n == ns]
        for sel in q.get("labelSelector", []):
            for term in sel.split(","):
                k, _, v = term.partition("=")
                pods = [p for p in pods if p.manifest["metadata"].get("labels", {}).get(k) == v]
        for sel in q.get("fieldSelector", []):
            k, _, v = sel.partition("=")
            if k == "metadata.name":
                pods = [p for p in pods if p.name == v]
        return pods

    def _log(self, container: _Container, q: dict) -> None:
        follow = q.get("follow", ["false"])[0] == "true"
        stamps = q.get("timestamps", ["false"])[0] == "true"
        tail = int(q["tailLines"][0]) if "tailLines" in q else None
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Connection", "close")
        self.end_headers()
        sent = 0
        while True:
            with container.log_cond:
                lines = container.log[sent:]
                if tail is not None and not follow:
                    lines = container.log[-tail:] if tail else []
                sent = len(container.log)
            for ts, line in lines:
                self.wfile.write((ts.encode() + b" " if stamps else b"") + line)
            if not follow or "terminated" in container.state:
                break
            with container.log_cond:
                container.log_cond.wait(0.2)
        self.close_connection = True

    # -- websocket subresources

    def _handshake(self) -> str:
        offered = [p.strip() for p in self.headers.get("Sec-WebSocket-Protocol", "").split(",") if p.strip()]
        proto = "v5.channel.k8s.io" if "v5.channel.k8s.io" in offered else "v4.channel.k8s.io"
        accept = base64.b64encode(
            hashlib.sha1((self.headers["Sec-WebSocket-Key"] + _WS_GUID).encode()).digest()
        ).decode()
        self.send_response(101, "Switching Protocols")
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.send_header("Sec-WebSocket-Protocol", proto)
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True
        return proto

    def _send(self, channel: int, data: bytes, opcode: int = 2) -> None:
        payload = bytes([channel]) + data if opcode in (1, 2) else data
        n = len(payload)
        head = bytes([0x80 | opcode])
        if n < 126:
            head += bytes([n])
        elif n < 65536:
            head += bytes([126]) + struct.pack(">H", n)
        else:
            head += bytes([127]) + struct.pack(">Q", n)
        self.wfile.write(head + payload)
        self.wfile.flush()

    def _recv(self) -> tuple[int, bytes] | None:
        first = self.rfile.read(2)
        if len(first) < 2:
            return None
        opcode, n = first[0] & 0x0F, first[1] & 0x7F
        if n == 126:
            n = struct.unpack(">H", self.rfile.read(2))[0]
        elif n == 127:
            n = struct.unpack(">Q", self.rfile.read(8))[0]
        mask = self.rfile.read(4) if first[1] & 0x80 else b"\0\0\0\0"
        data = bytearray(self.rfile.read(n))
        for i in range(len(data)):
            data[i] ^= mask[i % 4]
        return opcode, bytes(data)

    def _close(self) -> None:
        try:
            self._send(0, struct.pack(">H", 1000), opcode=8)
        except OSError:
            pass

    def _attach(self, container: _Container) -> None:
        self._handshake()
        proc = container.proc
        if proc is None or proc.stdin is None:
            self._send(3, json.dumps(_status(400, "BadRequest", "container is not running or has no stdin")).encode())
            return self._close()
        done = threading.Event()

        def reader() -> None:
            while not done.is_set():
                frame = self._recv()
                if frame is None:
                    break
                opcode, data = frame
                if opcode == 8:
                    break
                if opcode in (1, 2) and data:
                    if data[0] == 0:
                        try:
                            proc.stdin.write(data[1:])
                            proc.stdin.flush()
                        except (BrokenPipeError, ValueError):
                            pass
                    elif data[0] == 255 and data[1:2] == b"\0":
                        break  # v5 close of stdin
            try:
                proc.stdin.close()  # stdinOnce: the first attach session's end closes stdin
            except (BrokenPipeError, OSError, ValueError):
                pass

        t = threading.Thread(target=reader, daemon=True)
        t.start()
        while proc.poll() is None:
            time.sleep(0.02)
        done.set()
        self._close()
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _exec(self, pod: _Pod, container: _Container, command: list[str], want_stdin: bool = False) -> None:
        self._handshake()
        if container.proc is None or container.proc.poll() is not None:
            self._send(3, json.dumps(_status(400, "BadRequest", f"container {container.name} is not running")).encode())
            return self._close()
        argv, cwd = pod._map(_Container({**container.spec, "command": command, "args": []}, False))
        env = {"PATH": f"{self.standin.bin_dir}:{os.environ.get('PATH', '')}"}
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE if want_stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        with pod.lock:
            pod.exec_procs = [p for p in pod.exec_procs if p.poll() is None] + [proc]
        if pod.stopped.is_set():  # deleted while this exec was starting
            pod._kill_all()
        self.standin.execs.append((pod.name, container.name, list(command)))
        if want_stdin:
            # Stdin frames are relayed as they arrive (the command may read a framed request
            # without waiting for EOF); a v5 close of channel 0 or the socket's close ends it.
            def relay() -> None:
                while True:
                    frame = self._recv()
                    if frame is None or frame[0] == 8:
                        break
                    opcode, data = frame
                    if opcode in (1, 2) and data[:1] == b"\0":
                        try:
                            proc.stdin.write(data[1:])
                            proc.stdin.flush()
                        except (BrokenPipeError, ValueError, OSError):
                            pass
                    elif opcode in (1, 2) and data[:2] == b"\xff\0":
                        break
                try:
                    proc.stdin.close()
                except (BrokenPipeError, OSError, ValueError):
                    pass

            threading.Thread(target=relay, daemon=True).start()
        err: list[bytes] = []
        drain = threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True)
        drain.start()
        stdout = proc.stdout.read()
        proc.wait()
        drain.join(timeout=10)
        for i in range(0, len(stdout), 1 << 16):
            self._send(1, stdout[i : i + (1 << 16)])
        if err and err[0]:
            self._send(2, err[0])
        if proc.returncode == 0:
            status = {"metadata": {}, "status": "Success"}
        else:
            status = {
                "metadata": {},
                "status": "Failure",
                "message": f"command terminated with non-zero exit code: {proc.returncode}",
                "reason": "NonZeroExitCode",
                "details": {"causes": [{"reason": "ExitCode", "message": str(proc.returncode)}]},
            }
        self._send(3, json.dumps(status).encode())
        self._close()
        if want_stdin:
            try:
                self.connection.shutdown(socket.SHUT_RDWR)  # ends the relay thread's read
            except OSError:
                pass
