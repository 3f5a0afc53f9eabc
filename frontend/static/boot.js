// Starts the editor. A file of its own (not an inline script), so the
// page's Content-Security-Policy can allow scripts from this server only.
import init from "/pkg/sluice.js";
init({ module_or_path: "/pkg/sluice_bg.wasm" });
