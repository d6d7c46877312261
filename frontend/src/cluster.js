// The cluster-aware side of the console (docs/architecture.md#console): every member's address
// from /cluster/status, a heartbeat on this node, and when it stops answering, a search for the
// new leader among the others (their open /readyz) and a move to that leader's console, same path
// and query. The bearer token travels in the URL fragment (never sent to a server) and only to an
// address the authenticated cluster status named; the new console drops the fragment and, once the
// user accepts the hand-off (consumeHandoff says why it asks), stores it.
// Unsaved form drafts (draft.js) travel the same way.
import { reactive } from 'vue'
import { apiUrl, get, getToken, session, setToken, tokenRemembered } from './api.js'
import { isAdmin, me } from './access.js'
import { allDrafts, restoreDrafts } from './draft.js'

const HANDOFF = 'molens-handoff='
const HEARTBEAT_MS = 1000
const SEARCH_MS = 300
const PROBE_TIMEOUT_MS = 800
const STATUS_EVERY = 10

export const cluster = reactive({
  selfId: null, // this node's id
  members: [], // [{id, url}] every member (url: its HTTP base, null when unknown)
  searching: false, // this node does not answer: looking for the leader among the others
  tried: [], // ids asked in the last search round
  moved: null, // {from, to, why: 'down' | 'follower'} after this tab moved here
  handoff: null, // a hand-off waiting for the user's word: {from, src, tok, rem, replaces, drafts, count, moved}
})

function encode(obj) {
  const bytes = new TextEncoder().encode(JSON.stringify(obj))
  let bin = ''
  for (const b of bytes) bin += String.fromCharCode(b)
  return btoa(bin).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '')
}

function decode(s) {
  const bin = atob(s.replace(/-/g, '+').replace(/_/g, '/'))
  return JSON.parse(new TextDecoder().decode(Uint8Array.from(bin, (c) => c.charCodeAt(0))))
}

/**
 * On load: read what a previous node's console handed over (moveTo) and drop it from the address bar.
 *
 * Nothing in it is applied unasked. Any page can link here with a fragment of its own making:
 * applied on arrival, it would sign the tab in with someone else's key (the user then works in that
 * key's namespaces unawares, a login CSRF) or fill the task form with someone else's callback URL
 * under the "values are back" notice. Where a hand-off came from cannot be checked here: nodes answer
 * Referrer-Policy: same-origin (another node's page leaves no referrer), the members' addresses need
 * an admin key, and the hand-off's key cannot vouch for itself (an attacker's key is a key of this
 * cluster too). So one that would change anything (a key other than the stored one, form drafts)
 * waits in `cluster.handoff` until the user accepts it (App.vue asks before any page loads, naming
 * the node and address it says it comes from, and whether it replaces the key signed in here); one
 * refused is dropped whole. A hand-off with nothing to apply only brings the move notice.
 */
export function consumeHandoff() {
  const h = window.location.hash
  if (!h.startsWith(`#${HANDOFF}`)) return
  try {
    const x = decode(h.slice(HANDOFF.length + 1))
    const moved = x.from ? { from: String(x.from), to: x.to ? String(x.to) : null, why: x.why || 'down' } : null
    const stored = getToken()
    const tok = typeof x.tok === 'string' && x.tok && x.tok !== stored ? x.tok : ''
    const drafts = {}
    if (x.drafts && typeof x.drafts === 'object') for (const [k, v] of Object.entries(x.drafts)) if (typeof v === 'string') drafts[k] = v
    const count = Object.keys(drafts).length
    if (tok || count) {
      cluster.handoff = { from: moved ? moved.from : '', src: typeof x.src === 'string' ? x.src : '', tok, rem: !!x.rem,
        replaces: !!(tok && stored), drafts, count, moved, key: null, urls: draftUrls(drafts) }
      if (tok) describeKey(tok)
    } else cluster.moved = moved
  } catch {
    // a garbled fragment: ignore it, the login form asks for the token if one is needed
  }
  window.history.replaceState(window.history.state, '', window.location.pathname + window.location.search)
}

/** The callback URLs the hand-off's task-form drafts would fill in (the dialog shows them). */
function draftUrls(drafts) {
  const urls = new Set()
  for (const raw of Object.values(drafts)) {
    try {
      const f = JSON.parse(raw).fields || {}
      for (const k of ['callback_url', 'ack_url', 'notify_url']) if (typeof f[k] === 'string' && f[k]) urls.add(f[k])
    } catch {
      // not a draft this console wrote: draft.js ignores it too
    }
  }
  return [...urls]
}

/**
 * Who the hand-off's key is, as this node says (`/whoami` asked with that key alone, never stored):
 * the dialog names it, so the user can tell their own key from one a link planted. `{invalid: true}`
 * when this node refuses it.
 */
async function describeKey(tok) {
  try {
    const r = await fetch(apiUrl('/whoami'), { headers: { Accept: 'application/json', Authorization: `Bearer ${tok}` },
      cache: 'no-store', credentials: 'omit' })
    const key = r.ok ? await r.json() : r.status === 401 ? { invalid: true } : null
    if (cluster.handoff && cluster.handoff.tok === tok) cluster.handoff.key = key
  } catch {
    // the node did not answer: the dialog says nothing of the key
  }
}

let settle = null
const settled = new Promise((resolve) => (settle = resolve))

/** Resolves once no hand-off waits for the user's word (at once when none came). */
export function handoffSettled() {
  return cluster.handoff ? settled : Promise.resolve()
}

/** The user accepted the hand-off: its key and drafts are this console's now. */
export function acceptHandoff() {
  const x = cluster.handoff
  if (!x) return
  if (x.tok) setToken(x.tok, x.rem)
  restoreDrafts(x.drafts)
  cluster.moved = x.moved
  cluster.handoff = null
  settle()
}

/** The user refused the hand-off: nothing of it is kept (the sign-in asks for a key if one is needed). */
export function refuseHandoff() {
  cluster.handoff = null
  settle()
}

let currentPath = () => window.location.pathname.replace(/^\/ui/, '') + window.location.search

/** Where the router says the tab is (path + query, without the /ui base). */
export function setPathSource(fn) {
  currentPath = fn
}

let moving = false

/**
 * The origin of `url` if the tab may move there with its key: http or https only (a `javascript:`
 * or `data:` URL's origin is "null"), and never from https to plain http (the key would reach a page
 * an on-path attacker can change). Null: stay here.
 */
export function movableOrigin(url) {
  let u
  try {
    u = new URL(url)
  } catch {
    return null
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') return null
  if (window.location.protocol === 'https:' && u.protocol !== 'https:') return null
  return u.origin
}

/** Move the whole tab to the console of the member at `base`, keeping path and query. */
export function moveTo(base, why, toId) {
  if (moving) return
  moving = true
  const path = currentPath().split('#')[0]
  const frag = encode({ tok: getToken(), rem: tokenRemembered(), from: cluster.selfId || '', src: window.location.origin,
    to: toId || '', why, drafts: allDrafts() })
  window.location.replace(`${base.replace(/\/+$/, '')}/ui${path}#${HANDOFF}${frag}`)
}

async function probe(url) {
  const ctl = new AbortController()
  const timer = setTimeout(() => ctl.abort(), PROBE_TIMEOUT_MS)
  try {
    const r = await fetch(`${url}/readyz`, { cache: 'no-store', credentials: 'omit', signal: ctl.signal })
    return await r.json()
  } catch {
    return null
  } finally {
    clearTimeout(timer)
  }
}

/** The member whose own /readyz says it leads, or null. */
async function findLeader() {
  const others = cluster.members.filter((m) => m.url && movableOrigin(m.url) && m.id !== cluster.selfId)
  cluster.tried = others.map((m) => m.id)
  const answers = await Promise.all(others.map(async (m) => [m, await probe(m.url)]))
  const hit = answers.find(([, r]) => r && r.role === 'leader')
  return hit ? hit[0] : null
}

async function refreshMembers() {
  const st = await get('/cluster/status')
  cluster.selfId = st.node_id
  const members = (st.nodes || []).map((n) => ({ id: n.id, url: n.http_url ? n.http_url.replace(/\/+$/, '') : null }))
  // the leader lists every member's address; a follower may not know its own: keep what we knew
  const known = new Map(cluster.members.map((m) => [m.id, m.url]))
  cluster.members = members.map((m) => ({ id: m.id, url: m.url || known.get(m.id) || null }))
}

/**
 * One heartbeat: who leads as this node sees it. A follower that knows the leader's address moves
 * the tab there; no leader shows the election banner; no answer starts the search.
 */
export async function checkLeader() {
  if (moving) return
  const ctl = new AbortController()
  const timer = setTimeout(() => ctl.abort(), 3 * HEARTBEAT_MS)
  let li
  try {
    // any key may ask who leads and where (a follower's 307 tells it as much)
    li = await get('/cluster/leader', undefined, { signal: ctl.signal })
  } catch (e) {
    if ((e && e.name === 'AbortError') || (e && e.status === 0)) session.offline = true
    return
  } finally {
    clearTimeout(timer)
  }
  session.offline = false
  cluster.searching = false
  session.leader = li
  session.role = li.role
  if (li.role === 'leader') {
    session.noLeader = false
    session.leaderUnreachable = false
    return
  }
  const origin = li.leader_url ? movableOrigin(li.leader_url) : null
  if (origin && origin !== window.location.origin) {
    moveTo(origin, 'follower', li.leader_id)
    return
  }
  session.noLeader = !li.leader_id && !li.leader_url
  // a leader whose address this tab may not move to (not http(s), or plain http from https) is one
  // it cannot reach
  session.leaderUnreachable = !!li.leader_id && (!li.leader_url || !origin)
}

let timer = null
let started = false
let beats = 0
let running = false
let identify = null

/**
 * One beat, then the next one scheduled. While the sign-in screen shows there is none: the key was
 * refused (api.js forgot it) or there is none, and asking every second would only be refused again;
 * `beatNow` after a sign-in starts them again.
 */
async function beat() {
  if (running) return // the running beat schedules the next
  clearTimeout(timer)
  timer = null
  if (session.needLogin) return
  running = true
  try {
    await checkLeader()
    // a first /whoami that failed (no answer, no leader) leaves the console read-only: ask until it answered
    if (!session.offline && !session.needLogin && !me.loaded && identify) await identify()
    if (!session.offline && !session.needLogin && isAdmin() && (beats++ % STATUS_EVERY === 0 || !cluster.members.length)) {
      await refreshMembers().catch(() => {})
    }
    if (session.offline && !moving) {
      cluster.searching = true
      const leader = await findLeader()
      if (leader) moveTo(movableOrigin(leader.url), 'down', leader.id)
    }
  } finally {
    running = false
    clearTimeout(timer)
    if (!moving && !session.needLogin) timer = setTimeout(beat, session.offline ? SEARCH_MS : HEARTBEAT_MS)
  }
}

/**
 * Start the heartbeat (once, for the life of the tab). `identifyKey` asks who the key is (never
 * throws); each beat calls it again while that is not known.
 */
export function startHeartbeat(identifyKey) {
  if (started) return
  started = true
  identify = identifyKey || null
  beat()
}

/** Run one heartbeat now (after a sign-in, a redirect answer or a leadership change asked from this tab). */
export function beatNow() {
  beat()
}
