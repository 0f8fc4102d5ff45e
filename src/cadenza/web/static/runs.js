/* The runs pages' script (no inline script: CSP script-src 'self'). On a run page: the log
   level filter (a data-min attribute the stylesheet reads), the "follow" toggle (keeps the
   log scrolled to its end as the server-sent lines arrive), and the "live" tag going away
   when the stream ends. */
(function () {
  "use strict";

  function logBox() { return document.getElementById("log"); }
  function following() {
    const box = document.getElementById("log-follow");
    return box !== null && box.checked;
  }
  function toEnd() {
    const log = logBox();
    if (log && following()) log.scrollTop = log.scrollHeight;
  }

  // Log lines carry their UTC instant; show the clock time in the browser's zone.
  const clockFmt = new Intl.DateTimeFormat(document.documentElement.lang || undefined, {
    hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23" });
  function localTimes(root) {
    root.querySelectorAll("#log time[datetime]:not([data-local])").forEach(function (el) {
      const when = new Date(el.getAttribute("datetime"));
      if (isNaN(when)) return;
      el.setAttribute("data-local", "1");
      el.textContent = clockFmt.format(when);
    });
  }

  function wire() {
    localTimes(document);
    const level = document.getElementById("log-level");
    if (level && !level.dataset.wired) {
      level.dataset.wired = "1";
      level.addEventListener("change", function () {
        const log = logBox();
        if (log) log.setAttribute("data-min", level.value);
        const url = new URL(window.location.href);
        if (level.value === "DEBUG") url.searchParams.delete("level");
        else url.searchParams.set("level", level.value);
        window.history.replaceState(window.history.state, "", url.toString());
        toEnd();
      });
    }
    const follow = document.getElementById("log-follow");
    if (follow && !follow.dataset.wired) {
      follow.dataset.wired = "1";
      follow.addEventListener("change", toEnd);
    }
    toEnd();
  }

  document.addEventListener("DOMContentLoaded", wire);
  document.addEventListener("htmx:sseMessage", function () { localTimes(document); toEnd(); });
  document.addEventListener("htmx:afterSettle", function (e) {
    if (e.target && e.target.id === "log") toEnd();
  });
  document.addEventListener("htmx:sseClose", function () {
    const tag = document.getElementById("live-tag");
    if (tag) tag.classList.add("hidden");
  });
})();
