element.addEventListener('click', (event) => {
  const tok = event.target.closest('.tok[data-index]');
  if (!tok || event.target.closest('.pop')) return;
  element.querySelectorAll('.tok.pinned').forEach((other) => { if (other !== tok) other.classList.remove('pinned'); });
  tok.classList.toggle('pinned');
  trigger('click', { index: Number(tok.dataset.index) });
});
