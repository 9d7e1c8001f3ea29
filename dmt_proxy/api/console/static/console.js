// dmt-proxy review console: keys and actions. A client of the JSON review API
// (POST /v1/memories/{id}/review), authenticated by the session cookie and the
// page's CSRF token. No library; memory text is only ever set with textContent.
"use strict";
(function () {
  const csrf = document.querySelector('meta[name="csrf-token"]').content;
  const statusLine = document.getElementById("status");

  function say(text, isError) {
    statusLine.textContent = text;
    statusLine.className = isError ? "error" : "";
  }

  async function review(id, action, extra) {
    const body = Object.assign({ action: action }, extra || {});
    const resp = await fetch("/v1/memories/" + encodeURIComponent(id) + "/review", {
      method: "POST",
      credentials: "same-origin",
      headers: { "content-type": "application/json", "x-csrf-token": csrf },
      body: JSON.stringify(body),
    });
    const data = await resp.json().catch(function () { return {}; });
    if (!resp.ok) {
      const message = data.error && data.error.message ? data.error.message : "HTTP " + resp.status;
      say(action + " failed: " + message, true);
      return null;
    }
    say(action + " stored for " + id + " (" + data.event.before_status + " → " + data.event.after_status + ")", false);
    return data;
  }

  function typing(event) {
    const t = event.target;
    return t && (t.tagName === "INPUT" || t.tagName === "SELECT" || t.tagName === "TEXTAREA");
  }

  function queuePage() {
    const rows = Array.from(document.querySelectorAll("tr.item"));
    let at = 0;
    function select(i) {
      if (!rows.length) return;
      at = Math.max(0, Math.min(rows.length - 1, i));
      rows.forEach(function (r, j) { r.classList.toggle("selected", j === at); });
      rows[at].focus();
      rows[at].scrollIntoView({ block: "nearest" });
    }
    function nextOpen(from) {
      for (let i = from + 1; i < rows.length; i++) if (!rows[i].classList.contains("done")) return i;
      return Math.min(from + 1, rows.length - 1);
    }
    async function act(action, row) {
      const i = rows.indexOf(row);
      const data = await review(row.dataset.id, action);
      if (data) {
        row.classList.add("done");
        row.querySelector(".status").textContent = data.event.after_status;
        select(nextOpen(i));
      }
    }
    rows.forEach(function (row) {
      row.querySelectorAll("button[data-action]").forEach(function (b) {
        b.addEventListener("click", function () { act(b.dataset.action, row); });
      });
    });
    document.addEventListener("keydown", function (event) {
      if (typing(event) || event.ctrlKey || event.metaKey || event.altKey || !rows.length) return;
      const row = rows[at];
      if (event.key === "j" || event.key === "ArrowDown") select(at + 1);
      else if (event.key === "k" || event.key === "ArrowUp") select(at - 1);
      else if (event.key === "n") select(nextOpen(at));
      else if (event.key === "c") act("confirm", row);
      else if (event.key === "x") act("clear", row);
      else if (event.key === "Enter" || event.key === "o") row.querySelector("a.open").click();
      else return;
      event.preventDefault();
    });
    select(0);
  }

  function memoryPage() {
    const section = document.querySelector(".review");
    const id = section.dataset.id;
    async function act(action) {
      if (action === "delete" && !window.confirm("Delete this memory for good?")) return;
      const extra = { reason: document.getElementById("reason").value };
      const domain = document.getElementById("domain").value;
      if (domain) extra.domain = domain;
      const data = await review(id, action, extra);
      if (data) window.location.assign(data.memory ? window.location.pathname : "/console/queue");
    }
    section.querySelectorAll("button[data-action]").forEach(function (b) {
      b.addEventListener("click", function () { act(b.dataset.action); });
    });
    const keys = { c: "confirm", x: "clear", q: "quarantine", r: "release", a: "reaudit" };
    document.addEventListener("keydown", function (event) {
      if (typing(event) || event.ctrlKey || event.metaKey || event.altKey) return;
      if (keys[event.key]) { event.preventDefault(); act(keys[event.key]); }
    });
  }

  const page = document.body.dataset.page;
  if (page === "queue") queuePage();
  if (page === "memory") memoryPage();
})();
