// Playground: constraint, prompt or chat, parameters and a run button; the answer is drawn by the
// TokenView module (shipped as the `_token_view_esm` trait and imported from a blob URL, the way
// anywidget loads any ESM). All user and model text reaches the DOM through textContent.

import { candidates, chartRows, chartSummary, h, percent } from "./helpers.js";

/** Mark a control whose text cannot be read (the trait keeps its value), or clear the mark. */
function markInvalid(input, problem) {
  input.classList.toggle("sp-invalid", Boolean(problem));
  input.setAttribute("aria-invalid", problem ? "true" : "false");
  input.title = problem || "";
}

/** Keep a form control and a trait in step both ways; returns the function that unbinds it. A value its parser
 * refuses (or a number box's unreadable text) is marked on the control and not sent. */
function bind(model, input, name, { parse = (v) => v, format = (v) => (v ?? "") } = {}) {
  const isBox = input.type === "checkbox";
  const show = () => {
    const value = model.get(name);
    if (isBox) input.checked = Boolean(value);
    else if (input.value !== String(format(value))) input.value = format(value);
    markInvalid(input, "");
  };
  const push = () => {
    const unreadable = Boolean(input.validity && input.validity.badInput);  // a number box's value is then ""
    const value = isBox ? input.checked : unreadable ? undefined : parse(input.value);
    if (value === undefined) {
      markInvalid(input, `not a valid ${name}: it stays ${JSON.stringify(model.get(name))}`);
      return;
    }
    markInvalid(input, "");
    model.set(name, value);
    model.save_changes();
  };
  input.addEventListener(isBox || input.tagName === "SELECT" ? "change" : "input", push);
  model.on(`change:${name}`, show);
  show();
  return () => model.off(`change:${name}`, show);
}

const integer = (text) => (/^-?\d+$/.test(text.trim()) ? parseInt(text, 10) : undefined);
const decimal = (text) => (text.trim() !== "" && Number.isFinite(Number(text)) ? Number(text) : undefined);
const optionalInteger = (text) => (text.trim() === "" ? null : integer(text));
const lines = (text) => text.split("\n").filter((line) => line !== "");
// A stop sequence per line, as the UI's stop box: `\n`, `\t`, `\r` and `\\` stand for a newline, a tab, a carriage
// return and a backslash (a newline, the commonest stop, cannot be a line of its own).
const ESCAPES = { n: "\n", t: "\t", r: "\r", "\\": "\\" };
const stopsOf = (text) => lines(text).map((line) => line.replace(/\\([ntr\\])/g, (_, c) => ESCAPES[c]));
const stopsText = (stops) => (stops || [])
  .map((stop) => stop.replace(/[\\\n\t\r]/g, (c) => ({ "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r" })[c])).join("\n");

function field(label, control, className = "sp-field-row") {
  const wrap = h("label", className);
  wrap.append(h("span", "sp-label", label), control);
  return wrap;
}

function input(type, className) {
  const node = h(type === "textarea" ? "textarea" : "input", className);
  if (type !== "textarea") node.type = type;
  return node;
}

function fillSelect(select, options) {
  select.replaceChildren(...options.map(([value, label]) => {
    const option = h("option", null, label);
    option.value = value;
    return option;
  }));
}

function modelRow(model, offs) {
  const row = h("div", "sp-row");
  const picker = h("select", "sp-model");
  const fill = () => {
    fillSelect(picker, model.get("models").map((name) => [name, name]));
    picker.value = model.get("model");
  };
  model.on("change:models", fill);
  offs.push(() => model.off("change:models", fill));
  fill();
  offs.push(bind(model, picker, "model"));
  const mode = h("select", "sp-mode-select");
  fillSelect(mode, [["chat", "chat"], ["prompt", "plain prompt"]]);
  offs.push(bind(model, mode, "mode"));
  row.append(field("model", picker), field("input", mode));
  return row;
}

function constraintSection(model, offs) {
  const box = h("fieldset", "sp-constraint");
  box.append(h("legend", null, "constraint"));
  const kind = h("select", "sp-kind");
  fillSelect(kind, [["none", "none"], ["json_schema", "JSON schema"], ["regex", "regex"], ["choice", "choice"], ["grammar", "grammar (Lark)"]]);
  offs.push(bind(model, kind, "constraint_kind"));
  const example = h("select", "sp-example");
  const fillExamples = () => {
    const items = (model.get("examples") || {})[model.get("constraint_kind")] || [];
    fillSelect(example, [["", items.length ? "load an example\u2026" : "no examples"], ...items.map((e, i) => [String(i), e.title])]);
  };
  example.addEventListener("change", () => {
    const items = (model.get("examples") || {})[model.get("constraint_kind")] || [];
    const chosen = example.value === "" ? null : items[Number(example.value)];  // (the placeholder is "")
    if (!chosen) return;
    model.set("constraint_text", chosen.text);
    model.set("prompt", chosen.message);
    model.save_changes();
  });
  for (const name of ["change:constraint_kind", "change:examples"]) {
    model.on(name, fillExamples);
    offs.push(() => model.off(name, fillExamples));
  }
  fillExamples();
  const text = input("textarea", "sp-constraint-text");
  text.rows = 6;
  text.spellcheck = false;
  offs.push(bind(model, text, "constraint_text"));
  const problem = h("div", "sp-problem");
  const showProblem = () => {
    const message = model.get("constraint_problem");
    const none = model.get("constraint_kind") === "none";
    problem.className = message ? "sp-problem sp-bad" : "sp-problem sp-good";
    problem.textContent = message ? `\u2717 ${message}` : none ? "" : "\u2713 constraint is valid";
  };
  for (const name of ["change:constraint_problem", "change:constraint_kind"]) {
    model.on(name, showProblem);
    offs.push(() => model.off(name, showProblem));
  }
  showProblem();
  const top = h("div", "sp-row");
  top.append(field("kind", kind), example);
  box.append(top, text, problem, processorSection(model, offs));
  return box;
}

function processorSection(model, offs) {
  const box = h("div", "sp-processors");
  const list = h("div", "sp-processor-list");
  const draw = () => {
    list.replaceChildren();
    model.get("logits_processors").forEach((spec, index) => {
      const item = h("div", "sp-processor");
      item.append(h("code", null, `${spec.name}(${(spec.params || []).map((p) => JSON.stringify(p)).join(", ")})`));
      const remove = h("button", "sp-remove", "\u00d7");
      remove.title = "remove";
      remove.addEventListener("click", () => {
        model.set("logits_processors", model.get("logits_processors").filter((_, i) => i !== index));
        model.save_changes();
      });
      item.append(remove);
      list.append(item);
    });
  };
  model.on("change:logits_processors", draw);
  offs.push(() => model.off("change:logits_processors", draw));
  draw();
  const name = h("select", "sp-processor-name");
  const choices = model.get("processor_choices") || [];
  fillSelect(name, choices.map(([n, description]) => [n, description ? `${n} \u2014 ${description}` : n]));
  const params = input("textarea", "sp-processor-params");
  params.rows = 2;
  params.placeholder = "params, one per line";
  const add = h("button", "sp-add-processor", "add processor");
  add.addEventListener("click", () => {
    if (!name.value) return;
    const chosen = choices.find(([n]) => n === name.value) || [];
    // a whole text (a grammar, a schema) is one parameter; otherwise each line is one
    const values = chosen[2] === "one text" ? (params.value.trim() ? [params.value] : []) : lines(params.value);
    model.set("logits_processors", [...model.get("logits_processors"), { name: name.value, params: values }]);
    model.save_changes();
  });
  const row = h("div", "sp-row");
  row.append(field("custom processor", name), params, add);
  box.append(list);
  if (choices.length) box.append(row);
  return box;
}

function chatSection(model, offs) {
  const box = h("div", "sp-chat");
  const system = input("textarea", "sp-system-prompt");
  system.rows = 2;
  offs.push(bind(model, system, "system_prompt"));
  const history = h("div", "sp-messages");
  const clear = h("button", "sp-clear", "clear chat");
  clear.addEventListener("click", () => {
    model.set("messages", []);
    model.save_changes();
  });
  const draw = () => {
    const chat = model.get("mode") === "chat";
    box.style.display = chat ? "" : "none";
    history.replaceChildren(...model.get("messages").map((m) => {
      const item = h("div", `sp-message sp-${m.role}`);
      item.append(h("b", null, `${m.role}: `), h("span", null, m.content));
      return item;
    }));
  };
  for (const name of ["change:messages", "change:mode"]) {
    model.on(name, draw);
    offs.push(() => model.off(name, draw));
  }
  draw();
  box.append(field("system prompt", system, "sp-field-col"), history, clear);
  return box;
}

function parameterSection(model, offs) {
  const box = h("fieldset", "sp-parameters");
  box.append(h("legend", null, "parameters"));
  const specs = [
    ["max_new_tokens", "number", integer],
    ["do_sample", "checkbox", null],
    ["seed", "number", optionalInteger],
    ["best_of", "number", integer],
    ["top_n_tokens", "number", integer],
  ];
  for (const [name, type, parse] of specs) {
    const control = input(type, `sp-param sp-${name}`);
    offs.push(bind(model, control, name, parse ? { parse } : {}));
    box.append(field(name, control));
  }
  // The sampling controls come from the wire layer's table: a new warper needs no edit here.
  for (const spec of model.get("sampling_controls") || []) {
    const control = input("number", `sp-param sp-${spec.name}`);
    Object.assign(control, { min: String(spec.min), max: String(spec.max), step: String(spec.step) });
    offs.push(bind(model, control, spec.name, { parse: spec.integer ? integer : decimal }));
    box.append(field(spec.label, control));
  }
  const engine = h("select", "sp-param sp-constraint_engine");
  const fillEngines = () => {
    fillSelect(engine, (model.get("engines") || ["auto"]).map((name) => [name, name]));
    engine.value = model.get("constraint_engine");
  };
  fillEngines();
  model.on("change:engines", fillEngines);
  offs.push(() => model.off("change:engines", fillEngines));
  offs.push(bind(model, engine, "constraint_engine"));
  box.append(field("constraint engine", engine));
  const stop = input("textarea", "sp-param sp-stop");
  stop.rows = 1;
  stop.placeholder = "one per line; \\n for a newline";
  offs.push(bind(model, stop, "stop", { parse: stopsOf, format: stopsText }));
  box.append(field("stop", stop));
  return box;
}

function nextTokenChart(container, dist, position, tokens) {
  container.replaceChildren();
  if (dist && dist.unavailable) {
    container.append(h("div", "sp-chart-title", `next-token view unavailable: ${dist.unavailable}`));
    return;
  }
  if (!dist || !dist.candidates) return;
  const where = position < 0 || !tokens[position]
    ? "at the start of the answer"
    : `before token ${position} (${JSON.stringify(tokens[position].text)})`;
  container.append(h("div", "sp-chart-title", chartSummary(dist, `next token ${where}`)));
  const legend = h("div", "sp-chart-legend");
  legend.append(h("span", "sp-swatch sp-bar-raw"), h("span", null, " raw model "), h("span", "sp-swatch sp-bar-con"),
    h("span", null, " under the constraint"));
  container.append(legend);
  for (const row of chartRows(dist)) {
    const line = h("div", row.allowed ? "sp-bar-row" : "sp-bar-row sp-masked");
    const bars = h("span", "sp-bars");
    const raw = h("span", "sp-bar sp-bar-raw");
    raw.style.width = `${(100 * row.raw).toFixed(1)}%`;
    const con = h("span", "sp-bar sp-bar-con");
    con.style.width = `${(100 * row.con).toFixed(1)}%`;
    bars.append(raw, con);
    line.append(h("code", "sp-bar-label", JSON.stringify(row.text)), bars,
      h("span", "sp-num", `${percent(row.raw)} \u2192 ${percent(row.con)}`));
    if (row.reason) {
      line.title = row.reason;
      line.append(h("span", "sp-reason", row.reason));
    }
    container.append(line);
  }
}

// Confidence per JSON field of the chosen answer: the model's own probability of each value.
function fieldsTable(container, result) {
  container.replaceChildren();
  const fields = result && result.best && result.best.fields;
  if (!fields || !fields.length) return;
  const table = h("table", "sp-fields");
  const head = h("tr");
  for (const name of ["field", "value", "model p (min)", "model p (value)", "mass kept", "overridden", "forced"]) head.append(h("th", null, name));
  table.append(head);
  for (const f of fields) {
    const row = h("tr");
    row.dataset.path = f.path;
    for (const cell of [f.path, JSON.stringify(f.value), percent(f.prob_min), percent(f.prob_product), percent(f.mass_kept_min),
      f.overridden ? "yes" : "no", `${f.forced}/${f.tokens}`]) row.append(h("td", null, cell));
    table.append(row);
  }
  container.append(table);
}

/** A textarea kept in step with the trait `name`. */
function boundText(model, offs, name, className, rows, placeholder) {
  const text = input("textarea", className);
  text.rows = rows;
  text.placeholder = placeholder;
  offs.push(bind(model, text, name));
  return text;
}

/** A button that asks the kernel for work by incrementing the counter trait `counter`. */
function requestButton(model, className, label, counter) {
  const button = h("button", className, label);
  button.addEventListener("click", () => {
    model.set(counter, model.get(counter) + 1);
    model.save_changes();
  });
  return button;
}

// Test an instance: the first token the masks refuse (and why), beside the final verdict; worded in Python
// (playground/render/debugger.py: check_summary), as the UI words it.
function checkSection(model, offs) {
  const box = h("div", "sp-check");
  const text = boundText(model, offs, "check_text", "sp-check-text", 2, "a candidate output to test against the constraint");
  const run = requestButton(model, "sp-check-run", "check", "check_requested");
  const out = h("div", "sp-check-result");
  const draw = () => {
    const r = model.get("check_result") || {};
    if (r.accepted === undefined) { out.textContent = ""; return; }
    out.textContent = r.summary;
    out.dataset.accepted = String(r.accepted);
  };
  model.on("change:check_result", draw);
  offs.push(() => model.off("change:check_result", draw));
  draw();
  box.append(field("test an instance", text, "sp-field-col"), run, out);
  return box;
}

async function render({ model, el }) {
  const url = URL.createObjectURL(new Blob([model.get("_token_view_esm")], { type: "text/javascript" }));
  const tokenView = await import(url);
  URL.revokeObjectURL(url);
  const offs = [];
  const root = h("div", "sp-root sp-playground");
  const prompt = boundText(model, offs, "prompt", "sp-prompt", 3, "prompt or chat message");
  const run = requestButton(model, "sp-run", "run", "run_requested");
  const status = h("span", "sp-status");
  const error = h("div", "sp-error");
  const answer = h("div", "sp-answer");
  const chart = h("div", "sp-chart");
  const fields = h("div", "sp-fields-box");
  const local = { colourBy: "constrained", sequence: 0 };
  const drawAnswer = () => {
    const result = model.get("result_json");
    tokenView.renderResult(answer, result && result.best ? result : null, {
      colourBy: local.colourBy,
      // the view's position is in one candidate: pinned there only
      selected: model.get("next_token_sequence") === local.sequence ? model.get("next_token_position") : -1,
      sequence: local.sequence,
      onSelect: (index) => {
        const same = model.get("next_token_sequence") === local.sequence && model.get("next_token_position") === index;
        model.set("next_token_sequence", local.sequence);
        model.set("next_token_position", same ? -1 : index);
        model.save_changes();
      },
      onColourBy: (mode) => { local.colourBy = mode; drawAnswer(); },
      onSequence: (index) => { local.sequence = index; drawAnswer(); },
    });
  };
  const drawChart = () => {
    const result = model.get("result_json");
    const shown = result && result.best ? candidates(result)[model.get("next_token_sequence")] : null;
    nextTokenChart(chart, model.get("next_token"), model.get("next_token_position"), shown ? shown.tokens : []);
  };
  const evalBar = h("progress", "sp-eval-progress");
  const evalText = h("span", "sp-muted");
  const evalRow = h("div", "sp-row");
  evalRow.append(evalBar, evalText);
  const drawEvaluation = () => {
    const progress = model.get("evaluation_progress") || {};
    evalRow.style.display = progress.total ? "" : "none";
    evalBar.max = progress.total || 1;
    evalBar.value = progress.done || 0;
    evalText.textContent = progress.total ? `evaluated ${progress.done} of ${progress.total} prompts` : "";
  };
  const drawState = () => {
    run.disabled = model.get("running");
    status.textContent = model.get("running") ? "running\u2026" : "";
    error.textContent = model.get("error");
    error.style.display = model.get("error") ? "" : "none";
  };
  const handlers = [
    ["change:result_json", () => { local.sequence = 0; drawAnswer(); drawChart(); fieldsTable(fields, model.get("result_json")); }],
    ["change:next_token_position", () => { drawAnswer(); drawChart(); }],
    ["change:next_token_sequence", () => { drawAnswer(); drawChart(); }],
    ["change:next_token", drawChart],
    ["change:running", drawState],
    ["change:error", drawState],
    ["change:evaluation_progress", drawEvaluation],
  ];
  for (const [name, handler] of handlers) {
    model.on(name, handler);
    offs.push(() => model.off(name, handler));
  }
  const actions = h("div", "sp-row");
  actions.append(run, status);
  root.append(modelRow(model, offs), constraintSection(model, offs), chatSection(model, offs),
    field("message", prompt, "sp-field-col"), parameterSection(model, offs), actions, evalRow, error, answer, fields, chart,
    checkSection(model, offs));
  el.append(root);
  drawAnswer();
  drawChart();
  fieldsTable(fields, model.get("result_json"));
  drawState();
  drawEvaluation();
  return () => offs.forEach((off) => off());
}

export default { render };
