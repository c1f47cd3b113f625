// The dashboard's entry point: sign in, the top bar, and the routes between views.
import { api, paths, UNAUTHORIZED } from "./api.js";
import { fill, h } from "./dom.js";
import { forgetToken, storedToken } from "./token.js";
import * as groupView from "./views/group.js";
import * as groupsView from "./views/groups.js";
import * as namespacesView from "./views/namespaces.js";
import * as requestQuotasView from "./views/request_quotas.js";
import * as signInView from "./views/signin.js";

const ROUTES = [
  { pattern: /^#?\/?$/, nav: "groups", view: groupsView },
  { pattern: /^#\/groups\/(?<name>[^/]+)$/, nav: "groups", view: groupView },
  { pattern: /^#\/namespaces$/, nav: "namespaces", view: namespacesView },
  { pattern: /^#\/request-quotas$/, nav: "request-quotas", view: requestQuotasView },
];

const main = document.getElementById("view");
const nav = document.getElementById("nav");
const whoami = document.getElementById("whoami");

let session = null; // what /ui/api/session answered for the token; null when signed out
let leaveView = null; // stops the current view's refreshes

function leave() {
  if (leaveView) leaveView();
  leaveView = null;
}

function route() {
  leave();
  if (session === null) return;
  const hash = window.location.hash || "#/";
  for (const { pattern, nav: section, view } of ROUTES) {
    const match = hash.match(pattern);
    if (!match) continue;
    const params = Object.fromEntries(
      Object.entries(match.groups ?? {}).map(([key, value]) => [key, decodeURIComponent(value)]),
    );
    for (const link of nav.querySelectorAll("[data-nav]")) {
      link.classList.toggle("active", link.dataset.nav === section);
    }
    leaveView = view.render(main, { session }, params) ?? null;
    return;
  }
  fill(main, h("p", { class: "notice error" }, "No such page. "), h("a", { href: "#/" }, "Groups"));
}

function signedIn(answer) {
  session = answer;
  fill(
    document.getElementById("role"),
    h("strong", {}, session.role),
    session.superuser ? " · superuser" : " · tenant admin",
  );
  for (const link of nav.querySelectorAll("[data-superuser]")) link.hidden = !session.superuser;
  nav.hidden = false;
  whoami.hidden = false;
  route();
}

function signIn(message) {
  leave();
  session = null;
  nav.hidden = true;
  whoami.hidden = true;
  signInView.render(main, { message, onSignedIn: signedIn });
}

window.addEventListener("hashchange", route);
// The token expired or its key changed while signed in: sign in again.
window.addEventListener(UNAUTHORIZED, (event) => {
  if (session === null) return; // the sign-in form reports its own
  forgetToken();
  signIn(`Signed out: ${event.detail}`);
});
document.getElementById("sign-out").addEventListener("click", () => {
  forgetToken();
  signIn();
});

if (storedToken() === null) {
  signIn();
} else {
  api(paths.session).then(signedIn, (error) => {
    if (error.status === 401) forgetToken();
    signIn(error.reason);
  });
}
