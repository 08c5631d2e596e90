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

// A button marked data-count-label says how many nodes its form has
// checked ("Add CUSTOM_X to 2 nodes"); without JavaScript it keeps its
// own words.
document.addEventListener("change", (e) => {
	const form = e.target instanceof HTMLInputElement ? e.target.form : null;
	const button = form ? form.querySelector("button[data-count-label]") : null;
	if (button) {
		const n = form.querySelectorAll('input[type=checkbox][name="node"]:checked:not(:disabled)').length;
		button.textContent = button.getAttribute("data-count-label").replace("%d", String(n)).replace(" 1 nodes", " 1 node");
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

// A failed htmx request would otherwise change nothing on the page: htmx
// swaps no 4xx or 5xx answer. It is shown in the layout's one alert,
// replaced rather than repeated when a poll keeps failing; once dismissed,
// the same message stays away until a request succeeds again.
const requestError = {
	dismissed: "",
	show(msg) {
		const box = document.getElementById("request-error");
		const text = document.getElementById("request-error-text");
		if (!box || !text || msg === this.dismissed || (!box.hidden && text.textContent === msg)) {
			return;
		}
		box.hidden = false;
		text.textContent = msg;
	},
	hide() {
		const box = document.getElementById("request-error");
		if (box && !box.hidden) {
			this.dismissed = document.getElementById("request-error-text").textContent;
			box.hidden = true;
		}
	},
};

// serverMessage is the short sentence a failed answer carries: a plain
// text body, or an error page's message; "" when it has none.
function serverMessage(xhr) {
	const type = xhr.getResponseHeader("Content-Type") || "";
	let msg = "";
	if (type.startsWith("text/plain")) {
		msg = xhr.responseText;
	} else if (type.startsWith("text/html")) {
		const el = new DOMParser().parseFromString(xhr.responseText, "text/html").querySelector("[data-error-message]");
		msg = el ? el.textContent : "";
	}
	msg = msg.trim();
	return msg.length > 0 && msg.length <= 400 ? msg : "";
}

document.addEventListener("htmx:responseError", (e) => {
	const xhr = e.detail.xhr;
	requestError.show(serverMessage(xhr) || `The request failed (HTTP ${xhr.status}). Try again.`);
});
document.addEventListener("htmx:sendError", () => {
	requestError.show("Anvil did not answer. Check your connection and try again.");
});
document.addEventListener("htmx:afterRequest", (e) => {
	if (e.detail.successful) {
		requestError.dismissed = "";
	}
});
document.addEventListener("click", (e) => {
	if (e.target instanceof Element && e.target.id === "request-error-dismiss") {
		requestError.hide();
	}
});

// An element with data-copy="text" gets a Copy button that puts the text
// on the clipboard; data-copy-what names it for screen readers ("Copy the
// new token"). Without JavaScript, the text is there to select.
async function copyText(text) {
	if (navigator.clipboard && window.isSecureContext) {
		await navigator.clipboard.writeText(text);
		return;
	}
	// Served over plain HTTP to another host, the page has no clipboard
	// API; a selected hidden field and the copy command still work.
	const field = document.createElement("textarea");
	field.value = text;
	field.setAttribute("readonly", "");
	field.className = "copy-field";
	document.body.append(field);
	field.select();
	const ok = document.execCommand("copy");
	field.remove();
	if (!ok) {
		throw new Error("copy refused");
	}
}

function addCopyButtons(root) {
	for (const el of root.querySelectorAll("[data-copy]")) {
		if (el.nextElementSibling && el.nextElementSibling.classList.contains("copy")) {
			continue;
		}
		const what = el.getAttribute("data-copy-what") ||
			(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(el.getAttribute("data-copy")) ? "UUID" : "text");
		const wrap = document.createElement("span");
		wrap.className = "copy";
		const button = document.createElement("button");
		button.type = "button";
		button.className = "copy-button";
		button.textContent = "Copy";
		button.setAttribute("aria-label", `Copy ${what}`);
		const said = document.createElement("span");
		said.className = "copy-said";
		said.setAttribute("aria-live", "polite");
		button.addEventListener("click", async () => {
			try {
				await copyText(el.getAttribute("data-copy"));
				said.textContent = "Copied";
			} catch {
				said.textContent = "Copy failed; select the text instead";
			}
			clearTimeout(said.timer);
			said.timer = setTimeout(() => { said.textContent = ""; }, 4000);
		});
		wrap.append(button, said);
		el.after(wrap);
	}
}

// A <time datetime="RFC 3339"> keeps its UTC text and gains how long ago
// (or ahead) it is, kept current every minute, and the instant in full
// as its title.
function relative(ms) {
	const s = Math.abs(ms) / 1000;
	const m = Math.round(s / 60);
	const h = Math.round(s / 3600);
	let n;
	if (s < 45) {
		return ms < 0 ? "just now" : "in under a minute";
	} else if (m < 60) {
		n = `${m} min`;
	} else if (h < 24) {
		n = `${h} h`;
	} else {
		n = `${Math.round(s / 86400)} d`;
	}
	return ms < 0 ? `${n} ago` : `in ${n}`;
}

function showTimes(root) {
	const now = Date.now();
	for (const el of root.querySelectorAll("time[datetime]")) {
		const at = Date.parse(el.getAttribute("datetime"));
		if (Number.isNaN(at)) {
			continue;
		}
		el.title = new Date(at).toISOString();
		let rel = el.nextElementSibling;
		if (!rel || !rel.classList.contains("reltime")) {
			rel = document.createElement("span");
			rel.className = "reltime";
			el.after(rel);
		}
		// A lease's end (data-ends) says "ends in 3 h" or "ended 5 min ago".
		const ends = el.hasAttribute("data-ends");
		const said = relative(at - now);
		rel.textContent = ` (${ends ? (at < now ? `ended ${said}` : `ends ${said}`) : said})`;
	}
}

function enhance(root) {
	addCopyButtons(root);
	showTimes(root);
}

document.addEventListener("DOMContentLoaded", () => enhance(document));
// Content htmx swapped in.
document.addEventListener("htmx:load", (e) => enhance(e.target.parentElement || e.target));
setInterval(() => showTimes(document), 60_000);

// The node console page: the machine's serial output arrives over a
// WebSocket; a line typed in the box goes back with a carriage return,
// as a terminal's Enter sends.
document.addEventListener("DOMContentLoaded", () => {
  const box = document.querySelector("[data-console]");
  if (!box) return;
  const out = box.querySelector("[data-console-output]");
  const status = box.querySelector("[data-console-status]");
  const form = box.querySelector("[data-console-input]");
  const url = new URL(box.dataset.console, location.href);
  url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
  const ws = new WebSocket(url);
  ws.binaryType = "arraybuffer";
  const text = new TextDecoder();
  ws.onopen = () => { status.textContent = "Connected"; };
  ws.onmessage = (e) => {
    out.textContent += typeof e.data === "string" ? e.data : text.decode(e.data, { stream: true });
    // Keep the last 200 kB, as a terminal keeps its scrollback.
    if (out.textContent.length > 200000) out.textContent = out.textContent.slice(-150000);
    out.scrollTop = out.scrollHeight;
  };
  ws.onclose = () => { status.textContent = "Disconnected: the console was closed, or is in use by someone else. Reload to try again."; };
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const line = form.elements.line;
    if (ws.readyState === WebSocket.OPEN) ws.send(line.value + "\r");
    line.value = "";
  });
});

// On a phone the node list's filters start folded away, so the list comes
// first; the details element stays open without this script.
{
	const box = document.getElementById("filterbox");
	if (box && window.matchMedia("(max-width: 640px)").matches) {
		box.open = false;
	}
}
