// Anvil's own script, beside htmx: behaviour that would otherwise be an
// inline handler, which the portal's Content-Security-Policy refuses.
"use strict";

// A select marked data-autosubmit submits its form when changed (the
// project switcher); without JavaScript, its <noscript> button does.
document.addEventListener("change", (e) => {
	const el = e.target;
	if (el instanceof HTMLSelectElement && el.hasAttribute("data-autosubmit") && el.form) {
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
