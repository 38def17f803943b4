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
(``kubernetes/env_retention.py``) and rebuilt on their next use.

Failures are classified from the pod status: ``DeadlineExceeded`` -> TIMEOUT, eviction and image
pull errors (after a bounded wait) -> CRASHED with the cause, cancellation -> the pod is deleted
and the result is CANCELLED.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import threading
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from evalrunner_assets.execution import pod_wrapper
from evalrunner_assets.execution.kubernetes.config import (
    BACKEND_NAME,
    ENV_BUILT_ANNOTATION,
    ENV_LAST_USED_ANNOTATION,
    MERGE_PATCH,
    KubernetesSandboxConfig,
    KubernetesSandboxError,
    env_claim_name,
    env_digest_of,
    env_mount_path,
    parse_stamp,
    utc_stamp,
)
from evalrunner_assets.execution.kubernetes.payload import (
    build_repo_tarball,
)
from evalrunner_assets.execution.kubernetes.pod_run import (
    JobExists,
    PodLauncher,
    PodRun,
    _api_message,
    _delete_job,
)
from evalrunner_assets.execution.kubernetes.sessions import (
    KubernetesWarmSession,
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
    from evalrunner_assets.execution.kubernetes.env_retention import ClaimDecision


_NO_CHANNELS = (
    "channels (model gateway, package index) are not supported "
    "by the kubernetes backend yet; use the bubblewrap backend"
)


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
    ) -> None:
        if config is None:
            # No configuration: validating the empty one raises the error naming what is missing.
            config = KubernetesSandboxConfig.model_validate({})
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
            run = PodRun(self, request, tarball, cancel, started)
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
        from evalrunner_assets.execution.kubernetes.env import (
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
            run = PodRun(self, request, tarball, cancel, started)
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
                except JobExists:
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
        deleted): see :func:`~evalrunner_assets.execution.kubernetes.env_retention.prune_environment_claims`.
        Raises :class:`SandboxUnavailable` naming the call the cluster refused."""
        import kubernetes

        from evalrunner_assets.execution.kubernetes.env_retention import prune_environment_claims

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

    def _core(self) -> Any:  # a kubernetes CoreV1Api (untyped)
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


def make_api_client(config: KubernetesSandboxConfig) -> Any:  # a kubernetes ApiClient (untyped)
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


def _age_seconds(stamp: str | None, now: float | None = None) -> float | None:
    """Seconds since an annotation's UTC stamp (:func:`utc_stamp`); None when absent or unreadable."""
    when = parse_stamp(stamp)
    return None if when is None else (time.time() if now is None else now) - when
