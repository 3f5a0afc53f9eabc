// Starts the editor. A file of its own (not an inline script), so the
// page's Content-Security-Policy can allow scripts from this server only.
//
// The theme first, before anything is drawn: the one chosen in the editor
// (`sluice-theme` in local storage: "light" or "dark"), else the system's,
// followed as it changes.
const system = matchMedia("(prefers-color-scheme: dark)");
function theme() {
  const chosen = localStorage.getItem("sluice-theme");
  document.documentElement.dataset.theme =
    chosen === "light" || chosen === "dark" ? chosen : system.matches ? "dark" : "light";
}
theme();
system.addEventListener("change", theme);
window.addEventListener("storage", theme);

import init from "/pkg/sluice.js";
init({ module_or_path: "/pkg/sluice_bg.wasm" });
