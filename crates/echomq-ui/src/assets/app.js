// The dashboard's page script: the live feed (SSE) and in-place refresh.
// It never builds markup from data: feed lines are set as text, and a
// refresh swaps in HTML the server rendered (and escaped).
'use strict';
(function () {
  const main = document.getElementById('main');
  const feed = document.getElementById('feed');
  const status = document.getElementById('live-status');
  if (!main || !feed) return;
  const queue = document.body.dataset.queue || '';
  // One refresh at a time; a request made meanwhile runs once it is done,
  // so an older answer never lands after a newer one.
  let pending = null;
  let inflight = false;
  let again = false;

  async function load() {
    if (inflight) { again = true; return; }
    inflight = true;
    try {
      // Never swap a form the user is filling in.
      if (main.querySelector('form:focus-within, form.confirm')) return;
      const r = await fetch(location.href, { headers: { 'x-fragment': '1' }, credentials: 'same-origin' });
      if (r.ok && r.headers.get('x-fragment') === '1') main.innerHTML = await r.text();
    } catch (_) {
      /* the next event or tick tries again */
    } finally {
      inflight = false;
      if (again) { again = false; refresh(); }
    }
  }

  function refresh() {
    if (pending) return;
    pending = setTimeout(function () { pending = null; load(); }, 250);
  }

  function line(e) {
    const li = document.createElement('li');
    li.className = 'ev ev-' + String(e.event).replace(/[^a-z-]/g, '');
    const when = new Date().toLocaleTimeString();
    let text = when + ' ' + e.queue + ' ' + e.event;
    if (e.job_id) text += ' #' + e.job_id;
    if (e.detail) text += ' — ' + e.detail;
    li.textContent = text;
    if (e.job_id) li.dataset.job = e.job_id;
    li.dataset.event = e.event;
    feed.prepend(li);
    while (feed.children.length > 200) feed.lastChild.remove();
  }

  const url = '/events' + (queue ? '?queue=' + encodeURIComponent(queue) : '');
  const source = new EventSource(url);
  source.addEventListener('ready', function () {
    status.textContent = 'live';
    status.className = 'status live';
    // Whatever happened before the feed connected is on the page after this.
    refresh();
  });
  source.onmessage = function (m) {
    let e;
    try { e = JSON.parse(m.data); } catch (_) { return; }
    line(e);
    refresh();
  };
  source.onerror = function () {
    status.textContent = 'reconnecting…';
    status.className = 'status down';
  };
  if (document.querySelector('[data-poll]')) setInterval(refresh, 5000);
})();
