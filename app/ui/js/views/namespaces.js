// Each namespace's effective group and where it comes from; superusers attach and detach
// groups here (on namespaces, tenants, and the default), tenant admins see their own.
import { api, mapLimit, paths } from "../api.js";
import { fill, h, notice, select } from "../dom.js";
import { SOURCES } from "../format.js";

// Up to this many tenants open at once; past it each loads when opened.
const OPEN_TENANTS = 8;

export function render(root, { session }) {
  const status = notice();
  const sections = h("div");
  const defaultPanel = h("section", { class: "panel", id: "default-group" });
  fill(
    root,
    h("div", { class: "page-head" }, h("h1", {}, "Namespaces")),
    status.element,
    session.superuser ? defaultPanel : null,
    sections,
  );
  let groups = session.resourceGroups;
  const tenants = new Map(); // name -> reload()

  async function act(request) {
    try {
      await request();
      status.clear();
    } catch (error) {
      status.error(error);
    }
  }

  async function reloadAll() {
    await Promise.all([
      session.superuser ? showDefault() : null,
      ...[...tenants.values()].map((reload) => reload()),
    ]);
  }

  async function showDefault() {
    const current = await api(paths.defaultGroup());
    const choice = select(groups, { value: current, placeholder: "— group —", "aria-label": "Default group" });
    fill(
      defaultPanel,
      h("h2", {}, "Default group"),
      h(
        "div",
        { class: "tenant-group" },
        h("span", {}, "Namespaces with no group of their own or their tenant's: ", groupLink(current)),
        h(
          "form",
          {
            class: "inline",
            onSubmit: (event) => {
              event.preventDefault();
              if (!choice.value) return;
              act(async () => {
                await api(paths.defaultGroup(choice.value), { method: "POST" });
                await reloadAll();
              });
            },
          },
          choice,
          h("button", { type: "submit", class: "secondary" }, "Set default"),
          current
            ? h(
                "button",
                {
                  type: "button",
                  class: "danger",
                  onClick: () =>
                    act(async () => {
                      await api(paths.defaultGroup(), { method: "DELETE" });
                      await reloadAll();
                    }),
                },
                "Clear",
              )
            : null,
        ),
      ),
    );
  }

  function tenantSection(tenant, open) {
    const body = h("div", { class: "muted" }, "Loading…");
    const details = h(
      "details",
      { class: "tenant panel", open, dataset: { tenant } },
      h("summary", {}, `Tenant ${tenant}`),
      body,
    );
    let loaded = false;
    async function reload() {
      loaded = true;
      try {
        fill(body, await tenantContent(tenant, { groups, superuser: session.superuser, act, reload: reloadAll }));
        body.className = "";
      } catch (error) {
        body.className = "notice error";
        body.textContent = error.reason ?? String(error);
      }
    }
    function load() {
      if (details.open && !loaded) {
        tenants.set(tenant, reload);
        reload();
      }
    }
    details.addEventListener("toggle", load);
    load();
    return details;
  }

  (async () => {
    try {
      // The groups to choose from, as of now rather than as of sign-in.
      groups = (await api(paths.session)).resourceGroups;
    } catch (error) {
      status.error(error);
    }
    if (!session.tenants.length) {
      fill(sections, h("p", { class: "panel muted" }, "This role administers no tenant."));
    } else {
      const open = session.tenants.length <= OPEN_TENANTS;
      fill(sections, session.tenants.map((tenant) => tenantSection(tenant, open)));
    }
    if (session.superuser) await act(showDefault);
  })();
}

async function tenantContent(tenant, { groups, superuser, act, reload }) {
  const [names, own] = await Promise.all([
    api(paths.namespaces(tenant)),
    api(paths.tenantGroup(tenant)),
  ]);
  const namespaces = await mapLimit(names, 6, async (full) => {
    const namespace = full.slice(full.indexOf("/") + 1);
    return { namespace, ...(await api(paths.appliedGroup(tenant, namespace))) };
  });
  const tenantLine = h(
    "div",
    { class: "tenant-group" },
    h("span", {}, "Tenant's group: ", groupLink(own)),
    superuser
      ? attachForm({
          label: `Group of tenant ${tenant}`,
          groups,
          current: own,
          attach: (rg) => act(async () => {
            await api(paths.tenantGroup(tenant, rg), { method: "POST" });
            await reload();
          }),
          detach: own
            ? () => act(async () => {
                await api(paths.tenantGroup(tenant), { method: "DELETE" });
                await reload();
              })
            : null,
        })
      : null,
  );
  const rows = namespaces.map(({ namespace, resourceGroup, source }) =>
    h(
      "tr",
      { dataset: { namespace: `${tenant}/${namespace}`, group: resourceGroup ?? "", source: source ?? "" } },
      h("td", { class: "mono" }, `${tenant}/${namespace}`),
      h("td", {}, groupLink(resourceGroup)),
      h("td", {}, source ? h("span", { class: "badge source" }, SOURCES[source] ?? source) : "–"),
      superuser
        ? h(
            "td",
            {},
            attachForm({
              label: `Group of namespace ${tenant}/${namespace}`,
              groups,
              current: source === "namespace" ? resourceGroup : null,
              attach: (rg) => act(async () => {
                await api(paths.namespaceGroup(tenant, namespace, rg), { method: "POST" });
                await reload();
              }),
              detach:
                source === "namespace"
                  ? () => act(async () => {
                      await api(paths.namespaceGroup(tenant, namespace), { method: "DELETE" });
                      await reload();
                    })
                  : null,
            }),
          )
        : null,
    ),
  );
  return [
    tenantLine,
    h(
      "table",
      {},
      h(
        "thead",
        {},
        h(
          "tr",
          {},
          h("th", {}, "Namespace"),
          h("th", {}, "Effective group"),
          h("th", {}, "From"),
          superuser ? h("th", {}, "Own group") : null,
        ),
      ),
      h(
        "tbody",
        {},
        rows.length ? rows : h("tr", {}, h("td", { colspan: 4, class: "muted" }, "No namespaces.")),
      ),
    ),
    superuser ? null : h("p", { class: "small muted" }, "Superusers change attachments."),
  ];
}

function groupLink(group) {
  return group
    ? h("a", { href: `#/groups/${encodeURIComponent(group)}` }, group)
    : h("span", { class: "muted" }, "none");
}

function attachForm({ label, groups, current, attach, detach }) {
  const choice = select(groups, { value: current, placeholder: "— group —", "aria-label": label });
  return h(
    "form",
    {
      class: "inline",
      onSubmit: (event) => {
        event.preventDefault();
        if (choice.value) attach(choice.value);
      },
    },
    choice,
    h("button", { type: "submit", class: "secondary" }, "Attach"),
    detach ? h("button", { type: "button", class: "danger", onClick: detach }, "Detach") : null,
  );
}
