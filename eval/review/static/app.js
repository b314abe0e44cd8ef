// fic review: one item at a time. Model text is only ever written with textContent (never innerHTML).
"use strict";

const state = { total: 0, index: 0, item: null, labels: [] };
const $ = (id) => document.getElementById(id);

function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (className) node.className = className;
  return node;
}

async function api(path, options) {
  const response = await fetch(path, options);
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

function setStatus(text, isError) {
  $("status").textContent = text;
  $("status").className = isError ? "error" : "";
}

// The estimate arrives only once every item of the session is labelled (the server withholds it before); a pooled
// session never shows one (each folder's is in `fic rates DIR`).
function describe(estimate) {
  const c = estimate.calibrated;
  const f = (x) => x.toFixed(3);
  return `calibrated rate ${f(c.rate)} [${f(c.low)}, ${f(c.high)}], width ${f(c.width)}` +
    ` (labels alone: ${f(estimate.labels_only.width)})`;
}

function showProgress(done, estimate) {
  let text = `${done} / ${state.total} annotated`;
  if (estimate) text += ` · ${describe(estimate)}`;
  $("progress").textContent = text;
}

function buildLabels() {
  const box = $("labels");
  state.labels.forEach((label, i) => {
    const row = el("label");
    const input = document.createElement("input");
    input.type = "radio";
    input.name = "label";
    input.value = label.name;
    input.id = `label-${label.name}`;
    input.addEventListener("change", () => {
      // The binary decision follows the label by default; the annotator may still change it.
      $(label.name === "genuine_followup" ? "genuine-yes" : "genuine-no").checked = true;
      updateSave();
    });
    row.append(input, document.createTextNode(` ${i + 1}. ${label.name}`), el("span", label.description, "desc"));
    box.append(row);
  });
  document.querySelectorAll('input[name="genuine"]').forEach((r) => r.addEventListener("change", updateSave));
}

// The context_free flag belongs to a genuine label only: shown (and sent) when the binary decision is yes.
function updateContextFree() {
  const genuine = chosen("genuine") === "yes";
  $("context-free-box").hidden = !genuine;
  if (!genuine) $("context-free").checked = false;
}

function chosen(name) {
  const input = document.querySelector(`input[name="${name}"]:checked`);
  return input ? input.value : null;
}

function updateSave() {
  updateContextFree();
  $("save").disabled = !(chosen("label") && chosen("genuine"));
}

function render(item) {
  state.item = item;
  state.index = item.index;
  $("position").textContent = `item ${item.index + 1} of ${item.total}`;
  const context = $("context");
  context.replaceChildren();
  for (const message of item.messages) {
    context.append(el("div", message.role, "role"), el("pre", message.content));
  }
  $("user-turn").textContent = item.user_turn;
  document.querySelectorAll('input[name="label"], input[name="genuine"]').forEach((r) => { r.checked = false; });
  $("context-free").checked = false;
  if (item.annotation) {
    const radio = document.getElementById(`label-${item.annotation.label}`);
    if (radio) radio.checked = true;
    $(item.annotation.genuine ? "genuine-yes" : "genuine-no").checked = true;
    $("context-free").checked = item.annotation.context_free === true;
    setStatus("saved", false);
  } else {
    setStatus("", false);
  }
  updateSave();
  history.replaceState(null, "", `#i=${item.index}`);
}

async function go(index) {
  if (index < 0 || index >= state.total) return;
  try {
    render(await api(`/api/item?i=${index}`));
  } catch (err) {
    setStatus(err.message, true);
  }
}

async function save() {
  const label = chosen("label");
  const genuine = chosen("genuine");
  if (!state.item || !label || !genuine) return;
  $("save").disabled = true;
  try {
    const result = await api("/api/annotate", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({
        id: state.item.id, label: label, genuine: genuine === "yes",
        context_free: genuine === "yes" ? $("context-free").checked : false,
      }),
    });
    showProgress(result.done, result.estimate);
    setStatus("saved", false);
    if (result.next !== null && result.next !== state.index) {
      await go(result.next);
      setStatus("saved; next item", false);
    } else if (result.next === null) {
      const where = result.pooled ? " (each folder's calibrated rate: fic rates DIR)" : "";
      setStatus(`saved; every item is annotated${where}`, false);
    }
  } catch (err) {
    setStatus(`not saved: ${err.message}`, true);
  } finally {
    updateSave();
  }
}

function onKey(event) {
  if (event.target && event.target.tagName === "INPUT" && event.target.type === "text") return;
  const n = Number(event.key);
  if (Number.isInteger(n) && n >= 1 && n <= state.labels.length) {
    const radio = document.getElementById(`label-${state.labels[n - 1].name}`);
    radio.checked = true;
    radio.dispatchEvent(new Event("change"));
  } else if (event.key === "y" || event.key === "n") {
    $(event.key === "y" ? "genuine-yes" : "genuine-no").checked = true;
    updateSave();
  } else if (event.key === "c" && chosen("genuine") === "yes") {
    $("context-free").checked = !$("context-free").checked;
  } else if (event.key === "Enter") {
    save();
  } else if (event.key === "ArrowRight") {
    go(state.index + 1);
  } else if (event.key === "ArrowLeft") {
    go(state.index - 1);
  }
}

async function start() {
  try {
    const s = await api("/api/state");
    state.total = s.total;
    state.labels = s.labels;
    buildLabels();
    showProgress(s.done, s.estimate);
    const match = /^#i=(\d+)$/.exec(location.hash);
    const wanted = match ? Number(match[1]) : s.next === null ? 0 : s.next;
    await go(Math.min(wanted, s.total - 1));
    if (!match && s.done > 0) setStatus(s.next === null ? "every item is annotated" : `resumed: ${s.done} done`, false);
  } catch (err) {
    setStatus(`could not load: ${err.message}`, true);
  }
  $("prev").addEventListener("click", () => go(state.index - 1));
  $("next").addEventListener("click", () => go(state.index + 1));
  $("todo").addEventListener("click", async () => {
    const s = await api("/api/state");
    if (s.next !== null) go(s.next); else setStatus("every item is annotated", false);
  });
  $("save").addEventListener("click", save);
  document.addEventListener("keydown", onKey);
}

start();
