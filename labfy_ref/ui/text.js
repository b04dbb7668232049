// labfy-ref text shown on both pages: invisible format characters made visible (UI-02).
//
// A direction override, isolate or mark (U+202A-202E, U+2066-2069, U+200E/200F, U+061C),
// a zero-width character (U+200B-200D, U+FEFF) or any other Unicode format character
// (category Cf) is invisible, and the bidi ones reorder what is shown: an approval of
// `files.write run<U+202E>txt.sh` reads as "runhs.txt". So every text a page inserts
// that came from a model, a file, evidence, a title or the server goes through here,
// and each such character is shown as a mark: ⟨U+202E⟩. Both pages load this script
// first; their element and text helpers are these (labfyText.el / set / node / markTree).
"use strict";

(function defineText() {
  // \p{Cf} with the u flag reads code points, so astral format characters (tags U+E0001…)
  // match too, and a lone surrogate is left alone (never matched, never split).
  const FORMAT = /\p{Cf}/gu;

  function mark(character) {
    const hex = character.codePointAt(0).toString(16).toUpperCase().padStart(4, "0");
    return `⟨U+${hex}⟩`;
  }

  /** `text` with every format character (Unicode Cf) replaced by a visible ⟨U+XXXX⟩. */
  function visible(text) {
    return String(text).replace(FORMAT, mark);
  }

  /** Put `text` in `node` as text (never markup), visibly; unchanged text is not rewritten
   *  (rewriting equal text would drop the reader's selection). Returns the node. */
  function set(node, text) {
    const shown = visible(text);
    if (node.textContent !== shown) node.textContent = shown;
    return node;
  }

  /** A new element; `text` (when given) goes in as text, visibly — the one element helper
   *  of both pages. */
  function el(tag, className, text) {
    const element = document.createElement(tag);
    if (className) element.className = className;
    if (text !== undefined) set(element, text);
    return element;
  }

  /** A text node of `text`, visibly. */
  function node(text) {
    return document.createTextNode(visible(text));
  }

  /** Every text node under `root` (rendered, sanitised Markdown) made visible in place. */
  function markTree(root) {
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    for (let text = walker.nextNode(); text !== null; text = walker.nextNode()) {
      const shown = visible(text.data);
      if (shown !== text.data) text.data = shown;
    }
    return root;
  }

  const FACT_STATES = {
    found: "found in what the turn read",
    derived: "worked out from numbers read or said",
    not_found: "not found in anything the turn read or you said",
  };

  /** A final's checked facts (PR-09) as one line of both pages: each fact as written, a
   *  title saying where it comes from; a fact nothing supports is marked
   *  (data-testid="fact-unsupported"). The answer itself is never changed. Null when the
   *  answer holds no checkable fact. */
  function facts(list) {
    if (!Array.isArray(list) || list.length === 0) return null;
    const line = el("p", "facts");
    line.append(node("Checked: "));
    list.forEach((fact, index) => {
      if (index > 0) line.append(node(" · "));
      const status = Object.hasOwn(FACT_STATES, fact.status) ? fact.status : "not_found";
      const chip = el("span", `fact fact-${status.replace("_", "-")}`, String(fact.text));
      let why = FACT_STATES[status];
      if (status === "found" && fact.where) why += ` (${fact.where === "said" ? "you said it" : String(fact.where)})`;
      if (status === "derived" && fact.operation) {
        why += ` (${String(fact.operation)} of ${(fact.operands || []).map(String).join(", ")})`;
      }
      chip.title = visible(why);
      if (status === "not_found") {
        chip.dataset.testid = "fact-unsupported";
        chip.append(node(" (not found)"));
      }
      line.append(chip);
    });
    return line;
  }

  window.labfyText = Object.freeze({ visible, set, el, node, markTree, facts });
}());
