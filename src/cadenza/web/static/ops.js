/* The operations pages' script (admin): a form marked data-reset empties itself once
   its htmx request succeeded, so a name just used is not sent twice. No inline script
   anywhere (CSP script-src 'self'). */
(function () {
  "use strict";
  document.addEventListener("htmx:afterRequest", function (e) {
    const form = e.detail && e.detail.elt;
    if (form && form.tagName === "FORM" && form.hasAttribute("data-reset") && e.detail.successful) {
      form.reset();
    }
  });
})();
