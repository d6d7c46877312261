// What the console computes of a task's schedule itself, as the server does (molens/fsm/machine.py).

/**
 * The last instant at or before `now` of the interval grid of task `x` with interval `iv`: the server
 * anchors an interval task at its `start_at`, else its `created_at`, and fires at anchor + k * iv.
 */
export function gridBefore(x, iv, now) {
  const anchor = x.start_at ?? x.created_at
  return anchor + Math.floor((now - anchor) / iv) * iv
}
