// Live parts of the console; every page reads fine without this file.
// Text from the server is set with textContent, never as HTML.
"use strict";
(function () {
  const tail = document.querySelector("tbody[data-audit-tail]");
  if (!tail || !window.EventSource) {
    return;
  }
  const source = new EventSource(tail.getAttribute("data-audit-tail"));
  source.addEventListener("audit", function (e) {
    const row = JSON.parse(e.data);
    const tr = document.createElement("tr");
    for (const value of [row.when, row.actor, row.workspace || "", row.kind, row.detail]) {
      const td = document.createElement("td");
      td.textContent = value;
      tr.appendChild(td);
    }
    tail.insertBefore(tr, tail.firstChild);
  });
})();
