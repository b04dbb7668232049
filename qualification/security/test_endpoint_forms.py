"""ATTACKS.md §A (MC-01): every non-canonical endpoint is refused at configuration time.

The list below is examples, not the grammar: the parser is positive (see
``labfy_ref/model/endpoint.py``) and a property test in the unit suite feeds
it arbitrary text. Each form is tried through the parser and through
``labfy-ref check-config``, which must exit 2 with ``ENDPOINT_REFUSED: reason``.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from labfy_ref.cli.main import main
from labfy_ref.errors import EndpointRefused
from labfy_ref.model.endpoint import parse_endpoint

P = "43117"
REFUSED_FORMS = [
    # names
    f"http://localhost:{P}", f"http://LOCALHOST:{P}", f"http://localhost.:{P}",
    f"http://foo.localhost:{P}", f"http://example.com:{P}", f"http://127.0.0.1.nip.io:{P}",
    # other IPv4 spellings
    f"http://2130706433:{P}", f"http://0x7f000001:{P}", f"http://0177.0.0.1:{P}",
    f"http://127.1:{P}", f"http://127.0.0.2:{P}", f"http://0.0.0.0:{P}", f"http://0:{P}",
    f"http://127.0.0.1.:{P}", f"http://１２７.０.０.１:{P}", f"http://%31%32%37.0.0.1:{P}",
    f"http://0x7f.1:{P}", f"http://10.0.0.1:{P}", f"http://192.168.1.10:{P}",
    f"http://8.8.8.8:{P}", f"http://127.000.000.001:{P}",
    # IPv6 spellings
    f"http://[::]:{P}", f"http://[0:0:0:0:0:0:0:1]:{P}", f"http://[::ffff:127.0.0.1]:{P}",
    f"http://[::ffff:7f00:1]:{P}", f"http://[::1%25eth0]:{P}", f"http://[fe80::1%25lo]:{P}",
    f"http://::1:{P}", f"http://[::1]]:{P}", f"http://[::01]:{P}",
    # userinfo
    f"http://u:p@127.0.0.1:{P}/", "http://127.0.0.1:80@evil.example/",
    f"http://evil.com\\@127.0.0.1:{P}/", f"http://@127.0.0.1:{P}",
    # ports
    "http://127.0.0.1", "http://127.0.0.1:", "http://127.0.0.1:0", "http://127.0.0.1:65536",
    "http://127.0.0.1:-1", f"http://127.0.0.1:+{P}", f"http://127.0.0.1:0{P}",
    f"http://127.0.0.1: {P}", f"http://127.0.0.1:{P}:{P}", "http://127.0.0.1:8_080",
    "http://127.0.0.1:٤٣١١٧", "http://127.0.0.1:４３１１７", "http://127.0.0.1:999999",
    "http://[::1]", "http://[::1]:0",
    # scheme and shape
    f"https://127.0.0.1:{P}", f"HTTP://127.0.0.1:{P}", f"//127.0.0.1:{P}",
    f"http:127.0.0.1:{P}", f"http:/127.0.0.1:{P}", f"ftp://127.0.0.1:{P}",
    f"127.0.0.1:{P}", f"http://127.0.0.1:{P}?q=1", f"http://127.0.0.1:{P}#f",
    f"http://127.0.0.1:{P}/v2", f"http://127.0.0.1:{P}/v1/chat/completions",
    f"http://127.0.0.1:{P}//", f"http://127.0.0.1:{P}/%2e%2e",
    f"http://127.0.0.1:{P}/../x", f" http://127.0.0.1:{P}", f"http://127.0.0.1:{P} ",
    f"\thttp://127.0.0.1:{P}", f"http://127.0.0.1:{P}\n", f"http://127.0.0.1:{P}\r",
    f"http://127.0.0.1:{P}\x00", f"http://127.0.0.1\x00:{P}", f"http://127.0.0.1:{P}\u200b",
    "", " ", "http://", "http://[", "x" * 10_000,
]


@pytest.mark.req("MC-01")
@pytest.mark.parametrize("form", REFUSED_FORMS)
def test_the_parser_refuses(form: str) -> None:
    with pytest.raises(EndpointRefused) as caught:
        parse_endpoint(form)
    assert caught.value.message and len(caught.value.message) <= 300


@pytest.mark.req("MC-01", "CLI-01")
@pytest.mark.parametrize("form", REFUSED_FORMS)
def test_check_config_exits_2_with_the_code_and_no_traceback(
        form: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["check-config", "--agent-mode", "local-model", "--agent-endpoint", form,
                 "--agent-model", "m"])
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    assert err.startswith("ENDPOINT_REFUSED: ") and err.count("\n") == 1
    assert "Traceback" not in err


@pytest.mark.req("MC-01", "CLI-01")
@pytest.mark.parametrize("form", ["http://localhost:43117", "http://127.0.0.1:43117\x1b[2J"])
def test_the_installed_console_script_refuses_too(form: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "labfy_ref.cli.main", "check-config", "--agent-mode",
         "local-model", "--agent-endpoint", form, "--agent-model", "m"],
        capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith("ENDPOINT_REFUSED: ")
    assert "Traceback" not in done.stderr and "\x1b" not in done.stderr
