"""PR-07: the rules that make narrowing generalise, one property test per rule.

Each rule is a pure function of a turn's observations and the catalog's
traits; each is shown here to hold for any history (Hypothesis), and shown
to be *off* when an ablation switches it off, so the eval's ablation rows
measure what they say.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from labfy_ref.protocol import Budget, Observations, narrow, present, relevance
from labfy_ref.protocol.action import action_schema
from labfy_ref.protocol.narrowing import (
    ALL_RULES,
    EFFECT_TASK,
    GROUNDING,
    INFORMATION_GAIN,
    PROGRESS,
    RELEVANCE,
    REQUESTED,
    TEXT_SHAPE,
    grounded_words,
)
from labfy_ref.protocol.relevance import ranked, scores
from labfy_ref.protocol.text_shape import (
    FINAL,
    QUESTION,
    TOPIC,
    figures,
    scripts_of,
    vocabulary,
)
from labfy_ref.tools import default_catalog

CATALOG = default_catalog()
ROOT = Path(__file__).resolve().parents[2]
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
object_ids = st.text(st.sampled_from(_CROCKFORD), min_size=26, max_size=26).map(
    lambda body: f"obj_{body}")
titles = st.text(st.characters(codec="utf-8"), max_size=30)
any_text = st.text(st.characters(codec=None), max_size=60)
BUDGET = Budget(round=1, max_rounds=16, max_tool_calls=64, conclude_after=4)
#: The quoting profile (PR-08): grounding and quoted in force, for the weakest models.
QUOTING_BUDGET = dataclasses.replace(BUDGET, rules=ALL_RULES)


def _listing(ids: list[str], names: list[str], kind: str = "note") -> dict[str, Any]:
    return {"trust": "UNTRUSTED_DATA", "tool_id": "workspace.list_objects", "ok": True,
            "data": {"objects": [{"object_id": i, "kind": kind, "title": t}
                                 for i, t in zip(ids, names, strict=False)]}}


def _missing(tool_id: str) -> dict[str, Any]:
    return {"trust": "UNTRUSTED_DATA", "tool_id": tool_id, "ok": False,
            "data": {"error": {"code": "NOT_FOUND", "message": "no such file"}}}


def _branch(decoding: Any, tool_id: str) -> dict[str, Any] | None:
    for branch in decoding.schema["oneOf"]:
        if branch["properties"].get("tool_id") == {"const": tool_id}:
            return dict(branch["properties"]["arguments"])
    return None


def _offers_final(decoding: Any) -> bool:
    return any(b["properties"].get("type") == {"const": "final"} for b in decoding.schema["oneOf"])


@pytest.mark.req("PR-07")
def test_no_rule_spells_a_tool_id_a_model_or_a_specimen_object() -> None:
    """The narrowing, the driver and the relevance/shape modules read traits, not ids."""
    specimen = json.loads((ROOT / "labfy_ref/workspace/specimen/objects.json").read_text("utf-8"))
    names = [*CATALOG, *(o["title"] for o in specimen["objects"]), "smollm", "gemma", "q4_",
             "q8_"]
    package = sorted(str(path.relative_to(ROOT / "labfy_ref"))
                     for path in (ROOT / "labfy_ref/protocol/narrowing").glob("*.py"))
    assert len(package) >= 6, "the narrowing package's modules are all read"
    for module in (*package, "protocol/relevance.py", "protocol/text_shape.py",
                   "runtime/driver.py"):
        source = (ROOT / "labfy_ref" / module).read_text("utf-8").casefold()
        for name in names:
            assert name.casefold() not in source, f"{module} names {name!r}"


@pytest.mark.req("PR-07")
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ids=st.lists(object_ids, min_size=1, max_size=8, unique=True),
       names=st.lists(titles, min_size=8, max_size=8), kind=st.sampled_from(
           ["fact", "observation", "source", "note"]))
def test_information_gain_never_offers_a_listing_whose_answer_is_known(
        ids: list[str], names: list[str], kind: str) -> None:
    first = narrow(CATALOG, CATALOG, Observations(), BUDGET)
    listing = _branch(first, "workspace.list_objects")
    assert listing is not None and listing["properties"] == {}, \
        "the broadest listing first: its answer holds every filtered one"
    seen = Observations().observe("workspace.list_objects", {}, _listing(ids, names), CATALOG)
    assert "workspace.list_objects" not in narrow(CATALOG, CATALOG, seen, BUDGET).offered, \
        "a complete listing was answered: any filtered one is a subset of it"
    # the rule off (an ablation): PR-06's filtered listings come back before the broadest
    off = Budget(round=1, max_rounds=16, max_tool_calls=64, rules=ALL_RULES - {INFORMATION_GAIN})
    filtered = Observations().observe("workspace.list_objects", {"kind": kind},
                                      _listing(ids, names, kind), CATALOG)
    branch = _branch(narrow(CATALOG, CATALOG, filtered, off), "workspace.list_objects")
    assert branch is not None and kind not in branch["properties"]["kind"]["enum"]


@pytest.mark.req("PR-07")
def test_information_gain_offers_filters_when_the_broadest_listing_was_cut() -> None:
    ids = [f"obj_{str(i).zfill(26)}" for i in range(100)]
    seen = Observations().observe("workspace.list_objects", {}, _listing(ids, ["t"] * 100),
                                  CATALOG)
    branch = _branch(narrow(CATALOG, CATALOG, seen, BUDGET), "workspace.list_objects")
    assert branch is not None and branch["properties"]["kind"]["enum"], \
        "a full page may leave objects out: a filtered listing can add some"


@pytest.mark.req("PR-07")
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ids=st.lists(object_ids, min_size=1, max_size=6, unique=True),
       calls=st.integers(0, 12), round_=st.integers(1, 15))
def test_progress_comes_before_conclusion(ids: list[str], calls: int, round_: int) -> None:
    """While nothing was read and a read is on offer, the turn is not cut off."""
    seen = Observations().observe("workspace.list_objects", {}, _listing(ids, ["x"] * 6),
                                  CATALOG)
    seen = dataclasses.replace(seen, tool_calls=calls + 1)
    budget = Budget(round=round_, max_rounds=16, max_tool_calls=64, conclude_after=1)
    decoding = narrow(CATALOG, CATALOG, seen, budget)
    assert not decoding.concluding
    assert "workspace.read_object" in decoding.offered
    assert "research.prepare" not in decoding.offered, "a listing alone is not enough"
    assert not _offers_final(decoding), "it looks before it answers"
    # the last round concludes whatever the progress
    last = narrow(CATALOG, CATALOG, seen, Budget(round=16, max_rounds=16, max_tool_calls=64))
    assert last.concluding and last.offered == frozenset() and _offers_final(last)
    # the rule off: PR-06's count alone decides, and final is always offered
    off = narrow(CATALOG, CATALOG, seen, Budget(round=round_, max_rounds=16, max_tool_calls=64,
                                                conclude_after=1,
                                                rules=ALL_RULES - {PROGRESS}))
    assert off.concluding and _offers_final(off)


@pytest.mark.req("PR-07")
def test_an_empty_workspace_answers_at_once() -> None:
    """Nothing offered can lead to content: final is not withheld."""
    seen = Observations().observe("workspace.list_objects", {}, _listing([], []), CATALOG)
    seen = seen.observe("files.list", {"path": ""}, {"ok": True, "data": {
        "path": "", "entries": [], "skipped": 0}}, CATALOG)
    decoding = narrow(CATALOG, CATALOG, seen, BUDGET)
    assert _offers_final(decoding)


DEGENERATE = ["1" * 80, "1000000000000000000000", "][", "field_10", "research.prepare",
              "topic", "gardening-1048732695", "1234567890ABCDEFGHIJ", "ÿ ÿ ÿ ÿ ÿ", "", " ",
              "\ud800 lone", "a\x00b", "obj_01JD0000000000000000000000", "???"]
NATURAL = {"fr": "L'abeille du lierre précoce", "ro": "Albina de iederă timpurie în grădină",
           "el": "Η μέλισσα του κισσού", "en": "Early ivy bee record",
           "ru": "Ранняя пчела плюща"}


@pytest.mark.req("PR-07")
@settings(max_examples=200, deadline=None)
@given(text=any_text)
def test_text_shape_admits_no_degenerate_string_in_any_script(text: str) -> None:
    for shape in (TOPIC, QUESTION, FINAL):
        if shape.admits(text):
            assert re.search(r"[^\W\d_]{2}", text), "a shaped text holds a word of letters"
            assert not re.search(r"(.)\1{16}", text), "no run of one character past a word"
            assert not re.search(r"[_\[\]{}<>]|\.\w", text), "no placeholder punctuation"
            assert len(text) <= shape.max_chars
    for junk in DEGENERATE:
        assert not TOPIC.admits(junk) and not FINAL.admits(junk), junk


@pytest.mark.req("PR-07")
@pytest.mark.parametrize("language", sorted(NATURAL))
def test_text_shape_admits_the_scripts_of_the_conversation(language: str) -> None:
    text = NATURAL[language]
    assert TOPIC.within(scripts_of(text)).admits(text), "the user's script makes words"
    if language in ("el", "ru"):
        assert not TOPIC.within(scripts_of("an English question")).admits(text), \
            "a script nobody used is not offered (it is how noise got in)"
    seen = Observations(query=text, progress=1)
    decoding = narrow(CATALOG, CATALOG, seen, BUDGET)
    final = decoding.schema["oneOf"][-1]["properties"]["text"]
    assert re.fullmatch(final["pattern"], text), "the pattern is what Python reads too"
    off = narrow(CATALOG, CATALOG, seen, Budget(round=1, max_rounds=16, max_tool_calls=64,
                                                rules=ALL_RULES - {TEXT_SHAPE}))
    assert "pattern" not in off.schema["oneOf"][-1]["properties"]["text"]


@pytest.mark.req("PR-07")
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ids=st.lists(object_ids, min_size=1, max_size=8, unique=True),
       names=st.lists(titles, min_size=8, max_size=8), query=any_text)
def test_relevance_orders_and_never_removes(ids: list[str], names: list[str],
                                            query: str) -> None:
    result = _listing(ids, names)
    seen = Observations(query=query).observe("workspace.list_objects", {}, result, CATALOG)
    # the requested rule reads a reference the query names first (tested on its own)
    decoding = narrow(CATALOG, CATALOG, seen,
                      dataclasses.replace(BUDGET, rules=BUDGET.rules - {REQUESTED}))
    read = _branch(decoding, "workspace.read_object")
    assert read is not None
    offered = read["properties"]["object_id"]["enum"]
    assert sorted(offered) == sorted(ids), "ordering only: every valid id stays offered"
    shown = present(CATALOG, "workspace.list_objects", result, seen)
    entries = json.loads(shown)["data"]["objects"] if shown else result["data"]["objects"]
    def keys(items: list[Any]) -> list[str]:
        return sorted(json.dumps(item, sort_keys=True) for item in items)

    assert keys(entries) == keys(result["data"]["objects"]), "the same entries, reordered"
    score = scores(query, {i: seen.labels.get(i, "") for i in ids})
    assert [score[i] for i in offered] == sorted((score[i] for i in offered), reverse=True)
    off = Observations(query=query).observe("workspace.list_objects", {}, result, CATALOG)
    assert present(CATALOG, "workspace.list_objects", result, off,
                   ALL_RULES - {RELEVANCE}) is None


def _bm25(query: str, documents: dict[str, str]) -> dict[str, float]:
    """BM25 over trigram bags, computed from nothing every time (the oracle of the kept
    bags and scores): the module's own formula, spelled out once more."""
    def bag(text: str) -> Counter[str]:
        folded = text.casefold()
        counts: Counter[str] = Counter()
        for word in relevance.WORD.findall(folded):
            padded = f" {word} "
            counts.update(padded[i:i + 3] for i in range(len(padded) - 2))
        counts.update(f"#{n}" for n in relevance.NUMBER.findall(folded))
        return counts

    wanted, bags = bag(query), {key: bag(text) for key, text in documents.items()}
    if not wanted or not bags:
        return dict.fromkeys(documents, 0.0)
    average = sum(sum(b.values()) for b in bags.values()) / len(bags) or 1.0
    result = {}
    for key, b in bags.items():
        total = 0.0
        for gram in wanted:
            if b.get(gram):
                held = sum(1 for other in bags.values() if gram in other)
                idf = math.log(1.0 + (len(bags) - held + 0.5) / (held + 0.5))
                total += idf * b[gram] * (relevance.K1 + 1) / (b[gram] + relevance.K1 * (
                    1 - relevance.B + relevance.B * sum(b.values()) / average))
        result[key] = total
    return result


@pytest.mark.req("PR-07")
@settings(max_examples=150, deadline=None)
@given(query=any_text, texts=st.lists(any_text, max_size=6),
       long_text=st.sampled_from(["", "bee " * 600, "albine " * 6000]))
def test_relevance_kept_between_rounds_is_the_score_computed_afresh(
        query: str, texts: list[str], long_text: str) -> None:
    """A turn's bags and scores are kept between rounds (a bounded cache): each call, the
    first or a repeat, long texts past the kept size included, gives the fresh score, and
    what a caller does with a result never reaches the next one."""
    documents = {f"k{index}": text for index, text in enumerate([*texts, long_text])}
    expected = _bm25(query, documents)
    for _ in range(2):
        got = scores(query, documents)
        assert got.keys() == expected.keys()
        assert all(math.isclose(got[k], expected[k], rel_tol=1e-9, abs_tol=1e-12)
                   for k in got), (got, expected)
        got.clear()  # a caller's change to its copy


@pytest.mark.req("PR-07")
def test_relevance_keeps_bounded_memory() -> None:
    """What is kept is bounded in entries and in the size of each collection kept."""
    kept = relevance._kept_scores
    assert kept.cache_info().maxsize == relevance.SCORES_KEPT <= 64
    # a full cache stays full whatever enters it: count the lookups, not the entries
    before = kept.cache_info()
    huge = "hive " * (relevance.KEPT_CHARS // 5 + 1)
    assert scores(huge, {"a": "hive"})["a"] > 0
    many = {f"k{i}": "x" * 1024 for i in range(relevance.KEPT_CHARS // 1024 + 1)}
    assert set(scores("hive", many)) == set(many)
    edge = {"a": "h" * (relevance.KEPT_CHARS - len("hive") + 1)}  # one past, together
    assert set(scores("hive", edge)) == {"a"}
    after = kept.cache_info()
    assert (after.hits, after.misses) == (before.hits, before.misses), \
        "neither the long query nor the collection was looked up or kept"
    small = {"a": "h" * (relevance.KEPT_CHARS - len("hive"))}  # exactly the bound: kept
    scores("hive", small)
    scores("hive", small)
    last = kept.cache_info()
    assert (last.hits + last.misses) - (after.hits + after.misses) == 2
    assert last.hits > after.hits, "a repeat at the bound is the kept score"


@pytest.mark.req("PR-07")
def test_relevance_meets_inflections_in_any_language() -> None:
    documents = {"a": "Species list size", "b": "Nest boxes", "c": "Study area"}
    assert ranked("How many bee species were recorded?", list(documents), documents)[0] == "a"
    assert ranked("Câte grădini acoperă studiul?", list(documents), documents)[0] == "c"
    assert ranked("", list(documents), documents) == list(documents), "no query: no change"


ASKED = ["Prepare research on the open question about hedge cutting.",
         "Could you start researching ivy bees?", "Is there a campaign about hedges?"]
NOT_ASKED = ["How many bee species have been recorded so far?", "Compare garden 4 and 9.",
             "How many nest boxes were sealed with mud?", "Câte grădini acoperă studiul?", ""]


@pytest.mark.req("PR-07")
@settings(max_examples=60, deadline=None)
@given(calls=st.integers(0, 70), round_=st.integers(1, 16), progress=st.integers(0, 3),
       query=st.one_of(st.sampled_from(ASKED + NOT_ASKED), any_text))
def test_research_task_concludes_on_research_only_when_asked(
        calls: int, round_: int, progress: int, query: str) -> None:
    seen = Observations(query=query, tool_calls=calls, progress=progress)
    budget = Budget(round=round_, max_rounds=16, max_tool_calls=64, conclude_after=4)
    on = narrow(CATALOG, CATALOG, seen, budget)
    default = narrow(CATALOG, CATALOG, seen, dataclasses.replace(
        budget, rules=ALL_RULES - {EFFECT_TASK}))
    effects = {"research.prepare", "files.write"}
    assert on.concluding == default.concluding
    assert on.offered - effects == default.offered - effects, "reads are not this rule's"
    if not on.concluding:
        assert on.offered <= default.offered, "outside the conclusion it only withholds"
        assert "research.prepare" in on.offered or "research.prepare" not in default.offered, \
            "research, granted by a human, stays on offer while the turn looks"
    if "research.prepare" in on.offered and query in ASKED:
        assert not _offers_final(on), "a request for research does not end before it"
    if "research.prepare" in default.offered:
        asked = "research.prepare" in on.offered
        if query in ASKED:
            assert asked, "a request for research is offered research"
        if query in NOT_ASKED and on.concluding:
            assert not asked, "a question answered by reading concludes with final alone"
    if query in NOT_ASKED:
        assert "files.write" not in on.offered, "no write the user did not ask for"
        assert _offers_final(on) == _offers_final(default), "and final as before"
    if default.concluding and progress and calls + 1 < 64 and round_ < 16:
        assert default.offered == {"research.prepare"}, "ablated: PR-06's concluding set"
    if not progress:
        assert "research.prepare" not in default.offered, "never before something was read"


def _read(object_id: str, title: str, body: str) -> dict[str, Any]:
    return {"trust": "UNTRUSTED_DATA", "tool_id": "workspace.read_object", "ok": True,
            "data": {"object_id": object_id, "kind": "note", "title": title, "body": body}}


@pytest.mark.req("PR-07")
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ids=st.lists(object_ids, min_size=1, max_size=3, unique=True),
       bodies=st.lists(st.text(st.characters(codec="utf-8"), max_size=200), min_size=3,
                       max_size=3),
       query=any_text, data=st.data())
def test_grounding_makes_research_text_of_the_words_read(
        ids: list[str], bodies: list[str], query: str, data: st.DataObject) -> None:
    query = f"Prepare research. {query}"  # research is offered when asked for (effect-task)
    seen = Observations(query=query)
    for object_id, body in zip(ids, bodies, strict=False):
        seen = seen.observe("workspace.read_object", {"object_id": object_id},
                            _read(object_id, "Open question", body), CATALOG)
    on = narrow(CATALOG, CATALOG, seen, QUOTING_BUDGET)
    for _ in range(4):  # a request that names a file (``00.A``) has it read first (requested)
        named = _branch(on, "files.read")
        if set(on.offered) != {"files.read"} or named is None:
            break
        for path in named["properties"]["path"]["enum"]:
            seen = seen.observe("files.read", {"path": path}, _missing("files.read"), CATALOG)
        on = narrow(CATALOG, CATALOG, seen, QUOTING_BUDGET)
    prepare = _branch(on, "research.prepare")
    assert prepare is not None, "something was read: research may be prepared"
    topic = prepare["properties"]["topic"]
    said = set(vocabulary(*bodies, "Open question note"))
    words = grounded_words(seen)
    assert set(words) <= said, "every word was read (no id fragment, no copy of the request)"
    if seen.passages:  # content was read: the topic and questions are what it said
        quotes = set(seen.passages)
        assert set(topic["enum"]) <= quotes | {"Open question"}, "a title or a passage read"
        asked = prepare["properties"]["questions"]
        assert set(asked["items"]["enum"]) <= quotes and asked["minItems"] >= 1
        wide = CATALOG["research.prepare"].input_schema
        assert Draft202012Validator(wide).is_valid(
            {"topic": topic["enum"][0], "questions": asked["items"]["enum"][:1]})
    elif len(words) >= 8:
        sentence = " ".join(data.draw(st.lists(st.sampled_from(words), min_size=2, max_size=5)))
        assert re.fullmatch(topic["pattern"], sentence), "the conversation's words make a topic"
        for junk in ("research prepare", "textit textit", "field_10", "1000000"):
            if not set(junk.split()) <= set(words):
                assert not re.fullmatch(topic["pattern"], junk), junk
        numbered = f"1075 {sentence}"
        assert bool(re.fullmatch(topic["pattern"], numbered)) == (
            "1075" in figures(*bodies)), "a number opens a topic only if it was read"
        assert len(sentence) <= topic["maxLength"]
    off = _branch(narrow(CATALOG, CATALOG, seen, dataclasses.replace(
        QUOTING_BUDGET, rules=ALL_RULES - {GROUNDING})), "research.prepare")
    assert off is not None
    assert off["properties"]["topic"]["pattern"] == TOPIC.within(
        seen.scripts | scripts_of(query)).pattern, "off: the shape alone"


@pytest.mark.req("PR-07")
def test_research_text_offers_what_was_read_most_relevant_first_none_left_out() -> None:
    """The topic and questions research may be prepared with are titles and passages the
    turn read, ordered by relevance to the request (what it asks about first), never cut
    by it: the unrelated note's passages are still on offer, after."""
    query = "Prepare research on where ivy bees nest."
    seen = Observations(query=query)
    for object_id, title, body in (
            ("obj_" + "A" * 26, "Hedge cutting", "The hedge was cut in May. Why so late?"),
            ("obj_" + "B" * 26, "Ivy bee survey",
             "Ivy bees nest in sandy banks. Where do ivy bees nest?")):
        seen = seen.observe("workspace.read_object", {"object_id": object_id},
                            _read(object_id, title, body), CATALOG)
    prepare = _branch(narrow(CATALOG, CATALOG, seen, QUOTING_BUDGET), "research.prepare")
    assert prepare is not None, "research was asked for and something was read"
    topics = prepare["properties"]["topic"]["enum"]
    assert set(topics) == {"Hedge cutting", "Hedge cutting: The hedge was cut in May.",
                           "Hedge cutting: Why so late?", "Ivy bee survey",
                           "Ivy bee survey: Ivy bees nest in sandy banks.",
                           "Ivy bee survey: Where do ivy bees nest?"}, "none left out"
    assert [t.startswith("Ivy bee") for t in topics] == [True] * 3 + [False] * 3, topics
    assert topics[0] == "Ivy bee survey: Where do ivy bees nest?", "the words asked, first"
    assert prepare["properties"]["questions"]["items"]["enum"] == [
        "Ivy bee survey: Where do ivy bees nest?", "Hedge cutting: Why so late?"]


def _enum(decoding: Any, tool_id: str, field: str) -> list[str] | None:
    branch = _branch(decoding, tool_id)
    return None if branch is None else list(branch["properties"][field]["enum"])


@pytest.mark.req("PR-06", "PR-07")
@settings(max_examples=120, deadline=None)
@given(request=any_text, path=st.sampled_from(["notes/visitor.txt", "README.txt",
                                               "a/b/c/report.md", "summary_2.csv"]))
def test_requested_offers_what_the_user_named_and_nothing_else(
        request: str, path: str) -> None:
    rules = ALL_RULES
    named = f"Read {path} and tell me what it says. {request}"
    on = narrow(CATALOG, CATALOG, Observations(query=named),
                dataclasses.replace(BUDGET, rules=rules))
    offered = _enum(on, "files.read", "path")
    assert offered is not None and path in offered, "a file the user named is readable at once"
    for value in offered:
        assert value in named and not value.startswith(("/", ".")) and ".." not in value
    off = narrow(CATALOG, CATALOG, Observations(query=named),
                 dataclasses.replace(BUDGET, rules=ALL_RULES - {REQUESTED}))
    assert _enum(off, "files.read", "path") is None, "off: only results make references"
    quiet = narrow(CATALOG, CATALOG, Observations(query="How many species were seen?"),
                   dataclasses.replace(BUDGET, rules=rules))
    assert _enum(quiet, "files.read", "path") is None and \
        _enum(quiet, "workspace.read_object", "object_id") is None, "nothing named, nothing new"
    for hostile in ("../etc/passwd.txt", "/etc/hosts.txt", "./x.txt"):
        probe = narrow(CATALOG, CATALOG, Observations(query=f"read {hostile}"),
                       dataclasses.replace(BUDGET, rules=rules))
        assert all(".." not in v and not v.startswith(("/", "."))
                   for v in _enum(probe, "files.read", "path") or []), hostile


@pytest.mark.req("PR-07", "GW-02")
def test_search_looks_for_a_word_of_the_request_first(specimen: Path) -> None:
    from labfy_ref.gateway import AgentGateway  # noqa: PLC0415
    from labfy_ref.gateway.policy import CallContext  # noqa: PLC0415
    from labfy_ref.modes import PermissionMode  # noqa: PLC0415
    from labfy_ref.protocol.narrowing import SEARCH, request_words  # noqa: PLC0415
    from labfy_ref.workspace import open_workspace  # noqa: PLC0415

    query = "How many bee species have been recorded so far?"
    budget = BUDGET
    first = _branch(narrow(CATALOG, CATALOG, Observations(query=query), budget),
                    "workspace.list_objects")
    assert first is not None and first["required"] == ["match"], "a search comes first"
    words = first["properties"]["match"]["enum"]
    assert words == request_words(query)[:1] == ["recorded"], "the most specific word first"
    assert all(len(w) >= 3 for w in request_words(query))
    assert set(request_words(query)) <= set(query.casefold().rstrip("?").split(" "))
    seen = Observations(query=query).observe(
        "workspace.list_objects", {"match": "recorded"}, {"ok": True, "data": {"objects": []}},
        CATALOG)
    again = _branch(narrow(CATALOG, CATALOG, seen, budget), "workspace.list_objects")
    assert again is not None and "match" not in again["properties"] and not again["required"], \
        "a search that found nothing: the broadest listing next, not another search"
    workspace = open_workspace(specimen)
    store = workspace.open_store()
    try:
        gateway = AgentGateway(workspace, store)
        context = CallContext(PermissionMode.READ_ONLY)
        found = gateway.call("workspace.list_objects", {"match": "recorded"}, context)
        titles = [o["title"] for o in found.result["data"]["objects"]]
        assert "Species list size" in titles and len(titles) < len(gateway.list_objects())
        none = gateway.call("workspace.list_objects", {"match": "zzzqqq"}, context)
        assert none.ok and none.result["data"]["objects"] == []
    finally:
        store.close()
    seen = Observations(query=query).observe("workspace.list_objects", {"match": "recorded"},
                                             found.result, CATALOG)
    after = narrow(CATALOG, CATALOG, seen, budget)
    assert _branch(after, "workspace.list_objects") is None, "what it found is read first"
    read = _enum(after, "workspace.read_object", "object_id")
    assert read is not None and len(read) == len(titles), "only what the search found"
    for n, object_id in enumerate(read):
        if n:
            assert _branch(narrow(CATALOG, CATALOG, seen, budget),
                           "workspace.list_objects") is None, "all it found is read first"
        seen = seen.observe("workspace.read_object", {"object_id": object_id}, {
            "ok": True, "data": {"object_id": object_id, "kind": "fact", "title": "t",
                                 "body": "b"}}, CATALOG)
    listing = _branch(narrow(CATALOG, CATALOG, seen, budget), "workspace.list_objects")
    assert listing is not None and "match" not in listing["required"], "then the broadest"
    assert "recorded" not in listing["properties"]["match"]["enum"], "no search twice"
    empty = Observations(query=query).observe("workspace.list_objects", {"match": "recorded"},
                                              {"ok": True, "data": {"objects": []}}, CATALOG)
    assert _branch(narrow(CATALOG, CATALOG, empty, budget), "workspace.list_objects") \
        is not None, "a search that found nothing: list more"
    assert empty.fruitless == {"workspace.list_objects"} and not seen.fruitless - {
        "workspace.list_objects"}
    off = _branch(narrow(CATALOG, CATALOG, Observations(query=query), dataclasses.replace(
        BUDGET, rules=ALL_RULES - {SEARCH})), "workspace.list_objects")
    assert off is not None and "match" not in off["properties"], "off: no search"


def _final_text(decoding: Any) -> dict[str, Any] | None:
    branch = decoding.schema["oneOf"][-1]
    return branch["properties"]["text"] if branch["properties"].get("type") == {
        "const": "final"} else None


@pytest.mark.req("PR-07")
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ids=st.lists(object_ids, min_size=1, max_size=3, unique=True),
       bodies=st.lists(st.text(st.characters(codec="utf-8"), max_size=400), min_size=3,
                       max_size=3),
       names=st.lists(titles, min_size=3, max_size=3), query=any_text)
def test_quoted_final_is_a_passage_read_verbatim(ids: list[str], bodies: list[str],
                                                 names: list[str], query: str) -> None:
    from labfy_ref.protocol.narrowing import NOT_SAID, QUOTED  # noqa: PLC0415
    from labfy_ref.protocol.narrowing.answers import JOINED  # noqa: PLC0415
    from labfy_ref.protocol.text_shape import passages  # noqa: PLC0415

    seen = Observations(query=query)
    for object_id, title, body in zip(ids, names, bodies, strict=False):
        seen = seen.observe("workspace.read_object", {"object_id": object_id},
                            _read(object_id, title, body), CATALOG)
    budget = dataclasses.replace(QUOTING_BUDGET, round=16)  # the last round: final is on offer
    decoding = narrow(CATALOG, CATALOG, seen, budget)
    text = _final_text(decoding)
    assert text is not None
    said = [p for body in bodies[:len(ids)] for p in passages(body)]
    if not said:
        assert "enum" not in text, "nothing read to quote: the shaped sentence, as before"
        return
    assert NOT_SAID in text["enum"], "'nothing I read says this' is always on offer"
    options = [o for o in text["enum"] if o != NOT_SAID]
    singles = [o for o in options if o in seen.passages]
    assert singles and all(any(o.endswith(p) for p in said) for o in singles), \
        "every single answer on offer is a passage read, verbatim (after what it is from)"
    for joined in (o for o in options if o not in seen.passages):
        parts = [p for p in seen.passages if p in joined]
        assert 2 <= len(parts) <= JOINED and joined == " ".join(
            p for p in seen.passages if p in parts), "up to three passages, as read, joined"
    assert len(text["enum"]) == len(set(text["enum"]))
    shown = json.loads(decoding.note[decoding.note.index("["):])
    assert shown == text["enum"][:6], \
        "the note shows what the answer may quote, in order, as a JSON array (quoted data)"
    assert Draft202012Validator(action_schema()).is_valid(
        {"type": "final", "text": text["enum"][0]}), "a subset of the wide schema"
    off = _final_text(narrow(CATALOG, CATALOG, seen, dataclasses.replace(
        budget, rules=ALL_RULES - {QUOTED})))
    assert off is not None and "enum" not in off, "off: the shaped sentence"


@pytest.mark.req("PR-07", "PR-09")
def test_a_quoted_final_offers_nothing_read_after_the_relevant_passages_and_joins_them() -> None:
    """Under the quoting profile "nothing I read says this" is always on offer, after the
    passages scoring at least half of the best (first only when none scores) — never
    withdrawn or forced by word overlap; the most relevant passages may be joined."""
    from labfy_ref.protocol.narrowing import NOT_SAID  # noqa: PLC0415

    query = "How many bee species were recorded, and where do they nest?"
    budget = dataclasses.replace(QUOTING_BUDGET, round=16)  # the last round: final is on offer
    hedge, bees, nests = "obj_" + "A" * 26, "obj_" + "B" * 26, "obj_" + "C" * 26
    seen = Observations(query=query).observe(
        "workspace.read_object", {"object_id": hedge},
        _read(hedge, "Hedges", "The hedge was cut in May."), CATALOG)
    text = _final_text(narrow(CATALOG, CATALOG, seen, budget))
    assert text is not None and set(text["enum"]) == {
        NOT_SAID, "Hedges: The hedge was cut in May."}, "the model chooses; nothing forced"
    for object_id, title, body in ((bees, "Bees", "Twelve bee species were recorded."),
                                   (nests, "Nests", "The bees nest in sandy banks.")):
        seen = seen.observe("workspace.read_object", {"object_id": object_id},
                            _read(object_id, title, body), CATALOG)
    options = _final_text(narrow(CATALOG, CATALOG, seen, budget))["enum"]  # type: ignore[index]
    count, where = "Bees: Twelve bee species were recorded.", "Nests: The bees nest in sandy banks."
    assert set(options[:2]) == {count, where}, "the relevant passages first"
    assert f"{count} {where}" in options, "two facts: two passages joined, as read"
    assert options.index(NOT_SAID) > options.index(f"{count} {where}")
    assert options[-1] == "Hedges: The hedge was cut in May.", "the unrelated one after it"


@pytest.mark.req("PR-07")
def test_passages_split_sentences_and_lines_in_any_script() -> None:
    from labfy_ref.protocol.text_shape import PASSAGE_CHARS, passages  # noqa: PLC0415

    assert passages("First record of C. hederae. Needs a photo.\nLine two") == [
        "First record of C. hederae.", "Needs a photo.", "Line two"]
    assert passages("Studiul acoperă douăsprezece grădini. Ești sigur?") == [
        "Studiul acoperă douăsprezece grădini.", "Ești sigur?"]
    assert passages("1000000 ][ ... ") == [], "no word: nothing to quote"
    long = " ".join(["word"] * 200)
    assert all(len(p) <= PASSAGE_CHARS for p in passages(long))


@pytest.mark.req("PR-07")
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ids=st.lists(object_ids, min_size=2, max_size=5, unique=True),
       names=st.lists(titles, min_size=5, max_size=5), pick=st.integers(0, 4),
       noise=any_text)
def test_a_reference_named_in_the_request_is_read_first(ids: list[str], names: list[str],
                                                        pick: int, noise: str) -> None:
    from labfy_ref.protocol.narrowing import names_in  # noqa: PLC0415

    pick %= len(ids)
    names[pick] = "Field plan 2026"
    # noise that names a file ("00.A") asks for that file too: then a read of it is rightly
    # on offer beside the note's (the requested rule), which is not what this test is about
    assume(not re.search(CATALOG["files.read"].traits.requested["file"], noise))
    query = f"{noise} Read the note called field plan 2026, please."
    seen = Observations(query=query).observe("workspace.list_objects", {},
                                             _listing(ids, names), CATALOG)
    named = [i for i, n in zip(ids, names, strict=False) if names_in(n, query)]
    assert ids[pick] in named
    decoding = narrow(CATALOG, CATALOG, seen, BUDGET)
    assert decoding.offered == {"workspace.read_object"}, "reading what was named comes first"
    assert set(_enum(decoding, "workspace.read_object", "object_id") or []) == set(named)
    assert not _offers_final(decoding), "and before the answer"
    for object_id in named:
        seen = seen.observe("workspace.read_object", {"object_id": object_id},
                            _read(object_id, "Field plan 2026", "Sow in May."), CATALOG)
    after = narrow(CATALOG, CATALOG, seen, BUDGET)
    assert after.offered != {"workspace.read_object"} or not named, "then the rest"
    spelled = narrow(CATALOG, CATALOG, Observations(query="Read notes/plan.txt now"), BUDGET)
    assert spelled.offered == {"files.read"}
    assert _enum(spelled, "files.read", "path") == ["notes/plan.txt"]
    off = narrow(CATALOG, CATALOG, Observations(query=query).observe(
        "workspace.list_objects", {}, _listing(ids, names), CATALOG),
        dataclasses.replace(BUDGET, rules=ALL_RULES - {REQUESTED}))
    assert len(off.offered) > 1, "off: nothing is read first"
    assert not names_in("Plan", "the plan"), "one word is no naming"


@pytest.mark.req("PR-07")
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(calls=st.integers(0, 8), noise=any_text)
def test_a_write_is_offered_only_when_asked_where_asked_once(calls: int, noise: str) -> None:
    read = _read("obj_" + "A" * 26, "Next", "Check the boxes in August.")
    asked = (f"Read the note and write a short summary of it to the file out/summary.txt. "
             f"{noise}")
    for query, wanted in ((asked, True), ("What does the note say?", False)):
        seen = Observations(query=query, tool_calls=calls).observe(
            "workspace.read_object", {"object_id": "obj_" + "A" * 26}, read, CATALOG)
        decoding = narrow(CATALOG, CATALOG, seen, BUDGET)
        write = _branch(decoding, "files.write")
        if not wanted:
            assert write is None, "no write the user did not ask for"
            continue
        assert write is not None, "the write asked for is offered, concluding or not"
        targets = write["properties"]["path"]["enum"]
        assert "out/summary.txt" in targets, "where the user said"
        assert all(target in asked for target in targets), "nowhere the user did not say"
        assert not _offers_final(decoding), "the answer waits for the write asked for"
        done = seen.observe("files.write", {"path": "out/summary.txt", "content": "x"},
                            {"ok": True, "data": {"path": "out/summary.txt", "bytes": 1}},
                            CATALOG)
        assert _branch(narrow(CATALOG, CATALOG, done, BUDGET), "files.write") is None, "once"
    fresh = narrow(CATALOG, CATALOG, Observations(query=asked), BUDGET)
    assert _branch(fresh, "files.write") is None, "a write waits for something read"
    assert fresh.offered != {"files.read"}, "the file to write is not read first"


@pytest.mark.req("PR-07")
@settings(max_examples=150, deadline=None)
@given(query=any_text)
def test_search_words_are_the_request_s_own_less_the_catalog_s(query: str) -> None:
    """The search rule's words: the request's, never the catalog's, repeated ones first."""
    from labfy_ref.protocol.narrowing import catalog_vocabulary, request_words  # noqa: PLC0415

    tools = catalog_vocabulary(CATALOG)
    words = request_words(query, tools)
    said = [w.casefold() for w in re.findall(r"[^\W_]+", query)]
    assert len(words) == len(set(words)) and all(w in said for w in words)
    assert not set(words) & tools, "a word the catalog uses speaks of the tools"
    assert all(len(w) >= 3 and w.isalpha() for w in words)
    keys = [(-said.count(w), -len(w)) for w in words]
    assert keys == sorted(keys), "said most often first, then the longest"


@pytest.mark.req("PR-07")
def test_search_words_skip_the_tools_and_follow_the_subject() -> None:
    from labfy_ref.protocol.narrowing import catalog_vocabulary, request_words  # noqa: PLC0415

    tools = catalog_vocabulary(CATALOG)
    assert {"workspace", "research", "prepare", "file"} <= tools
    guided = request_words("Is the early record real? Check the workspace, then prepare "
                           "research on it.", tools)
    assert guided[0] == "record" and not {"workspace", "research", "prepare"} & set(guided)
    assert request_words("Compare the meadows of plot 4 and plot 9", tools)[0] == "plot", \
        "the word the request repeats is its subject"
    assert request_words("Câte grădini acoperă studiul?", tools)[0] == "grădini"


@pytest.mark.req("PR-07")
@settings(max_examples=100, deadline=None)
@given(first=st.integers(0, 10_000), second=st.integers(0, 10_000), word=st.sampled_from(
    ["plot", "grădina", "parcelle", "участок"]))
def test_relevance_counts_a_number_whole(first: int, second: int, word: str) -> None:
    """Numbers are whole terms of the relevance score: "plot 4" is nearer "Plot 4" than
    "Plot 14" or "Plot 9", in any script; the order stays a permutation."""
    if first == second:
        return
    documents = {"a": f"obj_01J{second}Z{second} {word.title()} {first}",
                 "b": f"obj_01J{first}Z{first} {word.title()} {second}"}  # an id's digits
    # are no number of the text
    score = scores(f"the {word} {first}", documents)
    assert score["a"] > score["b"]
    assert ranked(f"the {word} {first}", ["b", "a"], documents) == ["a", "b"]


def _files(path: str, entries: list[tuple[str, str]]) -> dict[str, Any]:
    return {"trust": "UNTRUSTED_DATA", "tool_id": "files.list", "ok": True,
            "data": {"path": path, "skipped": 0,
                     "entries": [{"name": n, "type": t} for n, t in entries]}}


@pytest.mark.req("PR-07")
def test_a_request_that_speaks_of_files_looks_at_files_first() -> None:
    """Requested rule: a request that says a distinctive word of a read's catalog
    description ("the log file") looks there first — that read and the listings that
    show what it takes — until the turn read something; the catalog decides."""
    from labfy_ref.protocol.narrowing import spoken_reads  # noqa: PLC0415

    query = "What does the log file in the notes say about plot 2?"
    assert spoken_reads(CATALOG, CATALOG, Observations(query=query)) == {"files.list",
                                                                          "files.read"}
    first = narrow(CATALOG, CATALOG, Observations(query=query), BUDGET)
    tools = {b["properties"]["tool_id"]["const"] for b in first.schema["oneOf"]
             if "tool_id" in b["properties"]}
    assert tools == {"files.list"} and not _offers_final(first), "the files are listed first"
    seen = Observations(query=query).observe(
        "files.list", {"path": ""}, _files("", [("notes", "directory"), ("a.txt", "file")]),
        CATALOG)
    second = narrow(CATALOG, CATALOG, seen, BUDGET)
    assert {b["properties"]["tool_id"]["const"] for b in second.schema["oneOf"]
            if "tool_id" in b["properties"]} == {"files.list", "files.read"}
    read = seen.observe("files.read", {"path": "a.txt"}, {
        "trust": "UNTRUSTED_DATA", "tool_id": "files.read", "ok": True,
        "data": {"path": "a.txt", "content": "Plot 2 had bees."}}, CATALOG)
    assert spoken_reads(CATALOG, CATALOG, read) == frozenset(), "once read: anything"
    assert _branch(narrow(CATALOG, CATALOG, read, BUDGET), "workspace.list_objects")
    off = narrow(CATALOG, CATALOG, Observations(query=query),
                 dataclasses.replace(BUDGET, rules=ALL_RULES - {REQUESTED}))
    assert _branch(off, "workspace.list_objects") is not None, "off: no file first"
    assert spoken_reads(CATALOG, CATALOG, Observations(query="How many bees were seen?")) \
        == frozenset(), "a request that speaks of no read restricts nothing"
    write = "Read the note called Next steps and write a summary to the file out.txt."
    assert spoken_reads(CATALOG, CATALOG, Observations(query=write)) == frozenset(), \
        "the file of a write the request asks for is the write's"
    exhausted = Observations(query=query).observe("files.list", {"path": ""},
                                                  _files("", []), CATALOG)
    rest = narrow(CATALOG, CATALOG, exhausted, BUDGET)
    assert _branch(rest, "workspace.list_objects") is not None, \
        "nothing of it left to look at: look elsewhere"


@pytest.mark.req("PR-07")
def test_a_request_that_speaks_of_every_read_restricts_nothing() -> None:
    """A request that says a distinctive word of each read that has listings leading to
    it (an object and a file) speaks of no one of them first: nothing is restricted, and
    saying one of them alone still restricts the round to it."""
    from labfy_ref.protocol.narrowing import spoken_reads  # noqa: PLC0415

    both = "Which object mentions the log file?"
    assert spoken_reads(CATALOG, CATALOG, Observations(query=both)) == frozenset()
    assert spoken_reads(CATALOG, CATALOG, Observations(query="What does the log file say?")) \
        == {"files.list", "files.read"}
    assert spoken_reads(CATALOG, CATALOG, Observations(query="Which object is newest?")) \
        == {"workspace.list_objects", "workspace.read_object"}
    first = narrow(CATALOG, CATALOG, Observations(query=both), BUDGET)
    assert {"files.list", "workspace.list_objects"} <= first.offered, "both are looked at"


@pytest.mark.req("PR-07")
@settings(max_examples=150, deadline=None)
@given(query=any_text, listed=st.booleans())
def test_spoken_reads_are_usable_reads_and_what_leads_to_them(query: str,
                                                               listed: bool) -> None:
    from labfy_ref.protocol.narrowing import produced_kinds, spoken_reads  # noqa: PLC0415

    usable = [t for t in CATALOG if not (listed and t == "files.list")]
    spoken = spoken_reads(CATALOG, usable, Observations(query=query))
    assert spoken <= set(usable)
    reads = {t for t in spoken if CATALOG[t].traits.progress}
    assert bool(spoken) == bool(reads)
    for tool_id in spoken - reads:
        taken = {k for r in reads for k in CATALOG[r].traits.consumes.values()}
        assert CATALOG[tool_id].traits.idempotent and produced_kinds(CATALOG[tool_id]) & taken


@pytest.mark.req("PR-07", "GW-02")
def test_the_resume_call_is_found_by_traits_not_by_name() -> None:
    """A granted turn resumes by reading what it waited on: the progress tool that takes
    the kind of reference the pausing tool produced — whatever the tools are called."""
    from labfy_ref.errors import ToolError  # noqa: PLC0415
    from labfy_ref.tools.catalog import ToolCatalog  # noqa: PLC0415

    assert CATALOG.resume_call("camp_1") == ("research.get_state", {"campaign_id": "camp_1"})
    renamed = ToolCatalog([dataclasses.replace(spec, tool_id=f"x.{n}")
                           for n, spec in enumerate(CATALOG.values())])
    tool_id, arguments = renamed.resume_call("camp_1")
    original = list(CATALOG)[list(renamed).index(tool_id)]
    assert original == "research.get_state" and arguments == {"campaign_id": "camp_1"}
    reads_only = ToolCatalog([s for s in CATALOG.values() if not s.traits.pauses_turn])
    with pytest.raises(ToolError):
        reads_only.resume_call("camp_1")


@pytest.mark.req("PR-07", "PR-05")
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=st.text(st.characters(codec=None), min_size=1, max_size=80),
       word=st.text(st.sampled_from("aßzщ"), min_size=90, max_size=160))
def test_hostile_reads_and_words_never_leave_the_wide_schema(body: str, word: str) -> None:
    """A lone surrogate read, or a request word longer than a search may be, never raises
    and never enters an enum: every value on offer is one the wide schema admits."""
    from labfy_ref.text import has_surrogate  # noqa: PLC0415

    query = f"Prepare research on {word} and write it to the file out.txt"
    first = narrow(CATALOG, CATALOG, Observations(query=query), BUDGET)
    search = _branch(first, "workspace.list_objects")
    assert search is None or all(len(w) <= 100 for w in search["properties"].get(
        "match", {}).get("enum", []))
    seen = Observations(query=query).observe(
        "workspace.read_object", {"object_id": "obj_" + "0" * 26},
        _read("obj_" + "0" * 26, f"T{body}", f"Said {body}. Also x\ud800y here."), CATALOG)
    decoding = narrow(CATALOG, CATALOG, seen, BUDGET)  # never raises
    for branch in decoding.schema["oneOf"]:
        tool = branch["properties"].get("tool_id", {}).get("const")
        if tool is None:
            continue
        for name, prop in branch["properties"]["arguments"]["properties"].items():
            for value in prop.get("enum", prop.get("items", {}).get("enum", [])):
                wide = CATALOG[tool].input_schema["properties"][name]
                assert Draft202012Validator(wide.get("items", wide)).is_valid(value)
                assert not has_surrogate(value), "a lone surrogate enters no enum"


@pytest.mark.req("PR-07")
def test_a_write_may_say_a_file_read_whole_and_unlabelled() -> None:
    """Grounding: a file's content is what the turn read said, as it said it — each line
    or sentence without the label of where it was from, or a read text whole."""
    query = "Read notes/alpha.txt and write a copy of it to the file beta.txt."
    seen = Observations(query=query).observe("files.read", {"path": "notes/alpha.txt"}, {
        "trust": "UNTRUSTED_DATA", "tool_id": "files.read", "ok": True,
        "data": {"path": "notes/alpha.txt",
                 "content": "Line one of the file.\nLine two here.\nLine three ends."}},
        CATALOG)
    write = _branch(narrow(CATALOG, CATALOG, seen, QUOTING_BUDGET), "files.write")
    assert write is not None
    content = write["properties"]["content"]["enum"]
    assert "Line one of the file.\nLine two here.\nLine three ends." in content
    assert "Line two here." in content and not any("alpha" in c for c in content)
    assert write["properties"]["path"]["enum"] == ["beta.txt"]
    off = _branch(narrow(CATALOG, CATALOG, seen, dataclasses.replace(
        QUOTING_BUDGET, rules=ALL_RULES - {TEXT_SHAPE})), "files.write")
    assert off is not None and "enum" not in off["properties"]["content"], \
        "text-shape off: PR-06's length bound alone"
