// Unsaved form values that outlive the page: a reload, or the tab's move to another node's console
// (cluster.js hands every draft over in the URL fragment, as it does the token: sessionStorage
// belongs to one origin). A draft is keyed by the form's route (path and query) and holds only the
// fields the user changed from what the form opened with, so a default that depends on the node
// (the test callback URL is this node's own) stays the new node's default.
const PREFIX = 'molens.draft:'

const keyOf = (route) => `${PREFIX}${route}`

/** The fields of `form` that differ from `initial`, stored for `route` (none differ: no draft). */
export function saveDraft(route, form, initial, extra = {}) {
  const fields = {}
  for (const [k, v] of Object.entries(form)) if (v !== initial[k]) fields[k] = v
  if (!Object.keys(fields).length) sessionStorage.removeItem(keyOf(route))
  else sessionStorage.setItem(keyOf(route), JSON.stringify({ ...extra, fields }))
}

/** The draft stored for `route` ({fields, ...extra}), or null. */
export function loadDraft(route) {
  try {
    const d = JSON.parse(sessionStorage.getItem(keyOf(route)) || 'null')
    return d && typeof d.fields === 'object' && d.fields !== null ? d : null
  } catch {
    return null
  }
}

export function dropDraft(route) {
  sessionStorage.removeItem(keyOf(route))
}

/** Forget every draft of this tab (sign-out: the next key to sign in here is not handed them). */
export function dropAllDrafts() {
  for (const route of Object.keys(allDrafts())) dropDraft(route)
}

/** Every draft of this tab, {route: draft}, for a move to another node's console. */
export function allDrafts() {
  const out = {}
  for (let i = 0; i < sessionStorage.length; i++) {
    const k = sessionStorage.key(i)
    if (k && k.startsWith(PREFIX)) out[k.slice(PREFIX.length)] = sessionStorage.getItem(k)
  }
  return out
}

/** Take over the drafts a previous node's console handed over. */
export function restoreDrafts(drafts) {
  for (const [route, v] of Object.entries(drafts || {})) if (typeof v === 'string') sessionStorage.setItem(keyOf(route), v)
}
