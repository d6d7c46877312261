// API errors in the user's language: by `code`, and for invalid_argument by `field` (docs/api.md).
// The server's own English text stays available as the detail (a tooltip), never as the message.
// A 429, 503 or 507 also says which quota refused (quota_exceeded) and when to try again (Retry-After).
import { t } from './i18n.js'
import { fmtDuration } from './format.js'

const WAIT_STATUSES = new Set([429, 503, 507])

function has(key) {
  const s = t(key)
  return typeof s === 'string' && s !== key // err.field.retry is a group of messages, not one
}

/** The message of `e` by its code or field, without what a throttling answer adds. */
function baseText(e) {
  const code = e.code || ''
  if (code === 'invalid_argument' && e.field) {
    const f = String(e.field).replace(/^tasks\[\d+\]\./, '')
    if (has(`err.field.${f}`)) return t(`err.field.${f}`)
    return t('err.invalid_argument', { field: f })
  }
  // a read has nothing to change: only the leader can answer it, and none is known now
  if (code === 'no_leader' && e.method === 'GET') return t('err.no_leader_read')
  if (code && has(`err.${code}`)) return t(`err.${code}`)
  if (e.status >= 500) return t('err.server', { status: e.status })
  if (e.status) return t('err.http', { status: e.status })
  return t('err.unknown')
}

/**
 * What a 429, 503 or 507 adds: the quota that refused (its name in words and as the API names it)
 * and when to try again. An outcome_unknown is never told to try again: it may have happened.
 */
function waitText(e) {
  if (!WAIT_STATUSES.has(e.status)) return ''
  const out = []
  if (e.code === 'quota_exceeded' && e.quota) {
    const name = has(`admin.quota.${e.quota}`) ? `${t(`admin.quota.${e.quota}`)} (${e.quota})` : e.quota
    out.push(t('err.quota', { quota: name }))
  }
  if (e.code !== 'outcome_unknown') {
    out.push(Number.isFinite(e.retryAfter) ? t('err.retryIn', { d: fmtDuration(Math.max(1, e.retryAfter) * 1000) }) : t('err.retrySoon'))
  }
  return out.length ? ` ${out.join(' ')}` : ''
}

/** The translated message of an ApiError (or any Error) `e`. */
export function errText(e) {
  if (!e) return ''
  if (e.i18n) return e.message // already a translated, client-side message
  return baseText(e) + waitText(e)
}

/** The server's own text of `e`, for a tooltip ('' for a client-side message). */
export function errDetail(e) {
  return e && !e.i18n && e.message ? e.message : ''
}
