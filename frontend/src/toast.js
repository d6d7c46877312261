// Toasts: messages that live outside the pages, so a page's refresh cannot clear them.
// An error stays until dismissed; a success goes after a few seconds.
import { reactive } from 'vue'

let seq = 0
export const toasts = reactive([])

/** Show `text` ('error' | 'ok' | 'info'); returns the toast's id. */
export function toast(text, kind = 'error', { ttlMs } = {}) {
  const id = ++seq
  // the same error again (a poll failing every few seconds) raises a counter, not a stack
  const same = toasts.find((x) => x.text === text && x.kind === kind)
  if (same) {
    same.count++
    return same.id
  }
  toasts.push({ id, text, kind, count: 1 })
  const ttl = ttlMs ?? (kind === 'error' ? 0 : 5000)
  if (ttl) setTimeout(() => dismiss(id), ttl)
  return id
}

export function dismiss(id) {
  const i = toasts.findIndex((x) => x.id === id)
  if (i >= 0) toasts.splice(i, 1)
}
