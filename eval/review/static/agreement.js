// Agreement page: numbers from /api/agreement, written with textContent.
"use strict";

function cell(tag, text, className) {
  const node = document.createElement(tag);
  node.textContent = text === null || text === undefined ? "—" : String(text);
  if (className) node.className = className;
  return node;
}

const fmt = (x) => (x === null || x === undefined ? "—" : Number(x).toFixed(3));

async function start() {
  const summary = document.getElementById("summary");
  let a;
  try {
    const response = await fetch("/api/agreement");
    a = await response.json();
    if (!response.ok) throw new Error(a.error || response.statusText);
  } catch (err) {
    summary.textContent = `could not load: ${err.message}`;
    return;
  }
  if (a.withheld) {  // before the last label: nothing derived from the judge is sent
    summary.textContent = `${a.annotated} of ${a.total} items annotated; agreement ${a.withheld}.`;
    document.getElementById("kappa").hidden = true;
    document.getElementById("confusion").hidden = true;
    document.getElementById("confusion-title").hidden = true;
    return;
  }
  summary.textContent = `${a.annotated} of ${a.total} items annotated; ${a.n} compared` +
    (a.excluded ? `, ${a.excluded} excluded (judge errors)` : "") + ".";
  const body = document.querySelector("#kappa tbody");
  for (const [name, stats] of [["binary (genuine or not)", a.binary], ["label", a.label]]) {
    const row = document.createElement("tr");
    row.append(cell("td", name), cell("td", stats ? fmt(stats.kappa) : null, "num"),
      cell("td", stats ? fmt(stats.agreement) : null, "num"));
    row.id = name.startsWith("binary") ? "kappa-binary" : "kappa-label";
    body.append(row);
  }
  const labels = a.labels.filter((l) => a.confusion[l] || Object.values(a.confusion).some((r) => r[l]));
  const head = document.createElement("tr");
  head.append(cell("th", "human \\ judge"), ...labels.map((l) => cell("th", l)));
  document.querySelector("#confusion thead").append(head);
  for (const h of labels) {
    const row = document.createElement("tr");
    row.append(cell("th", h), ...labels.map((j) => cell("td", (a.confusion[h] || {})[j] || 0, "num")));
    document.querySelector("#confusion tbody").append(row);
  }
}

start();
