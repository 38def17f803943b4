"""One request's pod, from creation to deletion (:class:`PodRun`): created with the plain
Kubernetes client or through a :class:`PodLauncher`, delivered, waited for, collected and
deleted (the steps in :mod:`evalrunner_assets.execution.kubernetes.backend`'s docstring).
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from evalrunner_assets.errors import EvalrunnerError
from evalrunner_assets.execution import pod_wrapper
from evalrunner_assets.execution.kubernetes.config import (
    COLLECTOR_CONTAINER,
    CONFIG_ERRORS,
    INIT_CONTAINER,
    MOUNTS,
    PULL_ERRORS,
    ROLE_LABEL,
    SANDBOX_CONTAINER,
    SANDBOX_ID_LABEL,
    KubernetesSandboxConfig,
    KubernetesSandboxError,
)
from evalrunner_assets.execution.kubernetes.manifests import (
    _wrapper_command,
    build_sandbox_pod,
    pod_deadline_seconds,
)
from evalrunner_assets.execution.kubernetes.observe import (
    PodObservation,
    observe_pod,
)
from evalrunner_assets.execution.kubernetes.payload import (
    WRAPPER_STATUS,
    verify_collected,
)
from evalrunner_assets.execution.sandbox import (
    SandboxRequest,
    SandboxResult,
    SandboxStatus,
)


class PodCancelled(EvalrunnerError, Exception):
    pass


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


class JobExists(EvalrunnerError, Exception):
    pass


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


class PodBackend(Protocol):
    """What a :class:`PodRun` (and a warm session's pod) needs of the backend that owns it:
    its configuration, its Kubernetes client, its result builder and its pod counts
    (:class:`~evalrunner_assets.execution.kubernetes.backend.KubernetesBackend`)."""

    config: KubernetesSandboxConfig

    def _core(self) -> Any: ...

    def _result(self, status: SandboxStatus, started: float, **kw: Any) -> SandboxResult: ...

    def _count(self, name: str, n: int = 1) -> None: ...


class PodRun:
    """One request's pod, from creation to deletion."""

    def __init__(
        self,
        backend: PodBackend,
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
        except PodCancelled:
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
        :class:`JobExists` when a Job of that name exists already."""
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
                    raise JobExists() from exc
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
                raise PodCancelled()
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
        status = WRAPPER_STATUS.get(str(result.get("status")), SandboxStatus.CRASHED)
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
        the request's output and stdout caps). Raises :class:`PodCancelled` when ``cancel`` is set
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
                    raise PodCancelled()
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

    def _stream(self, method: str, *args: Any, **kwargs: Any) -> Any:  # a kubernetes WSClient (untyped)
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

    def _read_pod(self) -> Any:  # a kubernetes V1Pod (untyped), None when gone
        import kubernetes

        try:
            return self.core.read_namespaced_pod(self.pod_name, self.config.namespace)
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def _find_pod(self) -> Any:  # a kubernetes V1Pod (untyped), None when not found
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


def _api_message(exc: Any) -> str:
    try:
        return json.loads(exc.body).get("message", "") if exc.body else str(exc.reason)
    except (ValueError, AttributeError):
        return str(exc.body)
