"""``python -m evalrunner_assets.cli``: the ``evalrunner`` command."""

from __future__ import annotations

import sys

from evalrunner_assets.cli import main

sys.exit(main())
