// Live parts of the console; every page reads fine without this file.
// Text from the server arrives either as JSON set with textContent, or as
// HTML the server rendered with the same escaping templates as its pages.
"use strict";
(function () {
  if (!window.EventSource) {
    return;
  }
  const tail = document.querySelector("tbody[data-audit-tail]");
  if (tail) {
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
  }
  const feed = document.querySelector("[data-chat-feed]");
  if (feed) {
    const source = new EventSource(feed.getAttribute("data-chat-feed"));
    source.addEventListener("item", function (e) {
      const item = JSON.parse(e.data);
      const template = document.createElement("template");
      template.innerHTML = item.html;
      const node = template.content.firstElementChild;
      if (!node) {
        return;
      }
      const old = document.getElementById(node.id);
      if (old) {
        // Keep a tool card open or closed as the reader left it.
        if (old.tagName === "DETAILS" && node.tagName === "DETAILS") {
          node.open = old.open;
        }
        old.replaceWith(node);
      } else {
        feed.appendChild(node);
      }
    });
    source.addEventListener("end", function () {
      source.close();
      for (const node of document.querySelectorAll("[data-while-running]")) {
        node.remove();
      }
      for (const button of document.querySelectorAll("[data-enable-when-ended]")) {
        button.disabled = false;
      }
    });
  }
})();
