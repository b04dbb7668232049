"""State-aware constrained decoding (PR-06), as guards and guidance (PR-07 amended, PR-08).

Each round the model is sent, as ``response_format``, the published action schema cut
down to what is valid *now* in this turn (:func:`narrow`), computed from the turn's own
observations (:class:`Observations`) and the tools' catalog traits. *Guards* hold under
every profile and never forbid an answer; *guidance* rules are composed into named
profiles (:data:`PROFILES`: ``none``, ``guided`` — the default —, ``quoting``). The reply
is still parsed against the wide published schema (PR-05). docs/narrowing.md tells the
design; :mod:`.rules` lists every rule with what it does and why.
"""

from labfy_ref.protocol.narrowing.answers import (
    FINAL_TEXT_CHARS,
    NOT_SAID,
    QUESTION_CHARS,
    TOPIC_CHARS,
    grounded_words,
    present,
    recap,
)
from labfy_ref.protocol.narrowing.bounds import max_json_bytes
from labfy_ref.protocol.narrowing.observations import (
    DEFAULT_CONCLUDE_AFTER,
    MAX_REFERENCES,
    Budget,
    Observations,
    call_key,
)
from labfy_ref.protocol.narrowing.offers import Decoding, concluding, narrow, offered_tools
from labfy_ref.protocol.narrowing.request import (
    catalog_vocabulary,
    names_in,
    produced_kinds,
    request_words,
    spoken_reads,
)
from labfy_ref.protocol.narrowing.rules import (
    ALL_RULES,
    AUTO,
    DEFAULT_GUIDANCE,
    DEFAULT_PROFILE,
    EFFECT_TASK,
    GROUNDED_CONTENT,
    GROUNDING,
    GUARDS,
    GUIDANCE,
    INFORMATION_GAIN,
    LOOK_FIRST,
    PROFILES,
    PROGRESS,
    QUOTED,
    RECAP,
    RELEVANCE,
    REQUESTED,
    SEARCH,
    TEXT_SHAPE,
    Guidance,
    Profile,
    Rule,
    guidance_for,
    guidance_names,
)

__all__ = [
    "ALL_RULES",
    "AUTO",
    "DEFAULT_CONCLUDE_AFTER",
    "DEFAULT_GUIDANCE",
    "DEFAULT_PROFILE",
    "EFFECT_TASK",
    "FINAL_TEXT_CHARS",
    "GROUNDED_CONTENT",
    "GROUNDING",
    "GUARDS",
    "GUIDANCE",
    "INFORMATION_GAIN",
    "LOOK_FIRST",
    "MAX_REFERENCES",
    "NOT_SAID",
    "PROFILES",
    "PROGRESS",
    "QUESTION_CHARS",
    "QUOTED",
    "RECAP",
    "RELEVANCE",
    "REQUESTED",
    "SEARCH",
    "TEXT_SHAPE",
    "TOPIC_CHARS",
    "Budget",
    "Decoding",
    "Guidance",
    "Observations",
    "Profile",
    "Rule",
    "call_key",
    "catalog_vocabulary",
    "concluding",
    "grounded_words",
    "guidance_for",
    "guidance_names",
    "max_json_bytes",
    "names_in",
    "narrow",
    "offered_tools",
    "present",
    "produced_kinds",
    "recap",
    "request_words",
    "spoken_reads",
]
