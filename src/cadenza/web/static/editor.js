/* The job editor's behaviour (templates/ui/editor_page.html); no inline script (CSP).
   Tabs between the form and the TOML text, steps moved and removed in the page (their
   order in the form is the order saved), a TOML problem's line:col puts the caret there.
   The TOML text is a CodeMirror 5 editor (static/vendor, highlighting and line numbers)
   over the textarea, which it keeps up to date: the form posts the textarea as before,
   and without the script the plain textarea works the same. Problems found at a line
   are marked in the gutter and shown under that line; the list below stays. */
(function () {
  "use strict";

  let cm = null;
  const GUTTER = "ed-problem-gutter";
  let marked = [];

  function enhanceToml() {
    const area = document.getElementById("toml-text");
    if (!area || !window.CodeMirror || cm) return;
    cm = window.CodeMirror.fromTextArea(area, {
      mode: "toml", lineNumbers: true, gutters: [GUTTER, "CodeMirror-linenumbers"],
      viewportMargin: Infinity, indentUnit: 2, tabSize: 2, lineWrapping: false,
      extraKeys: { Tab: false, "Shift-Tab": false },  // Tab leaves the editor (keyboard users)
      screenReaderLabel: (document.querySelector("label[for=toml-text]") || {}).textContent || "TOML",
    });
    cm.on("change", function () {
      cm.save();  // the textarea holds the text htmx posts
      area.dispatchEvent(new Event("input", { bubbles: true }));  // the live check
    });
  }

  function clearMarks() {
    if (!cm) return;
    cm.clearGutter(GUTTER);
    marked.forEach(function (m) {
      if (m.widget) m.widget.clear();
      cm.removeLineClass(m.line, "background", "ed-line-problem");
      cm.removeLineClass(m.line, "background", "ed-line-warning");
    });
    marked = [];
  }

  // The problems of #toml-problems that have a line, shown on that line of the editor.
  function markProblems() {
    if (!cm) return;
    clearMarks();
    document.querySelectorAll("#toml-problems li[data-line]").forEach(function (li) {
      const line = Number(li.dataset.line) - 1;
      if (!(line >= 0) || line >= cm.lineCount()) return;
      const warning = li.classList.contains("field-warning");
      const marker = document.createElement("span");
      marker.className = "ed-gutter-marker " + (warning ? "ed-gutter-warning" : "ed-gutter-error");
      marker.textContent = warning ? "!" : "✗";
      marker.title = li.title || li.textContent.trim();
      if (!cm.lineInfo(line).gutterMarkers) cm.setGutterMarker(line, GUTTER, marker);
      const css = warning ? "ed-line-warning" : "ed-line-problem";
      cm.addLineClass(line, "background", css);
      const note = document.createElement("div");
      note.className = "ed-line-message " + (warning ? "field-warning" : "field-error");
      note.textContent = (li.dataset.message || li.textContent).trim();
      marked.push({ line: line, widget: cm.addLineWidget(line, note, { coverGutter: false }) });
    });
  }

  function showTab(name) {
    document.querySelectorAll(".ed-tabs [role=tab]").forEach(function (tab) {
      const on = tab.id === "tab-" + name;
      tab.setAttribute("aria-selected", on ? "true" : "false");
      const panel = document.getElementById(tab.getAttribute("aria-controls"));
      if (panel) panel.classList.toggle("hidden", !on);
    });
    if (name === "toml" && cm) cm.refresh();  // measured while hidden: measure again
  }

  const LIVE = "#steps [data-step]:not([data-removed])";

  function numberSteps() {
    document.querySelectorAll(LIVE).forEach(function (step, i) {
      const no = step.querySelector(".ed-step-no");
      if (no) no.textContent = String(i + 1);
    });
  }

  function stepsChanged() {
    numberSteps();
    const form = document.getElementById("job-form");
    if (form) form.dispatchEvent(new Event("steps-changed"));
  }

  function caretAt(line, col) {
    if (cm) {
      cm.focus();
      cm.setCursor({ line: line - 1, ch: Math.max(0, col - 1) });
      return;
    }
    const area = document.getElementById("toml-text");
    if (!area) return;
    const lines = area.value.split("\n");
    let pos = 0;
    for (let i = 0; i < Math.min(line - 1, lines.length); i++) pos += lines[i].length + 1;
    pos += Math.max(0, col - 1);
    area.focus();
    area.setSelectionRange(pos, pos);
  }

  document.addEventListener("click", function (e) {
    const tab = e.target.closest(".ed-tabs [role=tab]");
    if (tab) { showTab(tab.id.slice(4)); return; }
    const goto = e.target.closest(".ed-toml-problems li[data-line]");
    if (goto) {
      e.preventDefault();
      caretAt(Number(goto.dataset.line), Number(goto.dataset.col || 1));
      return;
    }
    const btn = e.target.closest("[data-step-action]");
    if (!btn) return;
    const step = btn.closest("[data-step]");
    if (!step) return;
    const action = btn.getAttribute("data-step-action");
    const live = Array.prototype.slice.call(document.querySelectorAll(LIVE));
    const at = live.indexOf(step);
    if (action === "remove") {
      // Hidden and left out of the form (disabled inputs are not sent) rather than taken
      // out of the page: a check already on its way may still name its fields.
      step.hidden = true;
      step.dataset.removed = "1";
      step.querySelectorAll("input, select, textarea, button").forEach(function (el) {
        el.disabled = true;
      });
    } else if (action === "up" && at > 0) {
      step.parentNode.insertBefore(step, live[at - 1]);
    } else if (action === "down" && at >= 0 && at < live.length - 1) {
      step.parentNode.insertBefore(live[at + 1], step);
    }
    stepsChanged();
  });

  // A problem inside a closed <details> (More options, a step's common options) opens it.
  function openProblems() {
    document.querySelectorAll("#job-form details:not([open])").forEach(function (d) {
      if (d.querySelector(".field-problems:not(:empty)")) d.open = true;
    });
  }

  document.addEventListener("htmx:afterSettle", function (e) {
    if (e.target && e.target.id === "steps") stepsChanged();
    if (document.getElementById("toml-problems")) markProblems();
  });
  let pending = false;
  document.addEventListener("htmx:oobAfterSwap", function () {
    if (pending) return;
    pending = true;
    setTimeout(function () { pending = false; openProblems(); markProblems(); }, 0);
  });

  document.addEventListener("DOMContentLoaded", function () {
    if (!document.getElementById("job-form")) return;
    enhanceToml();
    showTab(location.hash === "#toml" ? "toml" : "form");
    numberSteps();
  });
})();
