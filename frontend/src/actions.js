// Which actions a task's state allows (docs/api.md: pause from pending/firing/awaiting_ack; resume
// from paused, and inactive for periodic tasks; trigger from pending; backfill: a periodic task that
// is pending, firing or paused), and the bounded client-side
// loop that runs one action over many tasks.
import { api } from './api.js'

const PAUSABLE = new Set(['pending', 'firing', 'awaiting_ack'])

export function allowed(task, action) {
  if (!task) return false
  switch (action) {
    case 'pause':
      return PAUSABLE.has(task.status)
    case 'resume':
      return task.status === 'paused' || (task.type === 'periodic' && task.status === 'inactive')
    case 'trigger':
      return task.status === 'pending'
    case 'backfill':
      return task.type === 'periodic' && ['pending', 'firing', 'paused'].includes(task.status)
    case 'delete':
      return true
    default:
      return false
  }
}

export const BULK_CONCURRENCY = 4

/**
 * Run `action` on every task of `tasks` it is allowed for, at most BULK_CONCURRENCY at a time.
 * `progress(done, total)` after each; resolves {ok: [task], failed: [{id, error}], skipped: [id],
 * left: [id]}: `left` were not attempted (every worker stopped on a 307 or a node that did not answer).
 */
export async function runBulk(action, tasks, progress = () => {}) {
  const todo = tasks.filter((x) => allowed(x, action))
  const skipped = tasks.filter((x) => !allowed(x, action)).map((x) => x.id)
  const ok = []
  const failed = []
  let next = 0
  let done = 0
  progress(0, todo.length)
  async function worker() {
    while (next < todo.length) {
      const x = todo[next++]
      const path = `/tasks/${encodeURIComponent(x.id)}`
      try {
        ok.push(action === 'delete' ? await api('DELETE', path) : await api('POST', `${path}/${action}`))
      } catch (e) {
        failed.push({ id: x.id, error: e })
        if (e.status === 307 || e.status === 0) break // moving to the leader / node gone: stop here
      }
      progress(++done, todo.length)
    }
  }
  await Promise.all(Array.from({ length: Math.min(BULK_CONCURRENCY, todo.length) }, worker))
  return { ok, failed, skipped, left: todo.slice(next).map((x) => x.id) }
}
