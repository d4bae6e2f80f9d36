"""`python -m tests.chaos`: see tests/chaos/cli.py."""

from __future__ import annotations

import sys

from tests.chaos.cli import main

sys.exit(main())
