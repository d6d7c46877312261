// API errors in the user's language: by `code`, and for invalid_argument by `field` (docs/api.md).
// The server's own English text stays available as the detail (a tooltip), never as the message.
import { t } from './i18n.js'

function has(key) {
  const s = t(key)
  return typeof s === 'string' && s !== key // err.field.retry is a group of messages, not one
}

/** The translated message of an ApiError (or any Error) `e`. */
export function errText(e) {
  if (!e) return ''
  if (e.i18n) return e.message // already a translated, client-side message
  const code = e.code || ''
  if (code === 'invalid_argument' && e.field) {
    const f = String(e.field).replace(/^tasks\[\d+\]\./, '')
    if (has(`err.field.${f}`)) return t(`err.field.${f}`)
    return t('err.invalid_argument', { field: f })
  }
  if (code && has(`err.${code}`)) return t(`err.${code}`)
  if (e.status >= 500) return t('err.server', { status: e.status })
  if (e.status) return t('err.http', { status: e.status })
  return t('err.unknown')
}

/** The server's own text of `e`, for a tooltip ('' for a client-side message). */
export function errDetail(e) {
  return e && !e.i18n && e.message ? e.message : ''
}
