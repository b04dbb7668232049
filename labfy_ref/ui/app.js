// labfy-ref runtime page (/): mode, objects, composer, turns with their activity cards,
// research authorization, cancel (SPEC §8 UI-01..UI-03, hooks of SPEC §15).
// Everything that comes from a model, a file, an object or evidence goes in with
// textContent, never as markup (UI-02); no inline script or style (CSP). The session,
// the login form and the lost-connection banner are session.js's (window.labfySession).
// Turns are updated in place from the event cursor (RT-06), so a refresh never rebuilds
// the list and never wipes the reader's text selection.
"use strict";

(function runtimePage() {
  const POLL_MS = 1000;
  const STATUS_EVERY_MS = 5000;
  const EVENT_PAGE = 200;
  const MAX_PAGES = 8;          // event pages read per poll before yielding
  const MEMORY_KEY = "labfy.liveTurns";
  const MEMORY_LIMIT = 64;
  const LIVE = new Set(["QUEUED", "RUNNING", "AUTHORIZATION_REQUIRED"]);
  const LABELS = {
    QUEUED: "Queued", RUNNING: "Running", AUTHORIZATION_REQUIRED: "Needs authorization",
    COMPLETED: "Completed", FAILED: "Failed", CANCELLED: "Cancelled",
    MODEL_UNAVAILABLE: "Model unavailable", MODEL_PROTOCOL_ERROR: "Model protocol error",
    BUDGET_EXHAUSTED: "Budget exhausted", LOST: "Gone",
  };
  const CALL_LABELS = { ok: "Done", error: "Failed", refused: "Refused" };

  const session = window.labfySession;
  const page = {
    generation: 0,      // bumped on logout/resync: late answers of an older one are dropped
    cursor: 0,
    timer: null,
    ticker: null,
    statusAt: 0,
    status: null,
    views: new Map(),   // turn id → view
    campaigns: new Map(),
    pending: null,      // {text, id}: a send that failed before the server answered
  };
  const $ = (id) => document.getElementById(id);

  // -- small helpers ---------------------------------------------------------------------

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = String(text);
    return node;
  }

  /** At most `limit` UTF-16 units of `text`, never ending inside a surrogate pair. */
  function clip(text, limit) {
    if (text.length <= limit) return text;
    let cut = text.slice(0, limit);
    const last = cut.charCodeAt(cut.length - 1);
    if (last >= 0xd800 && last <= 0xdbff) cut = cut.slice(0, -1);
    return cut + "…";
  }

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

  function clockTime(iso) {
    const date = new Date(iso);
    return Number.isNaN(date.getTime()) ? "" : date.toLocaleTimeString("en-GB");
  }

  function secondsBetween(from, to) {
    const start = new Date(from).getTime();
    return Number.isNaN(start) ? 0 : Math.max(0, Math.round((to - start) / 1000));
  }

  function plural(count, word) {
    return `${count} ${word}${count === 1 ? "" : "s"}`;
  }

  function announce(text) {
    $("announcer").textContent = text;
  }

  function showError(id, error) {
    $(id).textContent = error ? (error.message || String(error)) : "";
  }

  // -- memory of live turns (sessionStorage: this tab, this origin) ------------------------
  // After a restart the server has no turn left; what the page remembers lets it say so
  // where the turn was, and point at a grant that outlived it.

  function remembered() {
    try {
      const value = JSON.parse(sessionStorage.getItem(MEMORY_KEY) || "{}");
      return value && typeof value === "object" ? value : {};
    } catch (_) {
      return {};
    }
  }

  function saveMemory(memory) {
    const ids = Object.keys(memory).slice(-MEMORY_LIMIT);
    const kept = Object.fromEntries(ids.map((id) => [id, memory[id]]));
    try {
      sessionStorage.setItem(MEMORY_KEY, JSON.stringify(kept));
    } catch (_) {
      // storage full or refused: the page works on, it only cannot explain a restart
    }
  }

  function remember(turn) {
    if (turn.state === "LOST") return;  // kept until dismissed, so a reload explains it again
    const memory = remembered();
    if (LIVE.has(turn.state)) {
      memory[turn.id] = {
        message: clip(turn.message, 500), state: turn.state, created_at: turn.created_at,
        campaign_id: turn.authorization ? turn.authorization.campaign_id : null,
      };
    } else if (!(turn.id in memory)) {
      return;
    } else {
      delete memory[turn.id];
    }
    saveMemory(memory);
  }

  function forget(turnId) {
    const memory = remembered();
    delete memory[turnId];
    saveMemory(memory);
  }

  // -- mode and objects ------------------------------------------------------------------

  function showStatus(status) {
    page.status = status;
    let mode;
    if (status.mode === "demo") mode = "Deterministic demo agent";
    else if (status.available) mode = "Local agent · " + status.model;
    else mode = "Local agent · " + status.model + " — unavailable: " + oneLine(String(status.diagnostic), 160);
    $("mode-label").textContent = mode;
    const ws = status.workspace;
    $("workspace-line").textContent =
      `Workspace: ${ws.name} (${ws.kind}) · permission: ${status.permission_mode}`;
    $("composer-input").maxLength = status.limits.max_message_chars;
  }

  async function refreshStatus(generation) {
    const status = await session.api("GET", "/api/v1/agent-runtime/status");
    if (generation !== page.generation) return;
    page.statusAt = Date.now();
    showStatus(status);
  }

  function objectItem(object) {
    const item = el("li", "object");
    const title = oneLine(String(object.title), 160);
    const text = el("div", "object-text");
    text.append(el("span", "object-kind", object.kind), el("span", "object-title", title),
      el("code", "object-id", object.object_id));
    const insert = el("button", "object-insert", "Insert");
    insert.type = "button";
    insert.dataset.testid = "object-ref";
    insert.dataset.objectId = object.object_id;
    insert.setAttribute("aria-label", `Insert a reference to ${object.kind} “${title}”`);
    insert.addEventListener("click", () => insertReference(object.object_id));
    item.append(text, insert);
    return item;
  }

  async function refreshObjects(generation) {
    try {
      const body = await session.api("GET", "/api/v1/objects");
      if (generation !== page.generation) return;
      $("objects").replaceChildren(...body.objects.map(objectItem));
      showError("objects-error", null);
    } catch (error) {
      if (generation === page.generation) showError("objects-error", error);
    }
  }

  /** UI-03: a reference is only ever the exact id of a listed object, put at the caret. */
  function insertReference(objectId) {
    const field = $("composer-input");
    const start = field.selectionStart;
    const before = field.value.slice(0, start);
    const text = (before && !/\s$/u.test(before) ? " " : "") + objectId + " ";
    field.setRangeText(text, start, field.selectionEnd, "end");
    field.dispatchEvent(new Event("input", { bubbles: true }));
    field.focus();
  }

  // -- composer --------------------------------------------------------------------------

  function onComposerKey(event) {
    if (event.key !== "Enter" || event.shiftKey || event.isComposing) return;
    if (event.ctrlKey || event.altKey || event.metaKey) return;
    event.preventDefault();
    $("composer").requestSubmit();
  }

  async function sendMessage(event) {
    event.preventDefault();
    const field = $("composer-input");
    const button = $("composer-send");
    const text = field.value;
    if (!text.trim()) return;
    // The same text sent again after a failure reuses its request id: no duplicate turn.
    const id = page.pending && page.pending.text === text ? page.pending.id : crypto.randomUUID();
    page.pending = { text, id };
    button.disabled = true;
    showError("composer-error", null);
    try {
      const body = await session.api("POST", "/api/v1/agent-runtime/turns",
        { message: text, client_request_id: id });
      page.pending = null;
      if (field.value === text) field.value = "";
      updateCount();
      applyTurn(body.turn);
      schedulePoll(0);
    } catch (error) {
      showError("composer-error", error);
    } finally {
      button.disabled = false;
      session.live(button);
    }
  }

  function updateCount() {
    $("composer-count").textContent = $("composer-input").value.length.toLocaleString("en");
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

  // -- research authorization ------------------------------------------------------------

  function adapterLines() {
    const kind = page.status ? page.status.workspace.kind : "";
    if (kind === "SPECIMEN") {
      return ["SPECIMEN adapter: canned evidence stored in this workspace",
        "None: the SPECIMEN adapter never contacts a network"];
    }
    return ["None in a LIVE workspace: the campaign would fail RESEARCH_ADAPTER_UNAVAILABLE",
      "None"];
  }

  function definition(list, term, value) {
    list.append(el("dt", "", term));
    const detail = el("dd", "");
    if (value instanceof Node) detail.append(value);
    else detail.textContent = String(value);
    list.append(detail);
  }

  function grantItem(view, grant) {
    const item = el("li", "grant");
    const expiry = grant.expires_at ? `expires ${clockTime(grant.expires_at)}` : "no expiry";
    const state = grant.active ? "Active" : grant.revoked_at ? "Revoked" : "Inactive";
    item.append(el("span", "", `${state} grant, created ${clockTime(grant.created_at)}, ${expiry}`));
    if (grant.active) {
      const revoke = session.live(el("button", "secondary", "Revoke"));
      revoke.type = "button";
      revoke.setAttribute("aria-label", `Revoke the grant created ${clockTime(grant.created_at)}`);
      revoke.addEventListener("click", () => revokeGrant(view, grant.id, revoke));
      item.append(revoke);
    }
    return item;
  }

  function renderCampaign(view, campaign) {
    const [adapter, contact] = adapterLines();
    const facts = el("dl", "campaign");
    definition(facts, "Campaign", campaign.id);
    definition(facts, "Topic", campaign.topic);
    const questions = el("ul", "questions");
    for (const question of campaign.questions) questions.append(el("li", "", question));
    definition(facts, "Questions", campaign.questions.length ? questions : "none");
    definition(facts, "Adapter", adapter);
    definition(facts, "Network contact", contact);
    definition(facts, "Campaign status", campaign.status);
    const grants = el("ul", "grants");
    for (const grant of campaign.grants) grants.append(grantItem(view, grant));
    definition(facts, "Grants", campaign.grants.length ? grants : "none yet");
    view.campaignBox.replaceChildren(facts);
    const active = campaign.grants.some((grant) => grant.active);
    view.authorize.textContent = active ? "Resume with the active grant" : "Authorize research and resume";
  }

  async function refreshCampaign(view) {
    const campaignId = view.campaignId;
    if (!campaignId) return;
    try {
      const body = await session.api("GET", "/api/v1/research/campaigns/" + encodeURIComponent(campaignId));
      page.campaigns.set(campaignId, body.campaign);
      const shown = JSON.stringify(body.campaign);
      if (view.campaignShown !== shown) {
        view.campaignShown = shown;
        renderCampaign(view, body.campaign);
      }
    } catch (error) {
      view.campaignBox.replaceChildren(el("p", "error", error.message));
    }
  }

  function authorizationBox(view) {
    const box = el("section", "authorization");
    const headingId = "auth-" + view.id;
    const heading = el("h4", "", "Research authorization");
    heading.id = headingId;
    box.setAttribute("aria-labelledby", headingId);
    view.authText = el("p", "auth-text");
    view.authText.id = "auth-text-" + view.id;
    view.campaignBox = el("div", "campaign-box");
    view.authorize = session.live(el("button", "primary", "Authorize research and resume"));
    view.authorize.type = "button";
    view.authorize.dataset.testid = "authorize-resume";
    view.authorize.setAttribute("aria-describedby", view.authText.id);
    view.authorize.addEventListener("click", () => authorize(view));
    box.append(heading, view.authText, view.campaignBox, view.authorize);
    return box;
  }

  function authorizationText(view, state, status) {
    if (state === "LOST") {
      return "The research campaign this turn prepared is still in the workspace. Any active "
        + "grant below outlived the turn: revoke it if you no longer want it, or ask again.";
    }
    if (status === "GRANTED") return "Granted: the campaign ran and this turn went on with its evidence.";
    if (state === "AUTHORIZATION_REQUIRED") {
      return "The agent prepared a research campaign and paused; nothing has been contacted. "
        + "Authorizing creates a persistent grant for this campaign in this workspace "
        + "(revocable below), runs it, then resumes this same turn.";
    }
    return "This turn prepared a research campaign that was not granted.";
  }

  async function authorize(view) {
    const button = view.authorize;
    button.disabled = true;
    view.actionError.textContent = "";
    try {
      const campaign = page.campaigns.get(view.campaignId);
      if (!(campaign && campaign.grants.some((grant) => grant.active))) {
        await session.api("POST", "/api/v1/grants", { campaign_id: view.campaignId });
      }
      const body = await session.api("POST", `/api/v1/agent-runtime/turns/${encodeURIComponent(view.id)}/resume`);
      applyTurn(body.turn);
      schedulePoll(0);
    } catch (error) {
      view.actionError.textContent = error.message;
    } finally {
      button.disabled = false;
      session.live(button);
      refreshCampaign(view);
    }
  }

  async function revokeGrant(view, grantId, button) {
    button.disabled = true;
    view.actionError.textContent = "";
    try {
      await session.api("DELETE", "/api/v1/grants/" + encodeURIComponent(grantId));
      announce("Grant revoked.");
    } catch (error) {
      view.actionError.textContent = error.message;
      button.disabled = false;
    }
    await refreshCampaign(view);
  }

  // -- a turn's view: built once, then updated in place ------------------------------------

  function createView(turn) {
    const item = el("li", "turn");
    item.dataset.testid = "turn";
    item.dataset.turnId = turn.id;
    const head = el("div", "turn-head");
    const badge = el("span", "badge");
    head.append(el("h3", "turn-title", "Turn of " + clockTime(turn.created_at)), badge);
    const message = el("p", "turn-message", turn.message);
    const progress = el("p", "turn-progress");
    const spinner = el("span", "spinner");
    spinner.setAttribute("aria-hidden", "true");
    const progressText = el("span", "");
    progress.append(spinner, progressText);
    const cards = el("ol", "cards");
    cards.setAttribute("aria-label", "Tool calls");
    const actions = el("div", "turn-actions");
    const cancel = session.live(el("button", "secondary", "Cancel"));
    cancel.type = "button";
    cancel.dataset.testid = "cancel-turn";
    const actionError = el("p", "error");
    actionError.setAttribute("role", "alert");
    actions.append(cancel, actionError);
    item.append(head, message, progress, cards, actions);
    const view = {
      id: turn.id, item, badge, message, progress, progressText, cards, cancel, actionError,
      calls: new Set(), state: null, turn, finalNode: null, errorNode: null, authBox: null,
      campaignId: null, campaignShown: null, authStatus: null, authState: null, dismiss: null,
    };
    cancel.addEventListener("click", () => cancelTurn(view));
    return view;
  }

  async function cancelTurn(view) {
    view.cancel.disabled = true;
    view.actionError.textContent = "";
    try {
      const body = await session.api("POST", `/api/v1/agent-runtime/turns/${encodeURIComponent(view.id)}/cancel`);
      applyTurn(body.turn);
    } catch (error) {
      view.actionError.textContent = error.message;
    } finally {
      view.cancel.disabled = false;
      session.live(view.cancel);
    }
  }

  function setText(view, key, className, testid, text) {
    if (text === null || text === undefined) {
      if (view[key]) view[key].remove();
      view[key] = null;
      return;
    }
    if (!view[key]) {
      view[key] = el(className === "final-text" ? "div" : "p", className);
      view[key].dataset.testid = testid;
      view.item.insertBefore(view[key], view.item.lastElementChild);
    }
    // Only a change is written: rewriting equal text would drop the reader's selection.
    if (view[key].textContent !== text) view[key].textContent = text;
  }

  function progressLine(turn, now) {
    const counts = `${plural(turn.rounds, "round")} · ${plural(turn.tool_calls.length, "tool call")}`;
    switch (turn.state) {
      case "QUEUED": return `Queued for ${secondsBetween(turn.created_at, now)} s`;
      case "RUNNING": return `Running for ${secondsBetween(turn.created_at, now)} s · ${counts}`;
      case "AUTHORIZATION_REQUIRED":
        return `Paused since ${clockTime(turn.updated_at)}, waiting for your authorization · ${counts}`;
      default:
        return `Took ${secondsBetween(turn.created_at, new Date(turn.updated_at).getTime())} s · ${counts}`;
    }
  }

  function updateView(view, turn) {
    view.turn = turn;
    if (view.state !== turn.state) {
      if (view.state !== null) announce(`Turn of ${clockTime(turn.created_at)}: ${LABELS[turn.state] || turn.state}`);
      view.state = turn.state;
      view.item.dataset.state = turn.state;
      view.badge.className = "badge badge-" + turn.state.toLowerCase();
      view.badge.textContent = LABELS[turn.state] || turn.state;
      view.progress.classList.toggle("running", turn.state === "RUNNING" || turn.state === "QUEUED");
      view.cancel.hidden = !LIVE.has(turn.state);
    }
    const line = progressLine(turn, Date.now());
    if (view.progressText.textContent !== line) view.progressText.textContent = line;
    for (const call of turn.tool_calls) {
      if (view.calls.has(call.call_id)) continue;
      view.calls.add(call.call_id);
      view.cards.append(activityCard(call));
    }
    view.cards.hidden = view.calls.size === 0;
    updateAuthorization(view, turn.state, turn.authorization);
    setText(view, "finalNode", "final-text", "final-text", turn.final_text);
    setText(view, "errorNode", "turn-error", "turn-error",
      turn.error ? turn.error.code + ": " + turn.error.message : null);
    remember(turn);
  }

  function updateAuthorization(view, state, authorization) {
    if (!authorization) return;
    if (!view.authBox) {
      view.authBox = authorizationBox(view);
      view.item.insertBefore(view.authBox, view.item.lastElementChild);
    }
    const changed = view.campaignId !== authorization.campaign_id
      || view.authStatus !== authorization.status || view.authState !== state;
    view.campaignId = authorization.campaign_id;
    view.authStatus = authorization.status;
    view.authState = state;
    view.authorize.hidden = state !== "AUTHORIZATION_REQUIRED";
    view.authText.textContent = authorizationText(view, state, authorization.status);
    if (changed) refreshCampaign(view);
  }

  /** Where a turn goes in the newest-first list: before the first older one. */
  function place(view) {
    const list = $("turns");
    const created = view.turn.created_at;
    for (const other of list.children) {
      const otherView = page.views.get(other.dataset.turnId);
      if (otherView && otherView.turn.created_at < created) {
        list.insertBefore(view.item, other);
        return;
      }
    }
    list.append(view.item);
  }

  function applyTurn(turn) {
    let view = page.views.get(turn.id);
    if (!view) {
      view = createView(turn);
      page.views.set(turn.id, view);
      updateView(view, turn);
      place(view);
    } else if (view.state !== "LOST") {
      updateView(view, turn);
    }
    $("turns-empty").hidden = page.views.size > 0;
    startTicker();
  }

  /** A turn the page knew as live that the server no longer has: say so where it was. */
  function showLost(id, memory, error) {
    let view = page.views.get(id);
    const turn = {
      id, state: "LOST", message: memory.message, created_at: memory.created_at,
      updated_at: memory.created_at, rounds: 0, tool_calls: [], final_text: null, error: null,
      authorization: memory.campaign_id ? { campaign_id: memory.campaign_id, status: "REQUIRED" } : null,
    };
    if (!view) {
      view = createView(turn);
      page.views.set(id, view);
      updateView(view, turn);
      place(view);
    }
    const was = memory.state === "AUTHORIZATION_REQUIRED" ? "was waiting for your authorization"
      : memory.state === "RUNNING" ? "was running" : "was queued";
    view.turn = { ...view.turn, state: "LOST" };
    view.state = "LOST";
    view.item.dataset.state = "LOST";
    view.badge.className = "badge badge-lost";
    view.badge.textContent = LABELS.LOST;
    view.progress.hidden = true;
    view.cancel.hidden = true;
    setText(view, "errorNode", "turn-error", "turn-error", `${error.code}: this turn is gone — the server `
      + `no longer has it (it restarted or dropped it) while it ${was}. Nothing more will happen in it.`);
    view.message.after(view.errorNode);  // said first, where the turn's state was
    updateAuthorization(view, "LOST", turn.authorization);
    if (!view.dismiss) {
      view.dismiss = el("button", "secondary", "Dismiss");
      view.dismiss.type = "button";
      view.dismiss.addEventListener("click", () => dismiss(id));
      view.cancel.after(view.dismiss);
    }
  }

  function dismiss(id) {
    forget(id);
    const view = page.views.get(id);
    if (view) view.item.remove();
    page.views.delete(id);
    $("turns-empty").hidden = page.views.size > 0;
    $("composer-input").focus();
  }

  // -- elapsed time of live turns ----------------------------------------------------------

  function tick() {
    const now = Date.now();
    let live = 0;
    for (const view of page.views.values()) {
      if (view.state !== "RUNNING" && view.state !== "QUEUED") continue;
      live += 1;
      const line = progressLine(view.turn, now);
      if (view.progressText.textContent !== line) view.progressText.textContent = line;
    }
    if (live === 0) stopTicker();
  }

  function startTicker() {
    if (page.ticker === null) page.ticker = setInterval(tick, 1000);
  }

  function stopTicker() {
    if (page.ticker !== null) clearInterval(page.ticker);
    page.ticker = null;
  }

  // -- synchronisation: a full resync, then the event cursor --------------------------------

  async function headCursor(generation) {
    let cursor = 0;
    for (let pageIndex = 0; pageIndex < MAX_PAGES; pageIndex += 1) {
      const body = await session.api("GET", `/api/v1/agent-runtime/events?cursor=${cursor}&limit=500`);
      if (generation !== page.generation) return cursor;
      cursor = body.next_cursor;
      if (body.events.length < 500) break;
    }
    return cursor;
  }

  async function explainMissing(known, generation) {
    for (const [id, memory] of Object.entries(remembered())) {
      if (known.has(id)) continue;
      try {
        applyTurn((await session.api("GET", `/api/v1/agent-runtime/turns/${encodeURIComponent(id)}`)).turn);
      } catch (error) {
        if (generation !== page.generation) return;
        if (error.status === 404) showLost(id, memory, error);
      }
    }
  }

  async function resync() {
    page.generation += 1;
    const generation = page.generation;
    clearTimeout(page.timer);
    page.timer = null;
    try {
      await refreshStatus(generation);
      refreshObjects(generation);
      const cursor = await headCursor(generation);
      const body = await session.api("GET", "/api/v1/agent-runtime/turns");
      if (generation !== page.generation) return;
      page.cursor = cursor;
      const known = new Set(body.turns.map((turn) => turn.id));
      for (const [id, view] of page.views) {
        if (!known.has(id) && view.state !== "LOST") {
          view.item.remove();
          page.views.delete(id);
        }
      }
      for (const turn of body.turns) applyTurn(turn);
      await explainMissing(known, generation);
      $("turns-empty").hidden = page.views.size > 0;
      showError("turns-error", null);
    } catch (error) {
      if (generation !== page.generation) return;
      showError("turns-error", error.code === "CONNECTION_LOST" ? null : error);
    }
    if (generation === page.generation) schedulePoll(POLL_MS);
  }

  async function refreshTurn(id, generation) {
    try {
      const body = await session.api("GET", `/api/v1/agent-runtime/turns/${encodeURIComponent(id)}`);
      if (generation === page.generation) applyTurn(body.turn);
    } catch (error) {
      const memory = remembered()[id];
      if (generation === page.generation && error.status === 404 && memory) showLost(id, memory, error);
    }
  }

  async function poll() {
    page.timer = null;
    const generation = page.generation;
    if (!session.session || !session.online) return;
    try {
      for (let pageIndex = 0; pageIndex < MAX_PAGES; pageIndex += 1) {
        const body = await session.api("GET",
          `/api/v1/agent-runtime/events?cursor=${page.cursor}&limit=${EVENT_PAGE}`);
        if (generation !== page.generation) return;
        if (body.missed) {
          resync();  // fell behind the retained events: start again from the turns
          return;
        }
        const touched = new Set(body.events.map((event) => event.turn_id));
        page.cursor = body.next_cursor;
        await Promise.all([...touched].map((id) => refreshTurn(id, generation)));
        if (body.events.some((event) => event.type === "turn.state" && !LIVE.has(event.data.state))) {
          refreshObjects(generation);
        }
        if (body.events.length < EVENT_PAGE) break;
      }
      if (Date.now() - page.statusAt > STATUS_EVERY_MS) await refreshStatus(generation);
      showError("turns-error", null);
    } catch (error) {
      if (generation !== page.generation) return;
      if (error.code !== "CONNECTION_LOST") showError("turns-error", error);
    }
    if (generation === page.generation) schedulePoll(POLL_MS);
  }

  function schedulePoll(delay) {
    if (!session.session) return;
    clearTimeout(page.timer);
    page.timer = setTimeout(poll, delay);
  }

  // -- session life ------------------------------------------------------------------------

  function onLogin() {
    resync();
  }

  function onLogout(reason) {
    page.generation += 1;
    clearTimeout(page.timer);
    page.timer = null;
    stopTicker();
    for (const view of page.views.values()) view.item.remove();
    page.views.clear();
    page.campaigns.clear();
    $("objects").replaceChildren();
    $("mode-label").textContent = "Agent runtime";
    if (reason === "logout") sessionStorage.removeItem(MEMORY_KEY);
  }

  function onConnection(online) {
    if (online && session.session) resync();
  }

  function start() {
    $("composer").addEventListener("submit", sendMessage);
    $("composer-input").addEventListener("keydown", onComposerKey);
    $("composer-input").addEventListener("input", updateCount);
    session.start({
      login: $("login-panel"), account: $("account"), banner: $("connection-banner"),
      content: $("runtime"), onLogin, onLogout, onConnection,
    });
  }

  document.addEventListener("DOMContentLoaded", start);
}());
