// Keyboard shortcuts: `g` then a letter goes to a page, `n` new task, `/` the page's search box,
// `r` refresh, `?` this list, Esc closes a dialog. None fires while typing in a field.
import { ref } from 'vue'

/** [keys, what] in the order the help lists them; `what` is a path, or an action below. */
export const SHORTCUTS = [
  ['g d', '/'],
  ['g t', '/tasks'],
  ['g e', '/executions'],
  ['g l', '/dead-letters'],
  ['g f', '/flows'],
  ['g w', '/workers'],
  ['g c', '/cluster'],
  ['n', '/tasks/new'],
  ['/', 'search'],
  ['r', 'refresh'],
  ['?', 'help'],
  ['Esc', 'close'],
]
/** The help's text key of a shortcut. */
export const shortcutKey = (what) => `keys.${{ '/': 'dashboard', '/tasks': 'tasks', '/executions': 'executions',
  '/dead-letters': 'deadLetters', '/flows': 'flows', '/workers': 'workers', '/cluster': 'cluster',
  '/tasks/new': 'newTask' }[what] || what}`

export const helpOpen = ref(false)

let mayGo = () => true
/**
 * The shortcuts this key may use, in the help's order: a page's only when the key may see the page
 * (`mayGo`, the menu's check that installShortcuts was given); the others always.
 */
export function availableShortcuts() {
  return SHORTCUTS.filter(([, what]) => !what.startsWith('/') || mayGo(what))
}

/** The event pages' pollers listen to: `r` asks every list and chart on the page to reload now. */
export const REFRESH_EVENT = 'molens:refresh'

function typing(el) {
  if (!el || !el.tagName) return false
  return ['INPUT', 'TEXTAREA', 'SELECT'].includes(el.tagName) || el.isContentEditable
}

function focusSearch() {
  const el = document.querySelector('main [data-search]')
    || document.querySelector('main input[type="search"], main input[type="text"]:not([disabled]), main input:not([type])')
  if (el) {
    el.focus()
    if (el.select) el.select()
  }
}

/**
 * Installs the key handler on `window`; `go(path)` navigates, `may(path)` says whether the signed-in
 * key may see that page (a page's shortcut is neither listed nor handled for a key it would refuse).
 * Returns the function that removes it.
 */
export function installShortcuts(go, may = () => true) {
  mayGo = may
  let prefix = null
  let prefixTimer = null
  function onKey(e) {
    if (e.ctrlKey || e.metaKey || e.altKey || e.defaultPrevented) return
    if (e.key === 'Escape') {
      if (helpOpen.value) {
        helpOpen.value = false
        return
      }
      const dialog = document.querySelector('.modal-backdrop')
      if (dialog && !dialog.contains(e.target)) dialog.dispatchEvent(new KeyboardEvent('keydown', { key: 'Escape', bubbles: true }))
      return
    }
    if (typing(e.target) || document.querySelector('.modal-backdrop')) return
    const key = prefix ? `${prefix} ${e.key}` : e.key
    clearTimeout(prefixTimer)
    prefix = null
    if (key === 'g') {
      prefix = 'g'
      prefixTimer = setTimeout(() => (prefix = null), 1500)
      return
    }
    const hit = availableShortcuts().find(([k]) => k === key)
    if (!hit) return
    e.preventDefault()
    const what = hit[1]
    if (what.startsWith('/')) go(what)
    else if (what === 'search') focusSearch()
    else if (what === 'help') helpOpen.value = !helpOpen.value
    else if (what === 'refresh') window.dispatchEvent(new Event(REFRESH_EVENT))
  }
  window.addEventListener('keydown', onKey)
  return () => window.removeEventListener('keydown', onKey)
}
