// Page-wide keyboard fixes for Gradio's own controls (loaded once, in the page's <head>).
(() => {
  // Radio groups: Gradio names each radio input apart, so the browser's arrow keys cannot move inside a group
  // and every option is its own Tab stop. Named alike, a group is one Tab stop; the arrow keys move and check.
  const radios = (radio) => [...(radio.closest('.wrap') || radio.parentElement.parentElement)
    .querySelectorAll('input[type=radio]')].filter((input) => !input.disabled);
  document.addEventListener('focusin', (event) => {
    const radio = event.target;
    if (!(radio instanceof HTMLInputElement) || radio.type !== 'radio') return;
    radios(radio).forEach((input) => { input.name = `pg-${radios(radio)[0].name.replace(/^pg-/, '')}`; });
  });
  const STEPS = { ArrowRight: 1, ArrowDown: 1, ArrowLeft: -1, ArrowUp: -1 };
  document.addEventListener('keydown', (event) => {
    const radio = event.target;
    if (!(radio instanceof HTMLInputElement) || radio.type !== 'radio' || !(event.key in STEPS)) return;
    const group = radios(radio);
    const next = group[(group.indexOf(radio) + STEPS[event.key] + group.length) % group.length];
    event.preventDefault();
    next.focus();
    next.click();
  });
  // Dropdowns: a list left open when focus moves on (Tab) closes, as it does on a click elsewhere.
  document.addEventListener('focusout', (event) => {
    const input = event.target;
    if (!(input instanceof HTMLInputElement) || input.getAttribute('role') !== 'combobox') return;
    setTimeout(() => {
      const block = input.closest('.block');
      if (block && block.contains(document.activeElement)) return;
      if (input.getAttribute('aria-expanded') === 'true') {
        input.dispatchEvent(new KeyboardEvent('keydown', { key: 'Escape', bubbles: true }));
      }
    }, 0);
  });
  // Stop: the answer keeps the tokens on screen at the click. Counted here, in the click's own task: Gradio's
  // dispatch awaits the inputs' state before it runs the event's js, and updates that arrive meanwhile (a screen
  // behind the decode) may draw more tokens first.
  document.addEventListener('click', (event) => {
    if (!(event.target instanceof Element) || !event.target.closest('#stop-btn')) return;
    window.pgStopShown = document.querySelectorAll('#token-panel .tok[data-index]').length;
  }, true);
})();
