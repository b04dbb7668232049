"""The vendored JavaScript libraries match their npm pins, and no page loads from elsewhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from qualification import vendored

UI = Path(vendored.ROOT, "labfy_ref", "ui")


@pytest.mark.req("UI-05", "UI-08")
def test_every_vendored_file_matches_its_pin() -> None:
    packages = vendored.load()
    assert {p.name for p in packages} >= {"markdown-it", "dompurify", "axe-core"}
    assert vendored.verify(packages) == []
    for package in packages:
        assert vendored.sri_matches(package.integrity, b"") is False
        assert package.license and package.version[0].isdigit()
        assert any(f.target.endswith("LICENSE.txt") for f in package.files), package.name


@pytest.mark.req("UI-05")
def test_a_changed_vendored_file_is_reported(tmp_path: Path) -> None:
    packages = vendored.load()
    for package in packages:
        for file in package.files:
            target = tmp_path / file.target
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes((vendored.ROOT / file.target).read_bytes())
    victim = packages[0].files[0]
    (tmp_path / victim.target).write_bytes(b"window.__pwned = 1;")
    assert vendored.verify(packages, tmp_path) == [
        f"{packages[0].name}: {victim.target} does not match its pinned sha256"]


@pytest.mark.req("UI-02", "UI-05")
def test_pages_load_nothing_from_another_origin() -> None:
    pages = list(UI.glob("*.html")) + list(UI.glob("*.js")) + list(UI.glob("*.css"))
    assert pages
    for page in pages:
        text = page.read_text("utf-8")
        assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text), page.name
        assert "@import" not in text and "url(http" not in text, page.name
