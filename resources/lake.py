"""The lake as a Dagster resource: a local directory by default, or gs://bucket/prefix."""

from __future__ import annotations

import dagster as dg

from evalrunner_assets import home
from lake import Lake, open_lake
from lake.storage import gcs_filesystem


class LakeResource(dg.ConfigurableResource):
    """Where logs, tables and comparisons live. Empty ``root`` means ``$EVALRUNNER_LAKE`` or
    ``<EVALRUNNER_HOME>/lake``; ``gcs_endpoint``/``gcs_token`` point gs:// roots at an emulator."""

    root: str = ""
    gcs_endpoint: str = ""
    gcs_token: str = ""

    def open(self) -> Lake:
        root = self.root or home.lake_root()
        if root.startswith("gs://") and (self.gcs_endpoint or self.gcs_token):
            fs = gcs_filesystem(endpoint_url=self.gcs_endpoint or None, token=self.gcs_token or None)
            return Lake(root, fs=fs)
        return open_lake(root)
