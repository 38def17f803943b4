"""Discovery: what evals a repository declares at one commit (``.evals/list`` or Inspect)."""

from evalrunner_assets.discovery._agent_config import AgentConfigError, AgentModel, read_agent_model, yaml_problem
from evalrunner_assets.discovery._discover import DiscoveryResult, discover, task_id_for
from evalrunner_assets.discovery._errors import (
    DiscoveryError,
    DiscoverySandboxFailure,
    InspectListFailed,
    ListFailed,
    ListKilled,
    ListNotExecutable,
    ListNotRegularFile,
    ListOutputTooLarge,
    ListTimeout,
    ManifestNotJSON,
    ManifestSchemaError,
    NoEvalsFound,
    SchemaViolation,
)
from evalrunner_assets.discovery._manifest import (
    Manifest,
    ManifestTask,
    manifest_schema,
    parse_manifest_bytes,
    validate_manifest,
)

__all__ = [
    "AgentConfigError",
    "AgentModel",
    "DiscoveryError",
    "DiscoveryResult",
    "DiscoverySandboxFailure",
    "InspectListFailed",
    "ListFailed",
    "ListKilled",
    "ListNotExecutable",
    "ListNotRegularFile",
    "ListOutputTooLarge",
    "ListTimeout",
    "Manifest",
    "ManifestNotJSON",
    "ManifestSchemaError",
    "ManifestTask",
    "NoEvalsFound",
    "SchemaViolation",
    "discover",
    "manifest_schema",
    "parse_manifest_bytes",
    "read_agent_model",
    "task_id_for",
    "validate_manifest",
    "yaml_problem",
]
