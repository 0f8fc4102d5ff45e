/* /api/docs (templates/ui/api_docs.html): Swagger UI (static/vendor) drawn from the
   server's own /api/openapi.json; no inline script (CSP), nothing from another host. */
(function () {
  "use strict";

  function cookie(name) {
    const found = document.cookie.split("; ").find(function (c) {
      return c.indexOf(name + "=") === 0;
    });
    return found ? decodeURIComponent(found.slice(name.length + 1)) : "";
  }

  document.addEventListener("DOMContentLoaded", function () {
    const root = document.getElementById("swagger-ui");
    if (!root || !window.SwaggerUIBundle) return;
    window.SwaggerUIBundle({
      url: root.dataset.spec,
      dom_id: "#swagger-ui",
      deepLinking: true,
      presets: [window.SwaggerUIBundle.presets.apis],
      layout: "BaseLayout",
      validatorUrl: null,  // the badge would ask another host
      withCredentials: true,
      // "Try it out" with the page's session: a state-changing request needs the CSRF
      // token that the login set in the cadenza_csrf cookie (as static/cadenza.js does).
      requestInterceptor: function (req) {
        if (req.method && req.method.toUpperCase() !== "GET") {
          const token = cookie("cadenza_csrf");
          if (token) req.headers["X-CSRF-Token"] = token;
        }
        return req;
      },
    });
  });
})();
