// The token panel is one Tab stop (a roving tabindex): the arrow keys, Home and End move between tokens.
// Clicking a token, or Enter / Space on a focused one, pins it: its popover opens in the page's flow (under
// the answer, so it covers nothing) and the server is asked for the next-token chart at that position.
// Escape unpins.
const place = (tok) => {
  // Keep a hovering popover inside the window: shift it left when it would run off the right edge.
  const pop = tok.querySelector('.pop');
  if (!pop) return;
  pop.style.left = '0px';
  const right = pop.getBoundingClientRect().right;
  const room = window.innerWidth - 8;
  if (right > room) {
    const shift = Math.min(right - room, tok.getBoundingClientRect().left - 8);
    pop.style.left = `${-Math.max(0, shift)}px`;
  }
};
const unpin = () => {
  element.querySelectorAll('.tok.pinned').forEach((tok) => tok.classList.remove('pinned'));
  element.querySelectorAll('.pin-detail').forEach((old) => old.remove());
};
const pin = (tok) => {
  const pinned = !tok.classList.contains('pinned');
  unpin();
  const pop = tok.querySelector('.pop');
  if (pinned) {
    tok.classList.add('pinned');
    if (pop) {
      const detail = document.createElement('div');
      detail.className = 'pin-detail';
      detail.setAttribute('role', 'region');
      detail.setAttribute('aria-label', 'pinned token');
      detail.innerHTML = pop.innerHTML;
      tok.closest('.pg-tokens').appendChild(detail);
    }
  }
  trigger('click', { index: Number(tok.dataset.index) });
};
const moveTo = (to) => {
  if (!to) return;
  element.querySelectorAll('.tok[data-index]').forEach((tok) => tok.setAttribute('tabindex', '-1'));
  to.setAttribute('tabindex', '0');
  to.focus();
};
const STEPS = { ArrowRight: 1, ArrowDown: 1, ArrowLeft: -1, ArrowUp: -1 };
element.addEventListener('click', (event) => {
  const tok = event.target.closest('.tok[data-index]');
  if (!tok || event.target.closest('.pop')) return;
  moveTo(tok);
  pin(tok);
});
element.addEventListener('keydown', (event) => {
  const tok = event.target.closest('.tok[data-index]');
  if (!tok) return;
  const all = [...element.querySelectorAll('.tok[data-index]')];
  const at = all.indexOf(tok);
  if (event.key === 'Enter' || event.key === ' ') pin(tok);
  else if (event.key === 'Escape') unpin();
  else if (event.key in STEPS) moveTo(all[Math.max(0, Math.min(all.length - 1, at + STEPS[event.key]))]);
  else if (event.key === 'Home') moveTo(all[0]);
  else if (event.key === 'End') moveTo(all[all.length - 1]);
  else return;
  event.preventDefault();
});
['mouseover', 'focusin'].forEach((name) => element.addEventListener(name, (event) => {
  const tok = event.target.closest('.tok[data-index]');
  if (tok) place(tok);
}));
