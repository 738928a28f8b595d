"""Puts ``benchmarks/`` on ``sys.path``, so that a probe run as ``python benchmarks/probes/<x>.py``
imports ``_common`` (and a benchmark's constants) as the benchmarks do. Import it before them."""

import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1]
if str(BENCHMARKS) not in sys.path:
    sys.path.insert(1, str(BENCHMARKS))
