// A small i18n: English and Simplified Chinese, switchable, remembered in localStorage.
import { ref } from 'vue'
import en from './locales/en.js'
import zh from './locales/zh.js'

const KEY = 'molens.lang'
export const messages = { en, zh }
export const languages = [
  { code: 'en', label: 'English' },
  { code: 'zh', label: '简体中文' },
]

function initial() {
  const saved = localStorage.getItem(KEY)
  if (saved && messages[saved]) return saved
  return (navigator.language || '').toLowerCase().startsWith('zh') ? 'zh' : 'en'
}

export const locale = ref(initial())
document.documentElement.lang = locale.value === 'zh' ? 'zh-CN' : 'en'

export function setLocale(code) {
  if (!messages[code]) return
  locale.value = code
  localStorage.setItem(KEY, code)
  document.documentElement.lang = code === 'zh' ? 'zh-CN' : 'en'
}

/** t('tasks.title') or t('x.count', { n: 3 }) -> "{n} tasks" filled in; falls back to English, then the key. */
export function t(key, params) {
  const lookup = (dict) => key.split('.').reduce((o, k) => (o && o[k] !== undefined ? o[k] : undefined), dict)
  let s = lookup(messages[locale.value])
  if (s === undefined) s = lookup(en)
  if (s === undefined) return key
  if (params) s = s.replace(/\{(\w+)\}/g, (m, k) => (params[k] !== undefined ? String(params[k]) : m))
  return s
}

export const i18n = {
  install(app) {
    app.config.globalProperties.$t = t
  },
}
