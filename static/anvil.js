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
// nodes it will act on). Once answered yes, its inputs marked
// data-confirmed take that value: the server asks on a page of its own
// when a form comes without it (sent by a browser without JavaScript).
document.addEventListener("submit", (e) => {
	const msg = e.target instanceof HTMLFormElement ? e.target.getAttribute("data-confirm") : null;
	if (!msg) {
		return;
	}
	if (!window.confirm(msg)) {
		e.preventDefault();
		return;
	}
	for (const input of e.target.querySelectorAll("input[data-confirmed]")) {
		input.value = input.getAttribute("data-confirmed");
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
		if (el.classList.contains("row-copy")) {
			// A list row costs two Tab stops, its checkbox and its link; the
			// node's own page has the same Copy button in the Tab order.
			button.tabIndex = -1;
		}
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

// xterm.js writes its theme and cell sizes into <style> elements it
// creates, which the policy (style-src 'self', no nonce) refuses, even
// empty. On a page with a console, a script asking for a <style> gets an
// inert <template> instead, whose text becomes a constructed stylesheet
// the document adopts: CSSOM, which the policy leaves to the scripts it
// already allows. (xterm's 24-bit colours, set as style attributes, stay
// refused; serial consoles rarely send them.)
let scriptStylesAdopted = false;
function adoptScriptStyles() {
	if (scriptStylesAdopted) {
		return;
	}
	scriptStylesAdopted = true;
	const create = document.createElement;
	document.createElement = function (tag, options) {
		if (String(tag).toLowerCase() !== "style") {
			return create.call(this, tag, options);
		}
		const el = create.call(this, "template");
		const sheet = new CSSStyleSheet();
		let text = "";
		document.adoptedStyleSheets = [...document.adoptedStyleSheets, sheet];
		Object.defineProperty(el, "textContent", {
			get: () => text,
			set: (t) => {
				text = String(t ?? "");
				sheet.replaceSync(text);
			},
		});
		el.remove = () => {
			document.adoptedStyleSheets = document.adoptedStyleSheets.filter((s) => s !== sheet);
			Element.prototype.remove.call(el);
		};
		return el;
	};
}

// A node's serial console ([data-console], the WebSocket's path): a
// terminal whose keystrokes go to the machine as typed and which shows
// what the machine sends. It opens at once on the console page
// (data-console-auto) and from its Open button on the node page. When the
// socket closes (Close, the console turned off, the lease ended) the
// terminal keeps what it showed, says why it closed and takes no more
// input.
function startConsole(box) {
	const status = box.querySelector("[data-console-status]");
	const screen = box.querySelector("[data-console-screen]");
	const open = box.querySelector("[data-console-open]");
	const close = box.querySelector("[data-console-close]");
	let term = null;
	let ws = null;
	let byUser = false;
	function connect() {
		adoptScriptStyles();
		if (term) {
			term.dispose();
		}
		screen.hidden = false;
		open.hidden = true;
		close.hidden = false;
		byUser = false;
		term = new Terminal({
			cursorBlink: true,
			// ipmitool writes its own notices with bare line feeds, which
			// a terminal would otherwise leave mid-line.
			convertEol: true,
			fontFamily: 'ui-monospace, "DejaVu Sans Mono", Menlo, monospace',
			fontSize: 14,
			scrollback: 5000,
			// Dark in both colour schemes, as terminals are; the contrast
			// holds either way.
			theme: { background: "#101317", foreground: "#e8e8e8", cursor: "#e8e8e8", cursorAccent: "#101317" },
		});
		const fit = new FitAddon.FitAddon();
		term.loadAddon(fit);
		term.open(screen);
		fit.fit();
		const resized = new ResizeObserver(() => fit.fit());
		resized.observe(screen);
		const url = new URL(box.dataset.console, location.href);
		url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
		ws = new WebSocket(url);
		ws.binaryType = "arraybuffer";
		status.textContent = "Connecting…";
		const socket = ws;
		socket.onopen = () => {
			status.textContent = "Connected: what you type in the terminal goes to the machine.";
			term.focus();
		};
		socket.onmessage = (e) => term.write(typeof e.data === "string" ? e.data : new Uint8Array(e.data));
		const typed = term.onData((d) => {
			if (socket.readyState === WebSocket.OPEN) {
				socket.send(d);
			}
		});
		const typedBinary = term.onBinary((d) => {
			if (socket.readyState === WebSocket.OPEN) {
				socket.send(Uint8Array.from(d, (ch) => ch.charCodeAt(0)));
			}
		});
		socket.onclose = (e) => {
			typed.dispose();
			typedBinary.dispose();
			resized.disconnect();
			term.options.disableStdin = true;
			term.options.cursorBlink = false;
			let why = e.reason;
			if (byUser) {
				why = "you closed it";
			} else if (!why) {
				why = "the console is off, busy, or no longer yours to open";
			}
			status.textContent = `Closed: ${why}.`;
			term.write(`\r\n\x1b[7m[ console closed: ${why} ]\x1b[0m\r\n`);
			const hadFocus = box.contains(document.activeElement);
			open.textContent = "Open again";
			open.hidden = false;
			close.hidden = true;
			if (hadFocus) {
				open.focus();
			}
		};
	}
	open.addEventListener("click", connect);
	close.addEventListener("click", () => {
		if (ws && ws.readyState <= WebSocket.OPEN) {
			byUser = true;
			ws.close(1000);
		}
	});
	if (typeof Terminal !== "function") {
		status.textContent = "The terminal did not load; reload the page.";
		return;
	}
	if (box.hasAttribute("data-console-auto")) {
		connect();
	} else {
		open.hidden = false;
	}
}

document.addEventListener("DOMContentLoaded", () => {
	for (const box of document.querySelectorAll("[data-console]")) {
		startConsole(box);
	}
});

// On a phone the node list's filters start folded away, so the list comes
// first; the details element stays open without this script.
{
	const box = document.getElementById("filterbox");
	if (box && window.matchMedia("(max-width: 640px)").matches) {
		box.open = false;
	}
}

// A BMC form's provider select shows only the fields that provider uses
// (data-providers); without JavaScript every field shows, its label
// naming the providers it is for, and the server keeps only those.
function showProviderFields(select) {
	const form = select.form;
	if (!form) {
		return;
	}
	for (const el of form.querySelectorAll("[data-providers]")) {
		el.hidden = select.value !== "" && !el.getAttribute("data-providers").split(" ").includes(select.value);
	}
}
document.addEventListener("change", (e) => {
	if (e.target instanceof HTMLSelectElement && e.target.hasAttribute("data-provider-choice")) {
		showProviderFields(e.target);
	}
});
document.addEventListener("DOMContentLoaded", () => {
	for (const select of document.querySelectorAll("select[data-provider-choice]")) {
		showProviderFields(select);
	}
});
