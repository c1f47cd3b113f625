// Calls to this server's API with the stored token, and the paths the dashboard uses.
import { storedToken } from "./token.js";

// The server's root, from the page's own address (…/ui/), so the dashboard also works
// behind a proxy that serves it under a path prefix.
const ROOT = new URL("../", window.location.href);

export class ApiError extends Error {
  constructor(status, reason) {
    super(reason);
    this.status = status;
    this.reason = reason;
  }
}

/** Fired on window when the server refuses the token (401): the dashboard signs out. */
export const UNAUTHORIZED = "resourcegroups:unauthorized";

export async function api(path, { method = "GET", body } = {}) {
  const headers = { Accept: "application/json" };
  const token = storedToken();
  if (token) headers.Authorization = `Bearer ${token}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(new URL(path, ROOT), {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store",
    });
  } catch {
    throw new ApiError(0, "The server cannot be reached");
  }
  if (!response.ok) {
    const reason = await reasonOf(response);
    if (response.status === 401) {
      window.dispatchEvent(new CustomEvent(UNAUTHORIZED, { detail: reason }));
    }
    throw new ApiError(response.status, reason);
  }
  return response.status === 204 ? null : response.json();
}

async function reasonOf(response) {
  // The API's errors are Pulsar's {"reason": "..."}; a proxy's may be anything.
  try {
    const body = await response.json();
    if (body && typeof body.reason === "string") return body.reason;
  } catch {
    // not JSON
  }
  return `${response.status} ${response.statusText}`.trim();
}

const seg = encodeURIComponent;

export const paths = {
  session: "ui/api/session",
  group: (rg) => `admin/v2/resourcegroups/${seg(rg)}`,
  mode: (rg) => `admin/v2/resourcegroups/${seg(rg)}/mode`,
  usage: (rg, sinceSeconds) =>
    `admin/v2/resourcegroups/${seg(rg)}/usage?since=${Math.round(sinceSeconds)}`,
  namespaces: (tenant) => `admin/v2/namespaces/${seg(tenant)}`,
  appliedGroup: (tenant, ns) =>
    `admin/v2/namespaces/${seg(tenant)}/${seg(ns)}/resourcegroup?applied=true`,
  namespaceGroup: (tenant, ns, rg) =>
    `admin/v2/namespaces/${seg(tenant)}/${seg(ns)}/resourcegroup` + (rg ? `/${seg(rg)}` : ""),
  tenantGroup: (tenant, rg) =>
    `admin/v2/tenants/${seg(tenant)}/resourcegroup` + (rg ? `/${seg(rg)}` : ""),
  defaultGroup: (rg) => "admin/v2/default-resourcegroup" + (rg ? `/${seg(rg)}` : ""),
  requestQuotas: "admin/v2/request-quotas",
  defaultRequestQuota: "admin/v2/request-quotas/default",
  roleRequestQuota: (role) => `admin/v2/request-quotas/roles/${seg(role)}`,
};

/** `task` over `items`, at most `limit` at a time (a browser opens six connections). */
export async function mapLimit(items, limit, task) {
  const results = new Array(items.length);
  let next = 0;
  async function worker() {
    while (next < items.length) {
      const index = next++;
      results[index] = await task(items[index], index);
    }
  }
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return results;
}
