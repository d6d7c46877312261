// Builds the console into ../molens/web/static/, served by molens/web/ui.py at /ui/.
import { fileURLToPath, URL } from 'node:url'
import { defineConfig } from 'vite'
import vue from '@vitejs/plugin-vue'

export default defineConfig({
  base: '/ui/',
  plugins: [vue()],
  build: {
    outDir: fileURLToPath(new URL('../molens/web/static', import.meta.url)),
    emptyOutDir: true,
    assetsDir: 'assets',
    sourcemap: false,
    chunkSizeWarningLimit: 400,
  },
  server: {
    // `npm run dev` proxies the API to a local node (python -m molens.web.server --data-dir /tmp/m)
    proxy: { '/api': 'http://127.0.0.1:18081', '/healthz': 'http://127.0.0.1:18081' },
  },
})
