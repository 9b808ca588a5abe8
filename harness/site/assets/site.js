// Filter and sort every table marked data-filterable: a text box above it hides the rows that do not contain
// its text (every word, in any column); a click on a header sorts by that column (numbers as numbers).
"use strict";
(function () {
  function cellValue(row, index) {
    const text = row.cells[index] ? row.cells[index].textContent.trim() : "";
    const number = parseFloat(text.replace(/[^0-9eE+.\-]/g, ""));
    return { text: text, number: /^[+\-]?[0-9.]/.test(text) && !isNaN(number) ? number : null };
  }
  function sortBy(table, index) {
    const body = table.tBodies[0];
    const rows = Array.from(body.rows);
    const ascending = table.dataset.sortColumn !== String(index) || table.dataset.sortOrder !== "asc";
    rows.sort(function (a, b) {
      const x = cellValue(a, index), y = cellValue(b, index);
      const order = x.number !== null && y.number !== null ? x.number - y.number : x.text.localeCompare(y.text);
      return ascending ? order : -order;
    });
    rows.forEach(function (row) { body.appendChild(row); });
    table.dataset.sortColumn = String(index);
    table.dataset.sortOrder = ascending ? "asc" : "desc";
  }
  function filter(table, query) {
    const words = query.toLowerCase().split(/\s+/).filter(Boolean);
    let shown = 0;
    Array.from(table.tBodies[0].rows).forEach(function (row) {
      const text = row.textContent.toLowerCase();
      const keep = words.every(function (word) { return text.indexOf(word) >= 0; });
      row.hidden = !keep;
      shown += keep ? 1 : 0;
    });
    const count = document.getElementById(table.id + "-shown");
    if (count) { count.textContent = shown + " of " + table.tBodies[0].rows.length; }
  }
  document.querySelectorAll("table[data-filterable]").forEach(function (table) {
    const box = document.createElement("input");
    box.className = "filter";
    box.type = "search";
    box.placeholder = "filter rows (words, any column)";
    box.addEventListener("input", function () { filter(table, box.value); });
    table.parentNode.insertBefore(box, table);
    Array.from(table.tHead.rows[0].cells).forEach(function (th, index) {
      th.title = "sort";
      th.addEventListener("click", function () { sortBy(table, index); });
    });
  });
})();
