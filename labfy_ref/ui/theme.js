// labfy-ref: light or dark (UI-10). Loaded without defer in <head>, so the remembered
// choice applies before the first paint; the header's toggle (any [data-theme-toggle]
// button) switches and remembers it per browser. Without a choice the system's
// prefers-color-scheme decides (theme.css).
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

  const chosen = stored();
  if (chosen) root.dataset.theme = chosen;

  document.addEventListener("DOMContentLoaded", () => {
    for (const button of document.querySelectorAll("[data-theme-toggle]")) {
      label(button);
      button.addEventListener("click", () => set(current() === "dark" ? "light" : "dark"));
    }
    if (window.matchMedia) {
      window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", () => {
        for (const button of document.querySelectorAll("[data-theme-toggle]")) label(button);
      });
    }
  });

  window.labfyTheme = Object.freeze({ current, set });
}());
