"""``python -m qualification.mutants.launch NAME serve ARGS...``: ``labfy-ref serve`` with
mutant NAME's one function replaced, in this process only."""

from __future__ import annotations

import sys

from labfy_ref.cli.main import main as labfy_main
from qualification.mutants.faults import FAULTS


def main(argv: list[str]) -> int:
    """Apply the mutant, then run the CLI with the remaining arguments."""
    if not argv or argv[0] not in FAULTS:
        print(f"usage: python -m qualification.mutants.launch NAME serve ...; NAME is one of "
              f"{', '.join(sorted(FAULTS))}", file=sys.stderr)
        return 2
    FAULTS[argv[0]].apply()
    return labfy_main(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
