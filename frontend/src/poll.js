// Poll a loader every `ms` while the component lives; no overlap, pauses while the tab is hidden.
import { onBeforeUnmount, onMounted } from 'vue'

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
