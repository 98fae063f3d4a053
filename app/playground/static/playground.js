// The playground page: follows the workspace over server-sent events and re-renders the open
// conversation; posts and clicks go to /api/messages and /api/click. Message HTML is rendered by
// the server (Markdown with raw HTML disabled); everything else is set as text.
"use strict";

const ui = {
  data: null,
  person: localStorage.getItem("person") || "",
  conversation: localStorage.getItem("conversation") || "",
  thread: "",
  clicked: new Set(),
  inputs: new Map(),  // what the fields of cards hold, by message and block: kept across redraws
  home: false,  // the Home tab is open instead of a conversation  // buttons this page clicked, shown pressed (as Slack shows a chosen button)
};
const $ = (id) => document.getElementById(id);
// The per-start token the server put in this page: every API call carries it (other pages cannot read it).
const TOKEN = document.querySelector('meta[name="playground-token"]').content;
const withToken = (url) => `${url}${url.includes("?") ? "&" : "?"}token=${encodeURIComponent(TOKEN)}`;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "class") node.className = value;
    else if (key === "html") node.innerHTML = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (value !== undefined && value !== null && value !== false) node.setAttribute(key, value);
  }
  for (const child of children) if (child !== null && child !== undefined) node.append(child);
  return node;
}

function conversations() {
  const all = ui.data ? ui.data.conversations : [];
  return all.filter((c) => !c.dm || c.person === ui.person);
}

function current() {
  const visible = conversations();
  return visible.find((c) => c.id === ui.conversation) || visible[0] || null;
}

function renderPeople() {
  const select = $("person");
  if (select.options.length) return;
  for (const p of ui.data.people) select.append(el("option", { value: p.id }, p.name));
  if (!ui.data.people.some((p) => p.id === ui.person)) ui.person = ui.data.people[0].id;
  select.value = ui.person;
}

function renderSidebar(conv) {
  const nav = $("conversations");
  nav.replaceChildren();
  nav.append(el("a", {
    href: "#", class: ui.home ? "active" : "", "data-conversation": "home",
    onclick: (e) => { e.preventDefault(); openHome(); },
  }, "🏠 Home"));
  for (const c of conversations()) {
    const label = c.dm ? `✉ ${ui.data.bot.name}` : `# ${c.name}`;
    nav.append(el("a", {
      href: "#", class: !ui.home && c.id === conv.id ? "active" : "", "data-conversation": c.id,
      onclick: (e) => { e.preventDefault(); choose(c.id); },
    }, label));
  }
}

// A message's time as Slack shows it (2:03 PM), the full date and time on hover. The emulated
// workspace hands out ts that follow the wall clock, so these are the real times of posting.
// After a fast-forward, times follow the demo clock (shown_at), so they agree with it.
function timeNode(at) {
  const when = new Date(at * 1000);
  return el("time", { class: "when", datetime: when.toISOString(), title: when.toLocaleString() },
    when.toLocaleTimeString([], { hour: "numeric", minute: "2-digit" }));
}

function messageNode(conv, m) {
  const classes = ["msg", m.bot ? "bot" : "person", m.streaming && "streaming", m.retracted && "retracted", m.deleted && "deleted"];
  const meta = el("div", { class: "meta" }, el("b", {}, m.name), m.bot ? el("span", { class: "badge" }, "APP") : null,
    timeNode(m.shown_at || parseFloat(m.ts)),
    m.edited ? el("span", { class: "edited" }, " (edited)") : null,
    m.retracted ? el("span", { class: "edited" }, " (retracted by the bot)") : null,
    m.streaming ? el("span", { class: "edited" }, " (streaming…)") : null,
    m.retracted || m.deleted ? null : el("button", {
      type: "button", class: "shortcut", "data-shortcut": m.ts,
      title: "Ask the app about this message, in its thread (Slack: the message's ⋮ menu → Ask threadbound)",
      onclick: () => shortcut(conv, m),
    }, "Ask threadbound"));
  const body = el("div", { class: "body" }, meta, stepsNode(m), el("div", { class: "text", html: m.html }));
  if (m.files.length) {
    const files = el("div", { class: "files" });
    for (const f of m.files) {
      if (f.canvas) files.append(el("a", { class: "file", href: `#canvas-${f.id}` }, `🗒 ${f.name} (canvas)`));
      else if (f.image) files.append(el("a", { class: "file", href: withToken(f.url), target: "_blank", rel: "noreferrer" }, el("img", { src: withToken(f.url), alt: f.name })));
      else files.append(el("a", { class: "file", href: withToken(f.url), download: f.name }, `📄 ${f.name}`));
    }
    body.append(files);
  }
  if (m.inputs && m.inputs.length) body.append(formNode(m));
  if (m.buttons.length) {
    const row = el("div", { class: "buttons" });
    for (const b of m.buttons) {
      const pressed = ui.clicked.has(clickKey(m, b));
      row.append(el("button", {
        type: "button", class: `bk ${b.style || ""} ${pressed ? "clicked" : ""}`, disabled: pressed,
        "aria-pressed": pressed ? "true" : "false", title: pressed ? "You chose this" : null,
        "data-action-id": b.action_id, "data-value": b.value,
        onclick: (e) => click(conv, m, b, e.currentTarget),
      }, b.label));
    }
    body.append(row);
  }
  if (m.reactions.length) {
    const row = el("div", { class: "reactions" });
    for (const r of m.reactions) row.append(el("span", { class: "reaction", title: `${r.who.join(", ")} reacted :${r.name}:`, "data-reaction": r.name }, `${r.emoji} ${r.count}`));
    body.append(row);
  }
  const initial = (m.name || "?").slice(0, 1).toUpperCase();
  return el("div", { class: classes.filter(Boolean).join(" "), "data-ts": m.ts }, el("div", { class: "avatar" }, initial), body);
}

// The run's tool steps, as its streamed answer shows them (✓ done, ⋯ working, ✕ failed).
const STEP_MARKS = { complete: "✓", in_progress: "⋯", pending: "⋯", error: "✕" };
function stepsNode(m) {
  if (!m.steps || !m.steps.length) return null;
  const list = el("ul", { class: "steps", "aria-label": "Steps" });
  for (const s of m.steps) {
    list.append(el("li", { class: `step ${s.status}`, "data-step": s.title }, `${STEP_MARKS[s.status] || "•"} ${s.title}`));
  }
  return list;
}

function ephemeralNode(note) {
  const body = el("div", { class: "body" }, el("div", { class: "meta" }, el("b", {}, ui.data.bot.name),
    el("span", { class: "edited" }, "Only visible to you")), el("div", { class: "text", html: note.html }));
  // A link in a private note (a per-person MCP server's "connect" link): the emulator's browser opens
  // it as the person viewing, signed in as them, and the page it ends on is shown here.
  for (const url of note.links || []) {
    const result = el("div", { class: "link-result" });
    const open = el("button", { class: "open-link", type: "button" }, "Open link as you");
    open.addEventListener("click", () => openLink(url, result));
    body.append(el("div", { class: "actions" }, open), result);
  }
  return el("div", { class: "msg bot ephemeral" }, el("div", { class: "avatar" }, "T"), body);
}

async function openLink(url, result) {
  result.textContent = "Opening…";
  try {
    const response = await fetch("/api/open-link", {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-Playground-Token": TOKEN },
      body: JSON.stringify({ as: ui.person, url }),
    });
    const answer = await response.json();
    if (!response.ok) throw new Error(answer.error || response.statusText);
    result.textContent = `${answer.status}: ${answer.page}`;
  } catch (err) {
    result.textContent = `Could not open the link: ${err.message}`;
  }
}

// A follow-up the bot scheduled for itself in this thread (channel_follow_up), not fired yet.
function followUpNode(f) {
  return el("div", { class: "follow-up", title: f.follow_up }, `⏰ Follow-up ${f.in} (${f.at}): ${f.note}`);
}

// The fast-forward button shows only while a follow-up waits; the demo clock, once it was moved, in
// the same form as message times (which follow it).
function renderClock() {
  const pending = ui.data.conversations.some((c) => (c.follow_ups || []).length);
  const clock = ui.data.clock;
  $("fast-forward").hidden = !pending;
  const ahead = Math.round(clock.offset / 60);
  const now = new Date(clock.at * 1000).toLocaleTimeString([], { hour: "numeric", minute: "2-digit" });
  $("clock").textContent = clock.offset ? `demo clock: ${now} (${ahead} min ahead)` : "";
  $("clock").title = clock.offset ? `${clock.now}: follow-ups fire by this clock, and new messages carry its time` : "";
}

async function fastForward() {
  try {
    const response = await fetch("/api/fast-forward", { method: "POST", body: "{}",
      headers: { "Content-Type": "application/json", "X-Playground-Token": TOKEN } });
    const answer = await response.json();
    if (!response.ok) throw new Error(answer.error || response.statusText);
    $("error").textContent = "";
  } catch (err) {
    $("error").textContent = `Fast-forward failed: ${err.message}`;
  }
}

function renderMessages(conv) {
  const box = $("messages");
  const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 60;
  box.replaceChildren();
  if (!conv.messages.length) {
    box.append(el("p", { class: "empty" }, conv.dm
      ? "Your direct messages with the bot. Say something — no mention needed here."
      : "Nothing here yet. Mention @threadbound to start a task; replies in its thread continue it."));
    box.append(examplesNode(conv));
  }
  for (const root of conv.messages) {
    const thread = el("div", { class: "thread", "data-thread": root.ts });
    if (conv.titles[root.ts]) thread.append(el("div", { class: "thread-title" }, conv.titles[root.ts]));
    thread.append(messageNode(conv, root));
    if (root.replies.length) {
      const replies = el("div", { class: "replies" });
      for (const r of root.replies) replies.append(messageNode(conv, r));
      thread.append(replies);
    }
    for (const note of conv.ephemerals.filter((n) => n.user === ui.person && n.thread_ts === root.ts)) {
      thread.append(ephemeralNode(note));
    }
    for (const f of (conv.follow_ups || []).filter((x) => x.thread_ts === root.ts)) thread.append(followUpNode(f));
    const status = conv.statuses[root.ts];
    if (status) thread.append(el("div", { class: "status" }, `${ui.data.bot.name} ${status}`));
    const session = (conv.sessions || {})[root.ts];
    if (session) thread.append(sessionNode(conv, root, session));
    if (!root.retracted && !root.deleted) {
      thread.append(el("button", { type: "button", class: "reply-link", onclick: () => replyTo(root) },
        root.replies.length ? `${root.replies.length} repl${root.replies.length === 1 ? "y" : "ies"} · Reply in thread` : "Reply in thread"));
    }
    box.append(thread);
  }
  const roots = new Set(conv.messages.map((m) => m.ts));
  for (const f of (conv.follow_ups || []).filter((x) => !roots.has(x.thread_ts))) box.append(followUpNode(f));
  for (const note of conv.ephemerals.filter((n) => n.user === ui.person && !roots.has(n.thread_ts))) {
    box.append(ephemeralNode(note));
  }
  if (atBottom) box.scrollTop = box.scrollHeight;
}

// One button per example prompt (app/playground/demo.py EXAMPLES): a click sends it as you, here.
function examplesNode(conv) {
  const row = el("div", { class: "examples", "aria-label": "Example prompts" }, el("span", { class: "examples-label" }, "Try one:"));
  for (const ex of ui.data.examples || []) {
    row.append(el("button", {
      type: "button", class: "example", "data-example": ex.shows, title: `Shows ${ex.shows}`,
      onclick: () => sendExample(conv, ex),
    }, el("b", {}, ex.shows), el("span", {}, ex.text), ex.file ? el("small", {}, " 📄 with a file") : null));
  }
  return row;
}

// A click on an example in the menu sends it and closes the menu.
function closeMenu() { $("examples-menu").open = false; }

async function sendExample(conv, ex) {
  const text = conv.dm ? ex.text : `@${ui.data.bot.name} ${ex.text}`;
  const file = ex.file ? new File([ex.file.text], ex.file.name, { type: "text/plain" }) : null;
  closeMenu();
  await post(conv, text, file, "");
}

function renderCanvases(conv) {
  const box = $("canvases");
  box.replaceChildren();
  for (const c of conv.canvases) {
    const open = box.dataset.open === c.id;
    box.append(el("details", { id: `canvas-${c.id}`, open: open ? "" : null }, el("summary", {}, `🗒 Canvas: ${c.title}`), el("div", { class: "text", html: c.html })));
  }
}

function render() {
  // A card's field being typed in keeps the focus across the redraw.
  const typing = document.activeElement && document.activeElement.dataset ? document.activeElement.dataset.blockId : null;
  const typingIn = typing ? document.activeElement.closest("[data-ts]") : null;
  drawAll();
  if (typing && typingIn) {
    const again = document.querySelector(`[data-ts="${typingIn.dataset.ts}"] [data-block-id="${typing}"]`);
    if (again) again.focus();
  }
}

function drawAll() {
  if (!ui.data) return;
  renderPeople();
  renderClock();
  const conv = current();
  if (!conv) return;
  ui.conversation = conv.id;
  renderSidebar(conv);
  $("composer").hidden = ui.home;
  if (ui.home) { renderHome(); return; }
  $("title").replaceChildren(conv.dm ? `✉ ${ui.data.bot.name}` : `# ${conv.name}`,
    el("small", {}, conv.dm ? "a direct message with the bot" : "a channel: mention the bot to start a task"),
    conv.profile ? el("small", { class: "profile", title: "the agent file profile this conversation runs under" }, `profile: ${conv.profile}`) : "");
  renderCanvases(conv);
  renderMessages(conv);
  renderComposer(conv);
  // Once a conversation has messages its examples move into the composer's "Examples" menu.
  $("examples-menu").hidden = !conv.messages.length;
  $("examples-menu").querySelector("div").replaceChildren(examplesNode(conv));
  const target = $("target");
  const root = ui.thread && conv.messages.find((m) => m.ts === ui.thread);
  target.hidden = !root;
  if (root) target.querySelector("span").textContent = `Replying in the thread of ${root.name}'s message`;
}

// In a DM every message reaches the bot: no mention to ask for, no mention button.
function renderComposer(conv) {
  const bot = ui.data.bot.name;
  $("mention").hidden = conv.dm;
  $("text").placeholder = conv.dm
    ? `Message ${bot} (Enter sends, Shift+Enter for a new line)`
    : `Message #${conv.name} — type @${bot} to mention the bot (Enter sends, Shift+Enter for a new line)`;
}

// The app's Home tab for the person chosen: what the app last published for them (views.publish).
function renderHome() {
  $("title").replaceChildren("🏠 Home", el("small", {}, `the app's Home tab, as ${ui.data.people.find((p) => p.id === ui.person).name} sees it`));
  $("canvases").replaceChildren();
  const box = $("messages");
  box.replaceChildren();
  const items = (ui.data.home || {})[ui.person] || [];
  if (!items.length) box.append(el("p", { class: "empty" }, "Opening…"));
  for (const item of items) {
    if (item.kind === "divider") box.append(el("hr", {}));
    else if (item.kind === "header") box.append(el("h3", {}, item.text));
    else {
      const row = el("div", { class: "home-item" }, el("div", { class: "text", html: item.html }));
      if (item.button) {
        row.append(el("button", { type: "button", class: "bk danger", "data-value": item.button.value,
          onclick: (e) => { e.currentTarget.disabled = true; ways("/api/home-click", { action_id: item.button.action_id, value: item.button.value }); },
        }, item.button.label));
      }
      box.append(row);
    }
  }
}

// Opening the Home tab asks the app to draw it (app_home_opened), as Slack does on every opening.
function openHome() {
  ui.home = true;
  render();
  ways("/api/home", {});
}

async function shortcut(conv, m) {
  await ways("/api/shortcut", { channel: conv.id, ts: m.ts });
}

// The shortcut, the slash command, the Home tab: JSON to the page's endpoint, as the person chosen.
async function ways(path, body) {
  try {
    const response = await fetch(path, { method: "POST",
      headers: { "Content-Type": "application/json", "X-Playground-Token": TOKEN },
      body: JSON.stringify({ as: ui.person, ...body }) });
    const answer = await response.json();
    if (!response.ok) throw new Error(answer.error || response.statusText);
    $("error").textContent = answer.status === 200 ? "" : `The app answered with HTTP ${answer.status}`;
    return true;
  } catch (err) {
    $("error").textContent = `Not delivered: ${err.message}`;
    return false;
  }
}

function choose(id) {
  ui.home = false;
  ui.conversation = id;
  ui.thread = "";
  localStorage.setItem("conversation", id);
  render();
}

function replyTo(root) {
  ui.thread = root.ts;
  render();
  $("text").focus();
}

async function send(event) {
  event.preventDefault();
  const conv = current();
  const text = $("text").value;
  const file = $("file").files[0];
  if (!conv || (!text.trim() && !file)) return;
  const command = ui.data.slash_command || "/threadbound";
  if (!file && (text.trim() === command || text.trim().startsWith(`${command} `))) {
    // The slash command: its answer comes back as a note only you see.
    if (await ways("/api/command", { channel: conv.id, text: text.trim().slice(command.length) })) $("text").value = "";
    return;
  }
  if (await post(conv, text, file, ui.thread)) {
    $("text").value = "";
    $("file").value = "";
    $("file-name").textContent = "Attach a file";
  }
}

// Post as the person chosen, in `thread` ("" for the top level); true when it was taken.
async function post(conv, text, file, thread) {
  const form = new FormData();
  form.append("as", ui.person);
  form.append("channel", conv.id);
  form.append("text", text);
  if (thread) form.append("thread_ts", thread);
  if (file) form.append("file", file, file.name);
  $("send").disabled = true;
  try {
    const response = await fetch("/api/messages", { method: "POST", body: form, headers: { "X-Playground-Token": TOKEN } });
    const answer = await response.json();
    if (!response.ok) throw new Error(answer.error || response.statusText);
    $("error").textContent = "";
    return true;
  } catch (err) {
    $("error").textContent = `Not sent: ${err.message}`;
    return false;
  } finally {
    $("send").disabled = false;
  }
}

// The thread's agent session (agents.sessions.*): its status, and Slack's Stop while it works.
function sessionNode(conv, root, session) {
  const row = el("div", { class: "session", "data-session": session.status }, `Session: ${session.status}`);
  if (session.status === "processing") {
    row.append(el("button", { type: "button", class: "stop", onclick: (e) => stopSession(conv, root, e.target) }, "■ Stop"));
  }
  return row;
}

async function stopSession(conv, root, node) {
  node.disabled = true;
  try {
    const response = await fetch("/api/stop", {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-Playground-Token": TOKEN },
      body: JSON.stringify({ as: ui.person, channel: conv.id, thread_ts: root.ts }),
    });
    const answer = await response.json();
    if (!response.ok) throw new Error(answer.error || response.statusText);
    $("error").textContent = answer.status === 200 ? "" : `The app answered the Stop with HTTP ${answer.status}`;
  } catch (err) {
    $("error").textContent = `Stop not delivered: ${err.message}`;
    node.disabled = false;
  }
}

// A card's fields (an MCP server's form): what they hold is kept in ui.inputs and sent with a click.
function formNode(m) {
  const form = el("div", { class: "form" });
  for (const f of m.inputs) {
    const key = `${m.ts}|${f.block_id}`;
    const value = ui.inputs.has(key) ? ui.inputs.get(key) : f.initial;
    let field;
    if (f.kind === "select" || f.kind === "multiselect") {
      field = el("select", { multiple: f.kind === "multiselect" ? "" : null, "data-block-id": f.block_id });
      if (f.kind === "select") field.append(el("option", { value: "" }, "—"));
      const chosen = value.split("\n");
      for (const o of f.options) field.append(el("option", { value: o.value, selected: chosen.includes(o.value) ? "" : null }, o.label || o.value));
      field.addEventListener("change", () => ui.inputs.set(key, [...field.selectedOptions].map((o) => o.value).join("\n")));
    } else {
      field = el("input", { type: f.kind === "number" ? "number" : "text", value, "data-block-id": f.block_id });
      field.addEventListener("input", () => ui.inputs.set(key, field.value));
    }
    form.append(el("label", { class: "field" }, `${f.label}${f.optional ? "" : " *"}`, field, f.hint ? el("small", {}, f.hint) : null));
  }
  return form;
}

function formValues(m) {
  const values = {};
  for (const f of m.inputs || []) {
    const key = `${m.ts}|${f.block_id}`;
    const value = ui.inputs.has(key) ? ui.inputs.get(key) : f.initial;
    if (value) values[f.block_id] = value;
  }
  return values;
}

function clickKey(m, b) {
  return `${ui.person}|${m.ts}|${b.action_id}|${b.value}`;
}

async function click(conv, m, button, node) {
  node.disabled = true;
  if (button.type === "feedback_buttons") {
    // 👍 and 👎 are one choice: picking one un-picks the other, as in Slack.
    for (const other of m.buttons) if (other.action_id === button.action_id) ui.clicked.delete(clickKey(m, other));
  }
  ui.clicked.add(clickKey(m, button));
  render();  // the chosen button shows as pressed at once
  try {
    const response = await fetch("/api/click", {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-Playground-Token": TOKEN },
      body: JSON.stringify({ as: ui.person, channel: conv.id, ts: m.ts, action_id: button.action_id,
        block_id: button.block_id, type: button.type, value: button.value, values: formValues(m) }),
    });
    const answer = await response.json();
    if (!response.ok) throw new Error(answer.error || response.statusText);
    $("error").textContent = answer.status === 200 ? "" : `The app answered the click with HTTP ${answer.status}`;
  } catch (err) {
    $("error").textContent = `Click not delivered: ${err.message}`;
    ui.clicked.delete(clickKey(m, button));
    render();
  }
}

function connect() {
  const events = new EventSource(withToken("/api/events"));
  events.onopen = () => { $("connection").textContent = "live"; $("connection").className = "connection live"; };
  events.onerror = () => {
    $("connection").textContent = "reconnecting…"; $("connection").className = "connection";
    // A restarted playground has a new token: this page's is refused, so load the new page.
    fetch(withToken("/api/state"), { headers: { "X-Playground-Token": TOKEN } })
      .then((r) => { if (r.status === 403) location.reload(); }).catch(() => {});
  };
  events.onmessage = (e) => { ui.data = JSON.parse(e.data); render(); };
}

// Another person replies where the last one was replying, as long as they can see that conversation
// (a DM is its person's only).
$("person").addEventListener("change", (e) => {
  const before = current();
  ui.person = e.target.value;
  localStorage.setItem("person", ui.person);
  const after = current();
  if (!before || !after || before.id !== after.id) ui.thread = "";
  render();
  if (ui.home) ways("/api/home", {});
});
$("composer").addEventListener("submit", send);
$("fast-forward").addEventListener("click", fastForward);
$("text").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("composer").requestSubmit(); }
});
$("mention").addEventListener("click", () => {
  const box = $("text");
  box.value = `@${ui.data ? ui.data.bot.name : "threadbound"} ${box.value}`;
  box.focus();
});
$("leave-thread").addEventListener("click", () => { ui.thread = ""; render(); });
$("file").addEventListener("change", (e) => {
  const file = e.target.files[0];
  $("file-name").textContent = file ? file.name : "Attach a file";
});
$("canvases").addEventListener("toggle", (e) => {
  if (e.target.open) $("canvases").dataset.open = e.target.id.replace("canvas-", "");
}, true);
connect();
