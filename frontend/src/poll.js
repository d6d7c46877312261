// Poll a loader every `ms` while the component lives; no overlap, pauses while the tab is hidden.
import { computed, onBeforeUnmount, onMounted, watch } from 'vue'
import { useRoute, useRouter } from 'vue-router'

export function usePoll(load, ms) {
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
    if (!stopped) timer = setTimeout(tick, ms)
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
  onMounted(tick)
  onBeforeUnmount(() => {
    unmounted = true
    stop()
  })
  return { refresh: tick, stop, resume }
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
 * A list's auto-refresh switch, kept in the URL (?auto=1, so a reload or a shared link keeps it):
 * while on, `load()` runs every AUTO_REFRESH_MS unless `busy()` or the tab is hidden.
 */
export function useAutoRefresh(load, busy = () => false) {
  const route = useRoute()
  const router = useRouter()
  const path = route.path
  const auto = computed(() => route.query.auto === '1')
  let timer = null
  function schedule() {
    clearTimeout(timer)
    if (auto.value && route.path === path) timer = setTimeout(async () => {
      if (!busy() && !document.hidden) await load()
      schedule()
    }, AUTO_REFRESH_MS)
  }
  function setAuto(on) {
    const query = { ...route.query }
    if (on) query.auto = '1'
    else delete query.auto
    router.replace({ path, query, state: window.history.state })
  }
  watch(auto, schedule, { immediate: true })
  onBeforeUnmount(() => clearTimeout(timer))
  return { auto, setAuto }
}
