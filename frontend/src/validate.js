// Browser-side checks from the rules the API states in openapi.json (the TaskCreate schema's
// minimum/maximum/maxLength/pattern/required), in the user's units and language. Every field is
// checked, so every error shows at once; blank optional fields are left out (server defaults),
// blank required ones are errors, never 0.
import { t } from './i18n.js'
import { fmtNum } from './format.js'

export const UNITS = { ms: 1, s: 1000, min: 60000, h: 3600000, d: 86400000 }

function inUnit(ms, unit) {
  return unit ? `${fmtNum(ms / (UNITS[unit] || 1), 3)} ${t(`unit.${unit}`)}` : fmtNum(ms)
}

/**
 * An integer field typed in `unit` (null: a plain count). Returns [value or null, error or null];
 * the value is in the API's unit (ms for *_ms fields).
 */
export function checkInt(raw, prop, { required = false, unit = null } = {}) {
  const s = raw === null || raw === undefined ? '' : String(raw).trim()
  if (s === '') return [null, required ? t('v.required') : null]
  const n = Number(s)
  if (!Number.isFinite(n)) return [null, t('v.number')]
  const scale = unit ? UNITS[unit] : 1
  const v = Math.round(n * scale)
  if (Math.abs(n * scale - v) > 1e-6) return [null, unit ? t('v.wholeMs') : t('v.integer')]
  const p = prop || {}
  const lo = p.minimum ?? null
  const hi = p.maximum ?? null
  if ((lo !== null && v < lo) || (hi !== null && v > hi)) {
    if (lo !== null && hi !== null) return [null, t('v.range', { min: inUnit(lo, unit), max: inUnit(hi, unit) })]
    if (lo !== null) return [null, t('v.min', { min: inUnit(lo, unit) })]
    return [null, t('v.max', { max: inUnit(hi, unit) })]
  }
  return [v, null]
}

/** A string field: [value or null, error or null]. `patternKey` names the message for a pattern miss. */
export function checkStr(raw, prop, { required = false, patternKey = 'v.pattern' } = {}) {
  const s = (raw || '').trim()
  if (s === '') return [null, required ? t('v.required') : null]
  const p = prop || {}
  if (p.maxLength !== undefined && s.length > p.maxLength) return [null, t('v.maxLength', { n: p.maxLength })]
  if (p.minLength !== undefined && s.length < p.minLength) return [null, t('v.minLength', { n: p.minLength })]
  if (p.pattern && !new RegExp(p.pattern).test(s)) return [null, t(patternKey)]
  return [s, null]
}

/** An http(s) URL field. */
export function checkUrl(raw, prop, { required = false } = {}) {
  const [s, err] = checkStr(raw, prop, { required })
  if (err || s === null) return [s, err]
  if (/\s/.test(s)) return [null, t('v.urlSpace')]
  let u
  try {
    u = new URL(s)
  } catch {
    return [null, t('v.url')]
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') return [null, t('v.urlScheme')]
  return [s, null]
}

/**
 * The properties of the TaskCreate schema (tolerant of a missing document: no bounds then). A
 * nullable field is `{anyOf: [{type, minimum, ...}, {type: 'null'}], default}`: its bounds are
 * those of the non-null branch.
 */
export function props(schemaDoc) {
  const out = {}
  for (const [name, p] of Object.entries((schemaDoc && schemaDoc.properties) || {})) {
    const branch = Array.isArray(p.anyOf) ? p.anyOf.find((b) => b && b.type !== 'null') : null
    out[name] = branch ? { ...branch, ...p, anyOf: undefined } : p
  }
  return out
}

export function isRequired(schemaDoc, name) {
  return !!(schemaDoc && Array.isArray(schemaDoc.required) && schemaDoc.required.includes(name))
}

/**
 * A list of HTTP statuses typed as `422, 409 410`: [array or null, error or null]. `prop` is the
 * schema's array (maxItems, items.minimum/maximum); the API takes statuses 300..599 (docs/api.md,
 * `retry.non_retryable_statuses`) when the schema does not bound the items itself.
 */
export function checkStatuses(raw, prop) {
  const s = (raw || '').trim()
  if (s === '') return [null, null]
  const p = prop || {}
  const items = p.items || {}
  const lo = items.minimum ?? 300
  const hi = items.maximum ?? 599
  const parts = s.split(/[\s,;]+/).filter(Boolean)
  const out = []
  for (const x of parts) {
    if (!/^\d+$/.test(x) || Number(x) < lo || Number(x) > hi) return [null, t('v.statuses', { min: lo, max: hi })]
    out.push(Number(x))
  }
  const unique = [...new Set(out)]
  if (p.maxItems !== undefined && unique.length > p.maxItems) return [null, t('v.maxItems', { n: p.maxItems })]
  return [unique, null]
}
