"""The narrowing's rules and the profiles that compose them (PR-07 amended, PR-08).

A *guard* holds under every profile, for every model: it keeps a round to what is
valid now (references the turn saw, the tools available, no identical repeat, the
budget, the completion limit, no degenerate string, no call that cannot add
anything) and never forbids an answer. *Guidance* is everything a rule does to help
a model that needs help: it orders, it says what to do first, it may hold ``final``
back while something asked for is on offer, it may even build the answer from what
was read. A :class:`Profile` is an ordered tuple of guidance rules (the way a web
framework orders its middleware: the first listed is applied first in a round); the
guards are in every profile and are not listed. ``none`` is the guards alone.

Each rule is a :class:`Rule` with a name, what it does and why; the narrowing tests
each rule's name (``RELEVANCE in budget.rules``) where it applies, so switching a
rule off is removing its name. No rule names a model, a quantization, a workspace
object or a task's words (docs/narrowing.md says what each one reads instead).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable


@dataclasses.dataclass(frozen=True, slots=True)
class Rule:
    """One rule of the narrowing: its name (as profiles and records spell it), what it
    does and why it exists; a guard holds under every profile."""

    name: str
    what: str
    why: str
    guard: bool = False


# The rules' names, as the narrowing tests them.
INFORMATION_GAIN = "information-gain"
PROGRESS = "progress"
TEXT_SHAPE = "text-shape"
RELEVANCE = "relevance"
REQUESTED = "requested"
SEARCH = "search"
EFFECT_TASK = "effect-task"
LOOK_FIRST = "look-first"
GROUNDING = "grounding"
GROUNDED_CONTENT = "grounded-content"
QUOTED = "quoted"
RECAP = "recap"

#: The guards: in force under every profile (PR-06's own rules are unconditional and
#: carry no name: references from the turn's results, tools unavailable now, identical
#: repeats, once per turn, a pause needs a round after it, the budget, the completion
#: limit, the wide-schema subset).
GUARDS: tuple[Rule, ...] = (
    Rule(INFORMATION_GAIN, guard=True,
         what="a listing is offered broadest first and not again once its answer was "
              "complete; a read already answered is never offered again",
         why="a call whose answer cannot add anything only spends the budget"),
    Rule(PROGRESS, guard=True,
         what="past conclude_after a turn that read nothing may first read what it "
              "listed; research (trait needs_progress) waits for a read",
         why="the budget rule must never cut a turn before it used what it gathered"),
    Rule(TEXT_SHAPE, guard=True,
         what="free strings are sentences of words in the conversation's scripts, "
              "bounded in length",
         why="a degenerate string (a run of one character, a placeholder, no word) is no "
             "answer in any language, and the grammar enforces the shape"),
)

#: Every guidance rule, in the order a profile applies them.
GUIDANCE: tuple[Rule, ...] = (
    Rule(RELEVANCE,
         what="reference menus and the listings the model reads are ordered by a lexical "
              "score to the user's message; never cut",
         why="a small model copies the first plausible id it sees"),
    Rule(REQUESTED,
         what="a reference the user spells (a path, an id) or whose title the request "
              "says is offered as if a result showed it, and read first",
         why="what the user named is what the user wants read"),
    Rule(SEARCH,
         what="a listing that can search is first offered as a search for a word of the "
              "request, and what a search found is read before more is listed",
         why="the ids a model picks from are then those that match the request"),
    Rule(EFFECT_TASK,
         what="a tool with an effect is offered when the request speaks of what it does "
              "(the catalog's own words); final waits while it is on offer",
         why="a request for research or a write does not end with a chat answer"),
    Rule(LOOK_FIRST,
         what="final waits while the turn has read nothing and an offered call can lead "
              "to a read (an empty workspace answers at once)",
         why="a small model answers from nothing when it may; every model should look"),
    Rule(GROUNDING,
         what="once the turn read content, a research topic and its questions are what it "
              "read, verbatim (a title or a passage)",
         why="research is prepared on what the workspace raises; a very small model left "
             "to compose a topic repeats a word or copies the request"),
    Rule(GROUNDED_CONTENT,
         what="once the turn read content, a file's content is what it read, verbatim",
         why="for the weakest models only: a user's dictated text cannot then be written"),
    Rule(QUOTED,
         what="once the turn read content, the final text is up to three passages it "
              "read, joined, or the honest answer that nothing read says it",
         why="for the weakest models only: grounded by construction, but it can say no "
             "count, comparison or summary"),
    Rule(RECAP,
         what="a concluding round repeats the most relevant contents read",
         why="measured, in no shipped profile: it made no task pass more often"),
)

RULES_BY_NAME: dict[str, Rule] = {rule.name: rule for rule in (*GUARDS, *GUIDANCE)}
GUARD_NAMES = frozenset(rule.name for rule in GUARDS)
_ORDER = {rule.name: n for n, rule in enumerate(GUIDANCE)}


@dataclasses.dataclass(frozen=True, slots=True)
class Profile:
    """A named, ordered tuple of guidance rules; the guards hold under every profile."""

    name: str
    rules: tuple[Rule, ...]
    what: str = ""

    def __post_init__(self) -> None:
        names = [rule.name for rule in self.rules]
        if any(rule.guard for rule in self.rules):
            raise ValueError("a profile lists guidance only: the guards are in every one")
        if names != sorted(set(names), key=_ORDER.__getitem__):
            raise ValueError(f"profile {self.name!r}: rules once each, in GUIDANCE's order")

    @property
    def names(self) -> frozenset[str]:
        """Every rule in force under this profile: the guards and its guidance."""
        return GUARD_NAMES | {rule.name for rule in self.rules}

    def without(self, name: str) -> Profile:
        """This profile less one guidance rule (an eval's ``--ablate RULE``)."""
        if name not in {rule.name for rule in self.rules}:
            raise ValueError(f"{name!r} is not a rule of the {self.name!r} profile")
        return Profile(f"{self.name}-{name}", tuple(r for r in self.rules if r.name != name),
                       self.what)

    def plus(self, names: Iterable[str]) -> Profile:
        """This profile with more guidance rules (an eval's ``--with RULE``)."""
        added = [RULES_BY_NAME[name] for name in names]
        if any(rule.guard or rule in self.rules for rule in added):
            raise ValueError("--with adds a guidance rule the profile lacks")
        rules = sorted({*self.rules, *added}, key=lambda rule: _ORDER[rule.name])
        return Profile(self.name + "".join(f"+{rule.name}" for rule in added), tuple(rules),
                       self.what)

    def as_json(self) -> dict[str, object]:
        """How status and the records show the profile in force."""
        return {"profile": self.name, "rules": [rule.name for rule in self.rules],
                "guards": sorted(GUARD_NAMES)}


def _pick(*names: str) -> tuple[Rule, ...]:
    return tuple(RULES_BY_NAME[name] for name in names)


NONE = Profile("none", (), "the guards alone: the model is free within what is valid now")
GUIDED = Profile("guided", _pick(RELEVANCE, REQUESTED, SEARCH, EFFECT_TASK, LOOK_FIRST,
                                 GROUNDING),
                 "the default: orders, searches, reads what was named and looks before it "
                 "answers; every answer is the model's own words")
QUOTING = Profile("quoting", _pick(RELEVANCE, REQUESTED, SEARCH, EFFECT_TASK, LOOK_FIRST,
                                   GROUNDING, GROUNDED_CONTENT, QUOTED),
                  "for the weakest models: what it writes about the workspace is what it "
                  "read, verbatim")
#: The profiles ``--guidance`` names; ``auto`` picks one (PR-08).
PROFILES: dict[str, Profile] = {profile.name: profile for profile in (NONE, GUIDED, QUOTING)}
#: The profile in force when none is named and no calibration says otherwise: it admits
#: every kind of answer (never a quoting one).
DEFAULT_PROFILE = GUIDED
AUTO = "auto"
#: Every rule but the measured-only ones: what the fullest shipped profile runs.
ALL_RULES = QUOTING.names


@dataclasses.dataclass(frozen=True, slots=True)
class Guidance:
    """The profile in force and how it was chosen (``--guidance PROFILE|auto``, PR-08)."""

    #: What was asked: ``auto`` or a profile's name.
    asked: str = AUTO
    profile: Profile = DEFAULT_PROFILE
    #: Why this profile: named, or what ``auto`` found.
    source: str = "auto: no calibration record for this model, the default profile"

    def as_json(self) -> dict[str, object]:
        """How status and every record show it."""
        return {**self.profile.as_json(), "asked": self.asked, "source": self.source}


def guidance_for(asked: str) -> Guidance:
    """The :class:`Guidance` for ``--guidance``'s value (already checked by
    :func:`guidance_names`): a named profile, or for ``auto`` the default profile.

    ``auto`` is meant to read a calibration record of the verified model (EV-05); until
    one exists for the model in use it is the default profile, which admits every kind
    of answer, and says so.
    """
    if asked == AUTO:
        return Guidance()
    return Guidance(asked, PROFILES[asked], "named")


def guidance_names() -> tuple[str, ...]:
    """What ``--guidance`` takes."""
    return (AUTO, *PROFILES)


#: ``--guidance`` absent: ``auto``, which is the default profile until a calibration says.
DEFAULT_GUIDANCE = Guidance()
