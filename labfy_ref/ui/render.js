// labfy-ref runtime page: text helpers and the activity card of one tool call.
// Everything here that comes from a model, a file, an object or evidence goes in with
// textContent, never as markup, through labfyText (text.js), which shows each invisible
// format character as ⟨U+XXXX⟩ (UI-02). Exposed as window.labfyRender for app.js/turns.js.
"use strict";

(function defineRender() {
  const CALL_LABELS = { ok: "Done", error: "Failed", refused: "Refused" };

  // -- text helpers ----------------------------------------------------------------------

  // Text from anywhere goes in as text, visibly; equal text is not rewritten (a selection in
  // it survives a refresh): text.js's helpers, shared by both pages.
  const el = window.labfyText.el;
  const setText = window.labfyText.set;

  /** At most `limit` UTF-16 units of `text`, never ending inside a surrogate pair. */
  function clip(text, limit) {
    if (text.length <= limit) return text;
    let cut = text.slice(0, limit);
    const last = cut.charCodeAt(cut.length - 1);
    if (last >= 0xd800 && last <= 0xdbff) cut = cut.slice(0, -1);
    return cut + "…";
  }

  /** `text` clipped to `limit`, every run of white space (U+2028 included) one space. */
  function oneLine(text, limit) {
    return clip(text, limit).replace(/[\s\u2028\u2029\u0085]+/gu, " ");
  }

  /** A short, bounded, plain-text summary of any JSON value (arguments, results). */
  function summarize(value, budget) {
    if (typeof value === "string") {
      const limit = Math.max(budget, 48);  // ids and paths stay whole
      const more = value.length > limit ? ` (${value.length.toLocaleString("en")} characters)` : "";
      return "“" + oneLine(value, limit) + "”" + more;
    }
    if (value === null || typeof value !== "object") return String(value);
    if (Array.isArray(value)) {
      if (value.length === 0) return "none";
      const first = value.slice(0, 2).map((item) => summarize(item, budget / 2));
      const rest = value.length > 2 ? ", …" : "";
      return oneLine(`${plural(value.length, "item")}: ${first.join(", ")}${rest}`, budget * 2);
    }
    const parts = Object.entries(value).map(([key, item]) => key + ": " + summarize(item, budget / 2));
    return oneLine(parts.join(" · "), budget * 2) || "{}";
  }

  /** An ISO time as this machine's wall-clock time (hh:mm:ss). */
  function clockTime(iso) {
    const date = new Date(iso);
    return Number.isNaN(date.getTime()) ? "" : date.toLocaleTimeString("en-GB");
  }

  /** Whole seconds from ISO time `from` to epoch milliseconds `to` (never negative). */
  function secondsBetween(from, to) {
    const start = new Date(from).getTime();
    return Number.isNaN(start) ? 0 : Math.max(0, Math.round((to - start) / 1000));
  }

  /** "1 round", "2 rounds". */
  function plural(count, word) {
    return `${count} ${word}${count === 1 ? "" : "s"}`;
  }

  // -- a turn's activity cards -----------------------------------------------------------

  function resultSummary(call) {
    const result = call.result || {};
    const data = result.data;
    if (!result.ok && data && data.error) {
      return data.error.code + ": " + oneLine(String(data.error.message || ""), 300);
    }
    return summarize(data, 240);
  }

  /** One tool call's card: tool, argument summary, result summary, status (hook activity-card). */
  function activityCard(call) {
    const item = el("li", "card card-" + call.status);
    item.dataset.testid = "activity-card";
    item.dataset.toolId = call.tool_id;
    item.dataset.status = call.status;
    item.dataset.callId = call.call_id;
    const head = el("p", "card-head");
    head.append(el("span", "card-tool", call.tool_id),
      el("span", "card-status status-" + call.status, CALL_LABELS[call.status] || call.status));
    const args = el("p", "card-line");
    args.append(el("span", "card-key", "Arguments "), el("span", "", summarize(call.arguments, 160)));
    const result = el("p", "card-line");
    const key = call.status === "ok" ? "Result " : call.status === "refused" ? "Refused " : "Error ";
    result.append(el("span", "card-key", key), el("span", "", resultSummary(call)));
    item.append(head, args, result, fullRecord(call));
    return item;
  }

  /** The whole call as JSON text, built only when the reader opens it. */
  function fullRecord(call) {
    const details = el("details", "card-full");
    details.append(el("summary", "", "Full arguments and result"));
    details.addEventListener("toggle", () => {
      if (!details.open || details.childElementCount > 1) return;
      const record = { arguments: call.arguments, result: call.result };
      const json = el("pre", "card-json", JSON.stringify(record, null, 2));
      json.tabIndex = 0;  // it scrolls: keyboard users must reach it
      details.append(json);
    });
    return details;
  }

  window.labfyRender = Object.freeze({
    el, setText, visible: window.labfyText.visible, clip, oneLine, summarize, clockTime,
    secondsBetween, plural, activityCard,
  });
}());
