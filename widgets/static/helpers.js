// Helpers both widgets import (token_view.js and playground.js): elements, and the rules the Python renderer
// (playground/render) follows too: one palette, one wording, one best-of order, grey for a missing
// probability. Text reaches the DOM through textContent only: "<script>" is a valid token.

/** Create an element with classes and optional text (always set as textContent). */
export function h(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

/** exp(logprob); null where the engine reported nothing (JSON has no -Infinity: a masked token is null too). */
export function probability(logprob) {
  return logprob === null || logprob === undefined || Number.isNaN(logprob) ? null : Math.exp(Math.min(logprob, 0));
}

/** Red for unlikely through yellow to green for certain, pale; grey when unknown. */
export function colour(p) {
  if (p === null || p === undefined) return "hsl(0, 0%, 90%)";
  return `hsl(${Math.round(120 * Math.max(0, Math.min(1, p)))}, 80%, 82%)`;
}

/** A probability as a percentage with one decimal, "\u2014" when unknown. */
export function percent(p) {
  if (p === null || p === undefined) return "\u2014";
  const shown = (100 * p).toFixed(1);
  return p > 0 && Number(shown) === 0 ? "<0.1%" : `${shown}%`;
}

/** [state, text] of a verdict (ok, bad or muted); a constraint the provider did not enforce is always bad. */
export function verdict(validation, kind) {
  const v = validation || {};
  if (v.enforced === false) {
    const text = `\u26a0 not enforced by the provider \u2014 ${v.message || "output checked after the fact"}`;
    return ["bad", text + (v.valid === false ? " (output is INVALID)" : "")];
  }
  if (v.valid === true) return ["ok", `\u2713 valid (${kind}): ${v.message || ""}`];
  if (v.valid === false) return ["bad", `\u2717 invalid (${kind}): ${v.message || ""}`];
  return ["muted", v.message || "no constraint \u2014 nothing to validate"];
}

/** The finish reason, with the stop sequence or the stop_token_ids token that ended it. */
export function finishText(seq) {
  if (seq.stop_token !== null && seq.stop_token !== undefined) {
    return `${seq.finish_reason} (stop token ${seq.stop_token})`;
  }
  if (seq.stop_sequence === null || seq.stop_sequence === undefined) return seq.finish_reason;
  return `${seq.finish_reason} (${JSON.stringify(seq.stop_sequence)})`;
}

/** Every best_of candidate: the chosen one first, then the others by total logprob, highest first. */
export function candidates(result) {
  const others = [...(result.best_of_sequences || [])].sort((a, b) => b.total_logprob - a.total_logprob);
  return [result.best, ...others];
}

/** The next-token chart's rows, most likely first under either distribution; a refused token keeps 0. */
export function chartRows(dist, limit = 12) {
  const rows = dist.candidates.map((c) => ({
    text: c.text,
    raw: probability(c.raw_logprob) ?? 0,
    con: c.allowed ? probability(c.logprob) ?? 0 : 0,
    allowed: c.allowed,
    reason: c.reason,
  }));
  rows.sort((a, b) => Math.max(b.raw, b.con) - Math.max(a.raw, a.con));
  return rows.slice(0, limit);
}

/** The chart's heading line, as the Python renderer words it. */
export function chartSummary(dist, where) {
  const counted = dist.allowed_count != null && dist.vocab_size != null
    ? `${dist.allowed_count} of ${dist.vocab_size} tokens allowed`
    : "the server does not say how many tokens are allowed";
  return `${where} \u00b7 constraint keeps ${percent(dist.mass_kept)} of the model's probability mass \u00b7 ${counted}`;
}
