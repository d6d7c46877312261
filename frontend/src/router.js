import { createRouter, createWebHistory } from 'vue-router'
import Dashboard from './views/DashboardView.vue'

export const router = createRouter({
  history: createWebHistory('/ui/'),
  routes: [
    { path: '/', name: 'dashboard', component: Dashboard },
    { path: '/tasks', name: 'tasks', component: () => import('./views/TasksView.vue') },
    { path: '/tasks/new', name: 'task-new', component: () => import('./views/TaskNewView.vue') },
    { path: '/tasks/:id/edit', name: 'task-edit', component: () => import('./views/TaskNewView.vue') },
    { path: '/tasks/:id', name: 'task', component: () => import('./views/TaskDetailView.vue'), props: true },
    { path: '/executions', name: 'executions', component: () => import('./views/ExecutionsView.vue') },
    { path: '/dead-letters', name: 'dead-letters', component: () => import('./views/DeadLettersView.vue') },
    { path: '/latency', name: 'latency', component: () => import('./views/LatencyView.vue') },
    { path: '/timewheel', name: 'timewheel', component: () => import('./views/TimeWheelView.vue') },
    { path: '/flows', name: 'flows', component: () => import('./views/FlowsView.vue') },
    { path: '/workers', name: 'workers', component: () => import('./views/WorkersView.vue') },
    { path: '/cluster', name: 'cluster', component: () => import('./views/ClusterView.vue') },
    { path: '/:rest(.*)*', name: 'not-found', component: () => import('./views/NotFoundView.vue') },
  ],
})
