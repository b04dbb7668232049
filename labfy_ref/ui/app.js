// labfy-ref runtime page. Everything that comes from a model, a file or evidence
// is inserted with textContent, never as HTML (UI-02). No inline script (CSP).
"use strict";

const api = { csrf: null };

async function call(method, path, body) {
  const headers = { "Accept": "application/json" };
  if (method !== "GET") headers["X-CSRF-Token"] = api.csrf || "";
  const init = { method, headers, credentials: "same-origin" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  const data = await response.json().catch(() => ({}));
  if (!response.ok) {
    const error = (data && data.error) || { code: "HTTP_" + response.status, message: "" };
    throw Object.assign(new Error(error.code + ": " + error.message), { status: response.status });
  }
  return data;
}

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = String(text);
  return node;
}

function summary(value, limit) {
  const text = JSON.stringify(value);
  return text.length > limit ? text.slice(0, limit - 1) + "…" : text;
}

function renderTurn(turn) {
  const item = el("li", "turn");
  item.dataset.turnId = turn.id;
  const head = el("div", "turn-head");
  head.append(el("span", "state", turn.state), el("span", "message", turn.message));
  item.append(head);
  for (const callRecord of turn.tool_calls) {
    const card = el("div", "card");
    card.dataset.tool = callRecord.tool_id;
    card.append(el("div", "tool", callRecord.tool_id + " · " + callRecord.status));
    card.append(el("div", "summary", "arguments: " + summary(callRecord.arguments, 200)));
    card.append(el("div", "summary", "result: " + summary(callRecord.result.data, 400)));
    item.append(card);
  }
  if (turn.final_text !== null) item.append(el("div", "final", turn.final_text));
  if (turn.error) item.append(el("div", "error", turn.error.code + ": " + turn.error.message));
  const actions = el("div", "actions");
  if (turn.state === "AUTHORIZATION_REQUIRED" && turn.authorization) {
    const button = el("button", "authorize", "Authorize research and resume");
    button.addEventListener("click", () => authorizeAndResume(turn));
    actions.append(button);
  }
  if (["QUEUED", "RUNNING", "AUTHORIZATION_REQUIRED"].includes(turn.state)) {
    const button = el("button", "cancel", "Cancel");
    button.addEventListener("click", () => act(() => call("POST", `/api/v1/agent-runtime/turns/${turn.id}/cancel`)));
    actions.append(button);
  }
  item.append(actions);
  return item;
}

async function act(action) {
  document.getElementById("runtime-error").textContent = "";
  try { await action(); } catch (error) { document.getElementById("runtime-error").textContent = error.message; }
  await refresh();
}

function authorizeAndResume(turn) {
  return act(async () => {
    await call("POST", "/api/v1/grants", { campaign_id: turn.authorization.campaign_id });
    await call("POST", `/api/v1/agent-runtime/turns/${turn.id}/resume`);
  });
}

async function refresh() {
  const status = await call("GET", "/api/v1/agent-runtime/status");
  const mode = status.mode === "demo" ? "Deterministic demo agent"
    : status.available ? "Local agent · " + status.model
    : "Local agent · " + status.model + " — unavailable: " + status.diagnostic;
  document.getElementById("mode").textContent = mode;
  document.getElementById("workspace").textContent =
    `Workspace: ${status.workspace.name} (${status.workspace.kind}) · permission: ${status.permission_mode}`;
  const { turns } = await call("GET", "/api/v1/agent-runtime/turns");
  document.getElementById("turns").replaceChildren(...turns.map(renderTurn));
}

function showRuntime() {
  document.getElementById("login-panel").hidden = true;
  document.getElementById("runtime-panel").hidden = false;
  refresh();
  setInterval(() => refresh().catch(() => {}), 1000);
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("login-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const field = document.getElementById("login-code");
    try {
      const session = await call("POST", "/api/v1/session", { token: field.value });
      api.csrf = session.csrf_token;
      field.value = "";
      showRuntime();
    } catch (error) {
      document.getElementById("login-error").textContent = error.message;
    }
  });
  document.getElementById("turn-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const field = document.getElementById("turn-message");
    const message = field.value;
    act(async () => {
      await call("POST", "/api/v1/agent-runtime/turns", { message, client_request_id: crypto.randomUUID() });
      field.value = "";
    });
  });
  call("GET", "/api/v1/session").then((session) => { api.csrf = session.csrf_token; showRuntime(); }).catch(() => {});
});
