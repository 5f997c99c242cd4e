// The demo page's script: plain JavaScript, so the browser runs it as
// served. `?interval=<ms>&watch=<ms>` shorten the kit's waits (the browser
// test uses them).
// The local stack serves ./presence.ts with its types stripped
// (local/demo.ts).
import { PresenceKit } from "./presence.ts";

const params = new URLSearchParams(location.search);
const number = (name) =>
  params.has(name) ? Number(params.get(name)) : undefined;
const $ = (id) => document.getElementById(id);
// Put in the page by the server that serves it.
const anonKey = document.querySelector('meta[name="anon-key"]').content;

// The page is served by the API itself, so the project URL is its origin.
const supabase = globalThis.supabase.createClient(location.origin, anonKey, {
  auth: { persistSession: false },
});

let kit = null;
// A sign-in under way: a second submit (a double click) is ignored, not a
// second kit, which would ping twice as often.
let signingIn = false;
let signInsHandled = 0;
let kitsMade = 0;
let unwatch = null;
let myId = null;
let pings = 0;

function apiDown(down) {
  $("api-down").hidden = !down;
}

function render(users) {
  const list = $("users");
  list.replaceChildren();
  for (const u of [...users.values()].sort((a, b) => a.id - b.id)) {
    const li = document.createElement("li");
    li.dataset.id = String(u.id);
    li.dataset.status = u.status;
    if (u.id === myId) li.className = "me";
    const dot = document.createElement("span");
    dot.className = "dot";
    const name = document.createElement("span");
    name.className = "name";
    name.textContent = `${u.nombre_usuario ?? `#${u.id}`}${
      u.id === myId ? " (you)" : ""
    }`;
    const status = document.createElement("span");
    status.className = "status";
    status.textContent = u.status;
    li.append(dot, name, status);
    list.append(li);
  }
}

function start(email) {
  kitsMade++;
  kit = new PresenceKit(supabase, {
    url: location.origin,
    anonKey,
    intervalMs: number("interval"),
    watchIntervalMs: number("watch"),
    backoffBaseMs: number("backoff"),
    backoffMaxMs: number("backoff") && number("backoff") * 8,
  });
  kit.on("state", (state) => {
    $("me-state").textContent = state;
  });
  kit.on("ping", ({ user }) => {
    myId = user.id;
    $("me-id").textContent = String(user.id);
    $("pings").textContent = String(++pings);
    apiDown(false);
  });
  kit.on("error", (e) => {
    // No answer, or a gateway/relay failure: the API is down, not the user.
    if (e.status === 0 || e.status >= 500) apiDown(true);
    else if (e.code === "user_not_found") {
      $("notice").textContent =
        "This account has no row in usuarios, so it has no presence.";
    } else $("notice").textContent = `${e.code}: ${e.message}`;
  });
  $("me-email").textContent = email;
  $("notice").textContent = "";
  $("sign-in").hidden = true;
  $("session").hidden = false;
  kit.start();
  unwatch = kit.watch((users) => {
    apiDown(false);
    render(users);
  });
}

$("sign-in").addEventListener("submit", async (event) => {
  event.preventDefault();
  if (signingIn || kit) {
    signInsHandled++;
    return;
  }
  signingIn = true;
  const form = new FormData(event.target);
  $("error").textContent = "";
  const { error } = await supabase.auth.signInWithPassword({
    email: String(form.get("email")),
    password: String(form.get("password")),
  });
  signingIn = false;
  signInsHandled++;
  if (error) {
    if (
      error.status === undefined || error.status === 0 || error.status >= 500
    ) {
      apiDown(true);
    } else {
      $("error").textContent = error.message;
    }
    return;
  }
  apiDown(false);
  start(String(form.get("email")));
});

$("sign-out").addEventListener("click", async () => {
  unwatch?.();
  $("sign-out-error").textContent = "";
  const { error } = await kit.signOut();
  if (error) {
    // The session is kept (no network, Auth down): say so, stay signed in.
    $("sign-out-error").textContent = `Not signed out: ${error.message}`;
    return;
  }
  kit.dispose();
  kit = null;
  myId = null;
  $("session").hidden = true;
  $("sign-in").hidden = false;
});

// For the browser test and the curious: the kit and its ping count.
globalThis.presenceDemo = {
  get kit() {
    return kit;
  },
  get pings() {
    return pings;
  },
  get signInsHandled() {
    return signInsHandled;
  },
  get kitsMade() {
    return kitsMade;
  },
};
