// Clicking a token, or Enter / Space on a focused one, pins it: its popover opens in the page's flow (under
// the answer, so it covers nothing) and the server is asked for the next-token chart at that position.
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
const pin = (tok) => {
  element.querySelectorAll('.tok.pinned').forEach((other) => { if (other !== tok) other.classList.remove('pinned'); });
  const pinned = tok.classList.toggle('pinned');
  element.querySelectorAll('.pin-detail').forEach((old) => old.remove());
  const pop = tok.querySelector('.pop');
  if (pinned && pop) {
    const detail = document.createElement('div');
    detail.className = 'pin-detail';
    detail.setAttribute('role', 'region');
    detail.setAttribute('aria-label', 'pinned token');
    detail.innerHTML = pop.innerHTML;
    tok.closest('.pg-tokens').appendChild(detail);
  }
  trigger('click', { index: Number(tok.dataset.index) });
};
element.addEventListener('click', (event) => {
  const tok = event.target.closest('.tok[data-index]');
  if (!tok || event.target.closest('.pop')) return;
  pin(tok);
});
element.addEventListener('keydown', (event) => {
  if (event.key !== 'Enter' && event.key !== ' ') return;
  const tok = event.target.closest('.tok[data-index]');
  if (!tok) return;
  event.preventDefault();
  pin(tok);
});
['mouseover', 'focusin'].forEach((name) => element.addEventListener(name, (event) => {
  const tok = event.target.closest('.tok[data-index]');
  if (tok) place(tok);
}));
