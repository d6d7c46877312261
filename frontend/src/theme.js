// Light / dark: follows the system preference unless the user picked one (kept in localStorage).
import { ref } from 'vue'

const KEY = 'molens.theme'
const CHOICES = ['system', 'light', 'dark']
export const themeChoice = ref(CHOICES.includes(localStorage.getItem(KEY)) ? localStorage.getItem(KEY) : 'system')
const media = window.matchMedia ? window.matchMedia('(prefers-color-scheme: dark)') : null
export const dark = ref(false)

function apply() {
  dark.value = themeChoice.value === 'dark' || (themeChoice.value === 'system' && !!(media && media.matches))
  document.documentElement.dataset.theme = dark.value ? 'dark' : 'light'
}

export function setTheme(choice) {
  if (!CHOICES.includes(choice)) return
  themeChoice.value = choice
  if (choice === 'system') localStorage.removeItem(KEY)
  else localStorage.setItem(KEY, choice)
  apply()
}

if (media && media.addEventListener) media.addEventListener('change', apply)
apply()
