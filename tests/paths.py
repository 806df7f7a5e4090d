"""Where the tests' third-party reference data lives.

Every file a test reads from outside the project is copied into ``tests/fixtures/<name>/``
beside a PROVENANCE.md that names its source, commit and licence, so a clone needs nothing
beside it.
"""

from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"
TRACE_CSV = FIXTURES / "alibaba-gpu-v2023" / "csv"
