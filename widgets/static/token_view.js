// TokenView: a generation result as tokens coloured by probability, with alternatives on hover/click.
// Every piece of token text goes into the DOM through textContent, never innerHTML: tokens are
// arbitrary bytes and "<script>" is a valid token.
import { candidates, colour, finishText, h, percent, probability, verdict } from "./helpers.js";

const VERDICT_CLASS = { ok: "sp-good", bad: "sp-bad", muted: "sp-neutral" };

/** Make empty and whitespace tokens visible; newlines keep their line break. */
export function visible(text) {
  if (text === "") return "\u2205";
  return text.replace(/\n/g, "\u21b5\n").replace(/\t/g, "\u21e5");
}

/** The verdict of `seq` as a span (or `tag`) with its state's class. */
function verdictNode(seq, kind, tag, className) {
  const [state, text] = verdict(seq.validation, kind);
  return h(tag, `${className} ${VERDICT_CLASS[state]}`.trim(), text);
}

function summary(result, seq) {
  const box = h("div", "sp-summary");
  const overridden = seq.tokens.filter((t) => t.overridden).length;
  const parts = [
    ["model", `${result.model_id} via ${result.provider_id}`],
    ["constraint", result.constraint_kind],
    ["finish", finishText(seq)],
    ["tokens", String(seq.generated_tokens)],
    ["overridden", String(overridden)],
    ["forced", `${seq.tokens.filter((t) => t.forced).length} (dotted: not sampled)`],
  ];
  if (seq.reasoning) {
    const span = seq.reasoning;
    const engaged = span.answer_token === null ? "never" : `at token ${span.answer_token}`;
    parts.push(["reasoning", `${span.tokens} tokens, ended by ${span.ended_by}; constraint engaged ${engaged}`]);
  }
  if (result.timings && result.timings.tokens_per_s) parts.push(["speed", `${result.timings.tokens_per_s.toFixed(1)} tokens/s`]);
  for (const [label, value] of parts) {
    const item = h("span", `sp-field sp-f-${label}`);
    item.append(h("span", "sp-label", `${label} `), h("b", null, value));
    box.append(item);
  }
  box.append(verdictNode(seq, result.constraint_kind, "span", "sp-verdict"));
  return box;
}

function modeToggle(colourBy, onColourBy) {
  const bar = h("div", "sp-toolbar");
  bar.append(h("span", "sp-label", "colour by "));
  for (const mode of ["constrained", "raw"]) {
    const button = h("button", mode === colourBy ? "sp-mode sp-active" : "sp-mode", mode);
    button.dataset.mode = mode;
    button.addEventListener("click", () => onColourBy(mode));
    bar.append(button);
  }
  return bar;
}

/** Rows of raw and constrained alternatives, merged by token id and sorted by raw probability. */
export function alternatives(token) {
  const rows = new Map();
  for (const t of token.raw_top_tokens || []) rows.set(t.id, { text: t.text, raw: probability(t.logprob), con: undefined });
  for (const t of token.top_tokens || []) {
    const row = rows.get(t.id) || { text: t.text, raw: undefined, con: undefined };
    row.con = probability(t.logprob);
    rows.set(t.id, row);
  }
  return [...rows.entries()].sort((a, b) => (b[1].raw ?? -1) - (a[1].raw ?? -1));
}

function cellText(value) {
  if (value === undefined) return "not in top-n";
  return value === null ? "masked" : percent(value);
}

function detail(token) {
  const box = h("div", "sp-detail");
  const head = h("div", "sp-detail-head");
  head.append(h("code", "sp-detail-text", JSON.stringify(token.text)));
  head.append(h("span", null, ` constrained ${percent(probability(token.logprob))}`));
  head.append(h("span", null, ` \u00b7 raw ${percent(probability(token.raw_logprob))}`));
  head.append(h("span", "sp-mass", ` \u00b7 mass kept ${percent(token.mass_kept)}`));
  box.append(head);
  if (token.overridden) box.append(h("div", "sp-override-note", "the constraint overrode the model's first choice"));
  const table = h("table", "sp-alternatives");
  const header = h("tr");
  for (const title of ["alternative", "raw model", "under constraint"]) header.append(h("th", null, title));
  table.append(header);
  for (const [id, row] of alternatives(token)) {
    const tr = h("tr", id === token.id ? "sp-chosen" : null);
    tr.append(h("td", "sp-alt-text", JSON.stringify(row.text)), h("td", null, cellText(row.raw)));
    tr.append(h("td", row.con === null ? "sp-masked" : null, cellText(row.con)));
    table.append(tr);
  }
  box.append(table);
  return box;
}

function candidateTable(result, sequences, shown, onShow) {
  const box = h("div", "sp-candidates");
  if (sequences.length < 2) return box;
  box.append(h("div", "sp-label", `best_of: ${sequences.length} candidates (click one to see its tokens)`));
  const table = h("table");
  const header = h("tr");
  for (const title of ["", "text", "total logprob", "finish", "seed", "verdict"]) header.append(h("th", null, title));
  table.append(header);
  sequences.forEach((seq, index) => {
    const tr = h("tr", index === shown ? "sp-candidate sp-shown" : "sp-candidate");
    tr.append(h("td", null, index === 0 ? "chosen" : ""), h("td", "sp-candidate-text", seq.generated_text));
    tr.append(h("td", null, Number(seq.total_logprob).toFixed(3)), h("td", null, finishText(seq)));
    tr.append(h("td", null, seq.seed ?? ""), verdictNode(seq, result.constraint_kind, "td", ""));
    tr.addEventListener("click", () => onShow(index));
    table.append(tr);
  });
  box.append(table);
  return box;
}

function tokenSpans(seq, colourBy, selected, onHover, onSelect) {
  const line = h("div", "sp-tokens");
  const engaged = seq.tokens.findIndex((t) => t.segment === "answer");
  seq.tokens.forEach((token, index) => {
    const p = probability(colourBy === "raw" ? token.raw_logprob : token.logprob);
    let cls = "sp-token";
    if (token.overridden) cls += " sp-overridden";
    if (token.forced) cls += " sp-forced";
    if (token.segment === "reasoning") cls += " sp-reasoning";
    if (index === engaged) line.append(h("span", "sp-engaged", "\u25b8"));
    if (index === selected) cls += " sp-selected";
    const span = h("span", cls, visible(token.text));
    span.dataset.index = String(index);
    span.style.background = colour(p);
    span.addEventListener("mouseenter", () => onHover(index));
    span.addEventListener("click", () => onSelect(index));
    line.append(span);
  });
  line.addEventListener("mouseleave", () => onHover(null));
  return line;
}

/**
 * Render `result` into `container`. options: colourBy, selected (pinned token index), sequence
 * (candidate index), onSelect(index), onColourBy(mode), onSequence(index).
 */
export function renderResult(container, result, options = {}) {
  container.replaceChildren();
  if (!result || !result.best) {
    container.append(h("div", "sp-empty", "no result yet"));
    return;
  }
  const sequences = candidates(result);
  const shown = Math.min(options.sequence || 0, sequences.length - 1);
  const seq = sequences[shown];
  const selected = options.selected ?? -1;
  const panel = h("div", "sp-detail-slot");
  const showDetail = (index) => {
    const target = index === null ? selected : index;
    panel.replaceChildren();
    if (target >= 0 && target < seq.tokens.length) panel.append(detail(seq.tokens[target]));
    else panel.append(h("div", "sp-hint", "hover or click a token to see its alternatives"));
  };
  const onSelect = (index) => options.onSelect && options.onSelect(index);
  container.append(summary(result, seq), modeToggle(options.colourBy || "constrained", (mode) => options.onColourBy && options.onColourBy(mode)));
  container.append(tokenSpans(seq, options.colourBy || "constrained", selected, showDetail, onSelect), panel);
  container.append(candidateTable(result, sequences, shown, (index) => options.onSequence && options.onSequence(index)));
  showDetail(null);
}

/** The anywidget entry point: state lives in the model's traits; `sequence` is view-local. */
function render({ model, el }) {
  const root = h("div", "sp-root sp-token-view");
  el.append(root);
  let sequence = 0;
  const draw = () =>
    renderResult(root, model.get("result"), {
      colourBy: model.get("colour_by"),
      selected: model.get("selected"),
      sequence,
      onSelect: (index) => {
        model.set("selected", model.get("selected") === index ? -1 : index);
        model.save_changes();
      },
      onColourBy: (mode) => {
        model.set("colour_by", mode);
        model.save_changes();
      },
      onSequence: (index) => {
        sequence = index;
        model.set("selected", -1);
        model.save_changes();
        draw();
      },
    });
  const onResult = () => {
    sequence = 0;
    draw();
  };
  model.on("change:result", onResult);
  model.on("change:colour_by", draw);
  model.on("change:selected", draw);
  draw();
  return () => {
    model.off("change:result", onResult);
    model.off("change:colour_by", draw);
    model.off("change:selected", draw);
  };
}

export default { render };
