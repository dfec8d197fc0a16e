/* The console's own JavaScript: lease countdowns, keyboard shortcuts, bulk selection.
 * Loaded as a static file (strict CSP: no inline scripts, no hx-on). The server renders every
 * value first; this only ticks it between polls. */
(function () {
  "use strict";

  // --- lease countdowns and bars: server gives remaining seconds; we tick them locally ---
  var seen = new WeakMap();

  function leaseText(left, label) {
    if (left >= 0) return left + " s left";
    return "expired " + (-left) + " s ago \u2014 " + (label || "awaiting sweep");
  }

  function tickLeases() {
    var now = performance.now();
    document.querySelectorAll("[data-lease-remaining]").forEach(function (el) {
      var base = parseFloat(el.getAttribute("data-lease-remaining"));
      if (isNaN(base)) return;
      var key = el.getAttribute("data-lease-remaining");
      var entry = seen.get(el);
      if (!entry || entry.key !== key) {
        entry = { key: key, start: now };
        seen.set(el, entry);
      }
      var left = Math.floor(base - (now - entry.start) / 1000);
      var text = el.querySelector("[data-lease-text]") || el;
      text.textContent = leaseText(left, el.getAttribute("data-expired-label"));
      el.classList.toggle("expired", left < 0);
      var bar = el.querySelector("progress");
      if (bar) bar.value = Math.max(left, 0);
    });
  }
  setInterval(tickLeases, 1000);

  // --- keyboard: "/" search, "?" shortcuts, "g d|j|a" go to ---
  function typing(target) {
    if (!target) return false;
    var tag = target.tagName;
    return tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT" || target.isContentEditable;
  }

  function openShortcuts() {
    var dialog = document.getElementById("shortcuts");
    if (dialog && !dialog.open) dialog.showModal();
  }

  var pendingG = false;
  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    if (typing(event.target)) {
      if (event.key === "Escape") event.target.blur();
      return;
    }
    if (event.key === "/") {
      var search = document.querySelector("[data-search]");
      if (search) {
        event.preventDefault();
        search.focus();
        if (search.select) search.select();
      }
      return;
    }
    if (event.key === "?") {
      event.preventDefault();
      openShortcuts();
      return;
    }
    if (pendingG) {
      pendingG = false;
      // base.html puts each target on <body> as data-go-<key> (URLs come from {% url %}).
      var to = /^[a-z]$/.test(event.key) && document.body.getAttribute("data-go-" + event.key);
      if (to) window.location.assign(to);
      return;
    }
    if (event.key === "g") {
      pendingG = true;
      setTimeout(function () { pendingG = false; }, 1200);
    }
  });

  document.addEventListener("click", function (event) {
    var opener = event.target.closest("[data-open-shortcuts]");
    if (opener) openShortcuts();
  });

  // --- bulk selection: the header checkbox toggles every row checkbox of its form ---
  document.addEventListener("change", function (event) {
    var all = event.target.closest("[data-select-all]");
    if (!all) return;
    var scope = document.getElementById(all.getAttribute("data-select-all")) || document;
    scope.querySelectorAll("input[name='job_ids']").forEach(function (box) {
      box.checked = all.checked;
    });
  });

  // --- polling: skip [data-poll] requests while the tab is hidden (no eval'd trigger filters
  // under our CSP), and catch up as soon as it is visible again ---
  document.addEventListener("htmx:beforeRequest", function (event) {
    var elt = event.detail && event.detail.elt;
    if (elt && elt.hasAttribute("data-poll") && document.visibilityState !== "visible") {
      event.preventDefault();
    }
  });
  document.addEventListener("visibilitychange", function () {
    if (document.visibilityState !== "visible" || !window.htmx) return;
    document.querySelectorAll("[data-poll][hx-get]").forEach(function (el) {
      window.htmx.ajax("GET", el.getAttribute("hx-get"), { source: el, target: el, swap: "outerHTML" });
    });
  });

  // --- filter forms: leave empty fields out of the request, so the pushed URL stays short ---
  document.addEventListener("htmx:configRequest", function (event) {
    var elt = event.detail && event.detail.elt;
    if (!elt || !elt.closest || !elt.closest("[data-drop-empty]")) return;
    var params = event.detail.parameters;
    var empty = [];
    if (params && typeof params.entries === "function") {
      for (var pair of params.entries()) if (pair[1] === "") empty.push(pair[0]);
      empty.forEach(function (name) { params.delete(name); });
    }
  });

  document.addEventListener("DOMContentLoaded", tickLeases);
  document.body && document.body.addEventListener("htmx:afterSwap", tickLeases);
})();
