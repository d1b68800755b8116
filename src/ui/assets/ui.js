// kubectl hossted ui: live updates. The server sends a generation number
// on /events whenever a watched HelmApp or HelmAppSet changes; the page
// then fetches its own <main> again and swaps it in — no reload, focus and
// the filter form kept. One fetch at a time; changes during a fetch make
// one more.
(function () {
  "use strict";
  var main = document.getElementById("main");
  var live = document.getElementById("live");
  if (!main || !window.EventSource) return;
  var busy = false, again = false;

  function say(state, text) {
    live.dataset.live = state;
    live.textContent = text;
  }

  async function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    try {
      do {
        again = false;
        var r = await fetch(location.pathname + location.search, {
          headers: { "X-Fragment": "1" }, credentials: "same-origin", cache: "no-store"
        });
        if (!r.ok) { say("error", "update failed: HTTP " + r.status); break; }
        var html = await r.text();
        main.innerHTML = html;
        main.dataset.generation = r.headers.get("X-Generation") || main.dataset.generation;
        document.dispatchEvent(new CustomEvent("hossted:updated"));
      } while (again);
    } catch (e) {
      say("error", "update failed");
    }
    busy = false;
  }

  // A page about one object asks only for the changes that touch it.
  var watch = main.dataset.watch;
  var es = new EventSource(watch ? "/events?watch=" + encodeURIComponent(watch) : "/events");
  es.addEventListener("open", function () { say("live", "live"); });
  es.addEventListener("error", function () { say("reconnecting", "reconnecting…"); });
  es.addEventListener("message", function (e) {
    if (Number(e.data) > Number(main.dataset.generation)) refresh();
  });
})();

// A container's logs: new lines appended as text as they come.
(function () {
  "use strict";
  var log = document.getElementById("log");
  if (!log || !log.dataset.logStream || !window.EventSource) return;
  var es = new EventSource(log.dataset.logStream);
  es.addEventListener("message", function (e) {
    log.appendChild(document.createTextNode(e.data + "\n"));
  });
})();
