// labfy-ref runtime page: the turn list, oldest first like a chat. Each turn is built once
// and then updated in place (so a refresh never drops the reader's selection): the question,
// state, elapsed time and progress, the answer (final text or error) first, the research
// authorization with the campaign's grants, then what the agent did — one activity card per
// tool call, folded — and Cancel. A live turn the server no longer has
// (a restart) is explained where it was. Exposed as window.labfyTurns.create(options).
"use strict";

(function defineTurns() {
  const MEMORY_KEY = "labfy.liveTurns";
  const MEMORY_LIMIT = 64;
  const LIVE = new Set(["QUEUED", "RUNNING", "AUTHORIZATION_REQUIRED"]);
  const LABELS = {
    QUEUED: "Queued", RUNNING: "Running", AUTHORIZATION_REQUIRED: "Needs authorization",
    COMPLETED: "Completed", FAILED: "Failed", CANCELLED: "Cancelled",
    MODEL_UNAVAILABLE: "Model unavailable", MODEL_PROTOCOL_ERROR: "Model protocol error",
    BUDGET_EXHAUSTED: "Budget exhausted", LOST: "Gone",
  };
  const session = window.labfySession;
  const {
    el, setText: putText, clip, clockTime, secondsBetween, plural, activityCard,
  } = window.labfyRender;

  /**
   * A turn list in `options.list` (an <ol>), with `options.empty` shown while it is empty.
   * options: workspaceKind() → "SPECIMEN" | "LIVE"; announce(text); onResumed() after a
   * resume was accepted; onDismissed() after a lost turn was dismissed.
   */
  function create(options) {
    const state = { views: new Map(), campaigns: new Map(), ticker: null };

    function showEmpty() {
      options.empty.hidden = state.views.size > 0;
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

    // -- research authorization ------------------------------------------------------------

    function adapterLines() {
      const kind = options.workspaceKind();
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
      else putText(detail, value);
      list.append(detail);
    }

    function grantItem(view, grant) {
      const item = el("li", "grant");
      const expiry = grant.expires_at ? `expires ${clockTime(grant.expires_at)}` : "no expiry";
      const standing = grant.active ? "Active" : grant.revoked_at ? "Revoked" : "Inactive";
      item.append(el("span", "", `${standing} grant, created ${clockTime(grant.created_at)}, ${expiry}`));
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
        state.campaigns.set(campaignId, body.campaign);
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
        const campaign = state.campaigns.get(view.campaignId);
        if (!(campaign && campaign.grants.some((grant) => grant.active))) {
          await session.api("POST", "/api/v1/grants", { campaign_id: view.campaignId });
        }
        const body = await session.api("POST", `/api/v1/agent-runtime/turns/${encodeURIComponent(view.id)}/resume`);
        applyTurn(body.turn);
        options.onResumed();
      } catch (error) {
        putText(view.actionError, error.message);
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
        options.announce("Grant revoked.");
      } catch (error) {
        putText(view.actionError, error.message);
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
      // what the agent did, folded under the answer; the cards stay in the DOM either way
      const activity = el("details", "activity");
      activity.dataset.testid = "turn-activity";
      const activitySummary = el("summary", "", "What the agent did");
      activity.append(activitySummary, cards);
      const actions = el("div", "turn-actions");
      const cancel = session.live(el("button", "secondary", "Cancel"));
      cancel.type = "button";
      cancel.dataset.testid = "cancel-turn";
      const actionError = el("p", "error");
      actionError.setAttribute("role", "alert");
      actions.append(cancel, actionError);
      item.append(head, message, progress, activity, actions);
      const view = {
        id: turn.id, item, badge, message, progress, progressText, cards, cancel, actionError,
        activity, activitySummary,
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
        putText(view.actionError, error.message);
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
        view.item.insertBefore(view[key], view.authBox || view.activity);  // the answer first
      }
      // Only a change is written: rewriting equal text would drop the reader's selection.
      putText(view[key], text);
    }

    /** The answer's checked facts under it (PR-09), drawn once when they arrive. */
    function setFacts(view, facts) {
      if (view.factsNode || !view.finalNode) return;
      const line = window.labfyText.facts(facts);
      if (!line) return;
      view.factsNode = line;
      view.finalNode.after(line);
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
        if (view.state !== null) options.announce(`Turn of ${clockTime(turn.created_at)}: ${LABELS[turn.state] || turn.state}`);
        view.state = turn.state;
        view.item.dataset.state = turn.state;
        view.badge.className = "badge badge-" + turn.state.toLowerCase();
        putText(view.badge, LABELS[turn.state] || turn.state);
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
      view.activity.hidden = view.calls.size === 0;
      const summary = `What the agent did · ${plural(view.calls.size, "tool call")}`;
      if (view.activitySummary.textContent !== summary) view.activitySummary.textContent = summary;
      updateAuthorization(view, turn.state, turn.authorization);
      setText(view, "finalNode", "final-text", "final-text", turn.final_text);
      setFacts(view, turn.facts);
      setText(view, "errorNode", "turn-error", "turn-error",
        turn.error ? turn.error.code + ": " + turn.error.message : null);
      remember(turn);
    }

    function updateAuthorization(view, state, authorization) {
      if (!authorization) return;
      if (!view.authBox) {
        view.authBox = authorizationBox(view);
        view.item.insertBefore(view.authBox, view.activity);
      }
      const changed = view.campaignId !== authorization.campaign_id
        || view.authStatus !== authorization.status || view.authState !== state;
      view.campaignId = authorization.campaign_id;
      view.authStatus = authorization.status;
      view.authState = state;
      const waiting = state === "AUTHORIZATION_REQUIRED";
      const arrived = waiting && !view.broughtIntoView;
      view.broughtIntoView = waiting;  // once per pause: a refresh never steals focus again
      view.authorize.hidden = !waiting;
      view.authText.textContent = authorizationText(view, state, authorization.status);
      if (changed) refreshCampaign(view);
      if (arrived && options.bringIntoView) options.bringIntoView(view.authBox, view.authorize);
    }

    /** Where a turn goes in the oldest-first list (it reads like a chat): before the first
     * newer one. */
    function place(view) {
      const list = options.list;
      const created = view.turn.created_at;
      for (const other of list.children) {
        const otherView = state.views.get(other.dataset.turnId);
        if (otherView && otherView.turn.created_at > created) {
          list.insertBefore(view.item, other);
          return;
        }
      }
      list.append(view.item);
    }

    function applyTurn(turn) {
      let view = state.views.get(turn.id);
      if (!view) {
        view = createView(turn);
        state.views.set(turn.id, view);
        place(view);  // in the page first: what it shows may be brought into view
        updateView(view, turn);
      } else if (view.state !== "LOST") {
        updateView(view, turn);
      }
      showEmpty();
      startTicker();
      if (options.onChanged) options.onChanged();
    }

    /** The newest turn that can still be stopped (Esc), or null. */
    function newestLive() {
      let newest = null;
      for (const view of state.views.values()) {
        if (!LIVE.has(view.state)) continue;
        if (newest === null || view.turn.created_at > newest.turn.created_at) newest = view;
      }
      return newest;
    }

    /** Esc: cancel the newest live turn; false when none runs. */
    function stopNewest() {
      const view = newestLive();
      if (view === null || view.cancel.hidden || view.cancel.disabled) return false;
      cancelTurn(view);
      return true;
    }

    /** A turn the page knew as live that the server no longer has: say so where it was. */
    function showLost(id, memory, error) {
      let view = state.views.get(id);
      const turn = {
        id, state: "LOST", message: memory.message, created_at: memory.created_at,
        updated_at: memory.created_at, rounds: 0, tool_calls: [], final_text: null, error: null,
        authorization: memory.campaign_id ? { campaign_id: memory.campaign_id, status: "REQUIRED" } : null,
      };
      if (!view) {
        view = createView(turn);
        state.views.set(id, view);
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
      showEmpty();  // a lost turn is a turn: "No turns yet" never sits above it
      if (!view.dismiss) {
        view.dismiss = el("button", "secondary", "Dismiss");
        view.dismiss.type = "button";
        view.dismiss.addEventListener("click", () => dismiss(id));
        view.cancel.after(view.dismiss);
      }
    }

    function dismiss(id) {
      forget(id);
      const view = state.views.get(id);
      if (view) view.item.remove();
      state.views.delete(id);
      showEmpty();
      options.onDismissed();
    }

    // -- elapsed time of live turns ----------------------------------------------------------

    function tick() {
      const now = Date.now();
      let live = 0;
      for (const view of state.views.values()) {
        if (view.state !== "RUNNING" && view.state !== "QUEUED") continue;
        live += 1;
        const line = progressLine(view.turn, now);
        if (view.progressText.textContent !== line) view.progressText.textContent = line;
      }
      if (live === 0) stopTicker();
    }

    function startTicker() {
      if (state.ticker === null) state.ticker = setInterval(tick, 1000);
    }

    function stopTicker() {
      if (state.ticker !== null) clearInterval(state.ticker);
      state.ticker = null;
    }

    /** Drop every view (logout); `forgetMemory` also drops what this tab remembers. */
    function clear(forgetMemory) {
      stopTicker();
      for (const view of state.views.values()) view.item.remove();
      state.views.clear();
      state.campaigns.clear();
      showEmpty();
      if (forgetMemory) saveMemory({});
    }

    /** Remove the views of turns the server does not list, except those shown as lost. */
    function keepOnly(known) {
      for (const [id, view] of state.views) {
        if (!known.has(id) && view.state !== "LOST") {
          view.item.remove();
          state.views.delete(id);
        }
      }
      showEmpty();
    }

    return Object.freeze({
      apply: applyTurn, lost: showLost, remembered, keepOnly, clear, stopNewest,
    });
  }

  window.labfyTurns = Object.freeze({ create, LIVE });
}());
