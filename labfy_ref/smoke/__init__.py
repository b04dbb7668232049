"""The real-model smoke stage (SM-03): ``labfy-ref smoke`` and its record."""

from labfy_ref.smoke.record import FAILED, PASSED, RECORD_NAME, STAGES, SmokeRecord
from labfy_ref.smoke.run import QUESTION, SmokeOptions, run_smoke

__all__ = ["FAILED", "PASSED", "QUESTION", "RECORD_NAME", "STAGES",
           "SmokeOptions",
           "SmokeRecord", "run_smoke"]
