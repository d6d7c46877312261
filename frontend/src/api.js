// REST client for /api/v1 (docs/api.md): bearer token, JSON errors, leader/role tracking.
import { reactive } from 'vue'
import { locale } from './i18n.js'

const TOKEN_KEY = 'molens.token'

export const session = reactive({
  needLogin: false, // the API answered 401 to the stored key (forgotten) or to none
  role: null, // X-Molens-Role of the last answer
  leader: null, // last /cluster/leader answer
  noLeader: false, // no leader known (election in progress)
  leaderUnreachable: false, // a leader is known but not its HTTP address
  offline: false, // the node did not answer at all
})

export function getToken() {
  return sessionStorage.getItem(TOKEN_KEY) || localStorage.getItem(TOKEN_KEY) || ''
}

/** Whether the token is kept across browser restarts ("remember"). */
export function tokenRemembered() {
  return !!localStorage.getItem(TOKEN_KEY)
}

export function setToken(token, remember) {
  sessionStorage.removeItem(TOKEN_KEY)
  localStorage.removeItem(TOKEN_KEY)
  if (token) (remember ? localStorage : sessionStorage).setItem(TOKEN_KEY, token)
}

/**
 * A refused or failed request: `status`, the body's `code`, `field`, `reason` and `quota` (the
 * namespace's quota at fault of a 429 quota_exceeded), the request's `method` (a read's no_leader
 * reads differently from a write's) and `retryAfter`, the seconds the `Retry-After` header asks to
 * wait (null without one).
 */
export class ApiError extends Error {
  constructor(status, body, fallback, { method = null, retryAfter = null } = {}) {
    const err = (body && body.error) || {}
    super(err.message || fallback || `HTTP ${status}`)
    this.status = status
    this.code = err.code || (status ? `http_${status}` : 'network')
    this.field = err.field || null
    this.reason = err.reason || null
    this.quota = err.quota || null
    this.method = method
    this.retryAfter = retryAfter
    this.body = body
  }
}

/** A `Retry-After` header (seconds, or an HTTP date) as seconds from now; null when there is none. */
export function retryAfterSeconds(header, now = Date.now()) {
  if (!header) return null
  const v = header.trim()
  if (/^\d+$/.test(v)) return Number(v)
  const at = Date.parse(v)
  return Number.isNaN(at) ? null : Math.max(0, Math.ceil((at - now) / 1000))
}

function qs(query) {
  if (!query) return ''
  const p = new URLSearchParams()
  for (const [k, v] of Object.entries(query)) {
    if (v !== undefined && v !== null && v !== '') p.set(k, String(v))
  }
  const s = p.toString()
  return s ? `?${s}` : ''
}

/** The URL of an API path with its query, as api() asks it. */
export function apiUrl(path, query) {
  return `/api/v1${path}${qs(query)}`
}

let scopeOf = null
/** `fn(method, path, query, body)` -> [query, body]: the namespace switcher's part of a request (access.js). */
export function setScope(fn) {
  scopeOf = fn
}

/** A GET's query as api() sends it: with the namespace switcher's part (an export link needs it too). */
export function scopedQuery(path, query) {
  return scopeOf ? scopeOf('GET', path, query, undefined)[0] : query
}

const listeners = new Set()
/** Called with no argument when a write was redirected to the leader (307). */
export function onRedirect(fn) {
  listeners.add(fn)
  return () => listeners.delete(fn)
}

/**
 * One API call. Resolves with the parsed JSON body; rejects with ApiError.
 * Writes go with redirect: 'manual' so a follower's 307 is seen here (the app then moves the
 * whole UI to the leader) instead of being replayed cross-origin without the token.
 */
export async function api(method, path, { query, body, signal, headers: extra, withStatus } = {}) {
  if (scopeOf) [query, body] = scopeOf(method, path, query, body)
  // the server answers its own texts (error details, history events) in the console's language
  const headers = { Accept: 'application/json', 'Accept-Language': locale.value === 'zh' ? 'zh-CN,zh;q=0.9,en;q=0.5' : 'en', ...(extra || {}) }
  const token = getToken()
  if (token) headers.Authorization = `Bearer ${token}`
  if (body !== undefined) headers['Content-Type'] = 'application/json'
  let res
  try {
    res = await fetch(apiUrl(path, query), {
      method,
      headers,
      body: body !== undefined ? JSON.stringify(body) : undefined,
      redirect: method === 'GET' ? 'follow' : 'manual',
      cache: 'no-store',
      signal,
    })
  } catch (e) {
    if (e && e.name === 'AbortError') throw e
    session.offline = true
    throw new ApiError(0, null, 'network error: the node did not answer')
  }
  session.offline = false
  if (res.type === 'opaqueredirect' || res.status === 307) {
    listeners.forEach((fn) => fn())
    throw new ApiError(307, null, 'this node is a follower; moving to the leader')
  }
  const role = res.headers.get('X-Molens-Role')
  if (role) session.role = role
  let data = null
  const text = await res.text()
  if (text) {
    try {
      data = JSON.parse(text)
    } catch {
      data = null
    }
  }
  // a refused key is forgotten at once: sent again (the heartbeat asks every second) each one counts
  // against this address as a bad key, and after ten the node answers even a good one 429 (the brake
  // of docs/api.md#keys-and-roles). A late answer to a key replaced since changes nothing.
  if (res.status === 401 && getToken() === token) {
    if (token) setToken('', false)
    session.needLogin = true
  }
  if (res.status === 503 && data && data.error && data.error.code === 'no_leader') session.noLeader = true
  if (!res.ok) throw new ApiError(res.status, data, '', { method, retryAfter: retryAfterSeconds(res.headers.get('Retry-After')) })
  return withStatus ? { status: res.status, data } : data // withStatus: e.g. 201 created against 200 existing
}

export const get = (path, query, opts) => api('GET', path, { ...opts, query })
export const post = (path, body, opts) => api('POST', path, { ...opts, body })
export const del = (path, opts) => api('DELETE', path, opts)
export const put = (path, body, opts) => api('PUT', path, { ...opts, body })
export const patch = (path, body, opts) => api('PATCH', path, { ...opts, body })
