// Sort a table by a column when its header is clicked (again: the other way); filter long
// tables by the words typed above them. Written by hand: a few lines, no library, no network.
(function () {
  "use strict";
  var SCALE = {ns: 1e-9, "µs": 1e-6, ms: 1e-3, s: 1, B: 1, KiB: 1024, MiB: 1048576, GiB: 1073741824, TiB: 1099511627776};
  function key(text) {  // numbers (with their unit) before text; "–" (missing) sorts as text, last
    var t = text.trim(), m = t.replace(/,/g, "").match(/^[+-]?\d+(\.\d+)?(e[+-]?\d+)?/i);
    if (!m) return [1, t.toLowerCase()];
    var unit = t.replace(/,/g, "").slice(m[0].length).trim().split(/[ \/(]/)[0];
    return [0, parseFloat(m[0]) * (SCALE[unit] || 1)];
  }
  function compare(a, b) { return a[0] - b[0] || (a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0); }
  Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), function (table) {
    var heads = table.tHead ? table.tHead.rows[0].cells : [];
    Array.prototype.forEach.call(heads, function (th, column) {
      th.tabIndex = 0;
      th.title = "sort by " + th.textContent;
      function sort() {
        var ascending = th.getAttribute("aria-sort") !== "ascending";
        Array.prototype.forEach.call(heads, function (h) { h.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
        var body = table.tBodies[0];
        var keyed = Array.prototype.map.call(body.rows, function (row, i) {
          return [key(row.cells[column] ? row.cells[column].textContent : ""), i, row];
        });
        keyed.sort(function (a, b) { return (ascending ? 1 : -1) * compare(a[0], b[0]) || a[1] - b[1]; });
        keyed.forEach(function (k) { body.appendChild(k[2]); });
      }
      th.addEventListener("click", sort);
      th.addEventListener("keydown", function (e) {
        if (e.key === "Enter" || e.key === " ") { e.preventDefault(); sort(); }
      });
    });
  });
  Array.prototype.forEach.call(document.querySelectorAll("input.filter"), function (input) {
    var table = document.getElementById(input.getAttribute("data-table"));
    input.addEventListener("input", function () {
      var words = input.value.toLowerCase().split(/\s+/).filter(Boolean);
      Array.prototype.forEach.call(table.tBodies[0].rows, function (row) {
        var text = row.textContent.toLowerCase();
        row.hidden = !words.every(function (w) { return text.indexOf(w) >= 0; });
      });
    });
  });
})();
