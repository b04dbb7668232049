"""The deterministic demo agent (RT-07): a real policy behind the same contract.

It is a :class:`~labfy_ref.protocol.ChatModel` whose "model" is a fixed,
documented policy (docs/serve.md, "The demo agent"): it answers with action
JSON text, which the runtime parses strictly like any model output and runs
through the same gateway. It is a demo, not a model, and every answer says so.

The rule, in full:

1. The question's *words* are its runs of letters and digits, casefolded, of
   three characters or more (or all digits), less a short list of function
   words (:data:`STOP_WORDS`) and the research words; a final ``s`` is dropped
   (``bees`` -> ``bee``). An object's word *matches* a question word when it
   starts with it.
2. It searches the objects for its longest word (the first of equals;
   ``workspace.list_objects`` with ``match``), then, if that finds nothing,
   for the next one (at most :data:`SEARCHES`); when the question has no
   word, or no search finds anything, it lists every object and says what
   the workspace holds.
3. It reads, at most :data:`READS` of them, the found objects whose titles
   match the most question words (ties: the listing's order), and answers by
   quoting the one or two whose title and text match the most (of each, the
   sentence that matches the most).
4. When the question asks to look something up or check it
   (:data:`RESEARCH_WORDS`, or "look up", "look into", "find out", with
   at most one word between: "look it up"), it reads
   the best object only and prepares research on it (a note when nothing
   matched): the turn stops for a human grant like any agent's, and once
   granted it answers with what the evidence says (its first two excerpts,
   each with its source, then the campaign).
5. An object id the question holds (as *Insert* puts it there) is read first,
   and the answer (or the research) is made from the objects so named.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from labfy_ref.protocol import TOOL_RESULT_PREFIX, Usage, canonical
from labfy_ref.protocol.narrowing import QUESTION_CHARS, TOPIC_CHARS, offered_tools

DEMO_LABEL = "Deterministic demo agent"
#: How every answer of the demo starts: it is no model, and says so.
SAYS = "Demo agent (a fixed rule, not a model): "
#: Words that ask to look something up or check it: the demo then prepares research.
RESEARCH_WORDS = frozenset({"research", "check", "verify", "confirm", "investigate",
                            "search", "lookup"})
#: Two-word phrases that ask the same.
RESEARCH_PHRASES = (("look", "up"), ("look", "into"), ("find", "out"))
#: Function words that say nothing of what is asked.
STOP_WORDS = frozenset((
    "about", "above", "after", "again", "whether", "all", "also", "and", "any", "are",
    "been", "before", "being", "below", "between", "both", "but", "can", "could", "did",
    "does", "doing", "down", "during", "each", "few", "for", "from", "further", "had",
    "has", "have", "having", "her", "here", "hers", "him", "his", "how", "into",
    "its", "just", "more", "most", "much", "must", "not", "now", "off", "once",
    "only", "other", "our", "ours", "out", "over", "own", "same", "she", "should",
    "some", "such", "than", "that", "the", "their", "theirs", "them", "then", "there",
    "these", "they", "this", "those", "through", "too", "under", "until", "very", "was",
    "were", "what", "when", "where", "which", "while", "who", "whom", "whose", "why",
    "will", "with", "would", "you", "your", "yours", "tell", "show", "give", "please",
    "know", "many",
))
#: At most this many objects are read before the answer.
READS = 3
#: At most this many searches, one word each, the longest first.
SEARCHES = 2
#: A quoted passage is cut at this many characters.
QUOTE_CHARS = 300
#: At most this many evidence items are quoted in the answer to a research question.
EVIDENCE_ITEMS = 2
#: An object id as a user pastes it (the page's *Insert* puts one in the message).
OBJECT_ID = re.compile(r"\bobj_[0-9A-HJKMNP-TV-Z]{26}\b")
#: The ``match`` argument's bound (the catalog's ``maxLength``): no question word is longer.
MATCH_CHARS = 100
_WORD = re.compile(r"[^\W_]+")


@dataclasses.dataclass(frozen=True, slots=True)
class DemoReply:
    """The demo's reply: action JSON text, like a model's (it costs no tokens)."""

    content: str
    usage: Usage = dataclasses.field(default_factory=Usage)


def _tool_result(messages: Sequence[Mapping[str, Any]], index: int) -> dict[str, Any] | None:
    """The wrapped result at ``messages[index]``, if that message is one.

    A tool result is known by its place, not by its text: a user message right
    after the assistant's tool call. A user who types the result prefix is
    still just a user (the text is never trusted to say what it is).
    """
    call = _answered_call(messages, index)
    return None if call is None else call[1]


def _answered_call(messages: Sequence[Mapping[str, Any]],
                   index: int) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The call and its wrapped result when ``messages[index]`` is a result."""
    if index < 1:
        return None
    message, previous = messages[index], messages[index - 1]
    content = str(message.get("content", ""))
    if (message.get("role") != "user" or previous.get("role") != "assistant"
            or not content.startswith(TOOL_RESULT_PREFIX)):
        return None
    try:
        call = json.loads(str(previous.get("content", "")))
        # the result object, then what the round adds after it (the answers on offer)
        result, _ = json.JSONDecoder().raw_decode(content[len(TOOL_RESULT_PREFIX):])
    except ValueError:
        return None
    if not (isinstance(call, dict) and call.get("type") == "tool_call"
            and isinstance(call.get("arguments"), dict)
            and isinstance(result, dict) and isinstance(result.get("tool_id"), str)
            and isinstance(result.get("ok"), bool) and isinstance(result.get("data"), dict)):
        return None
    return call, result


@dataclasses.dataclass(frozen=True, slots=True)
class _Turn:
    """What the demo knows of the turn: the request and the calls answered since."""

    request: str
    calls: tuple[tuple[dict[str, Any], dict[str, Any]], ...]

    @classmethod
    def of(cls, messages: Sequence[Mapping[str, Any]]) -> _Turn:
        calls: list[tuple[dict[str, Any], dict[str, Any]]] = []
        for index in range(len(messages) - 1, -1, -1):
            answered = _answered_call(messages, index)
            if answered is not None:
                calls.append(answered)
            elif messages[index].get("role") == "user":
                text = " ".join(str(messages[index].get("content", "")).split())
                return cls(text, tuple(reversed(calls)))
        return cls("", tuple(reversed(calls)))

    @property
    def words(self) -> tuple[str, ...]:
        return question_words(self.request)

    @property
    def wants_research(self) -> bool:
        return asks_research(self.request)

    def results(self, tool_id: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """This turn's successful calls of ``tool_id``, in order."""
        return [(call["arguments"], result["data"]) for call, result in self.calls
                if result["tool_id"] == tool_id and result["ok"]]


def question_words(text: str) -> tuple[str, ...]:
    """The words of a question the demo matches objects with (rule 1), in order."""
    words: list[str] = []
    for word in _WORD.findall(text.casefold()):
        if ((len(word) < 3 and not word.isdigit()) or word in STOP_WORDS
                or word in RESEARCH_WORDS):
            continue
        plural = len(word) > 3 and word.endswith("s") and not word.endswith("ss")
        # within the search's bound: a cut word still matches as the prefix it is
        stem = (word[:-1] if plural else word)[:MATCH_CHARS]
        if stem not in words:
            words.append(stem)
    return tuple(words)


def asks_research(text: str) -> bool:
    """Whether a question asks to look something up or check it (rule 4)."""
    words = _WORD.findall(text.casefold())
    if any(word in RESEARCH_WORDS for word in words):
        return True
    # "look up", "look it up", "find out", "find that out": one word may stand between
    return any((words[i], after) in RESEARCH_PHRASES
               for i in range(len(words)) for after in words[i + 1:i + 3])


def overlap(words: Sequence[str], text: str) -> int:
    """How many of the question's ``words`` some word of ``text`` starts with."""
    found = set(_WORD.findall(text.casefold()))
    return sum(1 for word in words if any(f.startswith(word) for f in found))


def _call(tool_id: str, **arguments: Any) -> str:
    return canonical({"type": "tool_call", "tool_id": tool_id, "arguments": arguments})


def _final(text: str) -> str:
    return canonical({"type": "final", "text": SAYS + text})


def _quote(words: Sequence[str], body: str) -> str:
    """The body's sentence that matches the most question words, cut to a bound."""
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", body) if s.strip()] or [body]
    best = max(sentences, key=lambda s: overlap(words, s))  # first of the best
    return best if len(best) <= QUOTE_CHARS else best[:QUOTE_CHARS - 1] + "…"


class DemoAgent:
    """The default agent: deterministic, offline, and bound by the same gateway."""

    label = DEMO_LABEL
    #: The model id it answers as (``engine:demo:deterministic-demo``, BR-10).
    model = "deterministic-demo"

    async def chat(self, messages: Sequence[Mapping[str, Any]], *,
                   response_format: Mapping[str, Any] | None = None,
                   max_tokens: int | None = None) -> DemoReply:
        """Decide the next action from the conversation and the tools offered.

        Its actions are short, far under any round's completion limit.
        """
        return DemoReply(self.decide(messages, offered_tools(response_format)))

    def decide(self, messages: Sequence[Mapping[str, Any]],
               offered: frozenset[str] | None = None) -> str:
        """The policy itself (pure: the same conversation gives the same action).

        ``offered`` are the tools the round's schema admits (None: all of them);
        like a constrained model, the demo never calls a tool it is not offered.
        """
        turn = _Turn.of(messages)
        last = _tool_result(messages, len(messages) - 1) if messages else None
        try:
            if last is not None and not last["ok"]:
                error = last["data"]["error"]
                return _final(f"I stopped: {last['tool_id'][:64]} failed with "
                              f"{str(error['code'])[:64]}.")
            if last is not None and last["tool_id"] == "research.get_state":
                return _evidence(last["data"])
            if last is not None and last["tool_id"] == "research.prepare":
                return _final(f"research campaign {last['data']['campaign_id']} is prepared; "
                              "it runs only after a human grants it.")
            return _Plan(turn, offered).next()
        except (KeyError, TypeError, IndexError, AttributeError, ValueError):
            tool = str(last["tool_id"])[:64] if last is not None else "the conversation"
            return _final(f"I could not read the result of {tool}.")


def _evidence(data: Mapping[str, Any]) -> str:
    """What the evidence says (each excerpt and its source, at most :data:`EVIDENCE_ITEMS`),
    then the campaign it came from."""
    evidence = [item for item in data["evidence"] if isinstance(item, Mapping)]
    said = "; ".join(f"\u201c{_cut(str(item.get('excerpt', '')))}\u201d "
                     f"({str(item.get('source', ''))[:120]})"
                     for item in evidence[:EVIDENCE_ITEMS] if item.get("excerpt"))
    status = (f"campaign {data['campaign_id']} is {data['status']} with {len(evidence)} "
              "evidence item(s)")
    return _final(f"the research found: {said}. ({status}.)" if said
                  else f"the research found nothing to say: {status}.")


def _cut(text: str) -> str:
    return text if len(text) <= QUOTE_CHARS else text[:QUOTE_CHARS - 1] + "\u2026"


class _Plan:
    """Rules 2-4 over what the turn has seen so far."""

    def __init__(self, turn: _Turn, offered: frozenset[str] | None) -> None:
        self.turn, self.offered = turn, offered
        self.words = turn.words

    def _may(self, tool_id: str) -> bool:
        return self.offered is None or tool_id in self.offered

    def next(self) -> str:
        named = list(dict.fromkeys(OBJECT_ID.findall(self.turn.request)))
        if named:  # an object the user pasted is read, then answered from (rule 5)
            read = {str(a["object_id"]): d for a, d in self.turn.results("workspace.read_object")}
            unread = [object_id for object_id in named if object_id not in read]
            if unread and self._may("workspace.read_object"):
                return _call("workspace.read_object", object_id=unread[0])
            found = [read[object_id] for object_id in named if object_id in read]
            if found:
                return self._answer(found)
        listings = self.turn.results("workspace.list_objects")
        searches = [a["match"] for a, _ in listings if "match" in a]
        if not listings or (not listings[-1][1]["objects"] and "match" in listings[-1][0]):
            if not self._may("workspace.list_objects"):
                return _final("listing the workspace's objects is not offered here.")
            by_length = sorted(self.words, key=len, reverse=True)  # stable: first of equals
            left = [w for w in by_length if w not in searches][:max(0, SEARCHES - len(searches))]
            return (_call("workspace.list_objects", match=left[0]) if left
                    else _call("workspace.list_objects"))  # nothing found: everything
        arguments, listing = listings[-1]
        objects = [o for o in listing["objects"] if isinstance(o, dict)]
        if not objects:
            return _final("the workspace holds no objects yet.")
        searched = "match" in arguments
        if not searched and not self.turn.wants_research:
            return _final(_overview(objects, bool(self.words)))
        if searched:
            candidates = sorted(objects, key=lambda o: -overlap(self.words, str(o["title"])))
        else:  # nothing matched: a note, as a reader would start
            candidates = [o for o in objects if o.get("kind") == "note"] or objects
        reads = 1 if self.turn.wants_research else READS  # research is prepared on the best
        read = {str(a["object_id"]): d for a, d in self.turn.results("workspace.read_object")}
        unread = [o for o in candidates[:reads] if str(o["object_id"]) not in read]
        if unread and self._may("workspace.read_object"):
            return _call("workspace.read_object", object_id=str(unread[0]["object_id"]))
        if not read:
            return _final(_overview(objects, bool(self.words)))
        return self._answer(list(read.values()))

    def _answer(self, read: Sequence[Mapping[str, Any]]) -> str:
        def score(item: Mapping[str, Any]) -> int:
            return overlap(self.words, f"{item['title']} {item['body']}")
        ranked = sorted(read, key=lambda item: -score(item))  # stable: first read first
        top = score(ranked[0])
        best = [item for item in ranked if score(item) == top][:2]
        if self.turn.wants_research:
            if self._may("research.prepare"):
                question = self.turn.request[:QUESTION_CHARS] or str(best[0]["title"])
                return _call("research.prepare", topic=str(best[0]["title"])[:TOPIC_CHARS],
                             questions=[question[:QUESTION_CHARS]],
                             object_refs=[str(item["object_id"]) for item in best])
            return _final(_quotes(self.words, best) + " Research is not offered here.")
        return _final(_quotes(self.words, best))


def _quotes(words: Sequence[str], items: Sequence[Mapping[str, Any]]) -> str:
    said = "; ".join(f"\u201c{str(item['title'])[:200]}\u201d ({item['object_id']}) says: "
                     f"\u201c{_quote(words, str(item['body']))}\u201d" for item in items)
    lead = ("the object whose words best match your question"
            if len(items) == 1 else "the objects whose words best match your question")
    return f"{lead}: {said}"


def _overview(objects: Sequence[Mapping[str, Any]], had_words: bool) -> str:
    titles = ", ".join(f"\u201c{str(o['title'])[:80]}\u201d ({str(o['kind'])[:32]})"
                       for o in objects[:5])
    more = f" and {len(objects) - 5} more" if len(objects) > 5 else ""
    lead = ("no object's words match your question. " if had_words
            else "your message names nothing I can look for. ")
    return (f"{lead}This workspace holds {titles}{more}; ask about one of them, or ask me "
            "to check something to prepare research on it.")
