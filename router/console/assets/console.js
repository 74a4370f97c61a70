// egrid console: plain JavaScript over the admin HTTP API. Everything the page shows is put
// in with textContent (never parsed as HTML), and every answer the API gives that is not a success
// is shown as it came, status and body.
"use strict";

const TOKEN = "egrid.adminToken"; // sessionStorage key: this tab only, gone when it closes
const POLL_MS = 2000;
const SPARK_POINTS = 30;

const $ = (id) => document.getElementById(id);
let pollTimer = null;
let rates = {}; // counter key -> the last rates per second, oldest first, for the sparklines

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

// APIError is an answer of the admin API that is not a success, kept as it came.
class APIError extends Error {
  constructor(method, path, status, body) {
    super(`${method} ${path} answered ${status}\n${body}`);
    this.status = status;
    this.body = body;
  }
}

async function api(method, path, body) {
  const headers = { "Authorization": "Bearer " + (sessionStorage.getItem(TOKEN) || "") };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let resp;
  try {
    resp = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), cache: "no-store" });
  } catch (e) {
    throw new Error(`${method} ${path} failed: ${e.message} (is the server running?)`);
  }
  if (!resp.ok) {
    const text = await resp.text();
    if (resp.status === 401) sessionStorage.removeItem(TOKEN);
    throw new APIError(method, path, resp.status, text);
  }
  return resp;
}

async function getJSON(path) {
  return (await api("GET", path)).json();
}

function showError(e) {
  const box = $("error");
  box.textContent = e.message;
  box.hidden = false;
  if (e.status === 401) showLogin();
}

function clearError() {
  $("error").hidden = true;
  $("error").textContent = "";
}

function showLogin() {
  $("login").hidden = false;
  $("nav").hidden = true;
  render();
}

// enc encodes a name or id as one segment of a URL's path or of the page's hash. An id "." or
// ".." is sent as "%2E" or "%2E%2E", which encodeURIComponent leaves alone; a browser still
// takes those for the "." and ".." segments it removes from a path (the WHATWG URL standard),
// so a fetch sends such an id as a query parameter instead (eventPath).
const enc = (s) => {
  s = String(s);
  return s === "." || s === ".." ? s.replaceAll(".", "%2E") : encodeURIComponent(s);
};
const subPath = (t, s) => `/admin/topics/${enc(t)}/eventSubscriptions/${enc(s)}`;
// eventPath is the explain route of event id: the id in the query, where any id reaches the
// server as it is (a path segment "." or ".." would not).
const eventPath = (t, s, id) => subPath(t, s) + `/events?id=${encodeURIComponent(id)}`;

// sparkline draws the last values of a series as an inline SVG polyline.
function sparkline(points, label) {
  const w = 120, h = 24;
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("class", "spark");
  svg.setAttribute("width", w);
  svg.setAttribute("height", h);
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", label);
  const max = Math.max(1, ...points);
  const step = w / (SPARK_POINTS - 1);
  const start = SPARK_POINTS - points.length;
  const pl = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  pl.setAttribute("points", points.map((v, i) => `${((start + i) * step).toFixed(1)},${(h - 2 - (v / max) * (h - 4)).toFixed(1)}`).join(" "));
  svg.append(pl);
  return svg;
}

// sample reads the router's counters and keeps, per topic or subscription and name, the
// rate per second between successive reads.
let lastCounters = null;
async function sample() {
  const c = await getJSON("/console/api/counters");
  const now = Date.parse(c.time) || Date.now();
  const sums = {};
  for (const k of c.value) {
    const key = k.name + "|" + k.scope.toLowerCase();
    sums[key] = (sums[key] || 0) + k.value;
  }
  if (lastCounters) {
    const dt = Math.max(0.001, (now - lastCounters.time) / 1000);
    for (const key of new Set([...Object.keys(sums), ...Object.keys(lastCounters.sums)])) {
      const rate = Math.max(0, ((sums[key] || 0) - (lastCounters.sums[key] || 0)) / dt);
      const series = rates[key] || (rates[key] = []);
      series.push(rate);
      if (series.length > SPARK_POINTS) series.shift();
    }
  }
  lastCounters = { time: now, sums };
  return sums;
}

function rateCell(name, scope, sums) {
  const key = name + "|" + scope.toLowerCase();
  const series = rates[key] || [];
  const last = series.length ? series[series.length - 1] : 0;
  return el("td", { class: "num" }, sparkline(series, `${name} per second`), " ",
    el("span", { "data-rate": key }, `${last.toFixed(1)}/s`), el("span", { class: "muted" }, ` (${sums[key] || 0} total)`));
}

// Views. Each returns nothing and re-renders $("view"); polling views set pollTimer.

// storeHealth reads GET /admin/health, whose 503 is a report (the store is not healthy), not
// a failure of the call; any other answer is shown as it came.
async function storeHealth() {
  let h;
  try {
    h = await getJSON("/admin/health");
  } catch (e) {
    try {
      h = e.status === 503 ? JSON.parse(e.body) : null;
    } catch (_) {
      h = null;
    }
    if (!h || !h.store) return el("p", { id: "health" }, "Store: ", el("span", { class: "error" }, e.message));
  }
  const st = h.store;
  return el("p", { id: "health" }, "Store: ", el("span", { class: st.state === "healthy" ? "ok" : "bad" }, st.state),
    st.reason ? " — " + st.reason : "", st.corruptions ? ` (${st.corruptions} pieces of damage found)` : "");
}

async function topicsView() {
  const sums = await sample();
  const topics = (await getJSON("/admin/topics")).value;
  const health = await storeHealth();
  const rows = topics.map((t) => el("tr", {},
    el("td", {}, el("a", { href: `#/topics/${enc(t.name)}` }, t.name)),
    el("td", {}, t.properties.inputSchema || "EventGridSchema"),
    rateCell("PublishSuccessCount", t.name, sums),
    rateCell("PublishFailCount", t.name, sums)));
  render(el("h1", {}, "Topics"), health,
    topics.length ? el("table", { id: "topics" }, el("tr", {}, el("th", {}, "Topic"), el("th", {}, "Input schema"), el("th", {}, "Published"), el("th", {}, "Publish failures")), ...rows)
      : el("p", { class: "muted" }, "No topics yet: create one with PUT /admin/topics/{topic}."));
  poll(topicsView);
}

async function topicView(topic) {
  const sums = await sample();
  const subs = (await getJSON(`/admin/topics/${enc(topic)}/eventSubscriptions`)).value;
  const states = await Promise.all(subs.map((s) => getJSON(subPath(topic, s.name)).catch((e) => ({ error: e }))));
  const rows = subs.map((s, i) => {
    const st = states[i];
    const raw = (st.properties && st.properties.deliveryState) || null;
    const ds = raw && !raw.loading ? raw : null; // loading: the delivery state is not known yet
    const scope = topic + "/" + s.name;
    return el("tr", { "data-subscription": s.name },
      el("td", {}, el("a", { href: `#/topics/${enc(topic)}/subscriptions/${enc(s.name)}` }, s.name)),
      el("td", {}, st.error ? el("span", { class: "bad" }, st.error.message) : (st.properties.provisioningState || ""), loadingNote(raw)),
      el("td", { class: "num" }, ds ? ds.backlog : "–"),
      el("td", { class: "num" }, ds ? ds.inFlight : "–"),
      el("td", { class: "num" }, ds ? ds.oldestUndeliveredAgeSeconds.toFixed(1) + " s" : "–"),
      el("td", {}, probationCell(topic, s.name, ds)),
      rateCell("DeliverySuccessCount", scope, sums));
  });
  render(el("h1", {}, "Topic ", topic),
    el("h2", {}, "Event subscriptions"),
    subs.length ? el("table", { id: "subscriptions" }, el("tr", {}, el("th", {}, "Subscription"), el("th", {}, "State"), el("th", {}, "Backlog"),
      el("th", {}, "In flight"), el("th", {}, "Oldest"), el("th", {}, "Probation"), el("th", {}, "Delivered")), ...rows)
      : el("p", { class: "muted" }, "No event subscriptions on this topic."));
  poll(() => topicView(topic));
}

// loadingNote says that a subscription is reading its stored state, and since when; nothing
// when it is not.
function loadingNote(ds) {
  if (!ds || !ds.loading) return "";
  return el("span", { class: "muted", "data-loading": "yes" }, ` loading its state since ${ds.loadingSince || "?"}`);
}

function probationCell(topic, name, ds) {
  if (!ds) return "–";
  if (!ds.probation) return el("span", { class: "ok", "data-probation": "no" }, "no");
  return el("span", {},
    el("span", { class: "bad", "data-probation": "yes" }, `yes (${ds.probationCause || "failures"}) until ${ds.probationUntil || "?"}`), " ",
    el("button", { type: "button", class: "end-probation", onclick: () => act(() => api("POST", subPath(topic, name) + "/endProbation")) }, "End probation"));
}

async function subscriptionView(topic, name) {
  const sums = await sample();
  const s = await getJSON(subPath(topic, name));
  const raw = s.properties.deliveryState || null;
  const ds = raw && !raw.loading ? raw : null; // loading: the delivery state is not known yet
  const attempts = (await getJSON(`/console/api/attempts/${enc(topic)}/${enc(name)}`)).value;
  const scope = topic + "/" + name;
  const dest = s.properties.destination || {};
  const state = el("table", { id: "state" },
    el("tr", {}, el("th", {}, "Destination"), el("td", {}, dest.endpointType || "", " ", (dest.properties && dest.properties.endpointBaseUrl) || "")),
    el("tr", {}, el("th", {}, "Provisioning"), el("td", {}, s.properties.provisioningState || "", " ", s.properties.provisioningMessage || "", loadingNote(raw))),
    el("tr", {}, el("th", {}, "Backlog"), el("td", { class: "num", id: "backlog" }, ds ? ds.backlog : "–")),
    el("tr", {}, el("th", {}, "In flight"), el("td", { class: "num" }, ds ? ds.inFlight : "–")),
    el("tr", {}, el("th", {}, "Oldest undelivered"), el("td", { class: "num" }, ds ? ds.oldestUndeliveredAgeSeconds.toFixed(1) + " s" : "–")),
    el("tr", {}, el("th", {}, "Probation"), el("td", { id: "probation" }, probationCell(topic, name, ds))),
    el("tr", {}, el("th", {}, "Delivered"), rateCell("DeliverySuccessCount", scope, sums)),
    el("tr", {}, el("th", {}, "Failed attempts"), rateCell("DeliveryAttemptFailCount", scope, sums)),
    el("tr", {}, el("th", {}, "Dead-lettered"), rateCell("DeadLetteredCount", scope, sums)));
  const attemptRows = attempts.flatMap((a) => a.events.map((ev, i) => el("tr", { class: "attempt" },
    el("td", {}, i === 0 ? a.time : ""),
    el("td", {}, i === 0 ? el("span", { class: a.outcome === "Delivered" ? "ok" : "bad" }, a.outcome + (a.probe ? " (probe)" : "") + (a.noAttempt ? " (no attempt)" : "")) : ""),
    el("td", { class: "num" }, i === 0 && a.statusCode ? a.statusCode : ""),
    el("td", {}, el("a", { href: `#/topics/${enc(topic)}/subscriptions/${enc(name)}/events/${enc(ev.id)}` }, ev.id)),
    el("td", { class: "num" }, ev.attempt),
    el("td", {}, ev.decision))).concat(a.moreEvents ? [el("tr", { class: "attempt more" },
    el("td", {}, a.events.length ? "" : a.time), el("td", {}), el("td", {}),
    el("td", { class: "muted" }, `and ${a.moreEvents} more events`), el("td", {}), el("td", {}))] : []));
  const live = el("div", { id: "subscription-live" }, state,
    el("h2", {}, "Recent attempts"),
    attemptRows.length ? el("table", { id: "attempts" }, el("tr", {}, el("th", {}, "Time"), el("th", {}, "Outcome"), el("th", {}, "Status"),
      el("th", {}, "Event"), el("th", {}, "Attempt"), el("th", {}, "Decision")), ...attemptRows)
      : el("p", { class: "muted" }, "No attempts since the server started."));
  // A poll replaces only what it read: the explain form below keeps what the operator is
  // typing, and the focus.
  const page = "subscription " + JSON.stringify([topic, name]);
  const shown = $("subscription-live");
  if (shown && $("view").dataset.page === page) {
    shown.replaceWith(live);
    poll(() => subscriptionView(topic, name));
    return;
  }
  render(el("h1", {}, "Subscription ", el("a", { href: `#/topics/${enc(topic)}` }, topic), " / ", name),
    live,
    el("h2", {}, "Explain an event"),
    el("form", { class: "inline", id: "explain-form", onsubmit: (e) => { e.preventDefault(); location.hash = `#/topics/${enc(topic)}/subscriptions/${enc(name)}/events/${enc(e.target.elements.id.value)}`; } },
      el("input", { name: "id", placeholder: "event id", required: "" }), " ", el("button", { type: "submit" }, "Explain")),
    el("h2", {}, "Dead letters"),
    el("p", {}, el("a", { href: `#/topics/${enc(topic)}/subscriptions/${enc(name)}/deadLetters`, id: "dead-letters-link" }, "Dead letters and replay")));
  $("view").dataset.page = page;
  poll(() => subscriptionView(topic, name));
}

// explainView shows GET .../events/{id}: where the event stands, then its attempts with the
// rule that decided each next step, then the answer as it came (raw JSON).
async function explainView(topic, name, id) {
  const path = eventPath(topic, name, id);
  let x;
  try {
    x = await getJSON(path);
  } catch (e) {
    render(el("h1", {}, "Explain ", id), backTo(topic, name), el("div", { class: "error", id: "explain-error" }, e.message));
    return;
  }
  const ended = x.state === "DeadLettered" || x.state === "Dropped";
  const row = (label, value, attrs) => el("tr", {}, el("th", {}, label), el("td", attrs || {}, value));
  const head = el("table", { id: "explain-summary" },
    row("Published", when(x.publishTime)),
    row("State", el("span", { class: x.state === "Delivered" ? "ok" : ended ? "bad" : "" }, x.state), { id: "explain-state" }),
    row("Attempts", `${x.attemptsMade} of ${x.maxDeliveryAttempts}` + (x.cutAttempts ? ` (${x.cutAttempts} more cut when the subscription stopped, not counted)` : "") +
      (x.earlierAttempts ? ` (${x.earlierAttempts} earlier not kept)` : "")),
    x.state === "Retrying" || x.state === "Pending" || x.state === "InFlight" ? row("Attempts left", String(x.attemptsLeft || 0)) : null,
    x.attemptStarted ? row("Attempt in flight since", when(x.attemptStarted)) : null,
    x.nextAttempt ? row("Next attempt", when(x.nextAttempt)) : null,
    x.deadline ? row("Deadline", when(x.deadline) + (x.timeToLiveLeft ? ` (time to live left ${duration(x.timeToLiveLeft || 0)})` : "")) : null,
    ended ? row("Reason", x.reason || "") : null,
    x.state === "DeadLettered" ? row("Dead-letter object", x.deadLetterObject || "not written yet (waiting in the outbox)") : null);
  const attempts = (x.attempts || []).map((a) => el("tr", { class: "explained-attempt" },
    el("td", { class: "num" }, a.noAttempt ? "–" : a.attempt),
    el("td", {}, when(a.time)),
    el("td", { class: "num" }, a.noAttempt ? "" : duration(a.duration || 0)),
    el("td", { class: "outcome" }, a.noAttempt ? "came due, no attempt" : el("span", { class: a.outcome === "Delivered" ? "ok" : "bad" }, a.outcome || "")),
    el("td", { class: "num" }, a.statusCode || ""),
    el("td", { class: "explanation" }, a.explanation || "", a.rule ? el("span", { class: "muted" }, ` (rule ${a.rule})`) : null,
      a.response ? el("div", { class: "muted response" }, "response: ", a.response) : null),
    el("td", {}, a.due ? when(a.due) : ""),
    el("td", { class: "flags" }, [a.probe ? "probe" : "", a.heldBack ? `held back ${duration(a.heldBack)}` + (a.probe ? " by a probation" : "") : ""].filter((f) => f).join("; "))));
  const raw = el("details", { id: "explain-raw" }, el("summary", {}, "raw JSON"), el("pre", {}, JSON.stringify(x, null, 2)));
  render(el("h1", {}, "Explain ", id), backTo(topic, name),
    el("div", { id: "explain" }, head,
      el("h2", {}, "Attempts"),
      attempts.length ? el("table", { id: "explain-attempts" }, el("tr", {}, el("th", {}, "#"), el("th", {}, "Time"), el("th", {}, "Duration"),
        el("th", {}, "Outcome"), el("th", {}, "Status"), el("th", {}, "Decision"), el("th", {}, "Due"), el("th", {}, "Probation")), ...attempts)
        : el("p", { class: "muted" }, "No attempts kept."),
      raw));
}

// when shows a time of the API in UTC to the millisecond, and how far it is from now.
function when(t) {
  const ms = Date.parse(t);
  if (Number.isNaN(ms)) return String(t);
  const d = ms - Date.now();
  const rel = Math.abs(d) < 1000 ? "now" : d > 0 ? `in ${duration(d * 1e6)}` : `${duration(-d * 1e6)} ago`;
  return `${new Date(ms).toISOString().replace("T", " ")} (${rel})`;
}

// duration shows nanoseconds (the API's durations) as ms, s, min or h.
function duration(ns) {
  const ms = ns / 1e6;
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60e3) return `${(ms / 1000).toFixed(1)} s`;
  if (ms < 3600e3) return `${(ms / 60e3).toFixed(1)} min`;
  return `${(ms / 3600e3).toFixed(1)} h`;
}

function backTo(topic, name) {
  return el("p", {}, el("a", { href: `#/topics/${enc(topic)}/subscriptions/${enc(name)}` }, `← ${topic} / ${name}`));
}

async function deadLettersView(topic, name) {
  const answer = await getJSON(subPath(topic, name) + "/deadLetters/records");
  const records = answer.value || [];
  const more = answer.more ? el("p", { class: "muted", id: "dead-letters-more" },
    `The oldest ${records.length} records are shown; ${answer.more.records} more records of the last object and ${answer.more.objects} objects were not read. ` +
    `See them with egrid deadletter show --since ${answer.more.since}` +
    `${answer.more.after ? " --after " + answer.more.after : ""}${answer.more.offset ? " --offset " + answer.more.offset : ""}.`) : null;
  const rows = records.map((r) => el("tr", { class: "dead-letter" },
    el("td", {}, r.id), el("td", {}, r.eventType || ""), el("td", {}, r.deadLetterReason), el("td", { class: "num" }, r.deliveryAttempts),
    el("td", {}, r.lastDeliveryOutcome || ""), el("td", { class: "num" }, r.lastHttpStatusCode || ""), el("td", {}, r.written)));
  const progress = el("div", { class: "progress", id: "replay-progress" });
  const replay = async (e) => {
    const button = e.target;
    button.disabled = true;
    clearError();
    progress.textContent = "replay started…";
    try {
      const resp = await api("POST", subPath(topic, name) + "/deadLetters/replay", { wait: true });
      const reader = resp.body.getReader();
      const dec = new TextDecoder();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let nl;
        while ((nl = buf.indexOf("\n")) >= 0) {
          const line = JSON.parse(buf.slice(0, nl));
          buf = buf.slice(nl + 1);
          if (line.progress) progress.textContent = `${line.progress.stage}: ${line.progress.done}/${line.progress.total}`;
          if (line.error) progress.replaceChildren(el("div", { class: "error" }, `${line.error.code}: ${line.error.message}`));
          if (line.summary) {
            const s = line.summary;
            progress.replaceChildren(el("span", { id: "replay-summary" },
              `replay ${s.incomplete ? "incomplete" : s.completed ? "completed" : "stopped"}: ${s.unreadObjects ? `${s.unreadObjects} objects not read, ` : ""}found ${s.found}, replayed ${s.replayed}, skipped ${s.skipped}, delivered ${s.delivered}, dead-lettered ${s.deadLettered}, dropped ${s.dropped}`),
              ...(s.problems || []).map((p) => el("div", { class: "error" }, p)));
          }
        }
      }
    } catch (e) {
      progress.replaceChildren(el("div", { class: "error" }, e.message));
    }
    button.disabled = false;
  };
  render(el("h1", {}, "Dead letters of ", topic, " / ", name), backTo(topic, name),
    records.length ? el("table", { id: "dead-letters" }, el("tr", {}, el("th", {}, "Event"), el("th", {}, "Type"), el("th", {}, "Reason"), el("th", {}, "Attempts"),
      el("th", {}, "Last outcome"), el("th", {}, "Last status"), el("th", {}, "Written")), ...rows)
      : el("p", { class: "muted" }, "No dead letters."),
    ...(more ? [more] : []),
    el("p", {}, el("button", { type: "button", id: "replay" , onclick: replay }, "Replay all"), " ", el("span", { class: "muted" }, "publishes the dead letters to this subscription again; each is delivered once more")),
    progress);
}

// render shows a new page: nodes replace the view, and the view's page mark (which page a
// poll may update in place) is cleared.
function render(...nodes) {
  const view = $("view");
  delete view.dataset.page;
  view.replaceChildren(...nodes);
}

// poll runs fn again after POLL_MS; an error is shown and the polling goes on (but for a
// refused token, which shows the login form). The view's data-polls attribute counts the
// polls done, for whoever watches the page (the browser tests wait for it).
function poll(fn) {
  clearTimeout(pollTimer);
  pollTimer = setTimeout(() => fn().then(clearError, (e) => {
    showError(e);
    if (e.status !== 401) poll(fn);
  }).finally(() => {
    const view = $("view");
    view.dataset.polls = String(Number(view.dataset.polls || 0) + 1);
  }), POLL_MS);
}

// act runs an action, renders the page again and shows the action's error, if any, as the
// API answered it.
async function act(fn) {
  clearError();
  let err = null;
  try {
    await fn();
  } catch (e) {
    err = e;
  }
  await route();
  if (err) showError(err);
}

function route() {
  clearTimeout(pollTimer);
  if (sessionStorage.getItem(TOKEN) === null) { // an empty token is a sign-in too (--insecure-dev without a token)
    showLogin();
    return Promise.resolve();
  }
  $("login").hidden = true;
  $("nav").hidden = false;
  const parts = location.hash.replace(/^#\/?/, "").split("/").filter((p) => p !== "").map(decodeURIComponent);
  let view;
  if (parts.length === 0) view = topicsView();
  else if (parts[0] === "topics" && parts.length === 2) view = topicView(parts[1]);
  else if (parts[0] === "topics" && parts[2] === "subscriptions" && parts.length === 4) view = subscriptionView(parts[1], parts[3]);
  else if (parts[0] === "topics" && parts[2] === "subscriptions" && parts[4] === "events" && parts.length === 6) view = explainView(parts[1], parts[3], parts[5]);
  else if (parts[0] === "topics" && parts[2] === "subscriptions" && parts[4] === "deadLetters" && parts.length === 5) view = deadLettersView(parts[1], parts[3]);
  else view = Promise.reject(new Error(`no console page at ${location.hash}: start from the topics list`));
  return view.then(clearError, showError);
}

$("login").addEventListener("submit", (e) => {
  e.preventDefault();
  sessionStorage.setItem(TOKEN, $("token").value);
  $("token").value = "";
  route();
});
$("logout").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN);
  route();
});
window.addEventListener("hashchange", () => { clearError(); route(); });
route();
