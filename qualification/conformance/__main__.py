"""``python -m qualification.conformance [provider|run] ...``: the kit's two commands (QR-03).

``provider`` starts the kit's provider and prints the ``labfy-ref serve`` flags a
target must be launched with; it serves until Ctrl-C. ``run [PYTEST ARGS]`` (the
default: any other first argument is pytest's) runs the kit: against
``--target-url`` when the arguments name one, else against our own
``labfy-ref serve --bridge`` started here as a separate process on a fresh
SPECIMEN workspace (the self-test), logged in with the code it prints. Its
report is ``conformance-report/`` (STATUS.md, status.html, status.json).
"""

from __future__ import annotations

import argparse
import json
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from labfy_ref.netutil import RESERVED_PORTS
from labfy_ref.server.auth import token_hash
from qualification.conformance.kit import PROVIDERS_FILE, kit_provider, launch_profile
from qualification.conformance.launch import SERVE, LaunchError, ServeLaunch

#: How the kit's pytest runs by default: in parallel, the browser tests on one worker.
PYTEST = (sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-q", "-rfE")


def _provider(host: str, port: int) -> int:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with kit_provider(host, port) as provider, \
            tempfile.TemporaryDirectory(prefix="labfy-kit-") as folder:
        providers = Path(folder) / PROVIDERS_FILE
        profile = launch_profile(provider.base_url, str(providers))
        providers.write_text(profile["providers"], "utf-8")
        print("The kit's provider is serving. Launch the implementation under test with:",
              flush=True)
        print(f"  {' '.join(profile['flags'])}", flush=True)
        print("then run the kit with:", flush=True)
        print(f"  tox -e conformance -- --target-url URL --target-token CODE "
              f"[--target-user-token USER_CODE] --target-provider {provider.base_url}",
              flush=True)
        print(f"launch profile (QR-07): {json.dumps(profile)}", flush=True)
        print(f"and beside the target, on its workspace and Work database, a worker:\n"
              f"  labfy-ref work worker --workspace WORKSPACE {' '.join(profile['worker'])}",
              flush=True)
        stop.wait()
    return 0


def run_against(url: str, code: str, user_token: str | None, provider: str | None,
                pytest_args: list[str], *, command: tuple[str, ...] = PYTEST,
                log: Path | None = None) -> int:
    """Run the kit's pytest against a running target; its exit code (its output to ``log``)."""
    # NAME=VALUE: a code may begin with "-"
    args = [*command, f"--target-url={url}", f"--target-token={code}"]
    if user_token:
        args.append(f"--target-user-token={user_token}")
    if provider:
        args.append(f"--target-provider={provider}")
    if log is None:
        return subprocess.run([*args, *pytest_args], check=False).returncode
    with log.open("w", encoding="utf-8") as out:
        return subprocess.run([*args, *pytest_args], check=False, stdout=out,
                              stderr=subprocess.STDOUT).returncode


def launch_own(root: Path, provider_url: str, *, command: tuple[str, ...] = SERVE,
               env: dict[str, str] | None = None,
               flags: list[str] | None = None) -> tuple[ServeLaunch, str, str, str]:
    """Our ``serve --bridge`` on a fresh SPECIMEN workspace under ``root``, with a user account
    and the kit provider, launched with the kit's profile (or ``flags`` instead; the
    profile's providers file is ``root/providers.toml`` either way):
    ``(process, url, admin code, user token)``."""
    root.mkdir(parents=True, exist_ok=True)
    workspace = root / "workspace"
    made = subprocess.run([*SERVE[:-1], "workspace", "init", "--specimen", str(workspace)],
                          check=False, capture_output=True, text=True)
    if made.returncode != 0:
        raise LaunchError(f"workspace init failed: {made.stderr.strip()[:500]}")
    user_token = secrets.token_hex(24)
    accounts = root / "accounts.toml"
    accounts.write_text(f'[[account]]\nname = "kit-user"\n'
                        f'token_sha256 = "{token_hash(user_token)}"\n', "utf-8")
    profile = launch_profile(provider_url, str(root / PROVIDERS_FILE))
    (root / PROVIDERS_FILE).write_text(profile["providers"], "utf-8")  # where the flag says
    # --port 0: a launch never races another for the default port (SV-12)
    server = ServeLaunch(["--workspace", str(workspace), "--accounts", str(accounts),
                          "--port", "0", *(profile["flags"] if flags is None else flags)],
                         log=root / "serve.log",
                         command=command, env=env)
    url, code = server.start()
    if flags is None:  # the profile's worker, on the workspace's own Work database
        server.start_beside(["work", "worker", "--workspace", str(workspace),
                             *profile["worker"]], log=root / "worker.log")
    return server, url, code, user_token


def self_test(pytest_args: list[str]) -> int:
    """The kit against our own ``labfy-ref serve --bridge``, a separate process."""
    with tempfile.TemporaryDirectory(prefix="labfy-conformance-") as tmp, \
            kit_provider() as provider:
        try:
            server, url, code, user_token = launch_own(Path(tmp), provider.base_url)
        except LaunchError as exc:
            print(f"conformance: {exc}", file=sys.stderr)
            return 2
        print(f"conformance: target {url} = labfy-ref serve --bridge (pid "
              f"{server.process.pid if server.process else '?'}), agent on the kit provider "
              f"{provider.base_url}", flush=True)
        try:
            return run_against(url, code, user_token, provider.base_url, pytest_args)
        finally:
            server.stop()


def main(argv: list[str] | None = None) -> int:
    """Parse the subcommand; ``run`` passes every other argument to pytest."""
    parser = argparse.ArgumentParser(prog="python -m qualification.conformance",
                                     description=__doc__.split("\n\n")[0] if __doc__ else None)
    commands = parser.add_subparsers(dest="command", required=True)
    provider = commands.add_parser("provider", help="serve the kit's provider for a target")
    provider.add_argument("--host", default="127.0.0.1", choices=["127.0.0.1", "::1"])
    provider.add_argument("--port", type=int, default=0, help="0 picks a free port")
    commands.add_parser("run", help="run the kit (pytest arguments follow)", add_help=False)
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("provider", "run", "-h", "--help"):
        argv.insert(0, "run")  # `tox -e conformance -- --target-url ...`
    args, rest = parser.parse_known_args(argv)
    if args.command == "provider":
        if rest:
            parser.error(f"unknown arguments: {' '.join(rest)}")
        if args.port in RESERVED_PORTS or not 0 <= args.port <= 65535:
            parser.error(f"port {args.port} is not allowed")
        return _provider(args.host, args.port)
    if any(arg == "--target-url" or arg.startswith("--target-url=") for arg in rest):
        return subprocess.run([*PYTEST, *rest], check=False).returncode
    return self_test(rest)


if __name__ == "__main__":
    sys.exit(main())
