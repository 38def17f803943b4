"""Kubernetes sandbox backend: one pod per request in a dedicated, locked-down namespace.

Life of one request (both paths build the same pod with :func:`build_sandbox_pod`):

1. **Launch.** With a :class:`PodLauncher` bound (inside a Dagster step: ``resources/kubernetes.py``
   launches through ``dagster_k8s.PipesK8sClient``, so the run's event log shows the pod and the
   wrapper's Pipes summary) the launcher creates the pod; otherwise (the CLI) it is created with
   the plain Kubernetes client. This module imports no Dagster.
2. **Deliver.** The repository export never travels through credentials the pod holds: the
   controller attaches to the ``receive`` init container (``pods/attach``) and writes one framed
   payload -- a digest-checked tarball, the request's stdin and a fresh per-pod result key.
   The init container unpacks it into the ``repo`` volume, which the sandbox mounts read-only.
3. **Wait.** The ``sandbox`` container's trusted wrapper (``pod_wrapper run``) runs the untrusted
   argv as a child, captures its stdout/stderr itself (never the pod log), enforces the wall
   clock and rlimits, kills leftovers, writes an HMAC-signed ``result.json`` and exits.
4. **Collect.** The ``collector`` container (which never ran untrusted code and mounts the output
   volume read-only) is still alive; the controller runs ``pod_wrapper collect`` in it through
   ``pods/exec`` and reads the signed result, the captured stdout and the output files from the
   exec stream -- which does not pass through the pod log. Everything is re-checked here.
5. **Delete**, always, whatever happened before.

Repository environments (:meth:`KubernetesBackend.ensure_environment`): one volume claim per
environment digest, built once by a Job whose pod is run through the same steps (create,
deliver, wait, collect, delete), its record kept as an annotation on the claim; sandbox pods of
commits with that digest mount the claim read-only (``request.python_env`` = ``/envs/<digest>``).
Each pod that mounts a claim first records the use on it (``evalrunner.dev/env-last-used``, at
most once per ``env_last_used_interval_seconds`` per digest); claims unused for
``env_retain_days`` are deleted by :meth:`KubernetesBackend.prune_environments`
(``kubernetes_env_retention.py``) and rebuilt on their next use.

Failures are classified from the pod status: ``DeadlineExceeded`` -> TIMEOUT, eviction and image
pull errors (after a bounded wait) -> CRASHED with the cause, cancellation -> the pod is deleted
and the result is CANCELLED.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import math
import os
import secrets
import tarfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from evalrunner_assets.errors import EvalrunnerError
from evalrunner_assets.execution import pod_wrapper
from evalrunner_assets.execution.kubernetes_pod import (  # the pod as data; names re-exported for callers
    BACKEND_NAME,
    COLLECTOR_CONTAINER,
    CONFIG_ERRORS,
    ENV_BUILT_ANNOTATION,
    ENV_LAST_USED_ANNOTATION,
    FATAL_PULL_ERRORS,
    INIT_CONTAINER,
    MERGE_PATCH,
    MOUNTS,
    PULL_ERRORS,
    ROLE_LABEL,
    SANDBOX_CONTAINER,
    SANDBOX_ID_LABEL,
    KubernetesSandboxConfig,
    KubernetesSandboxError,
    _wrapper_command,
    build_sandbox_pod,
    env_claim_name,
    env_digest_of,
    env_mount_path,
    parse_stamp,
    pod_deadline_seconds,
    utc_stamp,
)
from evalrunner_assets.execution.kubernetes_pod import (
    NETWORK_LABEL as NETWORK_LABEL,
)
from evalrunner_assets.execution.kubernetes_pod import (
    env_job_name as env_job_name,
)
from evalrunner_assets.execution.kubernetes_pod import (
    sanitize_label_name as sanitize_label_name,
)
from evalrunner_assets.execution.kubernetes_pod import (
    sanitize_label_value as sanitize_label_value,
)
from evalrunner_assets.execution.sandbox import (
    RepoExport,
    SandboxBackend,
    SandboxRequest,
    SandboxResult,
    SandboxStatus,
    SandboxUnavailable,
)

if TYPE_CHECKING:  # environment.py loads the build machinery; only its types are needed here
    from evalrunner_assets.execution.environment import BuiltEnvironment, EnvSpec
    from evalrunner_assets.execution.kubernetes_env_retention import ClaimDecision


def build_repo_tarball(export_path: str, max_bytes: int) -> bytes:
    """A deterministic tar of the export (regular files, directories, symlinks; owners and
    times zeroed). Raises :class:`KubernetesSandboxError` naming the path when it is too big or
    holds something else."""
    root = Path(export_path)
    if not root.is_dir():
        raise KubernetesSandboxError(f"export path {export_path!r} is not a directory")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:", format=tarfile.PAX_FORMAT) as tar:
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            dirnames.sort()
            for name in sorted(dirnames) + sorted(filenames):
                path = Path(dirpath) / name
                rel = path.relative_to(root).as_posix()
                info = tar.gettarinfo(str(path), arcname=rel)
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                info.mtime = 0
                if info.isdir():
                    info.mode = 0o755
                    tar.addfile(info)
                elif info.issym():
                    tar.addfile(info)
                elif info.isreg():
                    info.mode = 0o755 if info.mode & 0o111 else 0o644
                    with open(path, "rb") as fh:
                        tar.addfile(info, fh)
                else:
                    raise KubernetesSandboxError(
                        f"export {export_path!r} holds {rel!r}, which is neither a file, a directory nor a symlink"
                    )
                if buf.tell() > max_bytes:
                    raise KubernetesSandboxError(f"export {export_path!r} exceeds repo_size_limit_bytes={max_bytes}")
    return buf.getvalue()


@dataclass(frozen=True)
class PodObservation:
    """What one read of the pod status means for the controller."""

    phase: str  # "waiting" | "deliver" | "running" | "main-exited" | "failed"
    status: SandboxStatus | None = None
    detail: str = ""
    exit_code: int | None = None
    reason: str = ""


def _get(obj: Any, *path: str) -> Any:
    for attr in path:
        if obj is None:
            return None
        obj = obj.get(attr) if isinstance(obj, dict) else getattr(obj, attr, None)
    return obj


def observe_pod(
    pod: Any,
    *,
    pull_error_since: float | None,
    unschedulable_since: float | None,
    now: float,
    config: KubernetesSandboxConfig,
) -> PodObservation:
    """Classify one pod status (a ``V1Pod``). Time-bounded states use the ``*_since`` stamps
    the caller keeps; pure otherwise."""
    phase = _get(pod, "status", "phase") or "Pending"
    reason = _get(pod, "status", "reason") or ""
    message = _get(pod, "status", "message") or ""
    if phase == "Failed" and reason == "DeadlineExceeded":
        return PodObservation(
            "failed",
            SandboxStatus.TIMEOUT,
            f"pod deadline exceeded (activeDeadlineSeconds): {message}".strip(": "),
            reason=reason,
        )
    if phase == "Failed" and reason == "Evicted":
        return PodObservation("failed", SandboxStatus.CRASHED, f"pod evicted: {message}".strip(": "), reason=reason)
    init = {s.name: s for s in (_get(pod, "status", "init_container_statuses") or [])}
    main = {s.name: s for s in (_get(pod, "status", "container_statuses") or [])}
    for status in list(init.values()) + list(main.values()):
        waiting = _get(status, "state", "waiting")
        wreason = _get(waiting, "reason") or ""
        if wreason in PULL_ERRORS:
            bounded = pull_error_since is not None and now - pull_error_since >= config.image_pull_timeout_seconds
            if wreason in FATAL_PULL_ERRORS or bounded:
                return PodObservation(
                    "failed",
                    SandboxStatus.CRASHED,
                    f"image pull failed for {_get(status, 'image') or config.image!r} in container {status.name!r}: {wreason}: {_get(waiting, 'message') or ''}".rstrip(
                        ": "
                    ),
                    reason=wreason,
                )
            return PodObservation("waiting", reason=wreason)
        if (
            wreason in CONFIG_ERRORS
            and pull_error_since is not None
            and now - pull_error_since >= config.image_pull_timeout_seconds
        ):
            return PodObservation(
                "failed",
                SandboxStatus.CRASHED,
                f"container {status.name!r} cannot start: {wreason}: {_get(waiting, 'message') or ''}",
                reason=wreason,
            )
    receive = init.get(INIT_CONTAINER)
    terminated = _get(receive, "state", "terminated")
    if terminated is not None and terminated.exit_code != 0:
        return PodObservation(
            "failed",
            SandboxStatus.CRASHED,
            f"repository delivery failed: init container exited {terminated.exit_code} ({terminated.reason or ''} {terminated.message or ''})".strip(),
            reason="InitFailed",
        )
    sandbox = main.get(SANDBOX_CONTAINER)
    sterm = _get(sandbox, "state", "terminated")
    if sterm is not None:
        return PodObservation(
            "main-exited", exit_code=sterm.exit_code, reason=sterm.reason or "", detail=sterm.message or ""
        )
    if phase == "Failed":
        return PodObservation(
            "failed",
            SandboxStatus.CRASHED,
            f"pod failed: {reason or 'unknown reason'} {message}".strip(),
            reason=reason,
        )
    if _get(receive, "state", "running") is not None:
        return PodObservation("deliver")
    for cond in _get(pod, "status", "conditions") or []:
        if cond.type == "PodScheduled" and cond.status == "False" and cond.reason == "Unschedulable":
            if unschedulable_since is not None and now - unschedulable_since >= config.schedule_timeout_seconds:
                return PodObservation(
                    "failed",
                    SandboxStatus.CRASHED,
                    f"pod unschedulable for {config.schedule_timeout_seconds:g}s: {cond.message or ''}",
                    reason="Unschedulable",
                )
            return PodObservation("waiting", reason="Unschedulable")
    if _get(sandbox, "state", "running") is not None:
        return PodObservation("running")
    return PodObservation("waiting", reason=phase)


def verify_collected(
    stream: bytes, key: bytes, request: SandboxRequest
) -> tuple[dict, bytes, dict[str, bytes], dict[str, str], bytes]:
    """Parse and check the collector's stream: the result must carry our HMAC, every file its
    digest, and the caps are enforced again here (the files are untrusted)."""
    try:
        records = pod_wrapper.read_records(stream)
    except pod_wrapper.PayloadError as exc:
        raise KubernetesSandboxError(f"collector stream malformed or truncated: {exc}") from exc
    if not records or records[0][0].get("kind") != "result":
        raise KubernetesSandboxError("collector stream does not start with the result record")
    header, raw = records[0]
    if header.get("missing"):
        raise KubernetesSandboxError(f"the wrapper wrote no result.json ({header.get('reason')})")
    result = json.loads(raw)
    if [h.get("kind") for h, _ in records[1:3]] != ["stdout", "pipes"]:
        raise KubernetesSandboxError("collector stream lacks the stdout and pipes records")
    stdout, pipes = records[1][1], records[2][1]
    expected = pod_wrapper.result_mac(key, result, stdout)
    if not hmac.compare_digest(str(result.get("mac", "")), expected):
        raise KubernetesSandboxError(
            "result.json does not carry this pod's signature: written by something other than the wrapper"
        )
    if hashlib.sha256(pipes).hexdigest() != result.get("pipes_sha256"):
        raise KubernetesSandboxError("pipes.jsonl differs from what the wrapper signed")
    outputs: dict[str, bytes] = {}
    rejected: dict[str, str] = {}
    total = 0
    ended = False
    for header, data in records[3:]:
        kind, name = header.get("kind"), str(header.get("name", ""))
        if kind == "end":
            ended = True
            continue
        if kind == "rejected":
            rejected[name] = str(header.get("reason", "rejected by the collector"))
            continue
        if kind != "file":
            raise KubernetesSandboxError(f"collector stream has an unknown record kind {kind!r}")
        parts = Path(name).parts
        if not name or name.startswith("/") or ".." in parts or "\0" in name:
            rejected[name] = "unsafe name"
        elif hashlib.sha256(data).hexdigest() != header.get("sha256"):
            rejected[name] = "digest mismatch in transit"
        elif len(outputs) >= request.limits.output_files:
            rejected[name] = f"more than {request.limits.output_files} output files"
        elif total + len(data) > request.limits.output_bytes:
            rejected[name] = f"output cap of {request.limits.output_bytes} bytes reached"
        else:
            outputs[name] = data
            total += len(data)
    if not ended:
        raise KubernetesSandboxError("collector stream ended before its end record (truncated)")
    return result, stdout, outputs, rejected, pipes


_WRAPPER_STATUS = {s.value: s for s in SandboxStatus}


# --- the backend ----------------------------------------------------------------------------


class _Cancelled(EvalrunnerError, Exception):
    pass


_NO_CHANNELS = (
    "channels (model gateway, package index) are not supported "
    "by the kubernetes backend yet; use the bubblewrap backend"
)


@dataclass(frozen=True)
class PodLaunch:
    """One sandbox pod for a :class:`PodLauncher` to run."""

    config: KubernetesSandboxConfig  # cluster credentials (in_cluster, kubeconfig, kube_context), poll interval
    namespace: str
    pod_metadata: dict[str, Any]  # labels and annotations (the launcher may name the pod itself)
    pod_spec: dict[str, Any]
    ignore_containers: frozenset[str]  # still running when the pod's work is done (the collector)
    wait_timeout_seconds: float
    messages_path: str  # where, in the pod, the trusted wrapper writes its messages
    # Once the sandbox container exited: collect and verify the result, then return the
    # wrapper's messages (parsed JSON objects; empty when none or when collection failed).
    collect_messages: Callable[[], list[dict[str, Any]]]


class _JobExists(EvalrunnerError, Exception):
    pass


class _EnvironmentCache:
    """Environments this controller process knows are built (shared by the backends made
    with :meth:`KubernetesBackend.with_launcher`), and one lock per digest."""

    def __init__(self) -> None:
        self.built: dict[str, BuiltEnvironment] = {}
        self.verified: dict[str, float] = {}  # digest -> monotonic time its claim was last read
        self.stamped: dict[str, float] = {}  # digest -> monotonic time of its last-used stamp
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def forget(self, digest: str) -> None:
        with self._guard:
            self.built.pop(digest, None)
            self.verified.pop(digest, None)
            self.stamped.pop(digest, None)

    def lock(self, digest: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(digest, threading.Lock())


def _env_error(spec: EnvSpec, why: str) -> Exception:
    from evalrunner_assets.execution.environment import EnvironmentBuildError

    return EnvironmentBuildError(
        f"{spec.source}: the environment {spec.digest} cannot be built on Kubernetes: {why}",
        source=spec.source,
        infrastructure=True,
    )


_MAX_RECORD_BYTES = 200_000  # the claim annotation that carries it (all annotations: 256 KiB)


def _checked_record(spec: EnvSpec, raw: bytes | None) -> dict[str, Any]:
    """The build's ``environment.json``: written inside the build sandbox, so only its shape
    is trusted after checking (it is informational: the package list)."""
    if not raw:
        raise _env_error(spec, "the build finished but reported no environment.json")
    if len(raw) > _MAX_RECORD_BYTES:
        raise _env_error(spec, f"its environment.json exceeds {_MAX_RECORD_BYTES} bytes")
    try:
        record = json.loads(raw)
    except ValueError as exc:
        raise _env_error(spec, "its environment.json is not JSON") from exc
    if not isinstance(record, dict) or record.get("digest") != spec.digest:
        raise _env_error(spec, "its environment.json is not this environment's record")
    packages = record.get("packages")
    if not isinstance(packages, list) or not all(isinstance(p, str) for p in packages):
        raise _env_error(spec, "its environment.json has no package list")
    return record


def _delete_job(batch: Any, name: str, namespace: str) -> None:
    import kubernetes

    try:
        batch.delete_namespaced_job(name, namespace, propagation_policy="Background", grace_period_seconds=0)
    except kubernetes.client.ApiException as exc:
        if exc.status != 404:
            raise


class PodLauncher(Protocol):
    """Creates a sandbox pod through another client (e.g. an orchestrator's, so that its event
    log shows the pod) and waits until it finishes. It calls ``launch.collect_messages()`` once
    the sandbox container has exited, before returning; it may raise (the backend classifies
    the outcome from the pod status). The backend delivers the repository, honours
    cancellation and deletes the pod."""

    def launch(self, launch: PodLaunch) -> None: ...


class KubernetesBackend(SandboxBackend):
    """Runs each :class:`SandboxRequest` in its own pod (see the module docstring)."""

    name = BACKEND_NAME

    def __init__(
        self,
        config: KubernetesSandboxConfig | None = None,
        *,
        api_client: Any | None = None,
        launcher: PodLauncher | None = None,
        _slots: threading.Semaphore | None = None,
        **fields: Any,
    ) -> None:
        # ``make_backend("kubernetes", image=..., namespace=...)`` passes config fields directly.
        if config is None:
            config = KubernetesSandboxConfig(**fields)
        elif fields:
            raise TypeError(f"pass either a KubernetesSandboxConfig or its fields, not both ({sorted(fields)})")
        self.config = config
        self._api_client = api_client
        self._launcher = launcher
        self._slots = _slots or threading.BoundedSemaphore(config.max_concurrent_pods)
        self._counts: dict[str, int] = {"cold_pods": 0, "session_pods": 0, "session_calls": 0, "env_build_pods": 0}
        self._counts_lock = threading.Lock()
        self._envs = _EnvironmentCache()

    def with_launcher(self, launcher: PodLauncher) -> KubernetesBackend:
        """The same backend (sharing its concurrency slots and pod counts), creating its pods
        through ``launcher``."""
        bound = KubernetesBackend(self.config, api_client=self._api_client, launcher=launcher, _slots=self._slots)
        bound._counts, bound._counts_lock, bound._envs = self._counts, self._counts_lock, self._envs
        return bound

    def sandbox_counts(self) -> dict[str, int]:
        """Pods this backend created: ``cold_pods`` (one request each), ``session_pods`` (warm
        sessions, each serving ``session_calls`` requests in all), ``env_build_pods``
        (repository environment builds, one per environment digest the cluster lacked)."""
        with self._counts_lock:
            return dict(self._counts)

    def _count(self, name: str, n: int = 1) -> None:
        with self._counts_lock:
            self._counts[name] += n

    # -- interface

    def runtime_digest(self) -> str:
        material = f"{BACKEND_NAME}\n{self.config.image}\nwrapper-protocol={pod_wrapper.PROTOCOL_VERSION}\n"
        return hashlib.sha256(material.encode()).hexdigest()

    def preflight(self) -> None:
        try:
            core = self._core()
            core.list_namespaced_pod(self.config.namespace, limit=1)
        except SandboxUnavailable:
            raise
        except Exception as exc:
            raise SandboxUnavailable(
                f"cannot list pods in namespace {self.config.namespace!r} ({exc}); apply deploy/k8s/ "
                "and give the controller's service account the evalrunner-sandbox-controller Role, or set "
                "KubernetesSandboxConfig.kubeconfig/in_cluster"
            ) from exc

    def run(self, request: SandboxRequest, cancel: threading.Event | None = None) -> SandboxResult:
        cancel = cancel or threading.Event()
        started = time.monotonic()
        if request.channels:
            # A pod reaches controller services through a Service its NetworkPolicy allows,
            # not a relayed unix socket; that path is not wired yet.
            return self._result(SandboxStatus.CRASHED, started, detail=_NO_CHANNELS)
        try:
            tarball = build_repo_tarball(request.export.path, self.config.repo_size_limit_bytes)
            self._note_environment_use(request)
        except KubernetesSandboxError as exc:
            return self._result(SandboxStatus.CRASHED, started, detail=str(exc))
        while not self._slots.acquire(timeout=0.2):
            if cancel.is_set():
                return self._result(SandboxStatus.CANCELLED, started, detail="cancelled while waiting for a pod slot")
        try:
            run = _PodRun(self, request, tarball, cancel, started)
            if self._launcher is not None and self.config.use_pipes:
                return run.via_launcher(self._launcher)
            return run.via_client()
        finally:
            self._slots.release()

    def open_session(self, request: SandboxRequest) -> KubernetesWarmSession:
        """A warm session pod for one (commit, task): ``request.argv`` is the worker, started
        once; each :meth:`KubernetesWarmSession.call` is one JSON request line and one reply.

        A session pod takes no slot of ``max_concurrent_pods`` (an idle one would starve cold
        runs): the warm pool's ``max_sessions`` bounds them per process, the namespace
        ResourceQuota across the cluster."""
        if request.channels:
            raise KubernetesSandboxError(_NO_CHANNELS)
        self._note_environment_use(request)
        return KubernetesWarmSession(self, request)

    def _note_environment_use(self, request: SandboxRequest) -> None:
        """Before a pod that mounts an environment claim is created: stamp the claim's last
        use (``evalrunner.dev/env-last-used``, a merge patch), at most once per
        ``env_last_used_interval_seconds`` per digest. A claim that is gone (deleted by the
        retention sweep) is forgotten here and the request refused, naming it: the next
        ``ensure_environment`` builds it again. Other API errors only skip the stamp (a live
        pod keeps its claim from the sweep anyway)."""
        import kubernetes

        if not request.python_env:
            return
        digest = env_digest_of(request.python_env)
        now = time.monotonic()
        last = self._envs.stamped.get(digest)
        if last is not None and now - last < self.config.env_last_used_interval_seconds:
            return
        try:
            claim = self._core().patch_namespaced_persistent_volume_claim(
                env_claim_name(digest),
                self.config.namespace,
                {"metadata": {"annotations": {ENV_LAST_USED_ANNOTATION: utc_stamp()}}},
                _content_type=MERGE_PATCH,
            )
        except kubernetes.client.ApiException as exc:
            if exc.status != 404:
                return
            claim = None
        if claim is None or (claim.metadata is not None and claim.metadata.deletion_timestamp is not None):
            self._envs.forget(digest)
            raise KubernetesSandboxError(
                f"request.python_env {request.python_env!r}: its volume claim {env_claim_name(digest)!r} is gone "
                "(deleted by the environment retention sweep?); the next ensure_environment builds it again"
            )
        self._envs.stamped[digest] = now

    def ensure_environment(
        self, export: RepoExport, spec: EnvSpec, *, index: str, cancel: threading.Event | None = None
    ) -> tuple[BuiltEnvironment, dict[str, Any] | None]:
        """The repository environment ``spec`` on the cluster: its claim
        ``evalrunner-env-<digest>``, built by a Job unless the claim already records a build.
        Returns the environment (``path`` is where sandbox pods see it, ``/envs/<digest>``) and
        the build's record when this call built it (None when it was there already).

        The build Job's pod is run like a sandbox pod: the repository delivered through
        ``attach``, the signed result and ``environment.json`` collected through ``exec``; on
        success the record is written on the claim (annotation ``evalrunner.dev/env-record``),
        which is what every controller checks before building. One build per digest: within
        this process a lock, across controllers the Job's fixed name (a second controller that
        finds it waits for the first one's record). Raises :class:`EnvironmentBuildError`."""
        from evalrunner_assets.execution.environment import BuiltEnvironment

        cancel = cancel or threading.Event()
        with self._envs.lock(spec.digest):
            known = self._envs.built.get(spec.digest)
            fresh = time.monotonic() - self._envs.verified.get(spec.digest, -math.inf)
            if known is not None and fresh < self.config.env_last_used_interval_seconds:
                return replace(known, reused=True, build_s=0.0), None
            # Not known, or known long enough ago that the retention sweep may have deleted it:
            # the claim says whether it exists.
            record = self._env_record(spec)
            built_record: dict[str, Any] | None = None
            if record is None:
                record, built_here = self._build_environment(export, spec, index=index, cancel=cancel)
                built_record = record if built_here else None
            built = BuiltEnvironment(
                spec.digest,
                env_mount_path(spec.digest),
                spec.kind,
                spec.source,
                reused=built_record is None,
                build_s=float(record.get("build_s", 0.0)) if built_record is not None else 0.0,
                packages=tuple(str(p) for p in record.get("packages", ())),
            )
            self._envs.built[spec.digest] = built
            self._envs.verified[spec.digest] = time.monotonic()
            return built, built_record

    def _env_record(self, spec: EnvSpec) -> dict[str, Any] | None:
        """The build record on the environment's claim; None when the claim is missing or not
        built yet."""
        import kubernetes

        try:
            claim = self._core().read_namespaced_persistent_volume_claim(
                env_claim_name(spec.digest), self.config.namespace
            )
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return None
            raise _env_error(spec, f"reading its volume claim failed: {exc.status} {exc.reason}") from exc
        annotations = (claim.metadata.annotations or {}) if claim.metadata else {}
        if claim.metadata is not None and claim.metadata.deletion_timestamp is not None:
            return None  # being deleted: not there for a new pod
        raw = annotations.get(ENV_BUILT_ANNOTATION)
        if not raw:
            return None
        age = _age_seconds(annotations.get(ENV_LAST_USED_ANNOTATION))
        if age is not None and age < self.config.env_last_used_interval_seconds:
            # Stamped recently (by any controller): this one need not stamp it again yet.
            self._envs.stamped[spec.digest] = time.monotonic() - max(age, 0.0)
        try:
            record = json.loads(raw)
        except ValueError as exc:
            raise _env_error(spec, f"its claim's {ENV_BUILT_ANNOTATION} annotation is not JSON") from exc
        return record if isinstance(record, dict) else None

    def _build_environment(
        self, export: RepoExport, spec: EnvSpec, *, index: str, cancel: threading.Event
    ) -> tuple[dict[str, Any], bool]:
        """The build's record, and whether this call built it (False: another controller's
        build of the same digest finished while this one waited)."""
        import kubernetes

        from evalrunner_assets.execution.environment import raise_build_failure
        from evalrunner_assets.execution.kubernetes_env import (
            build_environment_job,
            environment_build_request,
            environment_claim,
        )

        started = time.monotonic()
        core = self._core()
        claim = environment_claim(
            spec, self.config, size=self.config.env_claim_size, storage_class=self.config.env_storage_class
        )
        # Stamped as used from the start, so the retention sweep (which deletes only a claim
        # unchanged since it listed it) never deletes it under this build.
        claim["metadata"]["annotations"] = {ENV_LAST_USED_ANNOTATION: utc_stamp()}
        for _try in range(2):
            try:
                core.create_namespaced_persistent_volume_claim(self.config.namespace, claim)
                break
            except kubernetes.client.ApiException as exc:
                if exc.status != 409:  # 409: it exists (an earlier, failed or concurrent build)
                    raise _env_error(
                        spec, f"its volume claim was refused: {exc.status} {exc.reason}: {_api_message(exc)}"
                    ) from exc
            try:
                core.patch_namespaced_persistent_volume_claim(
                    env_claim_name(spec.digest),
                    self.config.namespace,
                    {"metadata": {"annotations": claim["metadata"]["annotations"]}},
                    _content_type=MERGE_PATCH,
                )
                break
            except kubernetes.client.ApiException as exc:
                if exc.status != 404:  # 404: deleted since (the sweep): create it again
                    raise _env_error(spec, f"stamping its volume claim failed: {exc.status} {exc.reason}") from exc
        request = environment_build_request(spec, export, index=index, index_proxy=self.config.package_index_proxy)
        try:
            tarball = build_repo_tarball(export.path, self.config.repo_size_limit_bytes)
        except KubernetesSandboxError as exc:
            raise _env_error(spec, str(exc)) from exc
        for _attempt in range(2):  # a second time only after clearing a finished stale Job
            run = _PodRun(self, request, tarball, cancel, started)
            job = build_environment_job(
                spec,
                export,
                self.config,
                index=index,
                index_proxy=self.config.package_index_proxy,
                sandbox_id=run.sandbox_id,
            )
            try:
                try:
                    result = run.via_job(job)
                except _JobExists:
                    other = self._wait_for_other_build(spec, job["metadata"]["name"], cancel)
                    if other is not None:
                        return other, False
                    continue
                if result.status is not SandboxStatus.OK:
                    raise_build_failure(spec, index, result)
                record = _checked_record(spec, result.outputs.get("environment.json"))
                record["build_s"] = round(time.monotonic() - started, 3)
                # Recorded before the Job goes: a controller waiting on the Job then finds it.
                try:
                    core.patch_namespaced_persistent_volume_claim(
                        env_claim_name(spec.digest),
                        self.config.namespace,
                        {
                            "metadata": {
                                "annotations": {
                                    ENV_BUILT_ANNOTATION: json.dumps(record, sort_keys=True),
                                    ENV_LAST_USED_ANNOTATION: utc_stamp(),
                                }
                            }
                        },
                        _content_type=MERGE_PATCH,
                    )
                    self._envs.stamped[spec.digest] = time.monotonic()
                except kubernetes.client.ApiException as exc:
                    raise _env_error(
                        spec, f"recording the build on its claim failed: {exc.status} {exc.reason}"
                    ) from exc
                return record, True
            finally:
                run.end_job()
        raise _env_error(spec, f"the build Job {job['metadata']['name']!r} exists and keeps coming back")

    def _wait_for_other_build(self, spec: EnvSpec, job_name: str, cancel: threading.Event) -> dict[str, Any] | None:
        """Another controller's build Job of this digest exists: its record once it lands, or
        None when the Job finished without one (deleted here, so the caller may build)."""
        import kubernetes

        batch = kubernetes.client.BatchV1Api(self._api_client)
        give_up = time.monotonic() + self.config.env_build_wait_seconds
        while time.monotonic() < give_up:
            record = self._env_record(spec)
            if record is not None:
                return record
            try:
                job = batch.read_namespaced_job(job_name, self.config.namespace)
            except kubernetes.client.ApiException as exc:
                if exc.status == 404:
                    return None
                raise
            status = job.status
            if status is not None and (status.succeeded or status.failed):
                record = self._env_record(spec)  # it may have landed between the two reads
                if record is None:
                    _delete_job(batch, job_name, self.config.namespace)
                return record
            if cancel.wait(self.config.poll_interval_seconds):
                raise _env_error(spec, "cancelled while another controller built it")
        raise _env_error(
            spec,
            f"another controller's build Job {job_name!r} did not finish within "
            f"env_build_wait_seconds={self.config.env_build_wait_seconds:g}",
        )

    def prune_environments(self, *, dry_run: bool = False, now: float | None = None) -> list[ClaimDecision]:
        """The retention sweep of environment claims (``env_retain_days``; 0: nothing is
        deleted): see :func:`~evalrunner_assets.execution.kubernetes_env_retention.prune_environment_claims`.
        Raises :class:`SandboxUnavailable` naming the call the cluster refused."""
        import kubernetes

        from evalrunner_assets.execution.kubernetes_env_retention import prune_environment_claims

        core = self._core()
        return prune_environment_claims(
            core,
            kubernetes.client.BatchV1Api(core.api_client),
            self.config.namespace,
            retain_s=self.config.env_retain_days * 86400,
            now=time.time() if now is None else now,
            dry_run=dry_run,
        )

    # -- plumbing

    def _core(self):
        import kubernetes

        if self._api_client is None:
            self._api_client = make_api_client(self.config)
        return kubernetes.client.CoreV1Api(self._api_client)

    def _result(self, status: SandboxStatus, started: float, **kw: Any) -> SandboxResult:
        base: dict[str, Any] = dict(
            exit_code=None,
            stdout=b"",
            stdout_truncated=False,
            stderr_tail="",
            outputs={},
            rejected_outputs={},
            detail="",
        )
        base.update(kw)
        return SandboxResult(
            status=status, duration_s=round(time.monotonic() - started, 3), backend=BACKEND_NAME, **base
        )


def make_api_client(config: KubernetesSandboxConfig):
    """An ApiClient from the in-cluster service account or a kubeconfig, per ``config``."""
    import kubernetes

    cfg = kubernetes.client.Configuration()
    in_cluster = config.in_cluster
    if in_cluster is None:
        in_cluster = bool(os.getenv("KUBERNETES_SERVICE_HOST")) and not config.kubeconfig
    try:
        if in_cluster:
            kubernetes.config.load_incluster_config(client_configuration=cfg)
        else:
            kubernetes.config.load_kube_config(
                config_file=config.kubeconfig, context=config.kube_context, client_configuration=cfg
            )
    except Exception as exc:
        where = (
            "the in-cluster service account" if in_cluster else f"kubeconfig {config.kubeconfig or '~/.kube/config'!r}"
        )
        raise SandboxUnavailable(f"cannot load Kubernetes credentials from {where}: {exc}") from exc
    return kubernetes.client.ApiClient(cfg)


class _PodRun:
    """One request's pod, from creation to deletion."""

    def __init__(
        self,
        backend: KubernetesBackend,
        request: SandboxRequest,
        tarball: bytes,
        cancel: threading.Event,
        started: float,
    ):
        self.backend, self.config = backend, backend.config
        self.request, self.tarball, self.cancel, self.started = request, tarball, cancel, started
        self.core = backend._core()
        self.sandbox_id = secrets.token_hex(8)
        self.key = secrets.token_bytes(32)
        self.pod_name = f"evalrunner-sbx-{self.sandbox_id}"
        self.delivered = False
        self.delivery_error = ""
        self.pod_seen = False

    # -- the two launch paths

    def via_client(self) -> SandboxResult:
        import kubernetes

        try:
            manifest = build_sandbox_pod(self.request, self.config, sandbox_id=self.sandbox_id, pod_name=self.pod_name)
        except KubernetesSandboxError as exc:
            return self.backend._result(SandboxStatus.CRASHED, self.started, detail=str(exc))
        try:
            self._create(manifest)
        except _Cancelled:
            return self.backend._result(
                SandboxStatus.CANCELLED, self.started, detail="cancelled before the pod was created"
            )
        except kubernetes.client.ApiException as exc:
            return self.backend._result(
                SandboxStatus.CRASHED,
                self.started,
                detail=f"pod creation refused: {exc.status} {exc.reason}: {_api_message(exc)}",
            )
        try:
            return self._wait_and_collect()
        finally:
            self._delete()

    def via_launcher(self, launcher: PodLauncher) -> SandboxResult:
        try:
            manifest = build_sandbox_pod(self.request, self.config, sandbox_id=self.sandbox_id)
        except KubernetesSandboxError as exc:
            return self.backend._result(SandboxStatus.CRASHED, self.started, detail=str(exc))
        self.collected: SandboxResult | None = None
        launch = PodLaunch(
            config=self.config,
            namespace=self.config.namespace,
            pod_metadata={k: v for k, v in manifest["metadata"].items() if k != "namespace"},
            pod_spec=manifest["spec"],
            # The collector stays up until we have read the outputs through it.
            ignore_containers=frozenset({COLLECTOR_CONTAINER}),
            wait_timeout_seconds=pod_deadline_seconds(self.request, self.config) + 60,
            # Not the pod log: messages come from the signed, collected result instead.
            messages_path=f"{MOUNTS['control']}/{pod_wrapper.PIPES_FILE}",
            collect_messages=self.collect_messages,
        )
        stop = threading.Event()
        helper = threading.Thread(target=self._launch_helper, args=(stop,), daemon=True)
        helper.start()
        pipes_error = ""
        try:
            launcher.launch(launch)
        except Exception as exc:  # classified from the pod status below; the text is kept as detail
            pipes_error = f"{type(exc).__name__}: {exc}"[:2000]
        finally:
            stop.set()
            helper.join(timeout=10)
        if self.pod_seen:
            self.backend._count("cold_pods")  # created by the launcher
        try:
            if self.collected is not None:
                return self.collected
            if self.cancel.is_set():
                return self.backend._result(SandboxStatus.CANCELLED, self.started, detail="cancelled; pod deleted")
            pod = self._find_pod()
            if pod is None:
                return self.backend._result(SandboxStatus.CRASHED, self.started, detail=f"pod vanished: {pipes_error}")
            obs = observe_pod(pod, pull_error_since=0.0, unschedulable_since=0.0, now=time.time(), config=self.config)
            if obs.phase == "failed":
                return self.backend._result(obs.status or SandboxStatus.CRASHED, self.started, detail=obs.detail)
            return self.backend._result(
                SandboxStatus.CRASHED,
                self.started,
                detail=self.delivery_error or pipes_error or f"pod ended in state {obs.phase}",
            )
        finally:
            self._delete()

    def via_job(self, job: dict) -> SandboxResult:
        """Run a Job whose pod template is this request's sandbox pod (labelled with our
        sandbox id): create it, then deliver, wait and collect exactly as for a pod we created.
        The caller ends it with :meth:`end_job` once it has recorded the outcome (a controller
        waiting on the same Job treats its disappearance as the end of the build). Raises
        :class:`_JobExists` when a Job of that name exists already."""
        import kubernetes

        batch = kubernetes.client.BatchV1Api(self.core.api_client)
        name, namespace = job["metadata"]["name"], self.config.namespace
        self.job_name = ""
        deadline = time.monotonic() + self.config.quota_wait_seconds
        backoff = 0.5
        while True:
            if self.cancel.is_set():
                return self.backend._result(SandboxStatus.CANCELLED, self.started, detail="cancelled before the Job")
            try:
                batch.create_namespaced_job(namespace, job)
                self.job_name = name
                break
            except kubernetes.client.ApiException as exc:
                if exc.status == 409:
                    raise _JobExists() from exc
                if exc.status == 403 and "exceeded quota" in _api_message(exc) and time.monotonic() < deadline:
                    self.cancel.wait(backoff)
                    backoff = min(backoff * 2, 15.0)
                    continue
                return self.backend._result(
                    SandboxStatus.CRASHED,
                    self.started,
                    detail=f"build Job creation refused: {exc.status} {exc.reason}: {_api_message(exc)}",
                )
        give_up = time.monotonic() + self.config.startup_slack_seconds + 60
        while self._find_pod() is None:  # the Job controller creates the pod
            if self.cancel.is_set():
                return self.backend._result(SandboxStatus.CANCELLED, self.started, detail="cancelled; Job deleted")
            if time.monotonic() > give_up:
                return self.backend._result(
                    SandboxStatus.CRASHED,
                    self.started,
                    detail=f"the build Job {name!r} made no pod within startup_slack_seconds + 60s",
                )
            self.cancel.wait(min(self.config.poll_interval_seconds, 0.5))
        self.backend._count("env_build_pods")
        return self._wait_and_collect()

    def end_job(self) -> None:
        """Delete the Job :meth:`via_job` created (if it did) and its pod, whose collector would
        otherwise hold it until its deadline."""
        import kubernetes

        if getattr(self, "job_name", ""):
            _delete_job(kubernetes.client.BatchV1Api(self.core.api_client), self.job_name, self.config.namespace)
            self.job_name = ""
        if self.pod_seen:
            self._delete()

    def collect_messages(self) -> list[dict[str, Any]]:
        """Called by the launcher once it saw the sandbox container exit: collect and verify
        the result, then return the wrapper's signed messages (never the child's)."""
        try:
            pod = self._find_pod()
            if pod is None:
                return []
            obs = observe_pod(pod, pull_error_since=0.0, unschedulable_since=0.0, now=time.time(), config=self.config)
            if obs.phase != "main-exited":
                return []
            self.collected, pipes_bytes = self._collect_with_pipes(obs)
        except Exception as exc:  # classified by via_launcher from the pod status
            self.delivery_error = self.delivery_error or f"collect failed: {exc}"
            return []
        messages = []
        for line in pipes_bytes.splitlines():
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if isinstance(message, dict):
                messages.append(message)
        return messages

    def _launch_helper(self, stop: threading.Event) -> None:
        """Alongside the launcher: deliver the repository and honour cancellation."""
        while not stop.wait(min(self.config.poll_interval_seconds, 0.5)):
            if self.cancel.is_set():
                self._find_pod()
                self._delete()
                return
            if self.delivered:
                continue
            pod = self._find_pod()
            if pod is None:
                continue
            if (
                observe_pod(
                    pod, pull_error_since=None, unschedulable_since=None, now=time.time(), config=self.config
                ).phase
                == "deliver"
            ):
                self._deliver()

    # -- steps

    def _create(self, manifest: dict) -> None:
        import kubernetes

        deadline = time.monotonic() + self.config.quota_wait_seconds
        backoff = 0.5
        while True:
            if self.cancel.is_set():
                raise _Cancelled()
            try:
                self.core.create_namespaced_pod(self.config.namespace, manifest)
                # Workspace pods (the Inspect provider's) are not a comparison's sandboxes.
                counter = {"session": "session_pods", "sandbox": "cold_pods"}.get(
                    manifest["metadata"]["labels"].get(ROLE_LABEL, "")
                )
                if counter:
                    self.backend._count(counter)
                return
            except kubernetes.client.ApiException as exc:
                # A full ResourceQuota is the cluster-wide concurrency cap: wait for a slot.
                if exc.status == 403 and "exceeded quota" in _api_message(exc) and time.monotonic() < deadline:
                    self.cancel.wait(backoff)
                    backoff = min(backoff * 2, 15.0)
                    continue
                raise

    def _wait_and_collect(self) -> SandboxResult:
        pull_since = unsched_since = None
        give_up = time.monotonic() + pod_deadline_seconds(self.request, self.config) + 60
        while True:
            if self.cancel.is_set():
                return self.backend._result(SandboxStatus.CANCELLED, self.started, detail="cancelled; pod deleted")
            pod = self._read_pod()
            if pod is None:
                return self.backend._result(
                    SandboxStatus.CRASHED,
                    self.started,
                    detail="pod disappeared before it finished (deleted from outside?)",
                )
            now = time.time()
            obs = observe_pod(
                pod, pull_error_since=pull_since, unschedulable_since=unsched_since, now=now, config=self.config
            )
            if obs.phase == "waiting" and obs.reason in PULL_ERRORS | CONFIG_ERRORS:
                pull_since = pull_since if pull_since is not None else now
            elif obs.phase == "waiting" and obs.reason == "Unschedulable":
                unsched_since = unsched_since if unsched_since is not None else now
            if obs.phase == "failed":
                return self.backend._result(obs.status or SandboxStatus.CRASHED, self.started, detail=obs.detail)
            if obs.phase == "main-exited":
                return self._collect(obs)
            if obs.phase == "deliver" and not self.delivered:
                if not self._deliver():
                    return self.backend._result(SandboxStatus.CRASHED, self.started, detail=self.delivery_error)
                continue
            if time.monotonic() > give_up:
                return self.backend._result(
                    SandboxStatus.TIMEOUT, self.started, detail="pod did not finish within its deadline plus 60s"
                )
            self.cancel.wait(self.config.poll_interval_seconds)

    def _deliver(self) -> bool:
        payload = pod_wrapper.encode_payload(self.tarball, self.request.stdin or b"", self.key)
        try:
            ws = self._stream(
                "connect_get_namespaced_pod_attach",
                self._pod_name(),
                self.config.namespace,
                container=INIT_CONTAINER,
                stdin=True,
                stdout=True,
                stderr=True,
                tty=False,
                _preload_content=False,
                binary=True,
            )
            try:
                for i in range(0, len(payload), 1 << 20):
                    ws.write_stdin(payload[i : i + (1 << 20)])
                ws.close_channel(0)
                ws.run_forever(timeout=60)  # until the init container exits and the stream closes
            finally:
                ws.close()
        except Exception as exc:
            self.delivery_error = f"repository delivery through the attach API failed: {exc}"
            return False
        self.delivered = True
        return True

    def _collect(self, obs: PodObservation) -> SandboxResult:
        return self._collect_with_pipes(obs)[0]

    def _collect_with_pipes(self, obs: PodObservation) -> tuple[SandboxResult, bytes]:
        result = self._collect_inner(obs)
        return result, self._pipes_bytes

    def _collect_inner(self, obs: PodObservation) -> SandboxResult:
        self._pipes_bytes = b""
        if obs.exit_code != 0:
            if obs.reason == "OOMKilled":
                return self.backend._result(
                    SandboxStatus.KILLED, self.started, detail="sandbox container OOMKilled (memory limit)"
                )
            cause = (
                "the repository was never delivered"
                if obs.exit_code == pod_wrapper.EXIT_NOT_DELIVERED
                else "the wrapper failed"
            )
            return self.backend._result(
                SandboxStatus.CRASHED,
                self.started,
                detail=f"sandbox container exited {obs.exit_code} ({obs.reason}): {cause}; {self._log_tail()}",
            )
        try:
            raw = self._exec_collect()
            result, stdout, outputs, rejected, self._pipes_bytes = verify_collected(raw, self.key, self.request)
        except Exception as exc:
            return self.backend._result(SandboxStatus.CRASHED, self.started, detail=f"collecting outputs failed: {exc}")
        status = _WRAPPER_STATUS.get(str(result.get("status")), SandboxStatus.CRASHED)
        return self.backend._result(
            status,
            self.started,
            exit_code=result.get("exit_code"),
            stdout=stdout,
            stdout_truncated=bool(result.get("stdout_truncated")),
            stderr_tail=str(result.get("stderr_tail", "")),
            outputs=outputs,
            rejected_outputs=rejected,
            detail=str(result.get("detail", "")),
        )

    def _exec_collect(self) -> bytes:
        limits = self.request.limits
        command = [
            *_wrapper_command(),
            "collect",
            "--out",
            MOUNTS["out"],
            "--control",
            MOUNTS["control"],
            "--max-files",
            str(limits.output_files),
            "--max-bytes",
            str(limits.output_bytes),
        ]
        return self._exec_records(command)

    def _exec_records(
        self,
        command: list[str],
        *,
        stdin: bytes | None = None,
        wait_seconds: float = 0.0,
        cancel: threading.Event | None = None,
        container: str = COLLECTOR_CONTAINER,
        cap: int | None = None,
    ) -> bytes:
        """Run a wrapper command in ``container`` (the collector, or a workspace pod's sandbox
        container) through the exec API; its stdout (records), at most ``cap`` bytes (default:
        the request's output and stdout caps). Raises :class:`_Cancelled` when ``cancel`` is set
        while it runs."""
        limits = self.request.limits
        ws = self._stream(
            "connect_get_namespaced_pod_exec",
            self._pod_name(),
            self.config.namespace,
            container=container,
            command=command,
            stdin=stdin is not None,
            stdout=True,
            stderr=True,
            tty=False,
            _preload_content=False,
            binary=True,
        )
        if cap is None:
            cap = limits.output_bytes + limits.stdout_bytes + (4 << 20)
        out = bytearray()
        deadline = time.monotonic() + wait_seconds + self.config.collect_slack_seconds
        try:
            if stdin is not None:
                for i in range(0, len(stdin), 1 << 20):
                    ws.write_stdin(stdin[i : i + (1 << 20)])
                ws.close_channel(0)
            while ws.is_open():
                if cancel is not None and cancel.is_set():
                    raise _Cancelled()
                if time.monotonic() > deadline:
                    raise KubernetesSandboxError(
                        f"{command[len(_wrapper_command())]} did not finish within {wait_seconds:g}s + collect_slack_seconds={self.config.collect_slack_seconds:g}"
                    )
                ws.update(timeout=0.2 if cancel is not None else 1)
                out += ws.read_channel(1, timeout=0)
                if len(out) > cap:
                    raise KubernetesSandboxError(f"collector stream exceeds {cap} bytes")
            out += ws.read_channel(1, timeout=0)
            status_raw = ws.read_channel(3, timeout=0)
        finally:
            ws.close()
        if status_raw:
            status = json.loads(status_raw)
            if status.get("status") != "Success":
                raise KubernetesSandboxError(
                    f"{command[len(_wrapper_command())]} exited unsuccessfully: {status.get('message') or status}"
                )
        return bytes(out)

    def start(self, manifest: dict, what: str) -> None:
        """Create a long-lived pod (``what``: e.g. "warm session") and wait until it runs; a pod
        that cannot start is deleted and the error says why."""
        import kubernetes

        try:
            self._create(manifest)
        except kubernetes.client.ApiException as exc:
            raise KubernetesSandboxError(
                f"{what} pod creation refused: {exc.status} {exc.reason}: {_api_message(exc)}"
            ) from exc
        try:
            failed = self.wait_running()
        except BaseException:
            self._delete()
            raise
        if failed is not None:
            self._delete()
            raise KubernetesSandboxError(f"{what} pod did not start ({failed[0].value}): {failed[1]}")

    def wait_running(self) -> tuple[SandboxStatus, str] | None:
        """Deliver the repository and wait until the sandbox container runs (a warm session's
        worker is up). None when it does; else the status and cause of why not."""
        pull_since = unsched_since = None
        give_up = time.monotonic() + self.config.startup_slack_seconds + 60
        while True:
            if self.cancel.is_set():
                return SandboxStatus.CANCELLED, "cancelled while the session pod started"
            pod = self._read_pod()
            if pod is None:
                return SandboxStatus.CRASHED, "session pod disappeared while starting (deleted from outside?)"
            now = time.time()
            obs = observe_pod(
                pod, pull_error_since=pull_since, unschedulable_since=unsched_since, now=now, config=self.config
            )
            if obs.phase == "waiting" and obs.reason in PULL_ERRORS | CONFIG_ERRORS:
                pull_since = pull_since if pull_since is not None else now
            elif obs.phase == "waiting" and obs.reason == "Unschedulable":
                unsched_since = unsched_since if unsched_since is not None else now
            if obs.phase == "failed":
                return obs.status or SandboxStatus.CRASHED, obs.detail
            if obs.phase == "main-exited":
                return (
                    SandboxStatus.CRASHED,
                    f"session wrapper exited {obs.exit_code} before serving: {self._log_tail()}",
                )
            if obs.phase == "running" and self.delivered:
                return None
            if obs.phase == "deliver" and not self.delivered:
                if not self._deliver():
                    return SandboxStatus.CRASHED, self.delivery_error
                continue
            if time.monotonic() > give_up:
                return (
                    SandboxStatus.CRASHED,
                    f"session pod not running within startup_slack_seconds={self.config.startup_slack_seconds:g} + 60s",
                )
            self.cancel.wait(self.config.poll_interval_seconds)

    def failure_cause(self) -> str:
        """What the pod status says went wrong (empty when it says nothing)."""
        try:
            pod = self._read_pod()
        except Exception:
            return ""
        if pod is None:
            return "the pod is gone (deleted from outside?)"
        obs = observe_pod(pod, pull_error_since=None, unschedulable_since=None, now=time.time(), config=self.config)
        if obs.phase == "failed":
            return obs.detail
        if obs.phase == "main-exited":
            return f"the session wrapper exited {obs.exit_code}: {self._log_tail()}"
        return ""

    def _pod_name(self) -> str:
        return self.pod_name

    def _stream(self, method: str, *args: Any, **kwargs: Any):
        """A websocket (attach/exec) opened through a private ApiClient: ``kubernetes.stream``
        swaps the client's ``request`` for the duration of the call, so on a client shared by
        several threads a concurrent REST call would go out as a websocket (and vice versa)."""
        import kubernetes
        from kubernetes.stream import stream

        private = kubernetes.client.ApiClient(self.core.api_client.configuration)
        try:
            return stream(getattr(kubernetes.client.CoreV1Api(private), method), *args, **kwargs)
        finally:
            private.close()  # the returned WSClient holds its own connection

    def _read_pod(self):
        import kubernetes

        try:
            return self.core.read_namespaced_pod(self.pod_name, self.config.namespace)
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def _find_pod(self):
        pods = self.core.list_namespaced_pod(
            self.config.namespace, label_selector=f"{SANDBOX_ID_LABEL}={self.sandbox_id}"
        ).items
        if pods:
            self.pod_name = pods[0].metadata.name  # a launcher may name the pod itself
            self.pod_seen = True
            return pods[0]
        return None

    def _log_tail(self) -> str:
        try:
            text = self.core.read_namespaced_pod_log(
                self.pod_name, self.config.namespace, container=SANDBOX_CONTAINER, tail_lines=5, _preload_content=False
            ).data
            return "log: " + text.decode("utf-8", "replace").strip()[-1000:]
        except Exception:
            return "log unavailable"

    def _delete(self) -> None:
        import kubernetes

        try:
            self.core.delete_namespaced_pod(self.pod_name, self.config.namespace, grace_period_seconds=0)
        except kubernetes.client.ApiException as exc:
            if exc.status != 404:
                raise
        except Exception:
            pass


class KubernetesWarmSession:
    """One pod that serves successive requests of one (commit, task): the worker process
    starts once (``pod_wrapper serve``), and each :meth:`call` is one exec of ``pod_wrapper
    call`` in the collector, which hands the request over through the ``inbox`` volume and
    streams back the wrapper's signed reply and the output files.

    The reply is untrusted (task code runs in the worker): it only travels back as
    ``SandboxResult.stdout``. After a timeout, cancellation or crash the session is dead, its
    pod deleted, and every later call returns CRASHED -- as for the local warm sessions."""

    def __init__(self, backend: KubernetesBackend, request: SandboxRequest) -> None:

        self.backend, self.request = backend, request
        self.dead = ""
        self.seq = 0
        started = time.monotonic()
        tarball = build_repo_tarball(request.export.path, backend.config.repo_size_limit_bytes)
        self.pod = _PodRun(backend, request, tarball, threading.Event(), started)
        manifest = build_sandbox_pod(
            request, backend.config, sandbox_id=self.pod.sandbox_id, pod_name=self.pod.pod_name, session=True
        )
        self.pod.start(manifest, "warm session")
        self.start_s = time.monotonic() - started

    @property
    def pod_name(self) -> str:
        return self.pod.pod_name

    def call(self, payload: dict, *, timeout: float, cancel: threading.Event | None = None) -> SandboxResult:
        started = time.monotonic()
        result = self.backend._result
        if self.dead:
            return result(SandboxStatus.CRASHED, started, detail=f"warm session is closed: {self.dead}")
        self.seq += 1
        self.backend._count("session_calls")
        line = json.dumps(payload, separators=(",", ":")).encode()
        limits = self.request.limits
        command = [
            *_wrapper_command(),
            "call",
            "--inbox",
            MOUNTS["inbox"],
            "--out",
            MOUNTS["out"],
            "--control",
            MOUNTS["control"],
            "--seq",
            str(self.seq),
            "--timeout",
            f"{timeout:g}",
            "--max-files",
            str(limits.output_files),
            "--max-bytes",
            str(limits.output_bytes),
        ]
        try:
            raw = self.pod._exec_records(
                command, stdin=f"{len(line)}\n".encode() + line, wait_seconds=timeout, cancel=cancel
            )
        except _Cancelled:
            self._die("cancelled")
            return result(SandboxStatus.CANCELLED, started, detail="cancelled by the caller; session pod deleted")
        except Exception as exc:
            cause = self.pod.failure_cause() or f"{type(exc).__name__}: {exc}"
            self._die(cause)
            return result(
                SandboxStatus.TIMEOUT if "deadline exceeded" in cause else SandboxStatus.CRASHED,
                started,
                detail=f"warm session call failed: {cause}",
            )
        try:
            records = pod_wrapper.read_records(raw)
        except pod_wrapper.PayloadError as exc:
            self._die(str(exc))
            return result(SandboxStatus.CRASHED, started, detail=f"warm session reply malformed: {exc}")
        if records and records[0][0].get("timeout"):
            self._die("timeout")
            return result(SandboxStatus.TIMEOUT, started, detail=f"no reply within {timeout:g}s; session pod deleted")
        try:
            reply, stdout, outputs, rejected, _ = verify_collected(raw, self.pod.key, self.request)
            if reply.get("seq") != self.seq:
                raise KubernetesSandboxError(f"signed reply is for request {reply.get('seq')!r}, not {self.seq}")
        except (KubernetesSandboxError, ValueError) as exc:
            self._die(str(exc))
            return result(SandboxStatus.CRASHED, started, detail=f"warm session reply refused: {exc}")
        status = _WRAPPER_STATUS.get(str(reply.get("status")), SandboxStatus.CRASHED)
        detail = str(reply.get("detail", ""))
        if status is not SandboxStatus.OK:
            # The worker is gone: as for the local sessions, an exit before replying is a crash.
            status = status if status is SandboxStatus.KILLED else SandboxStatus.CRASHED
            detail = f"warm worker ended: {detail}"
            self._die(detail)
        return result(
            status,
            started,
            exit_code=reply.get("exit_code"),
            stdout=stdout,
            stderr_tail=str(reply.get("stderr_tail", "")),
            outputs=outputs,
            rejected_outputs=rejected,
            detail=detail,
        )

    def _die(self, why: str) -> None:
        self.dead = self.dead or why
        self.pod._delete()

    def close(self) -> None:
        self._die("closed")

    def __enter__(self) -> KubernetesWarmSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _age_seconds(stamp: str | None, now: float | None = None) -> float | None:
    """Seconds since an annotation's UTC stamp (:func:`utc_stamp`); None when absent or unreadable."""
    when = parse_stamp(stamp)
    return None if when is None else (time.time() if now is None else now) - when


def _api_message(exc: Any) -> str:
    try:
        return json.loads(exc.body).get("message", "") if exc.body else str(exc.reason)
    except (ValueError, AttributeError):
        return str(exc.body)
