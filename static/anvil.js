// Anvil's own script, beside htmx: behaviour that would otherwise be an
// inline handler, which the portal's Content-Security-Policy refuses.
"use strict";

// A select or radio button marked data-autosubmit submits its form when
// changed (the project switcher, a bulk action's choices); without
// JavaScript, the form's own button does.
document.addEventListener("change", (e) => {
	const el = e.target;
	if ((el instanceof HTMLSelectElement || el instanceof HTMLInputElement) && el.hasAttribute("data-autosubmit") && el.form) {
		el.form.requestSubmit();
	}
});

// The list's header checkbox selects or clears every node on the page.
document.addEventListener("change", (e) => {
	const el = e.target;
	if (el instanceof HTMLInputElement && el.hasAttribute("data-select-page") && el.form) {
		for (const box of el.form.querySelectorAll('input[type=checkbox][name="node"]')) {
			box.checked = el.checked;
		}
	}
});

// A form marked data-confirm asks before it is sent (a bulk run names the
// nodes it will act on).
document.addEventListener("submit", (e) => {
	const msg = e.target instanceof HTMLFormElement ? e.target.getAttribute("data-confirm") : null;
	if (msg && !window.confirm(msg)) {
		e.preventDefault();
	}
});
