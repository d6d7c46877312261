// Who is signed in (GET /api/v1/whoami) and what the console offers that key (docs/api.md#keys-and-roles):
// writes for writer and admin, node-wide pages for a key of every namespace ("*"), cluster and
// admin pages for an admin of every namespace. The server decides; this only hides what it would refuse.
// Also the namespace the header's switcher chose: '' for every namespace the key may read.
import { reactive } from 'vue'
import { get, setScope } from './api.js'

const NS_KEY = 'molens.namespace'
const RANK = { reader: 0, writer: 1, admin: 2 }

export const me = reactive({
  loaded: false,
  key_id: null,
  name: null,
  role: null,
  namespaces: [],
  open: false,
})

/** The namespace switcher: `ns` chosen ('' = all the key may read), `list` the names it offers. */
export const scope = reactive({ ns: localStorage.getItem(NS_KEY) || '', list: [] })

/** Ask the node who the stored key is; a 401 shows the sign-in screen (api.js). */
export async function loadMe() {
  const w = await get('/whoami')
  Object.assign(me, w, { loaded: true })
  await loadNamespaces()
  return w
}

/** The namespaces the key may read; a chosen one it may not read any more falls back to all. */
export async function loadNamespaces() {
  try {
    scope.list = (await get('/namespaces')).items.map((n) => n.name)
  } catch {
    scope.list = []
  }
  if (scope.ns && !scope.list.includes(scope.ns)) chooseNamespace('')
}

export function forgetMe() {
  Object.assign(me, { loaded: false, key_id: null, name: null, role: null, namespaces: [], open: false })
  scope.list = []
}

export function chooseNamespace(ns) {
  scope.ns = ns || ''
  if (scope.ns) localStorage.setItem(NS_KEY, scope.ns)
  else localStorage.removeItem(NS_KEY)
}

// The requests a chosen namespace narrows: the lists, and the bulk dead-letter actions that act on
// what the list shows (a query's or body's own namespace is kept).
const LISTS = new Set(['GET /tasks', 'GET /executions', 'GET /dead-letters', 'GET /audit', 'DELETE /dead-letters'])
setScope((method, path, query, body) => {
  if (!scope.ns) return [query, body]
  if (LISTS.has(`${method} ${path}`) && !(query && query.namespace)) return [{ ...query, namespace: scope.ns }, body]
  if (method === 'POST' && path === '/dead-letters/redrive' && body && !body.namespace) return [query, { ...body, namespace: scope.ns }]
  return [query, body]
})

function atLeast(role) {
  return me.loaded && RANK[me.role] >= RANK[role]
}

/** Whether the key covers every namespace ("*"). */
export function wide() {
  return me.loaded && me.namespaces.includes('*')
}

/** Create, change, pause, delete, redrive: writer or admin. */
export function canWrite() {
  return atLeast('writer')
}

/** Keys, namespaces, cluster membership and leadership: an admin of every namespace. */
export function isAdmin() {
  return atLeast('admin') && wide()
}

const NEEDS = { write: canWrite, wide, admin: isAdmin }

/** What a route's `meta.needs` asks ('write', 'wide', 'admin'), or nothing: every key. */
export function allowed(needs) {
  return !needs || (me.loaded && NEEDS[needs]())
}
