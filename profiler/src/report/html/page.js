// profiler report: sort the exec table by a clicked header; show an exec's details while a
// row or its bar is hovered, and keep them (pinned) after a click. The page is complete
// without this script.
(function () {
  'use strict';
  const table = document.getElementById('execs');
  const tbody = table.tBodies[0];
  const headers = Array.from(table.tHead.rows[0].cells);

  // Figures are whole numbers up to 2^64: compared as BigInt. A missing figure ("") sorts
  // last in either direction; ties keep the recorded order (by start).
  function compare(a, b, numeric) {
    if (!numeric) return a.localeCompare(b);
    const x = BigInt(a), y = BigInt(b);
    return x < y ? -1 : x > y ? 1 : 0;
  }

  function sortBy(col) {
    const th = headers[col];
    const numeric = th.dataset.type === 'number';
    const now = th.getAttribute('aria-sort');
    // First click: largest figures first, names A to Z; then it toggles.
    const next = now === 'descending' ? 'ascending'
      : now === 'ascending' ? 'descending'
        : numeric ? 'descending' : 'ascending';
    headers.forEach(h => h.setAttribute('aria-sort', 'none'));
    th.setAttribute('aria-sort', next);
    const sign = next === 'ascending' ? 1 : -1;
    const rows = Array.from(tbody.rows);
    rows.sort((ra, rb) => {
      const a = ra.cells[col].dataset.v, b = rb.cells[col].dataset.v;
      if (a === '' || b === '') {
        if (a !== b) return a === '' ? 1 : -1;
      } else {
        const c = sign * compare(a, b, numeric);
        if (c !== 0) return c;
      }
      return Number(ra.dataset.row) - Number(rb.dataset.row);
    });
    tbody.append(...rows);
  }

  headers.forEach((th, col) => {
    th.tabIndex = 0;
    th.addEventListener('click', () => sortBy(col));
    th.addEventListener('keydown', e => {
      if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); sortBy(col); }
    });
  });

  const tip = document.getElementById('tip');
  const marked = row => document.querySelectorAll(
    '#timeline .exec[data-row="' + row + '"], #execs tbody tr[data-row="' + row + '"]');
  // The row whose details a click pinned: they stay, where they are, and take the mouse (so
  // that their links can be followed) until Escape, a click elsewhere or on the same row.
  let pinned = null;

  function place(e) {
    if (pinned !== null) return;
    const pad = 14;
    const r = tip.getBoundingClientRect();
    let x = e.clientX + pad, y = e.clientY + pad;
    if (x + r.width > window.innerWidth) x = Math.max(0, e.clientX - r.width - pad);
    if (y + r.height > window.innerHeight) y = Math.max(0, e.clientY - r.height - pad);
    tip.style.left = x + 'px';
    tip.style.top = y + 'px';
  }

  function show(row, e) {
    if (pinned !== null) return;
    const t = document.getElementById('detail-' + row);
    if (!t) return;
    tip.replaceChildren(t.content.cloneNode(true));
    tip.dataset.row = row;
    tip.hidden = false;
    marked(row).forEach(el => el.classList.add('hl'));
    place(e);
  }

  function hide(row) {
    if (pinned !== null) return;
    tip.hidden = true;
    marked(row).forEach(el => el.classList.remove('hl'));
  }

  function unpin() {
    const row = pinned;
    pinned = null;
    tip.classList.remove('pinned');
    hide(row);
  }

  function pin(row, e) {
    const again = pinned === row;
    if (pinned !== null) unpin();
    if (again) return;
    show(row, e);
    pinned = row;
    tip.classList.add('pinned');
  }

  document.querySelectorAll('#timeline .exec, #execs tbody tr').forEach(el => {
    const row = el.dataset.row;
    el.addEventListener('mouseenter', e => show(row, e));
    el.addEventListener('mousemove', place);
    el.addEventListener('mouseleave', () => hide(row));
    el.addEventListener('click', e => {
      if (e.target.closest('a')) return; // a link in the table: just follow it
      e.stopPropagation();
      pin(row, e);
    });
  });
  document.addEventListener('click', e => {
    if (pinned !== null && !tip.contains(e.target)) unpin();
  });
  document.addEventListener('keydown', e => {
    if (e.key === 'Escape' && pinned !== null) unpin();
  });
})();
