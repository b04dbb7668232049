// labfy-ref: a conversation that follows new content like a chat (UI-09). The conversation
// is its own scroll box between the header and the composer (nothing ever sits on top of
// it); it keeps to its end while the reader is there, and once they scroll up it stays
// where they are until they come back down. An approval waiting for the reader is brought
// into view and focused. Exposed as window.labfyScroll.create(box).
"use strict";

(function defineScroll() {
  const SLACK_PX = 48;  // this close to the end counts as at the end

  function create(box) {
    let following = true;
    const atEnd = () => box.scrollTop + box.clientHeight >= box.scrollHeight - SLACK_PX;
    box.addEventListener("scroll", () => { following = atEnd(); }, { passive: true });

    let pending = false;

    /** After new content: to the end, unless the reader scrolled up — once per frame, so a
     *  stream of small chunks never forces a layout per chunk. */
    function follow() {
      if (!following || pending) return;
      pending = true;
      requestAnimationFrame(() => {
        pending = false;
        if (following) box.scrollTop = box.scrollHeight;
      });
    }

    /** An approval: into the middle of the view, its control focused (a draft stays). */
    function bringIntoView(element, control) {
      element.scrollIntoView({ block: "center" });
      if (control) control.focus({ preventScroll: true });
      following = atEnd();
    }

    return Object.freeze({ follow, bringIntoView, following: () => following });
  }

  window.labfyScroll = Object.freeze({ create });
}());
