// labfy-ref runtime page (/): mode, objects, composer, and the synchronisation of the
// turn list (turns.js) with the server (SPEC §8 UI-01..UI-03, hooks of SPEC §15).
// Everything that comes from a model, a file, an object, evidence or the server goes in
// with textContent through labfyText (format characters shown as ⟨U+XXXX⟩), never as
// markup (UI-02); no inline script or style (CSP). The session,
// the login form and the lost-connection banner are session.js's (window.labfySession).
// Turns are updated in place from the event cursor (RT-06), so a refresh never rebuilds
// the list and never wipes the reader's text selection.
"use strict";

(function runtimePage() {
  const POLL_MS = 1000;
  const STATUS_EVERY_MS = 5000;
  const EVENT_PAGE = 200;
  const MAX_PAGES = 8;          // event pages read per poll before yielding

  const session = window.labfySession;
  const { el, setText, visible, oneLine } = window.labfyRender;
  const { LIVE } = window.labfyTurns;
  const page = {
    generation: 0,      // bumped on logout/resync: late answers of an older one are dropped
    cursor: 0,
    timer: null,
    statusAt: 0,
    status: null,
    turns: null,        // the turn list (turns.js), made at start
    pending: null,      // {text, id}: a send that failed before the server answered
    scroll: null,       // the conversation's scroll box (scroll.js)
  };
  const $ = (id) => document.getElementById(id);

  function announce(text) {
    setText($("announcer"), text);
  }

  function showError(id, error) {
    setText($(id), error ? (error.message || String(error)) : "");
  }

  // -- mode and objects ------------------------------------------------------------------

  function showStatus(status) {
    page.status = status;
    let mode;
    if (status.mode === "demo") mode = "Deterministic demo agent";
    else if (status.available) mode = "Local agent · " + status.model;
    else mode = "Local agent · " + status.model + " — unavailable: " + oneLine(String(status.diagnostic), 160);
    setText($("mode-label"), mode);
    const ws = status.workspace;
    const guidance = status.limits.guidance ? ` · guidance: ${status.limits.guidance.profile}` : "";
    setText($("workspace-line"),
      `Workspace: ${ws.name} (${ws.kind}) · permission: ${status.permission_mode}${guidance}`);
    $("composer-input").maxLength = status.limits.max_message_chars;
    $("pages-nav").hidden = !(status.bridge && status.bridge.enabled);  // /cordis serves then
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
    insert.setAttribute("aria-label", visible(`Insert a reference to ${object.kind} “${title}”`));
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

  /** Esc stops the newest running turn (as Cancel does), wherever the focus is. */
  function onEscape(event) {
    if (event.key !== "Escape" || event.isComposing || !session.session) return;
    if (page.turns.stopNewest()) {
      event.preventDefault();
      announce("Stopping the running turn.");
    }
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
      page.turns.apply(body.turn);
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
    for (const [id, memory] of Object.entries(page.turns.remembered())) {
      if (known.has(id)) continue;
      try {
        page.turns.apply((await session.api("GET", `/api/v1/agent-runtime/turns/${encodeURIComponent(id)}`)).turn);
      } catch (error) {
        if (generation !== page.generation) return;
        if (error.status === 404) page.turns.lost(id, memory, error);
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
      page.turns.keepOnly(known);
      for (const turn of body.turns) page.turns.apply(turn);
      await explainMissing(known, generation);
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
      if (generation === page.generation) page.turns.apply(body.turn);
    } catch (error) {
      const memory = page.turns.remembered()[id];
      if (generation === page.generation && error.status === 404 && memory) page.turns.lost(id, memory, error);
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

  /**
   * The session ended: its turns, objects, workspace line and errors go. A logout also
   * forgets the draft and what this tab remembers of live turns; a session that merely
   * expired (a restart, a 401) keeps both, so the reader who logs in again goes on and
   * sees a lost turn explained.
   */
  function onLogout(reason) {
    const logout = reason === "logout";
    page.generation += 1;
    clearTimeout(page.timer);
    page.timer = null;
    page.status = null;
    page.turns.clear(logout);
    $("objects").replaceChildren();
    $("mode-label").textContent = "Agent runtime";
    $("workspace-line").textContent = "";
    for (const id of ["composer-error", "turns-error", "objects-error"]) showError(id, null);
    if (logout) {
      page.pending = null;
      $("composer-input").value = "";
      updateCount();
    }
  }

  function onConnection(online) {
    if (online && session.session) resync();
  }

  function start() {
    page.turns = window.labfyTurns.create({
      list: $("turns"), empty: $("turns-empty"), announce,
      workspaceKind: () => (page.status ? page.status.workspace.kind : ""),
      onResumed: () => schedulePoll(0),
      onDismissed: () => $("composer-input").focus(),
      onChanged: () => page.scroll.follow(),
      bringIntoView: (box, control) => page.scroll.bringIntoView(box, control),
    });
    page.scroll = window.labfyScroll.create($("turns-panel"));
    document.addEventListener("keydown", onEscape);
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
