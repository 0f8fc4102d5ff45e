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

  // Times: the server renders <time datetime="...Z">UTC text</time>; here they become the
  // browser's zone, relative where data-rel is set, with the absolute and UTC on hover.
  const rtf = typeof Intl.RelativeTimeFormat === "function"
    ? new Intl.RelativeTimeFormat(document.documentElement.lang || undefined, { numeric: "auto" })
    : null;
  const absFmt = new Intl.DateTimeFormat(document.documentElement.lang || undefined, {
    year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit",
    second: "2-digit", timeZoneName: "short",
  });
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
      const abs = absFmt.format(when);
      el.title = abs + " — " + when.toISOString().replace(".000Z", "Z") + " UTC";
      if (el.hasAttribute("data-rel")) {
        el.textContent = relative(when - Date.now()) || abs;
      } else if (!el.hasAttribute("data-keep")) {
        el.textContent = abs;
      }
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
  // drawn with the vendored uPlot when it is on the page.
  function drawCharts(root) {
    if (typeof uPlot !== "function") return;
    root.querySelectorAll("[data-chart]").forEach(function (el) {
      if (el.dataset.drawn) return;
      el.dataset.drawn = "1";
      let spec;
      try { spec = JSON.parse(el.getAttribute("data-chart")); } catch (err) { return; }
      const colors = ["#0b5cad", "#c62828", "#1a7f37", "#9a6700", "#6e7781"];
      const opts = {
        width: Math.max(280, el.clientWidth || 600), height: 180,
        series: [{}].concat(spec.series.map(function (s, i) {
          return { label: s.label, stroke: colors[i % colors.length], width: 1.5,
                   paths: spec.bars ? uPlot.paths.bars({ size: [0.6, 40] }) : undefined,
                   fill: spec.bars ? colors[i % colors.length] : undefined };
        })),
        axes: [{}, { label: spec.ylabel || "" }],
      };
      new uPlot(opts, [spec.x].concat(spec.series.map(function (s) { return s.values; })), el);
    });
  }

  function decorate(root) { decorateTimes(root); wireConfirms(root); drawCharts(root); }
  document.addEventListener("DOMContentLoaded", function () { decorate(document); });
  document.addEventListener("htmx:afterSettle", function (e) { decorate(e.target || document); });
  setInterval(function () { decorateTimes(document); }, 30000);
  window.cadenza = { decorate: decorate, cookie: cookie };
})();
