import { createRouter, createWebHistory } from 'vue-router'
import Dashboard from './views/DashboardView.vue'

// meta.needs: what a key must hold to see the page (access.js): 'write' a writer or admin, 'wide' a key
// of every namespace, 'admin' an admin of every namespace

export const router = createRouter({
  history: createWebHistory('/ui/'),
  routes: [
    { path: '/', name: 'dashboard', component: Dashboard, meta: { needs: 'wide' } },
    { path: '/tasks', name: 'tasks', component: () => import('./views/TasksView.vue') },
    { path: '/tasks/new', name: 'task-new', component: () => import('./views/TaskNewView.vue'), meta: { needs: 'write' } },
    { path: '/tasks/:id/edit', name: 'task-edit', component: () => import('./views/TaskNewView.vue'), meta: { needs: 'write' } },
    { path: '/tasks/:id', name: 'task', component: () => import('./views/TaskDetailView.vue'), props: true },
    { path: '/executions', name: 'executions', component: () => import('./views/ExecutionsView.vue') },
    { path: '/dead-letters', name: 'dead-letters', component: () => import('./views/DeadLettersView.vue') },
    { path: '/latency', name: 'latency', component: () => import('./views/LatencyView.vue'), meta: { needs: 'wide' } },
    { path: '/timewheel', name: 'timewheel', component: () => import('./views/TimeWheelView.vue'), meta: { needs: 'wide' } },
    { path: '/flows', name: 'flows', component: () => import('./views/FlowsView.vue') }, // a key of some namespaces: their own flows
    { path: '/workers', name: 'workers', component: () => import('./views/WorkersView.vue'), meta: { needs: 'admin' } },
    { path: '/cluster', name: 'cluster', component: () => import('./views/ClusterView.vue'), meta: { needs: 'admin' } },
    { path: '/audit', name: 'audit', component: () => import('./views/AuditView.vue') },
    { path: '/admin', name: 'admin', component: () => import('./views/AdminView.vue'), meta: { needs: 'admin' } },
    { path: '/:rest(.*)*', name: 'not-found', component: () => import('./views/NotFoundView.vue') },
  ],
})
