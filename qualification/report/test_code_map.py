"""QR-06: each requirement ID declares the code that implements it, and a mutation there is
attributed to it -- the declarations of requirements.toml checked against the code."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from labfy_ref.errors import ReportInvalid
from labfy_ref.report.attribution import CodeMap, CodeRef, module_path, named_spans
from labfy_ref.report.model import Requirements
from qualification.mutants.__main__ import attributed
from qualification.mutants.faults import FAULTS

REPO = Path(__file__).resolve().parents[2]
REQUIREMENTS = Requirements.load(REPO / "qualification" / "requirements.toml")


@pytest.mark.req("QR-06")
def test_every_id_declares_its_code_or_says_why_none_implements_it() -> None:
    code = REQUIREMENTS.code
    undeclared = sorted(set(REQUIREMENTS.titles) - set(code.refs) - set(code.none))
    assert undeclared == [], f"IDs with neither [code] nor [code_none]: {undeclared}"
    assert code.missing(REPO) == [], "declarations naming no file or no definition"
    assert all(ref.path.startswith(("labfy_ref/", "fake_provider/"))
               for refs in code.refs.values() for ref in refs), \
        "an ID's code is the product's (or the fake provider's), never the suite's"


@pytest.mark.req("QR-06")
def test_a_fault_is_attributed_to_every_id_whose_code_holds_what_it_replaces() -> None:
    """Each deliberate fault runs at the tests of every such ID, not only those it names."""
    code = REQUIREMENTS.code
    for fault in FAULTS.values():
        module, _, qualname = fault.replaces.partition(":")
        declared = set(code.ids_for(module_path(module, REPO), qualname or None))
        assert set(attributed(fault)) == set(fault.ids) | declared, fault.name


SOURCE = textwrap.dedent('''\
    LIMIT = 3

    @decorated
    def top(x):
        return x + 1


    class Box:
        def open(self):
            return 1

        class Inner:
            def peek(self):
                return 2
    ''')


@pytest.mark.req("QR-06")
def test_names_resolve_to_their_lines_with_decorators_and_nesting() -> None:
    spans = named_spans(SOURCE)
    assert spans["LIMIT"] == (1, 1), "a top-level constant is a name too"
    assert spans["top"] == (3, 5), "a decorated definition starts at its decorator"
    assert spans["Box"] == (8, 14)
    assert spans["Box.open"] == (9, 10)
    assert spans["Box.Inner.peek"] == (13, 14)


@pytest.mark.req("QR-06")
def test_a_line_or_a_function_is_attributed_to_each_id_whose_code_contains_it() -> None:
    code = CodeMap.from_toml({"AA-01": ["m.py:Box"], "AA-02": ["m.py:Box.open"],
                              "AA-03": ["m.py"], "AA-04": ["other.py"]}, {},
                             {f"AA-0{n}": "t" for n in range(1, 5)})
    assert code.ids_at("m.py", SOURCE, 10) == ("AA-01", "AA-02", "AA-03")
    assert code.ids_at("m.py", SOURCE, 14) == ("AA-01", "AA-03")
    assert code.ids_at("m.py", SOURCE, 5) == ("AA-03",)
    assert code.ids_for("m.py", "Box.open") == ("AA-01", "AA-02", "AA-03")
    assert code.ids_for("m.py", "Boxes") == ("AA-03",), "a name's prefix is not its class"
    assert code.ids_for("other.py", None) == ("AA-04",)
    assert code.modules() == ("m.py", "other.py")
    with pytest.raises(ReportInvalid, match=r"not defined in m\.py"):
        CodeMap.from_toml({"AA-01": ["m.py:Gone"]}, {}, {"AA-01": "t"}).line_ids("m.py", SOURCE)


@pytest.mark.req("QR-06", "QR-05")
@pytest.mark.parametrize(("code", "none", "message"), [
    ({"AA-01": []}, {}, "non-empty lists"),
    ({"AA-01": "m.py"}, {}, "non-empty lists"),
    ({"AA-01": ["../m.py"]}, {}, "not a relative path"),
    ({"AA-01": ["/abs/m.py"]}, {}, "not a relative path"),
    ({"AA-01": ["m.txt"]}, {}, "not a relative path"),
    ({"AA-01": ["m.py:not a name"]}, {}, "not a qualified name"),
    ({"ZZ-09": ["m.py"]}, {}, "unknown IDs"),
    ({"AA-01": ["m.py"]}, {"AA-01": "why"}, "both"),
    ({}, {"AA-01": " "}, "a reason"),
])
def test_a_malformed_declaration_is_refused(code: object, none: object, message: str) -> None:
    with pytest.raises(ReportInvalid, match=message):
        CodeMap.from_toml(code, none, {"AA-01": "title"})


@pytest.mark.req("QR-06")
def test_a_declaration_prints_as_written() -> None:
    assert str(CodeRef.parse("labfy_ref/x.py:A.b")) == "labfy_ref/x.py:A.b"
    assert str(CodeRef.parse("labfy_ref/x.py")) == "labfy_ref/x.py"
