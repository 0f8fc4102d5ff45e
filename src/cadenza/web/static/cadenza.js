/* Cadenza's page script: loaded with `defer`, no inline script anywhere (CSP script-src
   'self'). It only decorates what the server rendered: the CSRF header on htmx requests,
   times in the browser's zone, typed-name confirmations, charts. */
(function () {
  "use strict";

  function cookie(name) {
    const found = document.cookie.split("; ").find((c) => c.startsWith(name + "="));
    return found ? decodeURIComponent(found.slice(name.length + 1)) : "";
  }

  // Every state-changing htmx request carries the session's CSRF token, read from the
  // cadenza_csrf cookie that the login set (never written into the page itself).
  document.addEventListener("htmx:configRequest", function (e) {
    const token = cookie("cadenza_csrf");
    if (token) e.detail.headers["X-CSRF-Token"] = token;
  });

  // Times, one style on every page: the browser's zone, 24-hour and ISO-like
  // (2026-12-04 20:22, seconds where the element asks for them with data-seconds), the
  // exact local time and the UTC instant on hover. The server renders
  // <time datetime="...Z">UTC text</time> (what shows without script); data-rel makes it
  // relative ("3 min ago"), data-keep leaves its text alone (the log's clock times). An
  // element with data-when="...Z" and a title naming that instant in UTC (the runs strip's
  // squares) gets the local time put before the UTC one in its title.
  const rtf = typeof Intl.RelativeTimeFormat === "function"
    ? new Intl.RelativeTimeFormat(document.documentElement.lang || undefined, { numeric: "auto" })
    : null;
  const zoneName = (function () {
    try { return Intl.DateTimeFormat().resolvedOptions().timeZone || ""; } catch (err) { return ""; }
  })();
  function pad(n) { return (n < 10 ? "0" : "") + n; }
  function localText(when, seconds) {
    const day = when.getFullYear() + "-" + pad(when.getMonth() + 1) + "-" + pad(when.getDate());
    return day + " " + pad(when.getHours()) + ":" + pad(when.getMinutes())
      + (seconds ? ":" + pad(when.getSeconds()) : "");
  }
  function utcText(when) {
    return when.toISOString().slice(0, 19).replace("T", " ") + " UTC";
  }
  function hoverText(when) {
    return localText(when, true) + (zoneName ? " (" + zoneName + ")" : "") + " — " + utcText(when);
  }
  function relative(ms) {
    const s = Math.round(ms / 1000), a = Math.abs(s);
    if (!rtf) return null;
    if (a < 45) return rtf.format(s, "second");
    if (a < 2700) return rtf.format(Math.round(s / 60), "minute");
    if (a < 79200) return rtf.format(Math.round(s / 3600), "hour");
    if (a < 2592000) return rtf.format(Math.round(s / 86400), "day");
    return null;
  }
  function decorateTimes(root) {
    root.querySelectorAll("time[datetime]").forEach(function (el) {
      const when = new Date(el.getAttribute("datetime"));
      if (isNaN(when)) return;
      el.title = hoverText(when);
      if (el.hasAttribute("data-keep")) return;
      const abs = localText(when, el.hasAttribute("data-seconds"));
      el.textContent = el.hasAttribute("data-rel") ? relative(when - Date.now()) || abs : abs;
    });
    root.querySelectorAll("[data-when][title]:not([data-when-done])").forEach(function (el) {
      const when = new Date(el.getAttribute("data-when"));
      if (isNaN(when)) return;
      el.setAttribute("data-when-done", "1");
      el.title = el.title.replace(utcText(when), localText(when, true) + " — " + utcText(when));
    });
  }

  // Destructive actions ask for the object's name: a button with data-confirm-input="ID"
  // stays disabled until the input with that id holds the value of data-confirm-value.
  function wireConfirms(root) {
    root.querySelectorAll("[data-confirm-input]").forEach(function (btn) {
      const input = document.getElementById(btn.getAttribute("data-confirm-input"));
      if (!input || input.dataset.wired) return;
      input.dataset.wired = "1";
      const want = btn.getAttribute("data-confirm-value");
      const check = function () { btn.disabled = input.value.trim() !== want; };
      input.addEventListener("input", check);
      check();
    });
  }

  // Charts: <div class="chart" data-chart='{"x":[unix s...],"series":[{"label":..,"values":[..]}]}'>
  // drawn with the vendored uPlot when it is on the page, in the one style of the pages:
  // the browser's zone, 24-hour dates on the time axis and in the legend (never
  // 12/4/26 8:14pm), numbers as numbers (never a legend of --), no legend for a single
  // series, and a series named for a run state in that state's colour (the badges' CSS
  // variables: succeeded is green here as everywhere). The legend's time goes without
  // uPlot's English "Time" label (cadenza.css hides it). The x axis's last labels are kept in
  // data-x-labels (what the axis shows, for tests and for reading the chart as text).
  const palette = ["--s-running", "--s-needs-review", "--s-canceled", "--s-missed", "--s-queued"];
  function cssVar(name) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  }
  function seriesColor(s, i) {
    const state = String(s.state || s.label || "").toLowerCase().replace(/[ _]/g, "-");
    return (state && cssVar("--s-" + state)) || cssVar(palette[i % palette.length]) || "#0b5cad";
  }
  const numFmt = new Intl.NumberFormat(document.documentElement.lang || undefined,
                                       { maximumFractionDigits: 3 });
  // A chart's x values are unix seconds; all on UTC midnights they are days (one bucket per
  // UTC day) and read as dates of their own, not shifted into the browser's zone.
  function timeLabel(ts, days, withClock) {
    const when = new Date(ts * 1000);
    if (days) return when.toISOString().slice(0, 10);
    return withClock === false ? localText(when, false).slice(0, 10) : localText(when, false);
  }
  function axisTimes(el, days, splits, incr) {
    let lastDay = null;
    const labels = splits.map(function (ts) {
      if (ts == null) return "";
      if (days || incr >= 86400) return timeLabel(ts, days, false);
      // seconds when the ticks are less than a minute apart (runs started seconds apart)
      const text = localText(new Date(ts * 1000), incr < 60);
      const day = text.slice(0, 10), clock = text.slice(11);
      const label = day !== lastDay ? clock + "\n" + day : clock;
      lastDay = day;
      return label;
    });
    el.setAttribute("data-x-labels", labels.join(" | ").replace(/\n/g, " "));
    return labels;
  }
  function drawCharts(root) {
    if (typeof uPlot !== "function") return;
    root.querySelectorAll("[data-chart]").forEach(function (el) {
      if (el.dataset.drawn) return;
      el.dataset.drawn = "1";
      let spec;
      try { spec = JSON.parse(el.getAttribute("data-chart")); } catch (err) { return; }
      const many = spec.series.length > 1;
      const days = spec.x.length > 0 && spec.x.every(function (x) { return x % 86400 === 0; });
      const opts = {
        width: Math.max(280, el.clientWidth || 600), height: 180,
        legend: { show: many },
        series: [{ value: function (u, ts) { return ts == null ? "" : timeLabel(ts, days); } }]
          .concat(spec.series.map(function (s, i) {
            const color = seriesColor(s, i);
            return { label: s.label, stroke: color, width: 1.5,
                     value: function (u, v) { return v == null ? "" : numFmt.format(v); },
                     paths: spec.bars ? uPlot.paths.bars({ size: [0.6, 40] }) : undefined,
                     fill: spec.bars ? color : undefined };
          })),
        axes: [{ values: function (u, splits, axis, space, incr) {
                   return axisTimes(el, days, splits, incr);
                 } },
               { label: spec.ylabel || "",
                 values: function (u, splits) {
                   return splits.map(function (v) { return v == null ? "" : numFmt.format(v); });
                 } }],
      };
      new uPlot(opts, [spec.x].concat(spec.series.map(function (s) { return s.values; })), el);
    });
  }

  function decorate(root) { decorateTimes(root); wireConfirms(root); drawCharts(root); }
  document.addEventListener("DOMContentLoaded", function () { decorate(document); });
  // htmx:load fires on every element htmx puts in the page, out-of-band swaps included
  // (the delivery log after "Send test"), so swapped content is dressed as the page was.
  document.addEventListener("htmx:load", function (e) { decorate(e.target || document); });
  setInterval(function () { decorateTimes(document); }, 30000);
  window.cadenza = { decorate: decorate, cookie: cookie, localText: localText, utcText: utcText };
})();
