"""A real worker process for the Work driver tests (``python -m qualification.work.worker_main``).

``JSON``: the options of ``labfy-ref work worker`` as one JSON object (the keys of its
argparse namespace); runs :func:`labfy_ref.work.worker.run_worker_command` — the body
of that command — with them, so the tests do not depend on the command line's parser
(tested with the CLI), and exits with its status. ``LABFY_WORK_CRASH_AT`` in the
environment makes it kill itself at a step boundary (:mod:`labfy_ref.work.crash`).
"""

from __future__ import annotations

import argparse
import json
import sys

from labfy_ref.errors import LabfyError
from labfy_ref.work.worker import run_worker_command


def main(argv: list[str]) -> int:
    """Run one worker with the options in ``argv[0]``; a refusal prints ``CODE: message``."""
    try:
        return run_worker_command(argparse.Namespace(**json.loads(argv[0])))
    except LabfyError as exc:
        print(str(exc), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
