// labfy-ref engine page: the NDJSON line parser of the engine API's turn streams (UI-06).
//
// Usage:
//   const parser = labfyNdjson.createParser();          // {maxLineChars} optional
//   for (const item of parser.feed(uint8ArrayChunk)) ... // every line completed by this read
//   for (const item of parser.end()) ...                 // the stream ended
//   await labfyNdjson.readStream(response, onItem);      // a fetch Response, read to its end
//
// Bytes are decoded by one streaming TextDecoder ({stream: true}), so a UTF-8 sequence
// cut by a network read is completed by the next read; lines are split on "\n" only
// (U+2028 and "\r" are characters of a line, as in the server's framing). A line that
// is not UTF-8, not a JSON object, or longer than the bound is refused: the parser
// yields a STREAM_INVALID error item in its place (shown in the page like any error
// chunk), skips the rest of that line and goes on with the next one.
"use strict";

(function () {
  const NEWLINE = 0x0a;
  // A line's characters are at most its bytes: a line within the server's 8 MiB stream
  // bound always fits.
  const DEFAULT_MAX_LINE_CHARS = 8 * 1024 * 1024;
  const CODE = "STREAM_INVALID";
  // fatal: bytes that are not UTF-8 refuse their line; ignoreBOM: a BOM is a character
  // (not JSON whitespace), as in the server's decoder, not silently dropped.
  const DECODING = { fatal: true, ignoreBOM: true };
  const BLANK = /^[ \t\r]*$/; // JSON's own whitespace only: a line of U+00A0 is not blank

  /** The item a refused line becomes: an error chunk, marked as the page's own. */
  function refusal(message) {
    return { type: "error", code: CODE, message: message, local: true };
  }

  /** The value of one complete line, or its refusal; null for a blank line. */
  function parseLine(line, number) {
    if (BLANK.test(line)) return null; // blank lines separate nothing and carry nothing
    let value;
    try {
      value = JSON.parse(line);
    } catch (_) {
      return refusal(`line ${number} of the stream is not JSON`);
    }
    if (value === null || typeof value !== "object" || Array.isArray(value)) {
      return refusal(`line ${number} of the stream is not a JSON object`);
    }
    return value;
  }

  /** A parser for one stream: feed it each read's bytes, then end it. */
  function createParser(options) {
    const maxLineChars = (options && options.maxLineChars) || DEFAULT_MAX_LINE_CHARS;
    let decoder = new TextDecoder("utf-8", DECODING);
    let tail = "";        // the current line's text so far
    let skipping = false; // the current line was refused: drop it up to its "\n"
    let lines = 0;

    function finishLine(out) {
      lines += 1;
      if (skipping) {
        skipping = false;
      } else if (tail.length > maxLineChars) {
        out.push(refusal(`line ${lines} of the stream is longer than ${maxLineChars} characters`));
      } else {
        const item = parseLine(tail, lines);
        if (item !== null) out.push(item);
      }
      tail = "";
    }

    function refuseCurrent(out, message) {
      out.push(refusal(message));
      tail = "";
      skipping = true;
    }

    // One piece of bytes holding at most one "\n", at its end: a decoding error then
    // belongs to exactly one line.
    function feedPiece(piece, out) {
      let text;
      try {
        text = decoder.decode(piece, { stream: true });
      } catch (_) {
        decoder = new TextDecoder("utf-8", DECODING); // the old one's state is lost
        if (!skipping) refuseCurrent(out, `line ${lines + 1} of the stream is not UTF-8`);
        skipping = true;
        if (piece[piece.length - 1] === NEWLINE) finishLine(out);
        return;
      }
      const ended = text.endsWith("\n");
      if (!skipping) tail += ended ? text.slice(0, -1) : text;
      if (ended) {
        finishLine(out);
      } else if (!skipping && tail.length > maxLineChars) {
        refuseCurrent(out, `line ${lines + 1} of the stream is longer than ${maxLineChars} characters`);
      }
    }

    /** The items of every line that ``bytes`` (a Uint8Array) completes. */
    function feed(bytes) {
      const out = [];
      let start = 0;
      while (start < bytes.length) {
        const newline = bytes.indexOf(NEWLINE, start);
        const end = newline < 0 ? bytes.length : newline + 1;
        feedPiece(bytes.subarray(start, end), out);
        start = end;
      }
      return out;
    }

    /** The stream ended: a line left without its "\n" is refused. */
    function end() {
      const out = [];
      let rest = "";
      try {
        rest = decoder.decode();
      } catch (_) {
        rest = "\ufffd"; // a cut UTF-8 sequence: the line is incomplete either way
      }
      if (!skipping && !BLANK.test(tail + rest)) {
        out.push(refusal(`the stream ended inside line ${lines + 1}`));
      }
      tail = "";
      skipping = false;
      return out;
    }

    return Object.freeze({ feed, end });
  }

  /** Read ``response``'s body to its end, handing each item to ``onItem`` as it arrives. */
  async function readStream(response, onItem, options) {
    const parser = createParser(options);
    const reader = response.body.getReader();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      for (const item of parser.feed(value)) onItem(item);
    }
    for (const item of parser.end()) onItem(item);
  }

  window.labfyNdjson = Object.freeze({ createParser, readStream, DEFAULT_MAX_LINE_CHARS, CODE });
})();
