// labfy-ref engine page: a model's Markdown → a sanitised DOM fragment (UI-05).
//
// Usage:  parent.append(labfyMarkdown.render(text));   // a DocumentFragment, never a string
//         const reply = labfyMarkdown.stream(element, decorate);  // a streamed reply:
//         reply.append(delta); … reply.end();          //   paced, see stream() below
//         labfyMarkdown.codeOf(preElement)              // the code of a rendered fence
//
// markdown-it (html: false, no linkify, no images) writes the HTML; fences are
// highlighted by highlight.js when their language is known and they are not huge,
// escaped otherwise; table alignment becomes a class (markdown-it writes it as
// style="text-align:…", which the CSP refuses); model headings are moved below the
// page's own (h4..h6). The HTML then goes through DOMPurify with an allow-list of what
// this Markdown can produce, style attributes and active tags forbidden, returning DOM
// (no string is parsed again); every link left is absolute http(s):// or mailto:,
// outside the page's own origin, and opens in a new tab with rel="noopener noreferrer"
// (a click never leaves the page mid-turn: the bridge cancels a turn whose client goes
// away). Every text node left shows its invisible format characters (labfyText, text.js).
"use strict";

(function () {
  const ALIGNMENTS = ["left", "center", "right"];
  const RENDER_MIN_MS = 50;         // a streamed reply is rendered again at most this often,
  const RENDER_COST_FACTOR = 4;     // and at most once per 4 × its last render's duration
  const STREAM_MARKDOWN_CHARS = 16 * 1024; // past this, the rest streams as plain text
  const SLICE_TOKENS = 512;         // markdown-it tokens per slice of the final render
  const SLICE_BUDGET_MS = 24;       // the final render yields to the page this often
  // A fence is one block, never sliced: past this, it is shown escaped, without colours
  // (highlight.js takes seconds on 100 KB of some languages, and blocks the page meanwhile).
  const HIGHLIGHT_MAX_CHARS = 16 * 1024;
  // Scheme and "//" both: "http:api/v1/session" or "HTTP:/cordis" resolve into this origin.
  const LINK = /^(?:https?:\/\/|mailto:)/i;
  const ALLOWED_TAGS = ["p", "br", "hr", "strong", "em", "s", "code", "pre", "span", "a",
    "ul", "ol", "li", "blockquote", "h4", "h5", "h6", "table", "thead", "tbody", "tr",
    "th", "td"];
  const SANITIZE = {
    ALLOWED_TAGS: ALLOWED_TAGS,
    ALLOWED_ATTR: ["href", "title", "class", "start"],
    FORBID_ATTR: ["style"],
    FORBID_TAGS: ["style", "script", "form", "input", "button", "textarea", "select",
      "iframe", "frame", "object", "embed", "svg", "math", "img", "video", "audio", "link",
      "meta", "base"],
    ALLOW_DATA_ATTR: false,
    RETURN_DOM_FRAGMENT: true,
  };

  /** highlight.js for a known language; "" lets markdown-it escape the code itself. */
  function highlight(code, language) {
    if (!language || code.length > HIGHLIGHT_MAX_CHARS || !hljs.getLanguage(language)) return "";
    try {
      return hljs.highlight(code, { language: language, ignoreIllegals: true }).value;
    } catch (_) {
      return ""; // a highlighter failure shows the plain, escaped code
    }
  }

  /** th/td: markdown-it's style="text-align:x" becomes class="align-x". */
  function alignedCell(tokens, index, options, env, self) {
    const token = tokens[index];
    const style = token.attrGet("style");
    if (style !== null) {
      token.attrs = token.attrs.filter(([name]) => name !== "style");
      const side = style.replace(/^text-align:\s*/, "");
      if (ALIGNMENTS.includes(side)) token.attrJoin("class", `align-${side}`);
    }
    return self.renderToken(tokens, index, options);
  }

  /** Model headings sit under the page's own h1-h3. */
  function demotedHeading(tokens, index, options, env, self) {
    const token = tokens[index];
    const level = Math.min(6, Number(token.tag.slice(1)) + 3);
    token.tag = `h${level}`;
    return self.renderToken(tokens, index, options);
  }

  function createRenderer() {
    const md = markdownit({ html: false, linkify: false, typographer: false,
      highlight: highlight });
    md.disable(["image"]); // an image would fetch (and the CSP refuses remote ones)
    md.validateLink = (url) => LINK.test(url.trim());
    md.renderer.rules.th_open = alignedCell;
    md.renderer.rules.td_open = alignedCell;
    md.renderer.rules.heading_open = demotedHeading;
    md.renderer.rules.heading_close = demotedHeading;
    return md;
  }

  let renderer = null;

  /** An absolute http(s)/mailto target outside the page's own origin (its API, its pages). */
  function allowedTarget(href) {
    if (href === null || !LINK.test(href.trim())) return false;
    try {
      return new URL(href, location.href).origin !== location.origin;
    } catch (_) {
      return false; // not a URL the browser can resolve: no link
    }
  }

  /** Links keep only an allowed target, open apart, and never hand the page to the target. */
  function fixLinks(fragment) {
    for (const link of fragment.querySelectorAll("a")) {
      if (!allowedTarget(link.getAttribute("href"))) link.removeAttribute("href");
      link.setAttribute("target", "_blank");
      link.setAttribute("rel", "noopener noreferrer");
    }
  }

  /** Wide blocks scroll inside the reply (never the page), and a scroller takes focus. */
  function scrollers(fragment) {
    for (const pre of fragment.querySelectorAll("pre")) pre.tabIndex = 0;
    for (const table of fragment.querySelectorAll("table")) {
      const wrap = document.createElement("div");
      wrap.className = "table-wrap";
      wrap.tabIndex = 0;
      table.replaceWith(wrap);
      wrap.append(table);
    }
  }

  /** Rendered HTML → a sanitised DocumentFragment, links fixed, text made visible. */
  function sanitized(html) {
    const fragment = DOMPurify.sanitize(html, SANITIZE);
    fixLinks(fragment);
    scrollers(fragment);
    window.labfyText.markTree(fragment);
    return fragment;
  }

  /** The Markdown ``text`` as a sanitised DocumentFragment. */
  function render(text) {
    renderer = renderer || createRenderer();
    return sanitized(renderer.render(String(text)));
  }

  /**
   * The Markdown ``text`` as sanitised fragments of a few top-level blocks each (an
   * iterator): parsed once, so reference links resolve across the whole text, then
   * rendered and sanitised slice by slice, so a caller can yield to the page between.
   */
  function* slices(text) {
    renderer = renderer || createRenderer();
    const env = {};
    const tokens = renderer.parse(String(text), env);
    let start = 0;
    for (let index = 0; index < tokens.length; index += 1) {
      const token = tokens[index];
      const blockEnds = token.level === 0 && token.nesting !== 1;
      if ((blockEnds && index + 1 - start >= SLICE_TOKENS) || index === tokens.length - 1) {
        yield sanitized(renderer.renderer.render(tokens.slice(start, index + 1),
          renderer.options, env));
        start = index + 1;
      }
    }
  }

  /**
   * A reply streamed into ``element`` that never blocks the page for long. While it
   * streams, the whole reply is rendered again no more often than RENDER_COST_FACTOR ×
   * its last render's duration (and RENDER_MIN_MS); past STREAM_MARKDOWN_CHARS the
   * rest is appended as plain text instead (its cost grows with the reply, not with
   * each delta). end() renders it all once, in slices of at most about SLICE_BUDGET_MS,
   * yielding to the page between them. ``decorate(fragment)`` runs on every rendered
   * fragment before it is shown (the page's copy buttons).
   */
  function stream(element, decorate) {
    const state = { text: "", timer: null, cost: 0, rendered: 0, plain: null, shown: 0,
      job: null };

    function schedule() {
      if (state.timer !== null || state.job !== null) return;
      state.timer = setTimeout(update, Math.max(RENDER_MIN_MS, RENDER_COST_FACTOR * state.cost));
    }

    function update() {
      state.timer = null;
      const started = performance.now();
      if (state.text.length <= STREAM_MARKDOWN_CHARS) {
        const fragment = render(state.text);
        decorate(fragment);
        element.replaceChildren(fragment);
        state.rendered = state.text.length;
      } else {
        appendPlain();
      }
      state.cost = performance.now() - started;
    }

    /** What arrived since the last update, as text after what was rendered. */
    function appendPlain() {
      if (state.plain === null) {
        state.plain = document.createElement("div");
        state.plain.className = "reply-plain";
        state.shown = state.rendered;
        element.append(state.plain);
      }
      let end = state.text.length;
      const last = state.text.charCodeAt(end - 1);
      if (last >= 0xd800 && last <= 0xdbff) end -= 1; // a pair's halves are shown together
      if (end > state.shown) {
        state.plain.append(window.labfyText.node(state.text.slice(state.shown, end)));
      }
      state.shown = end;
    }

    /** Render the next slices for about SLICE_BUDGET_MS, then let the page run. */
    function pump(job) {
      if (state.job !== job) return;
      if (!job.first && !element.isConnected) {
        state.job = null; // the reply left the page (another session, a logout): stop
        return;
      }
      const fragment = document.createDocumentFragment();
      const started = performance.now();
      let next = job.slices.next();
      while (!next.done) {
        decorate(next.value);
        fragment.append(next.value);
        if (performance.now() - started > SLICE_BUDGET_MS) break;
        next = job.slices.next();
      }
      if (job.first) {
        element.replaceChildren(fragment); // the streamed render and its plain tail go
        job.first = false;
      } else {
        element.append(fragment);
      }
      if (next.done) state.job = null;
      else setTimeout(() => pump(job), 0);
    }

    return Object.freeze({
      /** Add a streamed delta; it shows within a render period. */
      append(text) {
        state.text += String(text);
        schedule();
      },
      /** The reply is whole: render all of it once, in slices (the first one now). */
      end() {
        if (state.timer !== null) clearTimeout(state.timer);
        state.timer = null;
        state.plain = null;
        state.job = { slices: slices(state.text), first: true };
        pump(state.job);
      },
      /** The reply's Markdown so far, exactly as received. */
      get text() { return state.text; },
    });
  }

  /** The code of a rendered fence (its <pre>) as shown, without the last newline. */
  function codeOf(pre) {
    return pre.textContent.replace(/\n$/, "");
  }

  window.labfyMarkdown = Object.freeze({ render, slices, stream, codeOf });
})();
