/* The console's own JavaScript: countdowns and ages, live rows, error messages in place,
 * keyboard shortcuts, bulk selection and the jobs list's column chooser.
 * Loaded as a static file (strict CSP: no inline scripts, no hx-on, no eval). The server
 * renders every value first; this only ticks it between polls and keeps pages usable when a
 * request fails. */
(function () {
  "use strict";

  // --- lease countdowns and bars: server gives remaining seconds; we tick them locally ---
  var seen = new WeakMap();

  function leaseText(left, label) {
    if (left >= 0) return left + " s left";
    return "expired " + (-left) + " s ago \u2014 " + (label || "awaiting sweep");
  }

  function elapsed(el, attr, now) {
    var key = el.getAttribute(attr);
    var entry = seen.get(el);
    if (!entry || entry.key !== key || entry.attr !== attr) {
      entry = { key: key, attr: attr, start: now };
      seen.set(el, entry);
    }
    return (now - entry.start) / 1000;
  }

  function tickLeases() {
    var now = performance.now();
    document.querySelectorAll("[data-lease-remaining]").forEach(function (el) {
      var base = parseFloat(el.getAttribute("data-lease-remaining"));
      if (isNaN(base)) return;
      var left = Math.floor(base - elapsed(el, "data-lease-remaining", now));
      var text = el.querySelector("[data-lease-text]") || el;
      text.textContent = leaseText(left, el.getAttribute("data-expired-label"));
      el.classList.toggle("expired", left < 0);
      var bar = el.querySelector("progress");
      if (bar) bar.value = Math.max(left, 0);
    });
  }

  // --- relative ages ("3 min ago"): the server's words, advanced locally ---
  // Same words as console_tags.age_words.
  function ageWords(seconds) {
    seconds = Math.max(Math.floor(seconds), 0);
    if (seconds < 60) return seconds + " s ago";
    var minutes = Math.floor(seconds / 60);
    if (minutes < 60) return minutes + " min ago";
    var hours = Math.floor(minutes / 60);
    if (hours < 48) return hours + " h " + (minutes % 60) + " min ago";
    return Math.floor(hours / 24) + " days ago";
  }

  function tickAges() {
    var now = performance.now();
    document.querySelectorAll("[data-age]").forEach(function (el) {
      var base = parseFloat(el.getAttribute("data-age"));
      if (isNaN(base)) return;
      el.textContent = ageWords(base + elapsed(el, "data-age", now));
    });
  }

  function tick() {
    tickLeases();
    tickAges();
  }
  setInterval(tick, 1000);

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

  // --- bulk selection: the header checkbox toggles every row checkbox of its list ---
  document.addEventListener("change", function (event) {
    var all = event.target.closest("[data-select-all]");
    if (!all) return;
    var scope = document.getElementById(all.getAttribute("data-select-all")) || document;
    var name = all.getAttribute("data-select-name") || "job_ids";
    scope.querySelectorAll("input[name='" + name + "']").forEach(function (box) {
      box.checked = all.checked;
    });
  });

  // --- polling: skip [data-poll] requests while the tab is hidden (no eval'd trigger filters
  // under our CSP), and catch up as soon as it is visible again ---
  // A poll also waits while someone types a reason, in its region or anywhere on the page, so
  // a refresh never takes the words or the focus away.
  function typingReason(region) {
    var active = document.activeElement;
    if (active && active.name === "reason" && active.value) return true;
    var fields = region.querySelectorAll ? region.querySelectorAll("input[name=reason]") : [];
    for (var i = 0; i < fields.length; i++) if (fields[i].value) return true;
    return false;
  }

  document.addEventListener("htmx:beforeRequest", function (event) {
    var elt = event.detail && event.detail.elt;
    if (!elt || !elt.hasAttribute("data-poll")) return;
    if (document.visibilityState !== "visible" || typingReason(elt)) event.preventDefault();
  });
  document.addEventListener("visibilitychange", function () {
    if (document.visibilityState !== "visible" || !window.htmx) return;
    document.querySelectorAll("[data-poll][hx-get]").forEach(function (el) {
      window.htmx.ajax("GET", el.getAttribute("hx-get"), {
        source: el, target: el, swap: el.getAttribute("hx-swap") || "outerHTML"
      });
    });
  });

  // --- requests: a poller says which version it shows (the server answers 204 when nothing
  // changed); filter forms leave empty fields out, so the pushed URL stays short ---
  document.addEventListener("htmx:configRequest", function (event) {
    var elt = event.detail && event.detail.elt;
    if (!elt || !elt.closest) return;
    var params = event.detail.parameters;
    var version = elt.getAttribute("data-v");
    if (version !== null && elt.hasAttribute("data-poll") && params && params.set) {
      params.set("v", version);
    }
    if (!elt.closest("[data-drop-empty]")) return;
    var empty = [];
    if (params && typeof params.entries === "function") {
      for (var pair of params.entries()) if (pair[1] === "") empty.push(pair[0]);
      empty.forEach(function (name) { params.delete(name); });
    }
  });

  // --- live rows: a changed list re-renders, but only rows whose version changed are
  // replaced; the others keep their DOM (ticked checkboxes, focus, hover) ---
  function mergeRows(tbody, html) {
    var tpl = document.createElement("template");
    tpl.innerHTML = "<table>" + html + "</table>";
    var fresh = tpl.content.querySelector("tbody");
    if (!fresh) return;
    tbody.setAttribute("data-v", fresh.getAttribute("data-v") || "");
    var old = {};
    Array.prototype.forEach.call(tbody.children, function (row) {
      if (row.id) old[row.id] = row;
    });
    var order = [];
    Array.prototype.slice.call(fresh.children).forEach(function (row) {
      var prev = row.id && old[row.id];
      if (prev) delete old[row.id];
      if (prev && prev.getAttribute("data-v") === row.getAttribute("data-v")) {
        order.push(prev);
        return;
      }
      if (prev) {
        var was = prev.querySelector("input[type=checkbox]");
        var now = row.querySelector("input[type=checkbox]");
        if (was && now) now.checked = was.checked;
        row.classList.add("changed");
        prev.remove();
      }
      order.push(row);
    });
    Object.keys(old).forEach(function (id) { old[id].remove(); });
    order.forEach(function (row) {
      tbody.appendChild(row);
      if (window.htmx) window.htmx.process(row);
    });
    tick();
  }

  // --- typed reasons survive a region refresh (a poll that swaps an action form) ---
  var typed = {};
  document.addEventListener("htmx:oobBeforeSwap", function (event) {
    var target = event.detail && event.detail.target;
    if (!target || !target.querySelectorAll) return;
    target.querySelectorAll("input[name=reason][id]").forEach(function (input) {
      if (input.value) typed[input.id] = input.value;
    });
  });
  document.addEventListener("htmx:oobAfterSwap", function () {
    Object.keys(typed).forEach(function (id) {
      var input = document.getElementById(id);
      if (input && !input.value) input.value = typed[id];
    });
    typed = {};
  });

  // --- confirmations: a form posts through htmx; each submit button may ask its own question
  // (data-confirm), since the form, not the button, carries hx-post (so `required` works) ---
  document.addEventListener("htmx:confirm", function (event) {
    var trigger = event.detail && event.detail.triggeringEvent;
    var submitter = trigger && trigger.submitter;
    var question = submitter && submitter.getAttribute("data-confirm");
    if (!question) return;
    event.preventDefault();
    if (window.confirm(question)) event.detail.issueRequest(true);
  });

  // --- errors in place: a failed request never blanks the page; its region says what
  // happened and the page stays as it was ---
  function errorWords(status) {
    if (status === 0) return "The console did not answer (network error). Nothing is known to " +
      "have changed; check your connection and try again.";
    if (status === 404) return "Not found (404): this item no longer exists. Reload the page.";
    if (status === 429 || status === 503) return "The console is busy (" + status + "). " +
      "Nothing was done; try again in a moment.";
    if (status >= 500) return "The server failed (" + status + "). Your action may not have " +
      "been done: reload the page to see the current state before trying again.";
    return "The request was refused (" + status + "). Reload the page and try again.";
  }

  // Where a request's error is shown: its form, else the region it targets (a table's rows
  // get the note above the table).
  function errorHost(detail) {
    var elt = detail.elt;
    if (!elt || !elt.closest) return null;
    var host = elt.closest("form") || detail.target || elt;
    if (host.tagName === "TBODY" || host.tagName === "TR") host = host.closest("table") || host;
    return host;
  }

  function showError(event, status) {
    var host = errorHost(event.detail || {});
    if (!host || !host.parentNode) return;
    var note = host.consoleError;
    if (!note || !note.isConnected) {
      note = document.createElement("p");
      note.setAttribute("data-client-error", "");
      note.setAttribute("role", "alert");
      note.className = "flash flash-error";
      if (host.tagName === "TABLE") host.parentNode.insertBefore(note, host);
      else host.insertBefore(note, host.firstChild);
      host.consoleError = note;
    }
    note.textContent = errorWords(status);
  }

  document.addEventListener("htmx:responseError", function (event) {
    var xhr = event.detail && event.detail.xhr;
    showError(event, xhr ? xhr.status : 0);
  });
  document.addEventListener("htmx:sendError", function (event) { showError(event, 0); });
  // The next answer from the same place clears the note (a poller that recovers, a retry).
  document.addEventListener("htmx:afterRequest", function (event) {
    var xhr = event.detail && event.detail.xhr;
    var status = xhr ? xhr.status : 0;
    // Answers the region shows itself: success, and the refusals it renders (400/403/409).
    var shown = (status >= 200 && status < 400) || [400, 403, 409].indexOf(status) !== -1;
    if (!shown) return;
    var host = errorHost(event.detail);
    if (host && host.consoleError) {
      host.consoleError.remove();
      host.consoleError = null;
    }
  });

  document.addEventListener("htmx:beforeSwap", function (event) {
    var target = event.detail && event.detail.target;
    if (!target || !target.hasAttribute || !target.hasAttribute("data-live-rows")) return;
    if (!event.detail.shouldSwap) return;
    event.detail.shouldSwap = false;
    mergeRows(target, event.detail.serverResponse);
  });

  // --- the jobs list's column chooser: optional columns, remembered in this browser ---
  var COLUMNS_KEY = "console:job-columns";

  function chosenColumns() {
    try {
      return JSON.parse(window.localStorage.getItem(COLUMNS_KEY) || "[]");
    } catch (e) {
      return [];
    }
  }

  function applyColumns() {
    var chosen = chosenColumns();
    document.querySelectorAll("[data-columns]").forEach(function (table) {
      Array.prototype.slice.call(table.classList).forEach(function (name) {
        if (name.indexOf("show-") === 0) table.classList.remove(name);
      });
      chosen.forEach(function (name) { table.classList.add("show-" + name); });
    });
    document.querySelectorAll("[data-column-choice]").forEach(function (box) {
      box.checked = chosen.indexOf(box.getAttribute("data-column-choice")) !== -1;
    });
  }

  document.addEventListener("change", function (event) {
    var box = event.target.closest && event.target.closest("[data-column-choice]");
    if (!box) return;
    var name = box.getAttribute("data-column-choice");
    var chosen = chosenColumns().filter(function (n) { return n !== name; });
    if (box.checked) chosen.push(name);
    try {
      window.localStorage.setItem(COLUMNS_KEY, JSON.stringify(chosen));
    } catch (e) { /* private mode: the choice lasts for this page only */ }
    applyColumns();
  });

  function refresh() {
    tick();
    applyColumns();
  }

  document.addEventListener("DOMContentLoaded", refresh);
  document.body && document.body.addEventListener("htmx:afterSwap", refresh);
  document.body && document.body.addEventListener("htmx:oobAfterSwap", tick);
})();
