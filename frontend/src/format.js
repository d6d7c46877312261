// Display helpers: times (epoch ms), durations, bytes, numbers. Everything returns plain text.
import { ref, watch } from 'vue'
import { locale, t } from './i18n.js'

const ZONE_KEY = 'molens.zone'
const ZONES = ['local', 'utc', 'task']
/** Which zone times are shown in: the browser's (local), UTC, or each task's own zone (task). */
export const zoneMode = ref(ZONES.includes(localStorage.getItem(ZONE_KEY)) ? localStorage.getItem(ZONE_KEY) : 'local')
export function setZoneMode(m) {
  if (!ZONES.includes(m)) return
  zoneMode.value = m
  localStorage.setItem(ZONE_KEY, m)
}
export const browserZone = Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC'

/** The zone to show a time of a task in (`taskTz`: its `timezone`; none for times of no task). */
export function zoneFor(taskTz) {
  if (zoneMode.value === 'utc') return 'UTC'
  if (zoneMode.value === 'task' && taskTz) return taskTz
  return undefined
}

/** The name of the zone times of a task (`taskTz`: its `timezone`) are shown in. */
export function zoneName(taskTz) {
  return zoneFor(taskTz) || browserZone
}

/** A cron schedule's description ({en, zh} from the server) with the zone its wall times are in. */
export function describeIn(description, lang, tz) {
  if (!description) return ''
  const text = description[lang] || description.en || ''
  return tz ? t('task.describeIn', { text, tz }) : text
}

const tag = () => (locale.value === 'zh' ? 'zh-CN' : 'en-GB')

/**
 * One date-time format in every language: `2026-12-01 09:30:00` (24 h), in `timeZone` (default:
 * the browser's), with the weekday when asked and the zone's short name unless `zone: false`.
 */
export function fmtTime(ms, timeZone, { weekday = false, zone = true } = {}) {
  if (ms === null || ms === undefined || ms === '') return '—'
  const d = new Date(Number(ms))
  if (Number.isNaN(d.getTime())) return '—'
  let parts
  try {
    parts = new Intl.DateTimeFormat('en-CA', {
      year: 'numeric', month: '2-digit', day: '2-digit', hour: '2-digit', minute: '2-digit', second: '2-digit',
      hourCycle: 'h23', timeZone: timeZone || zoneFor(undefined), timeZoneName: 'short',
    }).formatToParts(d)
  } catch {
    return d.toISOString()
  }
  const p = Object.fromEntries(parts.map((x) => [x.type, x.value]))
  let out = `${p.year}-${p.month}-${p.day} ${p.hour}:${p.minute}:${p.second}`
  if (weekday) {
    const wd = new Intl.DateTimeFormat(tag(), { weekday: 'short', timeZone: timeZone || zoneFor(undefined) }).format(d)
    out = `${out} ${wd}`
  }
  if (zone && p.timeZoneName) out = `${out} ${p.timeZoneName}`
  return out
}

/** A time of `task` (next run, created, ...) in the zone the switch asks for. */
export function fmtTaskTime(ms, task, opts) {
  return fmtTime(ms, zoneFor(task && task.timezone), opts)
}

const TIME_MODE_KEY = 'molens.timeMode'
const TIME_MODES = ['absolute', 'relative']
/** How times are shown on every page: as a date-time (absolute) or as "3 minutes ago" (relative). */
export const timeMode = ref(TIME_MODES.includes(localStorage.getItem(TIME_MODE_KEY)) ? localStorage.getItem(TIME_MODE_KEY) : 'absolute')
export function setTimeMode(m) {
  if (!TIME_MODES.includes(m)) return
  timeMode.value = m
  localStorage.setItem(TIME_MODE_KEY, m)
}

/** A time as the time switch asks (`timeZone` as for fmtTime); `when` and `other` for a cell and its tooltip. */
export function fmtWhen(ms, timeZone, opts) {
  if (ms === null || ms === undefined || ms === '') return '—'
  return timeMode.value === 'relative' ? fmtRelative(ms) : fmtTime(ms, timeZone, opts)
}

/** The other form of fmtWhen (a tooltip): the absolute time when relative is shown, and the reverse. */
export function whenTitle(ms, timeZone) {
  if (ms === null || ms === undefined || ms === '') return null
  return timeMode.value === 'relative' ? fmtTime(ms, timeZone) : fmtRelative(ms)
}

/** fmtWhen / whenTitle for a time of `task`, in the zone the zone switch asks for. */
export function fmtTaskWhen(ms, task, opts) {
  return fmtWhen(ms, zoneFor(task && task.timezone), opts)
}
export function taskWhenTitle(ms, task) {
  return whenTitle(ms, zoneFor(task && task.timezone))
}

/** An axis tick: `09:30` within a day, `12-01 09:30` across days (24 h, any language). */
export function fmtAxis(ms, spanMs) {
  const full = fmtTime(ms, undefined, { zone: false })
  if (full === '—') return ''
  return spanMs > 86400000 ? full.slice(5, 16) : full.slice(11, 16)
}

export function fmtRelative(ms, now = Date.now()) {
  if (ms === null || ms === undefined) return ''
  const s = Math.round((Number(ms) - now) / 1000)
  const a = Math.abs(s)
  const unit = a < 60 ? [s, 'second'] : a < 3600 ? [Math.round(s / 60), 'minute']
    : a < 86400 ? [Math.round(s / 3600), 'hour'] : [Math.round(s / 86400), 'day']
  try {
    return new Intl.RelativeTimeFormat(tag(), { numeric: 'auto' }).format(unit[0], unit[1])
  } catch {
    return ''
  }
}

export function fmtDuration(ms) {
  if (ms === null || ms === undefined || ms === '') return '—'
  let n = Number(ms)
  if (!Number.isFinite(n)) return '—'
  if (n < 1000) return `${+n.toFixed(n < 10 ? 2 : 0)} ${t('dur.ms')}`
  const parts = []
  for (const [u, v] of [['d', 86400000], ['h', 3600000], ['m', 60000], ['s', 1000]]) {
    if (n >= v) {
      const q = Math.floor(n / v)
      parts.push(`${q}${t(`dur.${u}`)}`)
      n -= q * v
    }
  }
  // milliseconds only next to a few seconds: '1s 500ms', but '22s', not '22s 746ms'
  if (n && parts.length === 1 && Number(ms) < 10000) parts.push(`${Math.round(n)}${t('dur.ms')}`)
  return parts.slice(0, 2).join(' ')
}

export function fmtBytes(b) {
  if (b === null || b === undefined || b === '') return '—'
  let n = Number(b)
  if (!Number.isFinite(n)) return '—'
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB']
  let i = 0
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024
    i++
  }
  return `${n.toFixed(i === 0 || n >= 100 ? 0 : 1)} ${units[i]}`
}

export function fmtNum(n, digits = 0) {
  if (n === null || n === undefined || n === '' || !Number.isFinite(Number(n))) return '—'
  return new Intl.NumberFormat(tag(), { maximumFractionDigits: digits, minimumFractionDigits: 0 }).format(Number(n))
}

export function fmtPercent(x) {
  if (x === null || x === undefined || !Number.isFinite(Number(x))) return '—'
  return `${(Number(x) * 100).toFixed(Number(x) >= 0.999 && Number(x) < 1 ? 2 : 1)}%`
}

/** The task's schedule in words: cron (tz), every N, after N, at time. */
export function scheduleText(task, t) {
  if (task.cron_expr) return `${task.cron_expr} (${task.timezone || 'UTC'})`
  if (task.type === 'periodic') return t('task.every', { d: fmtDuration(task.interval_ms) })
  if (task.run_at !== null && task.run_at !== undefined) return t('task.at', { time: fmtTaskTime(task.run_at, task) })
  return t('task.after', { d: fmtDuration(task.interval_ms) })
}

/** The zone typed times of no task are read and written in: UTC when the zone switch says so, else the browser's (undefined). */
export function inputZone() {
  return zoneFor(undefined)
}

/** What the wall time in `zone` is ahead of UTC at instant `ms`, in ms (whole seconds). */
function offsetAt(ms, zone) {
  const p = Object.fromEntries(new Intl.DateTimeFormat('en-CA', {
    year: 'numeric', month: '2-digit', day: '2-digit', hour: '2-digit', minute: '2-digit', second: '2-digit',
    hourCycle: 'h23', timeZone: zone,
  }).formatToParts(new Date(ms)).map((x) => [x.type, Number(x.value)]))
  return Date.UTC(p.year, p.month - 1, p.day, p.hour, p.minute, p.second) - Math.floor(ms / 1000) * 1000
}

/**
 * Parse `2026-12-01 09:30` or `2026-12-01 09:30:00` (the console's own format; a `T` also works)
 * as a wall time in `zone`: an IANA name, 'UTC', or none for the browser's (`true` means UTC); epoch
 * ms, or null when it is not one. A wall time a zone skips (a DST gap) reads as the browser does:
 * shifted by the gap.
 */
export function parseTime(v, zone) {
  const m = /^\s*(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2})(?::(\d{2}))?\s*$/.exec(v || '')
  if (!m) return null
  const [y, mo, d, h, mi, s] = m.slice(1).map((x) => Number(x || 0))
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || s > 59) return null
  if (new Date(Date.UTC(y, mo - 1, d)).getUTCDate() !== d) return null // 2026-02-31 is not a day
  const tz = zone === true ? 'UTC' : zone || undefined
  if (!tz) return new Date(y, mo - 1, d, h, mi, s).getTime()
  const wall = Date.UTC(y, mo - 1, d, h, mi, s)
  if (tz === 'UTC') return wall
  try {
    const guess = wall - offsetAt(wall, tz)
    return wall - offsetAt(guess, tz) // the offset in force at the instant itself (near a DST change)
  } catch {
    return null // a zone this browser does not know
  }
}

/** `ms` in the format parseTime reads (no zone), in `zone` as parseTime takes it. */
export function formatInput(ms, zone) {
  if (ms === null || ms === undefined) return ''
  const tz = zone === true ? 'UTC' : zone || browserZone
  return fmtTime(ms, tz, { zone: false })
}

/**
 * Keep the instants the time fields `keys` of `form` stand for when the zone they are read in
 * (`zoneOf()`, as parseTime takes it) changes: each is read in the zone it was written in and
 * written again in the new one, so Apply or Save sends the same instant. A text that is no time stays.
 * Synchronous: text assigned after the change (a form filled in) is already in the new zone.
 */
export function keepInstants(form, keys, zoneOf = inputZone) {
  watch(zoneOf, (now, before) => {
    for (const k of keys) {
      const ms = parseTime(form[k], before)
      if (ms !== null) form[k] = formatInput(ms, now)
    }
  }, { flush: 'sync' })
}

/** The waits before retries 1..n of `policy` (ms), as the node computes them without jitter. */
export function retryWaits(policy, n) {
  const out = []
  for (let i = 1; i <= n; i++) {
    const w = policy.backoff === 'fixed' ? policy.initial_ms : policy.initial_ms * policy.factor ** (i - 1)
    out.push(Math.min(w, policy.max_ms))
  }
  return out
}

/**
 * A retry policy in words (docs/api.md, `retry`): one sentence per rule, for the task page and the
 * form. `reliability` at_most_once: one attempt, whatever the policy says.
 */
export function retryText(policy, reliability, t) {
  if (reliability === 'at_most_once') return [t('retry.atMostOnce')]
  if (!policy) return []
  const n = Number(policy.max_retries) || 0
  const out = []
  if (n === 0) out.push(t('retry.none'))
  else {
    const shown = retryWaits(policy, Math.min(n, 4)).map((w) => fmtDuration(w))
    const waits = shown.join(', ') + (n > 4 ? ', …' : '')
    out.push(t(n === 1 ? 'retry.one' : 'retry.upTo', { n, waits }))
    out.push(policy.backoff === 'fixed'
      ? t('retry.fixed', { d: fmtDuration(policy.initial_ms) })
      : t('retry.exponential', { d: fmtDuration(policy.initial_ms), factor: policy.factor, max: fmtDuration(policy.max_ms) }))
    if (policy.jitter === 'full') out.push(t('retry.jitterFull'))
  }
  const codes = policy.non_retryable_statuses || []
  out.push(codes.length ? t('retry.nonRetryable', { codes: codes.join(', ') }) : t('retry.nonRetryableNone'))
  out.push(t('retry.throttle', { d: fmtDuration(policy.max_throttle_ms) }))
  return out
}

/**
 * The text of a history event (kind `event`: skipped, updated, backfill) with its epoch-ms times
 * shown as times: `[a, b) ms` becomes `a – b`, any other epoch ms a time, in the zone the switch asks for.
 */
export function eventText(text, timeZone) {
  if (!text) return ''
  const at = (ms) => fmtTime(Number(ms), timeZone)
  return String(text)
    .replace(/\[(\d{11,14}), (\d{11,14})\)(?: ms)?/g, (m, a, b) => `${at(a)} – ${at(b)}`)
    .replace(/\b\d{11,14}\b/g, (m) => at(m))
}
