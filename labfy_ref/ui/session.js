// labfy-ref session — the one piece the runtime page (/) and the engine page (/cordis) share:
// API calls (JSON, CSRF), the login form, "Logged in as …" + Log out, the lost-connection
// banner, and "a 401 brings the login form back". No inline script, no HTML strings (CSP).
// Text from the server (a name, an error) goes in through labfyText (text.js), which
// shows invisible format characters.
//
// Usage (load text.js and it before the page's own script, all `defer`):
//
//   <script src="/ui/text.js" defer></script>
//   <script src="/ui/session.js" defer></script>
//   <script src="/ui/app.js" defer></script>
//
//   labfySession.start({
//     login: loginSection,      // empty element: the login form is built in it (hooks
//                               //   login-code / login-submit); hidden while logged in
//     account: accountElement,  // empty element: "Logged in as NAME (ROLE)" + Log out
//     banner: bannerElement,    // empty element: "Connection to the server lost — retrying"
//     content: mainContent,     // the page's own content: hidden while logged out
//     onLogin(session) {},      // {role, name}: show data, start polling
//     onLogout(reason) {},      // "logout" | "expired": stop polling, forget live state
//     onConnection(online) {},  // optional: the connection was lost (false) or is back (true)
//   });
//   const data = await labfySession.api("POST", "/api/v1/grants", {campaign_id});
//   const response = await labfySession.request("POST", path, body, {signal});  // streams
//   labfySession.live(button);  // disabled while the connection is lost (or mark it data-live)
//
// Errors: every failure rejects with a `labfySession.ApiError` {code, detail, status}
// whose `message` (and String()) starts with the code: "GRANT_REQUIRED: …". A network
// failure is code CONNECTION_LOST (status 0): the banner shows, live controls are
// disabled, and /api/health is retried until it answers; then the session is checked
// again (a 401 there brings the login form back). A 401 from any call ends the session
// on the page. Nothing here ever calls console.error: an expected failure is shown in
// the page, not logged. The login code is typed or pasted (surrounding whitespace is
// trimmed), or it arrives in the URL's fragment, #code=CODE (SV-10: the banner's one-click
// link): the page takes it, removes the fragment from the address bar and the history at
// once, then logs in with a POST. A fragment never reaches the server, its logs or a
// Referer. The form is built here, so without script there is no form to submit.
"use strict";

(function defineSession() {
  const RETRY_DELAYS_MS = [500, 1000, 2000, 3000];
  // SV-11: how long before the session ends the page says so, and how often it looks.
  const WARN_BEFORE_MS = 120000;
  const LIFE_CHECK_MS = 5000;
  const LOST_TEXT = "Connection to the server lost — retrying";

  /** An API failure; `message` starts with the stable error code. */
  class ApiError extends Error {
    constructor(code, detail, status) {
      super(detail ? code + ": " + detail : code);
      this.name = "ApiError";
      this.code = code;
      this.detail = detail || "";
      this.status = status;
    }

    toString() {
      return this.message;
    }
  }

  const state = {
    options: null,
    session: null,   // {role, name} while logged in
    csrf: null,
    online: true,
    retryTimer: null,
    retryIndex: 0,
    ui: null,
    // SV-11: the session's idle timeout, its absolute end, and the last request that used it
    idleMs: null,
    endsAt: null,
    lastUse: 0,
    lifeTimer: null,
  };

  // Text into an element, never markup; invisible format characters shown (text.js).
  const node = window.labfyText.el;
  const setText = window.labfyText.set;

  /** The error a failed response carries ({"error": {code, message}}), or HTTP_<status>. */
  async function errorOf(response) {
    let body = null;
    try {
      body = await response.json();
    } catch (_) {
      body = null;
    }
    const error = body && typeof body === "object" ? body.error : null;
    if (error && typeof error.code === "string") {
      return new ApiError(error.code, String(error.message || ""), response.status);
    }
    return new ApiError("HTTP_" + response.status, response.statusText, response.status);
  }

  /**
   * Send one request; resolve with the Response when it is 2xx.
   * Mutations carry the session's X-CSRF-Token; a body is sent as JSON.
   */
  async function request(method, path, body, init) {
    const headers = { "Accept": "application/json" };
    if (method !== "GET" && method !== "HEAD" && state.csrf) {
      headers["X-CSRF-Token"] = state.csrf;
    }
    const options = { method, headers, credentials: "same-origin", cache: "no-store" };
    if (init && init.signal) options.signal = init.signal;
    if (init && init.accept) headers["Accept"] = init.accept;
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      options.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(path, options);
    } catch (failure) {
      if (failure && failure.name === "AbortError") {
        throw new ApiError("ABORTED", "the request was stopped", 0);
      }
      connectionLost();
      throw new ApiError("CONNECTION_LOST", "the server did not answer", 0);
    }
    connectionBack();
    if (response.ok) {
      if (state.session) state.lastUse = Date.now();
      return response;
    }
    const error = await errorOf(response);
    if (response.status === 401 && state.session) endSession("expired");
    throw error;
  }

  /** Send one request and resolve with its JSON body (null when it has none). */
  async function api(method, path, body, init) {
    const response = await request(method, path, body, init);
    const text = await response.text();
    if (!text) return null;
    try {
      return JSON.parse(text);
    } catch (_) {
      throw new ApiError("BAD_RESPONSE", "the server's answer is not JSON", response.status);
    }
  }

  // -- connection ------------------------------------------------------------------------

  function setLiveDisabled(offline) {
    for (const control of document.querySelectorAll("[data-live]")) {
      if (offline && !control.disabled) {
        control.disabled = true;
        control.dataset.offline = "1";
      } else if (!offline && control.dataset.offline) {
        delete control.dataset.offline;
        control.disabled = false;
      }
    }
  }

  /** Mark a control live: disabled while the connection is lost, restored when it is back. */
  function live(control) {
    control.dataset.live = "1";
    if (!state.online && !control.disabled) {
      control.disabled = true;
      control.dataset.offline = "1";
    }
    return control;
  }

  function showBanner(shown) {
    if (!state.ui) return;
    state.ui.banner.hidden = !shown;
    state.ui.bannerText.textContent = shown ? LOST_TEXT : "";
  }

  function connectionLost() {
    if (!state.online) return;
    state.online = false;
    state.retryIndex = 0;
    showBanner(true);
    setLiveDisabled(true);
    if (state.options && state.options.onConnection) state.options.onConnection(false);
    scheduleRetry();
  }

  function connectionBack() {
    if (state.online) return;
    state.online = true;
    if (state.retryTimer !== null) clearTimeout(state.retryTimer);
    state.retryTimer = null;
    showBanner(false);
    setLiveDisabled(false);
    if (state.options && state.options.onConnection) state.options.onConnection(true);
  }

  function scheduleRetry() {
    const delay = RETRY_DELAYS_MS[Math.min(state.retryIndex, RETRY_DELAYS_MS.length - 1)];
    state.retryIndex += 1;
    state.retryTimer = setTimeout(retry, delay);
  }

  /** While lost: ask /api/health (no session needed); once it answers, check the session. */
  async function retry() {
    state.retryTimer = null;
    try {
      const response = await fetch("/api/health", { credentials: "same-origin", cache: "no-store" });
      if (!response.ok) throw new Error("not ready");
    } catch (_) {
      scheduleRetry();
      return;
    }
    connectionBack();
    await checkSession();
  }

  // -- session ---------------------------------------------------------------------------

  function beginSession(body) {
    state.session = { role: String(body.role), name: String(body.name) };
    if (body.csrf_token) state.csrf = String(body.csrf_token);
    const { ui, options } = state;
    setText(ui.who, "Logged in as " + state.session.name + " (" + state.session.role + ")");
    ui.account.hidden = false;
    ui.login.hidden = true;
    ui.error.textContent = "";
    if (options.content) options.content.hidden = false;
    if (options.onLogin) options.onLogin(state.session);
    watchLife();
  }

  function endSession(reason) {
    const wasIn = state.session !== null;
    state.session = null;
    state.csrf = null;
    const { ui, options } = state;
    ui.account.hidden = true;
    ui.who.textContent = "";
    ui.lifeWarning.hidden = true;
    clearTimeout(state.lifeTimer);
    ui.login.hidden = false;
    if (options.content) options.content.hidden = true;
    if (reason === "expired") ui.error.textContent = "Your session ended: log in again with the code.";
    if (wasIn && options.onLogout) options.onLogout(reason);
  }

  /** The session's lifetime headers (SV-11) noted, then the JSON body of ``response``. */
  async function sessionBody(response) {
    const idle = Number(response.headers.get("X-Session-Idle-Seconds"));
    const ends = Number(response.headers.get("X-Session-Ends-In"));
    if (Number.isFinite(idle) && idle > 0) state.idleMs = idle * 1000;
    if (Number.isFinite(ends) && ends > 0) state.endsAt = Date.now() + ends * 1000;
    state.lastUse = Date.now();
    return response.json();
  }

  /** Say, two minutes ahead, when the session will end; end it on the page when it has. */
  function watchLife() {
    clearTimeout(state.lifeTimer);
    if (!state.session || state.idleMs === null || state.endsAt === null) return;
    const end = Math.min(state.lastUse + state.idleMs, state.endsAt);
    const left = end - Date.now();
    const { ui } = state;
    if (left <= 0) {
      checkSession();  // the server says 401: the login form comes back, the typing stays
      return;
    }
    if (left <= WARN_BEFORE_MS) {
      const why = end === state.endsAt ? "it reaches its maximum length" : "of inactivity";
      setText(ui.lifeWarning, "Your session ends in " + Math.ceil(left / 1000) + " s ("
        + why + "); anything you do keeps an idle session, and what you typed stays.");
      ui.lifeWarning.hidden = false;
    } else {
      ui.lifeWarning.hidden = true;
    }
    state.lifeTimer = setTimeout(watchLife, Math.min(LIFE_CHECK_MS, Math.max(left, 250)));
  }

  /** GET /api/v1/session: resume a session from the cookie, or show the login form. */
  async function checkSession() {
    try {
      const body = await sessionBody(await request("GET", "/api/v1/session"));
      if (!state.session) beginSession(body);
      else state.csrf = body.csrf_token ? String(body.csrf_token) : state.csrf;
      watchLife();
    } catch (error) {
      if (error.status === 401) endSession(state.session ? "expired" : "none");
      // CONNECTION_LOST: the banner says so and the retry checks again.
    }
  }

  /** The code of a #code=CODE fragment (SV-10), which leaves the address bar and history
   *  before anything else happens; null when the URL has none. */
  function takeFragmentCode() {
    const found = /^#code=([A-Za-z0-9]{1,256})$/.exec(window.location.hash);
    if (!window.location.hash.startsWith("#code=")) return null;
    window.history.replaceState(null, "", window.location.pathname + window.location.search);
    return found ? found[1] : "";
  }

  async function submitLogin(event) {
    event.preventDefault();
    await logIn(state.ui.code.value.trim());
  }

  async function logIn(code) {
    const { ui } = state;
    ui.error.textContent = "";
    ui.submit.disabled = true;
    try {
      const body = await sessionBody(await request("POST", "/api/v1/session", { token: code }));
      ui.code.value = "";
      beginSession(body);
    } catch (error) {
      setText(ui.error, error.status === 401
        ? error.code + ": that login code is not valid"
        : error.message);
    } finally {
      ui.submit.disabled = false;
      live(ui.submit);  // offline meanwhile: disabled again, and restored when back
    }
  }

  async function logout() {
    state.ui.accountError.textContent = "";
    try {
      await api("DELETE", "/api/v1/session");
    } catch (error) {
      if (error.status !== 401) {
        setText(state.ui.accountError, error.message);
        return;
      }
    }
    endSession("logout");
  }

  function buildLogin(section) {
    const heading = node("h2", "", "Log in");
    heading.id = "login-heading";
    section.setAttribute("aria-labelledby", heading.id);
    const form = node("form", "login-form");
    form.autocomplete = "off";
    const label = node("label", "", "Login code (printed in the terminal where labfy-ref "
                       + "serve runs, under its one-click link)");
    label.htmlFor = "login-code";
    const code = node("input", "login-code");
    code.id = "login-code";
    code.name = "login-code";
    code.type = "password";
    code.required = true;
    code.autocomplete = "off";
    code.spellcheck = false;
    code.dataset.testid = "login-code";
    const submit = live(node("button", "login-submit", "Log in"));
    submit.type = "submit";
    submit.dataset.testid = "login-submit";
    const error = node("p", "error login-error");
    error.setAttribute("role", "alert");
    form.append(label, code, submit);
    form.addEventListener("submit", submitLogin);
    section.replaceChildren(heading, form, error);
    return { code, submit, error };
  }

  function buildAccount(element) {
    const who = node("span", "account-who");
    const button = node("button", "account-logout", "Log out");
    button.type = "button";
    button.addEventListener("click", logout);
    live(button);
    const accountError = node("span", "error account-error");
    accountError.setAttribute("role", "alert");
    const lifeWarning = node("span", "session-warning");
    lifeWarning.setAttribute("role", "status");
    lifeWarning.dataset.testid = "session-warning";
    lifeWarning.hidden = true;
    element.replaceChildren(who, button, accountError, lifeWarning);
    return { who, accountError, lifeWarning };
  }

  function buildBanner(element) {
    element.classList.add("connection-banner");
    element.setAttribute("role", "status");
    element.setAttribute("aria-live", "polite");
    const bannerText = node("span", "connection-text");
    element.replaceChildren(bannerText);
    return bannerText;
  }

  /** Build the login form, account line and banner in the page's elements; check the session. */
  function start(options) {
    state.options = options;
    const login = buildLogin(options.login);
    const account = buildAccount(options.account);
    state.ui = {
      login: options.login, account: options.account, banner: options.banner,
      bannerText: buildBanner(options.banner), ...login, ...account,
    };
    options.login.hidden = true;
    options.account.hidden = true;
    options.banner.hidden = true;
    if (options.content) options.content.hidden = true;
    const fragmentCode = takeFragmentCode();
    if (fragmentCode === null) return checkSession();
    options.login.hidden = false;  // where a refused code is said
    return logIn(fragmentCode);
  }

  window.labfySession = Object.freeze({
    ApiError,
    start,
    api,
    request,
    live,
    /** Report a connection lost outside `request` (e.g. a stream cut mid-body). */
    lost: connectionLost,
    /** The current session {role, name}, or null. */
    get session() { return state.session; },
    /** False while the connection is lost. */
    get online() { return state.online; },
  });
}());
