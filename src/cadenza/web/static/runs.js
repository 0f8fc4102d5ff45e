/* The runs pages' script (no inline script: CSP script-src 'self'). On a run page: the log
   level filter (a data-min attribute the stylesheet reads), the "follow" toggle (keeps the
   log scrolled to its end as the server-sent lines arrive), the "live" tag going away
   when the stream ends, a running run's duration ticking, and the Cancel confirmation kept
   open across the header's swaps. */
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

  // The header of a running run: its duration (and a running step's) ticks each second
  // from the server's figure (data-elapsed, seconds when the page or the header was read),
  // counted on this page's clock so a browser whose clock is off still counts right. The
  // stream swaps the whole header when the run moves; a finished run's has no data-elapsed.
  // The units are the page language's (data-units on <html>, from the server's Babel data)
  // and the numbers the browser's Intl in that language: "1,5 s" in French, "1.5秒" in Chinese.
  const lang = document.documentElement.lang || undefined;
  let units = { ms: "{} ms", s: "{} s", min: "{} min", h: "{} h" };
  try { units = Object.assign(units, JSON.parse(document.documentElement.dataset.units || "{}")); }
  catch (err) { /* keep the English units */ }
  const glue = /^zh/.test(lang || "") ? "" : " ";
  const oneDecimal = new Intl.NumberFormat(lang, { minimumFractionDigits: 1, maximumFractionDigits: 1 });
  function unit(name, n) { return units[name].replace("{}", n); }
  function durationText(s) {
    if (s < 1) return unit("ms", Math.round(s * 1000));
    if (s < 120) return unit("s", oneDecimal.format(s));
    if (s < 7200) return unit("min", Math.floor(s / 60)) + glue + unit("s", Math.floor(s % 60));
    return unit("h", Math.floor(s / 3600)) + glue + unit("min", Math.floor((s % 3600) / 60));
  }
  function tick() {
    const now = performance.now();
    document.querySelectorAll("#run-summary [data-elapsed]").forEach(function (el) {
      if (!el.dataset.base) el.dataset.base = String(now);
      const s = parseFloat(el.dataset.elapsed) + (now - parseFloat(el.dataset.base)) / 1000;
      if (!isNaN(s)) el.textContent = durationText(Math.max(0, s));
    });
  }
  setInterval(tick, 1000);

  // "Cancel…" opens a confirmation; a header swapped while it is open keeps it open.
  let cancelOpen = false;
  document.addEventListener("toggle", function (e) {
    if (e.target && e.target.classList && e.target.classList.contains("confirm-cancel")) {
      cancelOpen = e.target.open;
    }
  }, true);
  document.addEventListener("htmx:load", function (e) {
    if (!e.target || e.target.id !== "run-summary") return;
    const box = e.target.querySelector("details.confirm-cancel");
    if (box && cancelOpen && !box.open) box.open = true;
    tick();
  });

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
