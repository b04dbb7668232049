// labfy-ref engine page (/cordis): the bridge's state, sessions, and a conversation
// streamed from NDJSON as it arrives, with approvals at their operation (UI-04..UI-06), and
// what the provider spent (BR-14: totals per model and per day, the last calls).
//
// Text from a model, a tool, a file, the server or a session title goes in as text
// through labfyText (text.js: textContent, every invisible format character shown as
// ⟨U+XXXX⟩); only the assistant's reply is Markdown, rendered by labfyMarkdown (a
// sanitised DOM fragment, paced so that a long reply never blocks the page). Session,
// CSRF, login, logout and the lost-connection banner are labfySession's (session.js);
// the stream's lines are labfyNdjson's (ndjson.js). Hooks are SPEC §15's data-testid
// names. No inline script, no style attribute (CSP).
"use strict";

(function () {
  const PAGE_SIZE = 20;
  const USAGE_CALLS = 20;
  const NOT_REPORTED = "—";
  const STARTING_RETRY_MS = 1000;
  const STARTING_RETRIES = 60;
  const SESSION_ID = /^[A-Za-z0-9_-]{1,80}$/;
  const SCOPES = { "read-only": "Read-only", "workspace-write": "Workspace write" };
  const DECISIONS = { "allowed-once": "Allowed once", "rejected": "Denied", "expired": "Expired" };
  const { api, request, live } = window.labfySession;
  const { visible } = window.labfyText;

  const $ = (id) => document.getElementById(id);
  const ui = {
    status: $("bridge-status"), workspace: $("workspace"), list: $("session-list"),
    more: $("sessions-more"), sessionsError: $("sessions-error"), newSession: $("session-new"),
    title: $("chat-title"), contextSettings: $("context-settings"), contextTools: $("context-tools"),
    contextPrompt: $("context-prompt"), contextInjected: $("context-injected"),
    conversation: $("conversation"), turnStatus: $("turn-status"), composer: $("composer"),
    input: $("message-input"), scope: $("permission-scope"), send: $("message-send"),
    model: $("model-select"),
    stop: $("stop-turn"), composerError: $("composer-error"),
    usageStatus: $("usage-status"), usageRefresh: $("usage-refresh"),
    usageModels: $("usage-models"), usageDays: $("usage-days"), usageCalls: $("usage-calls"),
    toggle: $("bridge-toggle"), disable: $("bridge-disable"), enable: $("bridge-enable"),
    reload: $("bridge-reload"), toggleError: $("bridge-toggle-error"),
  };

  const conversationScroll = window.labfyScroll.create(ui.conversation);
  const state = {
    nextCursor: null,
    session: null,     // the open session: {id, created_at, settings, ...}
    turn: null,        // the running turn: {view, sessionId, controller}
    startingTries: 0,
    tools: null,
    usageReads: 0,     // numbers the usage reads: only the newest one is shown
    models: null,      // the engine's models ({default, models}), null until read
    modelsFailed: false, // the last read of the models failed (its reason is said)
    chosenModel: null, // the model picked with no session open: the next new session's
    modelReads: 0,     // numbers the model reads: only the newest one is shown
    modelTimer: null,
  };
  const MODEL_CHECK_MS = 15000;  // how often an idle page asks whether the model answers
  const TITLE_CHECKS_MS = [1500, 5000, 15000];  // when a new session's title is read again

  // -- small helpers ----------------------------------------------------------------------

  // Text from anywhere (a model, the server, an error) goes in as text, never as markup,
  // invisible format characters shown (UI-02): text.js's helpers, shared by both pages.
  const el = window.labfyText.el;
  const setText = window.labfyText.set;

  function button(label, className, testid) {
    const node = el("button", className, label);
    node.type = "button";
    if (testid) node.dataset.testid = testid;
    return live(node);
  }

  function sessionPath(sessionId, rest) {
    return `/api/cordis/sessions/${encodeURIComponent(sessionId)}${rest || ""}`;
  }

  function formatTime(iso) {
    const date = new Date(iso);
    return Number.isNaN(date.getTime()) ? String(iso || "") : date.toLocaleString();
  }

  function pretty(value) {
    return JSON.stringify(value, null, 2);
  }

  /** navigator.clipboard.writeText(text); the outcome is said next to the button. */
  function copy(text, outcome) {
    outcome.textContent = "";
    let pending;
    try {
      pending = navigator.clipboard.writeText(text);
    } catch (_) {
      pending = Promise.reject(new Error("no clipboard"));
    }
    Promise.resolve(pending).then(
      () => { outcome.textContent = "Copied"; },
      () => { outcome.textContent = "Copy failed"; });
  }

  function copyControl(label, testid, text) {
    const box = el("div", testid === "copy-code" ? "code-actions" : "reply-actions");
    const outcome = el("span", "copy-state");
    outcome.setAttribute("role", "status");
    const control = button(label, "", testid);
    control.addEventListener("click", () => copy(text(), outcome));
    box.append(control, outcome);
    return box;
  }

  // -- provider usage (BR-14) ---------------------------------------------------------------

  /** A token count as reported; a count the provider did not report is never shown as 0. */
  function tokens(value) {
    return value === null || value === undefined ? NOT_REPORTED : String(value);
  }

  /** One table row: its first cell names the row (a row header), the others are data. */
  function usageRow(testid, cells) {
    const row = el("tr");
    row.dataset.testid = testid;
    cells.forEach((text, index) => {
      const cell = el(index === 0 ? "th" : "td", index === 0 ? "" : "number", text);
      if (index === 0) cell.scope = "row";
      row.append(cell);
    });
    return row;
  }

  function totalsRow(testid, name, total) {
    return usageRow(testid, [name, String(total.calls), tokens(total.prompt_tokens),
      tokens(total.completion_tokens), tokens(total.cached_tokens), String(total.errors),
      String(total.cancelled)]);
  }

  function renderUsage(body) {
    const { by_model: models, by_day: days } = body.totals;
    ui.usageModels.replaceChildren(...models.map((t) => totalsRow("usage-model-row", t.model, t)));
    ui.usageDays.replaceChildren(...days.map((t) => totalsRow("usage-day-row", t.day, t)));
    ui.usageCalls.replaceChildren(...body.usage.map((call) => usageRow("usage-call-row", [
      formatTime(call.at), call.model, tokens(call.prompt_tokens), tokens(call.completion_tokens),
      tokens(call.cached_tokens), String(call.latency_ms), call.outcome, call.caller])));
    const calls = models.reduce((sum, total) => sum + total.calls, 0);
    setText(ui.usageStatus, calls === 0 ? "No model call recorded yet."
      : `${calls} model call${calls === 1 ? "" : "s"} recorded; the last ${body.usage.length} below.`);
  }

  /** Totals and the last calls, read again; a refusal is said in the panel, not logged.
   *  Only the newest read is shown: an older answer arriving late changes nothing. */
  async function loadUsage() {
    const read = ++state.usageReads;
    let body;
    try {
      body = await api("GET", `/api/cordis/usage?limit=${USAGE_CALLS}`);
    } catch (error) {
      if (read === state.usageReads) setText(ui.usageStatus, `Usage unavailable: ${error.message}`);
      return;
    }
    if (read === state.usageReads) renderUsage(body);
  }

  function clearUsage() {
    state.usageReads += 1; // a read still on its way belongs to the session that ended
    for (const body of [ui.usageModels, ui.usageDays, ui.usageCalls]) body.replaceChildren();
    ui.usageStatus.textContent = "Loading usage…";
  }

  // -- the bridge -------------------------------------------------------------------------

  /** First page of sessions; a 503 names why the bridge cannot serve (CORDIS_*). */
  async function loadBridge() {
    let page;
    showToggle();
    try {
      page = await api("GET", `/api/cordis/sessions?limit=${PAGE_SIZE}`);
    } catch (error) {
      bridgeRefused(error);
      return;
    }
    state.startingTries = 0;
    bridgeState("checking", "Engine bridge up; asking its model…");
    ui.workspace.hidden = false;
    renderSessions(page, false);
    loadTools();
    loadUsage();
    loadModels();
    const wanted = location.hash.slice(1);
    if (SESSION_ID.test(wanted)) openSession(wanted);
  }

  // -- the admin's toggle (BR-16): off, on, reload, without restarting the server ---------

  /** The buttons that apply now (none when serve runs with --bridge-toggle locked). */
  async function showToggle() {
    let health = null;
    try {
      health = await api("GET", "/api/cordis/health");
    } catch (_) {
      health = null;
    }
    const session = window.labfySession.session;
    const usable = health && health.toggle === "unlocked" && session && session.role === "admin";
    ui.toggle.hidden = !usable;
    if (!usable) return;
    const off = health.state === "disabled";
    ui.disable.hidden = off;
    ui.reload.hidden = off;
    ui.enable.hidden = !(off || health.state === "failed");
  }

  /** Send one toggle; the page then reads the bridge again, as after a login. */
  async function toggle(action) {
    ui.toggleError.textContent = "";
    for (const control of [ui.disable, ui.enable, ui.reload]) control.disabled = true;
    try {
      await api("POST", `/api/cordis/admin/${action}`, {});
    } catch (error) {
      setText(ui.toggleError, error.message);
    } finally {
      for (const control of [ui.disable, ui.enable, ui.reload]) control.disabled = false;
    }
    reset("bridge");  // the open session stays named in the URL: it reopens once ready
    state.startingTries = 0;
    loadBridge();
  }

  /** The bridge's line says one state: checking, ready, model unavailable (why), refused. */
  function bridgeState(name, text) {
    ui.status.dataset.state = name;
    setText(ui.status, text);
  }

  /** The engine's models: the selector's options, and whether the model answers at all. */
  async function loadModels() {
    const read = ++state.modelReads;
    clearTimeout(state.modelTimer);
    let body = null;
    let failure = null;
    try {
      body = await api("GET", "/api/cordis/models");
    } catch (error) {
      failure = error;
    }
    if (read !== state.modelReads || ui.workspace.hidden) return;
    state.modelsFailed = Boolean(failure);
    if (failure) {
      modelUnavailable(failure.message);
    } else {
      const changed = JSON.stringify(body) !== JSON.stringify(state.models);
      state.models = body;
      if (changed) renderModels();  // an open selector is not closed under the reader
      sayReady();
    }
    state.modelTimer = setTimeout(loadModels, MODEL_CHECK_MS);
  }

  /** Ready, naming the model a message goes to now — unless its provider is down (BR-19:
   * the list says so, with the reason; no other provider answers in its place). */
  function sayReady() {
    const wanted = currentModel();
    const listed = state.models ? state.models.models : [];
    const entry = listed.find((model) => model.id === wanted);
    if (entry && entry.available === false) {
      modelUnavailable(`${entry.provider}: ${entry.reason || "it does not answer"}`);
      return;
    }
    bridgeState("ready", `Ready · ${wanted}`);
  }

  function modelUnavailable(reason) {
    bridgeState("model-unavailable", `Model unavailable: ${reason} — a message `
      + "sent now ends with this error; the page asks again every 15 s.");
  }

  /** The model a message goes to now: the open session's, else the engine's default. */
  function currentModel() {
    if (state.session) return state.session.settings.model;
    return state.chosenModel || (state.models ? state.models.default : "");
  }

  function renderModels() {
    const wanted = currentModel();
    const listed = state.models ? state.models.models : [];
    const options = listed.map((model) => {
      const down = model.available === false ? " (unavailable)" : "";
      const option = el("option", "", `${model.model} · ${model.provider}${down}`);
      option.value = model.id;
      return option;
    });
    if (wanted && !listed.some((model) => model.id === wanted)) {
      const option = el("option", "", `${wanted} (not listed by the provider now)`);
      option.value = wanted;
      options.unshift(option);
    }
    ui.model.replaceChildren(...options);
    ui.model.value = wanted;
    ui.model.disabled = Boolean(state.turn) || options.length === 0;
  }

  async function changeModel() {
    ui.composerError.textContent = "";
    if (!state.session) {  // no session yet: the next new one is made with it
      state.chosenModel = ui.model.value;
      return;
    }
    try {
      const { session } = await api("PATCH", sessionPath(state.session.id, "/settings"),
        { model: ui.model.value });
      state.session.settings = session.settings;
      renderContext(state.session);
      setTurnStatus("", `Model: ${session.settings.model}`);
      if (state.models && !state.modelsFailed) sayReady();
    } catch (error) {
      setText(ui.composerError, error.message);
      ui.model.value = state.session.settings.model;
    }
  }

  function bridgeRefused(error) {
    ui.workspace.hidden = true; // the reason, never an empty list
    if (error.code !== "CORDIS_STARTING") showToggle();  // it settled: say what applies
    // it settles in the background: starting is no refusal
    bridgeState(error.code === "CORDIS_STARTING" ? "starting" : "refused", error.message);
    if (error.code === "CORDIS_STARTING" && state.startingTries < STARTING_RETRIES) {
      state.startingTries += 1;
      setTimeout(loadBridge, STARTING_RETRY_MS);
    }
  }

  async function loadTools() {
    try {
      state.tools = (await api("GET", "/api/cordis/tools")).tools;
    } catch (error) {
      state.tools = null;
      ui.contextTools.replaceChildren(el("li", "error", error.message));
      return;
    }
    renderTools();
  }

  function renderTools() {
    ui.contextTools.replaceChildren(...(state.tools || []).map((tool) => {
      const unavailable = tool.available ? "" : ` — unavailable: ${tool.unavailable_reason || ""}`;
      return el("li", "", `${tool.tool_id} (${tool.effect}): ${tool.description}${unavailable}`);
    }));
  }

  // -- sessions -----------------------------------------------------------------------------

  function titleOf(summary) {
    return summary.title ? summary.title : "Untitled session";
  }

  function sessionItem(summary) {
    const item = el("li", "session-item");
    item.dataset.testid = "session-item";
    item.dataset.sessionId = summary.id;
    const open = el("button", "session-open");
    open.type = "button";
    const title = el("span", "title", titleOf(summary));
    const detail = summary.error
      ? `${summary.error.code}: ${summary.error.message}` : formatTime(summary.created_at);
    open.append(title, el("span", "when", detail));
    open.addEventListener("click", () => openSession(summary.id));
    const remove = button("Delete", "session-delete danger");
    remove.setAttribute("aria-label", visible(`Delete session ${titleOf(summary)}`));
    remove.addEventListener("click", () => deleteSession(summary.id, remove, title));
    remove.addEventListener("blur", () => unconfirm(remove, title));
    item.append(open, remove);
    return item;
  }

  function itemOf(sessionId) {
    return [...ui.list.children].find((item) => item.dataset.sessionId === sessionId) || null;
  }

  function renderSessions(page, append) {
    if (!append) ui.list.replaceChildren();
    for (const summary of page.sessions) {
      if (!itemOf(summary.id)) ui.list.append(sessionItem(summary));
    }
    state.nextCursor = page.next_cursor;
    ui.more.hidden = !state.nextCursor;
    markOpen();
  }

  async function loadMore() {
    ui.sessionsError.textContent = "";
    const cursor = encodeURIComponent(state.nextCursor || "");
    try {
      renderSessions(await api("GET", `/api/cordis/sessions?limit=${PAGE_SIZE}&cursor=${cursor}`), true);
    } catch (error) {
      setText(ui.sessionsError, error.message);
    }
  }

  /** Titles come from the server (the session's model's, else the first user message cut):
   * refresh the first page's. */
  async function refreshTitles() {
    let page;
    try {
      page = await api("GET", `/api/cordis/sessions?limit=${PAGE_SIZE}`);
    } catch (_) {
      return; // the list keeps its old titles; the failure is said by whatever comes next
    }
    for (const summary of page.sessions) {
      const item = itemOf(summary.id);
      if (item) item.replaceWith(sessionItem(summary));
      if (state.session && summary.id === state.session.id) setText(ui.title, titleOf(summary));
    }
    markOpen();
  }

  function markOpen() {
    for (const item of ui.list.children) {
      const open = item.querySelector(".session-open");
      if (state.session && item.dataset.sessionId === state.session.id) {
        open.setAttribute("aria-current", "true");
      } else {
        open.removeAttribute("aria-current");
      }
    }
  }

  async function newSession() {
    ui.sessionsError.textContent = "";
    if (busy()) return null;
    try {
      const chosen = ui.model.value ? { model: ui.model.value } : {};
      const { session } = await api("POST", "/api/cordis/sessions",
        { permission_mode: ui.scope.value, ...chosen });
      ui.list.prepend(sessionItem({ ...session, title: "" }));
      await openSession(session.id);
      return session;
    } catch (error) {
      setText(ui.sessionsError, error.message);
      return null;
    }
  }

  function unconfirm(control, title) {
    if (control.dataset.confirm !== "1" || control.disabled) return;
    delete control.dataset.confirm;
    control.textContent = "Delete";
    control.setAttribute("aria-label", `Delete session ${title.textContent}`);
  }

  /** Delete asks once more on the same button, then cancels any turn and removes the log. */
  async function deleteSession(sessionId, control, title) {
    if (control.dataset.confirm !== "1") {
      control.dataset.confirm = "1";
      control.textContent = "Confirm delete";
      control.setAttribute("aria-label", `Confirm delete of session ${title.textContent}`);
      return;
    }
    control.disabled = true;
    ui.sessionsError.textContent = "";
    try {
      await api("DELETE", sessionPath(sessionId));
    } catch (error) {
      setText(ui.sessionsError, error.message);
      control.disabled = false;
      return;
    }
    const item = itemOf(sessionId);
    if (item) item.remove();
    if (state.session && state.session.id === sessionId) closeSession();
  }

  // -- the open session ---------------------------------------------------------------------

  function busy() {
    if (!state.turn) return false;
    setTurnStatus(state.turn.waiting ? "approval" : "working",
      "A turn is running: stop it or wait for its end first.");
    return true;
  }

  /** The turn's line: working, waiting for your approval, or a note (idle). */
  function setTurnStatus(name, text) {
    ui.turnStatus.dataset.state = name || "idle";
    setText(ui.turnStatus, text);
  }

  async function openSession(sessionId) {
    if (busy()) return;
    setTurnStatus("", "");
    ui.composerError.textContent = "";
    let session;
    try {
      session = (await api("GET", sessionPath(sessionId))).session;
    } catch (error) {
      setText(ui.turnStatus, error.message);
      if (location.hash === `#${sessionId}`) history.replaceState(null, "", location.pathname);
      return;
    }
    state.session = session;
    history.replaceState(null, "", `#${session.id}`);
    const item = itemOf(session.id);
    setText(ui.title, item ? item.querySelector(".title").textContent : session.id);
    ui.scope.value = session.settings.permission_mode;
    renderContext(session);
    loadContext(session.id);
    if (state.models) renderModels();
    if (state.models && !state.modelsFailed) sayReady();
    renderMessages(session.messages);
    markOpen();
    if (session.active_turn) {
      setTurnStatus("working", "A turn started elsewhere is running in this session; "
        + "reopen the session after it ends to see its messages.");
    }
  }

  /** No session open: title, context and conversation go; ``keepUrl``: its id stays. */
  function closeSession(keepUrl) {
    state.session = null;
    if (!keepUrl) history.replaceState(null, "", location.pathname);
    ui.title.textContent = "No session open: create one or pick one from the list.";
    ui.contextSettings.replaceChildren();
    ui.contextPrompt.textContent = "";
    ui.contextInjected.replaceChildren();
    ui.conversation.replaceChildren();
    setTurnStatus("", "");
    if (state.models) renderModels();
    markOpen();
  }

  function renderContext(session) {
    const rows = [["Session", session.id], ["Created", formatTime(session.created_at)],
      ["Model", session.settings.model],
      ["Permission scope", SCOPES[session.settings.permission_mode] || session.settings.permission_mode]];
    ui.contextSettings.replaceChildren(...rows.flatMap(([name, value]) =>
      [el("dt", "", name), el("dd", "", value)]));
  }

  /** What the model is told besides the messages: the engine's system prompt and the
   *  session's injected context — as text, in Session context (closed by default). */
  async function loadContext(sessionId) {
    let context;
    try {
      context = (await api("GET", sessionPath(sessionId, "/context"))).context;
    } catch (error) {
      setText(ui.contextPrompt, error.message);
      ui.contextInjected.replaceChildren();
      return;
    }
    if (!state.session || state.session.id !== sessionId) return;  // another one opened since
    setText(ui.contextPrompt, context.system_prompt);
    if (context.guidance) {  // the narrowing's profile in force (PR-08), after the settings
      const rules = (context.guidance.rules || []).map(String).join(", ") || "guards only";
      ui.contextSettings.append(el("dt", "", "Guidance"),
        el("dd", "", `${String(context.guidance.profile)} (${rules})`));
    }
    ui.contextInjected.replaceChildren(...(context.injected.length
      ? context.injected.map((text) => el("pre", "context-prompt", text))
      : [el("p", "muted", "None: this session's messages are all the model is told besides the prompt.")]));
  }

  async function changeScope() {
    ui.composerError.textContent = "";
    if (!state.session) return; // no session open: the scope of the next new one
    try {
      const { session } = await api("PATCH", sessionPath(state.session.id, "/settings"),
        { permission_mode: ui.scope.value });
      state.session.settings = session.settings;
      renderContext(state.session);
      setTurnStatus("", `Permission scope: ${SCOPES[session.settings.permission_mode]}`);
    } catch (error) {
      setText(ui.composerError, error.message);
      ui.scope.value = state.session.settings.permission_mode;
    }
  }

  // -- the conversation -------------------------------------------------------------------

  /** One exchange: the user's message, then reasoning, tool activity and the reply. */
  function createExchange(sessionId, userText) {
    const item = el("li", "exchange");
    if (userText !== null) {
      item.append(el("p", "speaker speaker-you", "You"), el("div", "user-message", userText));
    }
    const reasoning = el("details", "reasoning-section");
    reasoning.dataset.testid = "reasoning-section";
    const reasoningText = el("div", "reasoning-text");
    reasoningText.tabIndex = 0; // it scrolls: reachable by keyboard
    reasoning.append(el("summary", "", "Reasoning (exposed by the model)"), reasoningText);
    reasoning.hidden = true;
    // what the assistant did, folded under its answer; the cards stay in the DOM either way
    const activity = el("details", "activity");
    activity.dataset.testid = "tool-activity";
    const activitySummary = el("summary", "", "Tool activity");
    activity.append(activitySummary);
    activity.hidden = true;
    const speaker = el("p", "speaker", "Assistant");
    const reply = el("div", "assistant-message");
    reply.dataset.testid = "assistant-message";
    speaker.hidden = true;
    reply.hidden = true;
    const tail = el("div", "exchange-end");
    item.append(speaker, reply, tail, reasoning, activity);
    ui.conversation.append(item);
    return { sessionId, item, reasoning, reasoningText, activity, activitySummary, speaker, reply, tail,
      calls: new Map(), markdown: labfyMarkdown.stream(reply, withCopyButtons), ended: false };
  }

  function appendReasoning(view, text) {
    view.reasoning.hidden = false;
    view.reasoningText.append(window.labfyText.node(text));
  }

  function callCard(view, callId, toolId, args) {
    const card = el("div", "tool-call");
    card.dataset.testid = "tool-call";
    card.dataset.callId = callId;
    card.dataset.status = "running";
    const head = el("p", "tool-head", toolId);
    const status = el("span", "tool-status", " · running");
    head.append(status);
    const argsText = el("pre", "json", pretty(args));
    argsText.tabIndex = 0;
    argsText.setAttribute("aria-label", visible(`Arguments of ${toolId}`));
    card.append(head, argsText);
    view.activity.hidden = false;
    view.activity.append(card);
    view.calls.set(callId, { card, status });
    const count = view.calls.size;
    view.activitySummary.textContent = `Tool activity · ${count} call${count === 1 ? "" : "s"}`;
    return view.calls.get(callId);
  }

  function callOf(view, callId, toolId) {
    return view.calls.get(callId) || callCard(view, callId, toolId || "(unknown tool)", {});
  }

  function attachResult(view, message) {
    const call = callOf(view, message.call_id, message.tool_id);
    call.card.dataset.status = String(message.status);
    setText(call.status, ` · ${message.status}`);
    const result = el("div", "tool-result");
    result.dataset.testid = "tool-result";
    result.dataset.callId = message.call_id;
    const text = el("pre", "json", pretty(message.result));
    text.tabIndex = 0;
    text.setAttribute("aria-label", visible(`Result of ${message.tool_id || "the call"}`));
    result.append(el("p", "muted", `Result (${message.status})`), text);
    call.card.append(result);
  }

  function approvalBox(view, chunk) {
    const call = callOf(view, chunk.call_id);
    const box = el("div", "approval");
    box.setAttribute("role", "group");
    box.setAttribute("aria-label", "Approval needed");
    box.dataset.approvalId = chunk.approval_id;
    const allow = button("Allow once", "primary", "approval-allow-once");
    const deny = button("Deny", "danger", "approval-deny");
    const note = el("p", "error");
    note.setAttribute("role", "alert");
    const decideWith = (decision) => decide(view.sessionId, chunk.approval_id, decision,
      [allow, deny], note);
    allow.addEventListener("click", () => decideWith("allowed-once"));
    deny.addEventListener("click", () => decideWith("rejected"));
    const actions = el("div", "approval-actions");
    actions.append(allow, deny, note);
    box.append(el("p", "", `Approval needed: ${chunk.summary}`), actions);
    call.card.append(box);
    call.approval = actions;
    call.status.textContent = " · waiting for your decision";
    view.activity.open = true;  // an approval is never folded away
    if (state.turn && state.turn.view === view) {
      state.turn.waiting = true;
      setTurnStatus("approval", "Waiting for your approval: the turn is paused until you "
        + "decide (Allow once or Deny).");
    }
    conversationScroll.bringIntoView(box, allow);
  }

  async function decide(sessionId, approvalId, decision, controls, note) {
    note.textContent = "";
    for (const control of controls) control.disabled = true;
    try {
      await api("POST", sessionPath(sessionId, `/approvals/${encodeURIComponent(approvalId)}`),
        { decision });
    } catch (error) {
      setText(note, error.message);
      if (error.status !== 409) for (const control of controls) control.disabled = false;
    }
  }

  function decisionNote(decision) {
    return el("p", "decision", `Decision: ${DECISIONS[decision] || decision}`);
  }

  function decided(view, chunk) {
    const call = callOf(view, chunk.call_id);
    const note = decisionNote(chunk.decision);
    if (call.approval) call.approval.replaceWith(note); // the question stays, its buttons go
    else call.card.append(note);
    call.approval = null;
    if (call.card.dataset.status === "running") call.status.textContent = " · running";
    if (state.turn && state.turn.view === view) {
      state.turn.waiting = false;
      setTurnStatus("working", "The assistant is working…");
    }
  }

  function appendText(view, text) {
    view.speaker.hidden = false;
    view.reply.hidden = false;
    view.markdown.append(text);
  }

  /** Each code block of a rendered piece of the reply gets its copy button. */
  function withCopyButtons(fragment) {
    for (const pre of fragment.querySelectorAll("pre")) {
      pre.after(copyControl("Copy code", "copy-code", () => labfyMarkdown.codeOf(pre)));
    }
  }

  /** The whole reply rendered once; Copy reply hands over its Markdown as shown (no
   *  invisible format character the reader did not see). */
  function finishReply(view) {
    const text = view.markdown.text;
    if (!text) return;
    view.markdown.end();
    view.tail.append(copyControl("Copy reply", "copy-reply", () => visible(text)));
  }

  function showError(view, code, message) {
    const line = el("p", "error", message ? `${code}: ${message}` : String(code));
    line.setAttribute("role", "alert");
    view.tail.append(line);
  }

  /** The answer's checked facts (PR-09), under the reply: nothing in the reply changes. */
  function showFacts(view, chunk) {
    const line = window.labfyText.facts(chunk.facts);
    if (line) view.tail.append(line);
  }

  const ENDINGS = { cancelled: "Stopped: the turn was cancelled.", error: "The turn ended with an error." };

  function finish(view, chunk) {
    view.ended = true;
    finishReply(view);
    if (ENDINGS[chunk.reason]) view.tail.append(el("p", "turn-end", ENDINGS[chunk.reason]));
  }

  // A Map: a chunk type such as "__proto__" or "constructor" finds no handler.
  const HANDLERS = new Map([
    ["text", (view, chunk) => appendText(view, String(chunk.text))],
    ["reasoning", (view, chunk) => appendReasoning(view, String(chunk.text))],
    ["tool-call", (view, chunk) => callCard(view, chunk.call_id, chunk.tool_id, chunk.arguments)],
    ["tool-result", attachResult],
    ["approval-request", approvalBox],
    ["approval-decision", decided],
    ["facts", showFacts],
    ["error", (view, chunk) => showError(view, chunk.code, chunk.message)],
    ["done", finish],
  ]);

  function onChunk(view, chunk) {
    const handler = HANDLERS.get(chunk.type);
    if (handler && !view.ended) handler(view, chunk); // a chunk type of a later build: skipped
    conversationScroll.follow();
  }

  /** A session's stored messages, each tool result at its call (BR-06 projection). */
  function renderMessages(messages) {
    ui.conversation.replaceChildren();
    let view = null;
    for (const message of messages) {
      if (message.role === "user") {
        if (view) finishReply(view);
        view = createExchange(state.session.id, message.text);
        continue;
      }
      view = view || createExchange(state.session.id, null);
      if (message.role === "tool") {
        callCard(view, message.call_id, message.tool_id, message.arguments);
        if (message.approval) view.calls.get(message.call_id).card.append(
          decisionNote(message.approval.decision));
        attachResult(view, message);
      } else if (message.role === "assistant") {
        if (message.reasoning) appendReasoning(view, message.reasoning);
        appendText(view, message.text);
      }
    }
    if (view) finishReply(view);
  }

  // -- a turn ---------------------------------------------------------------------------------

  function setRunning(running) {
    ui.send.disabled = running;
    ui.scope.disabled = running;
    ui.model.disabled = running || ui.model.options.length === 0;  // as the API refuses it
    ui.stop.hidden = !running;
    ui.stop.disabled = false;
    setTurnStatus(running ? "working" : "", running ? "The assistant is working…" : "");
  }

  async function send(event) {
    event.preventDefault();
    ui.composerError.textContent = "";
    const text = ui.input.value;
    if (!text.trim() || state.turn) return;
    if (!state.session && !(await newSession())) return;
    const sessionId = state.session.id;
    const turn = { view: null, sessionId, controller: new AbortController(), stopAsked: false,
      waiting: false };
    state.turn = turn; // from now on a second Enter sends nothing
    let response;
    setRunning(true);
    try {
      response = await request("POST", sessionPath(sessionId, "/messages"), { text },
        { signal: turn.controller.signal, accept: "application/x-ndjson" });
    } catch (error) {
      state.turn = null;
      setRunning(false);
      setText(ui.composerError, error.message); // refused: nothing was sent, the text stays
      return;
    }
    ui.input.value = "";  // the server has the message now: it is never sent twice
    const view = createExchange(sessionId, text);
    const first = ui.conversation.children.length === 1;  // the session's first message
    turn.view = view;
    conversationScroll.follow();
    refreshTitles();  // the first message names the session
    if (turn.stopAsked) cancelTurn(turn);  // Stop pressed before the stream began
    try {
      await labfyNdjson.readStream(response, (chunk) => onChunk(view, chunk));
      if (!view.ended) showError(view, "STREAM_INVALID", "the stream ended before the turn did");
    } catch (failure) {
      if (!view.ended) lostStream(view, failure);
    } finally {
      if (!view.ended) view.markdown.end(); // a cut reply is still rendered, whole, once
      state.turn = null;
      setRunning(false);
      refreshTitles();
      // its model names a new session once the first turn ended (BR-18): read it again
      if (first) for (const ms of TITLE_CHECKS_MS) setTimeout(refreshTitles, ms);
      loadUsage(); // the turn's calls are in the ledger now
    }
  }

  function lostStream(view, failure) {
    if (failure && failure.name === "AbortError") {
      view.tail.append(el("p", "turn-end", "Stopped: the stream was closed."));
      return;
    }
    window.labfySession.lost();
    showError(view, "CONNECTION_LOST", "the stream was cut before the turn ended");
  }

  /** Stop: the engine cancels the turn (its stream ends "cancelled"). Before the stream
   *  began the request is not withdrawn — the server may already hold the message, and
   *  withdrawing it would put the text back to be sent twice: the turn is cancelled as soon
   *  as its stream begins. */
  async function stop() {
    const turn = state.turn;
    if (!turn) return;
    ui.stop.disabled = true;
    setTurnStatus("working", "Stopping…");
    if (!turn.view) {
      turn.stopAsked = true;
      return;
    }
    await cancelTurn(turn);
  }

  async function cancelTurn(turn) {
    try {
      await api("POST", sessionPath(turn.sessionId, "/cancel"));
    } catch (_) {
      turn.controller.abort(); // a client that goes away cancels its turn too (BR-05)
    }
  }

  // -- start ------------------------------------------------------------------------------

  /**
   * The session ended: nothing of it stays in the page (the list, the open session's
   * title, context and conversation, the tools, any error). A logout also forgets the
   * draft, the scope chosen and the open session's id in the URL (the next login would
   * reopen it); a session that merely expired (a restart, a 401) — or a bridge turned off
   * and on (BR-16) — keeps those two, so the reader goes on where they were.
   */
  function reset(reason) {
    if (state.turn) state.turn.controller.abort();
    const logout = reason === "logout";
    closeSession(!logout);
    state.nextCursor = null;
    state.tools = null;
    ui.list.replaceChildren();
    ui.contextTools.replaceChildren();
    clearUsage();
    for (const line of [ui.sessionsError, ui.composerError]) line.textContent = "";
    if (logout) {
      ui.input.value = "";
      ui.scope.selectedIndex = 0;
      ui.toggle.hidden = true;
      ui.toggleError.textContent = "";
    }
    ui.workspace.hidden = true;
    state.models = null;
    state.chosenModel = null;
    state.modelReads += 1;
    clearTimeout(state.modelTimer);
    bridgeState("checking", "Checking the engine bridge…");
  }

  live(ui.send);
  live(ui.stop);
  live(ui.newSession);
  live(ui.more);
  live(ui.usageRefresh);
  for (const [control, action] of [[ui.disable, "disable"], [ui.enable, "enable"],
    [ui.reload, "reload"]]) {
    live(control);
    control.addEventListener("click", () => toggle(action));
  }
  ui.usageRefresh.addEventListener("click", loadUsage);
  ui.newSession.addEventListener("click", newSession);
  ui.more.addEventListener("click", loadMore);
  ui.scope.addEventListener("change", changeScope);
  ui.model.addEventListener("change", changeModel);
  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && !event.isComposing && state.turn && !ui.stop.disabled) {
      event.preventDefault();
      stop();
    }
  });
  ui.composer.addEventListener("submit", send);
  ui.stop.addEventListener("click", stop);
  ui.input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      ui.composer.requestSubmit();
    }
  });

  window.labfySession.start({
    login: $("login"), account: $("account"), banner: $("banner"), content: $("content"),
    onLogin: () => loadBridge(),
    onLogout: (reason) => reset(reason),
    // A first load that met a lost connection is tried again once the server answers.
    onConnection: (online) => {
      if (online && ui.workspace.hidden && window.labfySession.session) loadBridge();
    },
  });
})();
