// Signing in: a token checked against the server before it is kept.
import { api, paths } from "../api.js";
import { fill, h, notice } from "../dom.js";
import { forgetToken, storeToken } from "../token.js";

/** Show the form in `root`; `onSignedIn(session)` once the server accepts the token. */
export function render(root, { message, onSignedIn }) {
  const status = notice();
  if (message) status.error(message);
  const token = h("textarea", {
    id: "token",
    name: "token",
    rows: 4,
    autocomplete: "off",
    spellcheck: "false",
    placeholder: "eyJhbGciOi…",
    "aria-label": "Token",
  });
  fill(
    root,
    h(
      "section",
      { class: "panel signin" },
      h("h1", {}, "Sign in"),
      h(
        "p",
        { class: "muted" },
        "Paste a token: a superuser's, or a tenant admin's to see that tenant's namespaces and " +
          "groups. Mint one with ",
        h("code", {}, "rgadmin tokens create --subject ROLE"),
        ". It is kept in this tab only.",
      ),
      status.element,
      h(
        "form",
        {
          onSubmit: async (event) => {
            event.preventDefault();
            // An empty token is for a server with authentication disabled.
            storeToken(token.value.trim());
            try {
              onSignedIn(await api(paths.session));
            } catch (error) {
              forgetToken();
              status.error(error);
            }
          },
        },
        token,
        h("div", { class: "actions" }, h("button", { type: "submit", class: "primary" }, "Sign in")),
      ),
    ),
  );
  token.focus();
}
