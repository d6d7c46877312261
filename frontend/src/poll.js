// Poll a loader every `every` ms (a number or a ref; 0: only when asked) while the component lives;
// no overlap, pauses while the tab is hidden; the `r` shortcut (REFRESH_EVENT) reloads at once.
import { computed, isRef, onBeforeUnmount, onMounted, ref, unref, watch } from 'vue'
import { useRoute, useRouter } from 'vue-router'
import { REFRESH_EVENT } from './shortcuts.js'

export function usePoll(load, every) {
  let timer = null
  let running = false
  let stopped = false
  async function tick() {
    if (running || stopped) return
    if (document.hidden) return schedule()
    running = true
    try {
      await load()
    } finally {
      running = false
      schedule()
    }
  }
  function schedule() {
    clearTimeout(timer)
    const ms = unref(every)
    if (!stopped && ms > 0) timer = setTimeout(tick, ms)
  }
  function stop() {
    stopped = true
    clearTimeout(timer)
  }
  let unmounted = false
  function resume() {
    if (unmounted || !stopped) return
    stopped = false
    schedule()
  }
  if (isRef(every)) watch(every, () => running || schedule())
  onMounted(() => {
    window.addEventListener(REFRESH_EVENT, tick)
    tick()
  })
  onBeforeUnmount(() => {
    unmounted = true
    window.removeEventListener(REFRESH_EVENT, tick)
    stop()
  })
  return { refresh: tick, stop, resume }
}

/** The auto-refresh choices every polling page offers (ms; 0 is off). */
export const REFRESH_CHOICES = [0, 2000, 5000, 15000, 60000]
const REFRESH_KEY = 'molens.refresh.'

function remembered(page, fallback) {
  const raw = localStorage.getItem(REFRESH_KEY + page)
  return raw !== null && REFRESH_CHOICES.includes(Number(raw)) ? Number(raw) : fallback
}

/** A page's auto-refresh interval (ms, 0 off), remembered in the browser; `fallback` until one is picked. */
export function useRefreshSetting(page, fallback) {
  const every = ref(remembered(page, fallback))
  watch(every, (v) => localStorage.setItem(REFRESH_KEY + page, String(v)))
  return every
}

/** The first defined value among dotted paths of obj (tolerant of optional stats keys). */
export function pick(obj, ...paths) {
  for (const p of paths) {
    const v = p.split('.').reduce((o, k) => (o !== null && o !== undefined ? o[k] : undefined), obj)
    if (v !== undefined && v !== null) return v
  }
  return null
}

export const AUTO_REFRESH_MS = 5000

/**
 * A list's auto-refresh interval, kept in the URL (?auto=15: seconds, so a reload or a shared link
 * keeps it; ?auto=1 is 5 s) and remembered in the browser for the next visit without one: while on,
 * `load()` runs every interval unless `busy()` or the tab is hidden, and at once on REFRESH_EVENT.
 */
export function useAutoRefresh(load, busy = () => false) {
  const route = useRoute()
  const router = useRouter()
  const path = route.path
  const every = computed(() => {
    const a = route.query.auto
    if (a === undefined) return remembered(path, 0)
    const ms = a === '1' ? AUTO_REFRESH_MS : Number(a) * 1000
    return REFRESH_CHOICES.includes(ms) ? ms : 0
  })
  let timer = null
  function schedule() {
    clearTimeout(timer)
    if (every.value > 0 && route.path === path) timer = setTimeout(async () => {
      if (!busy() && !document.hidden) await load()
      schedule()
    }, every.value)
  }
  function setEvery(ms) {
    localStorage.setItem(REFRESH_KEY + path, String(ms))
    const query = { ...route.query }
    if (ms > 0) query.auto = String(ms / 1000)
    else delete query.auto
    router.replace({ path, query, state: window.history.state })
  }
  function now() {
    if (route.path === path && !busy()) load()
  }
  watch(every, schedule, { immediate: true })
  onMounted(() => window.addEventListener(REFRESH_EVENT, now))
  onBeforeUnmount(() => {
    clearTimeout(timer)
    window.removeEventListener(REFRESH_EVENT, now)
  })
  return { every, setEvery }
}
