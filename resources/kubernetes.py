"""The Kubernetes backend's Dagster Pipes link: sandbox pods launched by ``dagster_k8s``.

Inside a Dagster step the sandbox resource binds a :class:`PipesPodLauncher` to the Kubernetes
backend, so each pod is created by ``dagster_k8s.PipesK8sClient`` and the run's event log shows
the pod and the pod wrapper's summary. Messages are never read from the pod log (untrusted code
writes there): :class:`CollectedMessageReader` takes them from the wrapper's signed file, which
the backend collects and verifies after the sandbox container exited (docs/architecture.md, "Sandboxes and the trust boundary").
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import dagster as dg

from evalrunner_assets.execution.kubernetes import PodLaunch


class CollectedMessageReader(dg.PipesMessageReader):
    """Hands Dagster the messages the backend collected through the exec API, inside the Pipes
    session (before ``PipesK8sClient.run`` returns)."""

    def __init__(self, launch: PodLaunch) -> None:
        self._launch = launch

    @contextmanager
    def read_messages(self, handler: Any) -> Iterator[dict[str, Any]]:
        try:
            yield {"path": self._launch.messages_path}
        finally:
            for message in self._launch.collect_messages():
                handler.handle_message(message)

    def no_messages_debug_text(self) -> str:
        return "Messages are read from the sandbox wrapper's signed pipes.jsonl, collected through the exec API."


@dataclass(frozen=True)
class PipesPodLauncher:
    """A :class:`~evalrunner_assets.execution.kubernetes.PodLauncher` that runs the pod through
    ``PipesK8sClient`` in ``context`` (an asset/op execution context)."""

    context: Any

    def launch(self, launch: PodLaunch) -> None:
        from dagster_k8s import PipesK8sClient  # the Kubernetes client stack loads only when a pod runs

        config = launch.config
        client = PipesK8sClient(
            message_reader=CollectedMessageReader(launch),
            load_incluster_config=config.in_cluster,
            kubeconfig_file=config.kubeconfig,
            kube_context=config.kube_context,
            poll_interval=config.poll_interval_seconds,
        )
        client.run(
            context=self.context,
            namespace=launch.namespace,
            base_pod_meta=launch.pod_metadata,
            base_pod_spec=launch.pod_spec,
            ignore_containers=set(launch.ignore_containers),
            pod_wait_timeout=launch.wait_timeout_seconds,
            delete_pod_on_completion=False,
        )
