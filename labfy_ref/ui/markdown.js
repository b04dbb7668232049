// labfy-ref engine page: a model's Markdown → a sanitised DOM fragment (UI-05).
//
// Usage:  parent.append(labfyMarkdown.render(text));   // a DocumentFragment, never a string
//         labfyMarkdown.codeOf(preElement)              // the exact code of a rendered fence
//
// markdown-it (html: false, no linkify, no images) writes the HTML; fences are
// highlighted by highlight.js when their language is known, escaped otherwise; table
// alignment becomes a class (markdown-it writes it as style="text-align:…", which the
// CSP refuses); model headings are moved below the page's own (h4..h6). The HTML then
// goes through DOMPurify with an allow-list of what this Markdown can produce, style
// attributes and active tags forbidden, returning DOM (no string is parsed again), and
// every link left keeps an http(s) or mailto target and rel="noopener noreferrer".
"use strict";

(function () {
  const ALIGNMENTS = ["left", "center", "right"];
  const LINK = /^(?:https?:|mailto:)/i;
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
    if (!language || !hljs.getLanguage(language)) return "";
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

  /** Links keep only an http(s)/mailto target and never hand the page to the target. */
  function fixLinks(fragment) {
    for (const link of fragment.querySelectorAll("a")) {
      const href = link.getAttribute("href");
      if (href === null || !LINK.test(href.trim())) link.removeAttribute("href");
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

  /** The Markdown ``text`` as a sanitised DocumentFragment. */
  function render(text) {
    renderer = renderer || createRenderer();
    const html = renderer.render(String(text));
    const fragment = DOMPurify.sanitize(html, SANITIZE);
    fixLinks(fragment);
    scrollers(fragment);
    return fragment;
  }

  /** The code of a rendered fence (its <pre>), as the model wrote it, without the last newline. */
  function codeOf(pre) {
    return pre.textContent.replace(/\n$/, "");
  }

  window.labfyMarkdown = Object.freeze({ render, codeOf });
})();
