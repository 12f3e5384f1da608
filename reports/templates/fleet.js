// Sortable tables and a filter; offline, no dependencies.
document.querySelectorAll("table.sortable").forEach(function (table) {
  table.querySelectorAll("th.sortable").forEach(function (th, col) {
    th.addEventListener("click", function () {
      var idx = Array.prototype.indexOf.call(th.parentNode.children, th);
      var asc = !th.classList.contains("asc");
      table.querySelectorAll("th").forEach(function (h) { h.classList.remove("asc", "desc"); });
      th.classList.add(asc ? "asc" : "desc");
      var num = th.dataset.type === "num";
      var body = table.tBodies[0];
      var rows = Array.prototype.slice.call(body.rows);
      rows.sort(function (a, b) {
        var x = a.cells[idx], y = b.cells[idx];
        var u = x.dataset.sort !== undefined ? x.dataset.sort : x.textContent.trim();
        var v = y.dataset.sort !== undefined ? y.dataset.sort : y.textContent.trim();
        var r = num ? (parseFloat(u) || 0) - (parseFloat(v) || 0) : u.localeCompare(v);
        return asc ? r : -r;
      });
      var frag = document.createDocumentFragment();
      rows.forEach(function (r) { frag.appendChild(r); });
      body.appendChild(frag);
    });
  });
});
var filter = document.getElementById("filter");
if (filter) {
  filter.addEventListener("input", function () {
    var q = filter.value.toLowerCase();
    document.querySelectorAll("#incidents tbody tr").forEach(function (tr) {
      tr.style.display = tr.textContent.toLowerCase().indexOf(q) >= 0 ? "" : "none";
    });
  });
}
