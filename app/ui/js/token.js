// The operator's token lives in sessionStorage: it is gone when the tab closes, and other
// sites never see it (it travels only in the Authorization header of this server's API).
const KEY = "resourcegroups.token";

export function storedToken() {
  return sessionStorage.getItem(KEY);
}

export function storeToken(token) {
  sessionStorage.setItem(KEY, token);
}

export function forgetToken() {
  sessionStorage.removeItem(KEY);
}
