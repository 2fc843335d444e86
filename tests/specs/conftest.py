"""The spec scripts (`specs/run_tlc.py`, `specs/check_trace.py`) are scripts, not a
package: their directory goes on the import path for these tests."""

import sys
from pathlib import Path

SPECS_DIR = Path(__file__).resolve().parents[2] / "specs"
if str(SPECS_DIR) not in sys.path:
    sys.path.insert(0, str(SPECS_DIR))
