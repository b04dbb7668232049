// labfy-ref: light or dark (UI-10). Loaded without defer in <head>, so data-theme is set on
// <html> before the first paint — the reader's remembered choice, else the system's
// prefers-color-scheme; the header's toggle (any [data-theme-toggle] button) switches and
// remembers it per browser.
"use strict";

(function defineTheme() {
  const KEY = "labfy.theme";
  const root = document.documentElement;

  function stored() {
    try {
      const value = localStorage.getItem(KEY);
      return value === "dark" || value === "light" ? value : null;
    } catch (_) {
      return null;  // storage refused: the system's choice stands
    }
  }

  function current() {
    const chosen = stored();
    if (chosen) return chosen;
    return window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches
      ? "dark" : "light";
  }

  function label(button) {
    // one name, its pressed state the theme: a toggle button never renames itself
    button.textContent = "Dark theme";
    button.setAttribute("aria-pressed", current() === "dark" ? "true" : "false");
  }

  function set(theme) {
    root.dataset.theme = theme;
    try {
      localStorage.setItem(KEY, theme);
    } catch (_) {
      // not remembered, still applied
    }
    for (const button of document.querySelectorAll("[data-theme-toggle]")) label(button);
  }

  root.dataset.theme = current();  // before the first paint: the CSS reads only this

  document.addEventListener("DOMContentLoaded", () => {
    for (const button of document.querySelectorAll("[data-theme-toggle]")) {
      label(button);
      button.addEventListener("click", () => set(current() === "dark" ? "light" : "dark"));
    }
    if (window.matchMedia) {
      window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", () => {
        if (stored()) return;  // a choice made here outranks the system's
        root.dataset.theme = current();
        for (const button of document.querySelectorAll("[data-theme-toggle]")) label(button);
      });
    }
  });

  window.labfyTheme = Object.freeze({ current, set });
}());
