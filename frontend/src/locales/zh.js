export default {
  app: {
    language: '语言',
    thisNode: '本节点',
    offline: '节点无响应，正在重试…',
    noLeader: '没有 Leader：正在等待选举。选出 Leader 之前写操作会被拒绝；本页会自动重试。',
    leaderUnknownAddr: 'Leader 是 {id}，但还不知道它的 HTTP 地址；正在重试。',
  },
  nav: {
    menu: '菜单', dashboard: '概览', tasks: '任务', executions: '执行记录', latency: '延迟', timewheel: '时间轮', cluster: '集群',
  },
  common: {
    refresh: '刷新', any: '全部', apply: '筛选', reset: '重置', back: '返回', cancel: '取消', confirm: '确认', loading: '加载中…',
    more: '加载更多', next: '下一页', prev: '上一页', page: '第 {n} 页', saving: '保存中…',
  },
  role: {
    leader: 'Leader', follower: 'Follower', candidate: '候选者', learner: '学习者', joining: '加入中',
    precandidate: '预候选者', 'pre-candidate': '预候选者', stopping: '停止中',
  },
  status: {
    pending: '等待中', firing: '执行中', awaiting_ack: '等待确认', paused: '已暂停', done: '已完成', failed: '已失败', inactive: '已停用',
  },
  result: {
    success: '成功', failed: '失败', timeout: '超时', network_error: '网络错误', not_found: '未找到 (404)', lost: '丢失',
    unknown: '未知', ack_success: '确认成功', ack_failed: '确认失败',
  },
  type: { delayed: '延时', periodic: '周期' },
  reliability: { at_least_once: '至少一次', at_most_once: '至多一次' },
  dash: {
    updated: '更新于 {time}', tasksTotal: '全部任务', firesPerS: '每秒触发', successRate: '成功率', lateness: '触发延迟 p99',
    leader: 'Leader', noLeader: '无（选举中）', term: '任期', thisNode: '本节点', cleanup: '清理', disk: '磁盘占用',
    replication: '复制', mode: '模式', notReported: '本节点未提供。',
  },
  stat: {
    expired_total: '已过期任务', deleted_total: '已删除任务', last_run_at: '上次运行', pending: '待过期',
    rate_limit_qps: '速率上限 (/秒)', data_bytes: '数据', lmdb_bytes: '任务存储', history_bytes: '历史记录',
    raft_bytes: 'Raft 日志', snapshot_bytes: '快照', free_bytes: '可用', total_bytes: '总计', used_bytes: '已用',
  },
  tasks: {
    title: '任务', new: '新建任务', id: 'ID', status: '状态', type: '类型', scene: '场景', schedule: '调度',
    callback: '回调地址', nextRun: '下次运行', lastResult: '上次结果', urlSearch: 'URL 包含', urlPlaceholder: '例如 example.com/hook',
    empty: '没有匹配的任务。',
  },
  task: {
    type: '类型', schedule: '调度', callback_url: '回调地址', scene: '场景', reliability: '可靠性', timeout_ms: '超时 (毫秒)',
    max_retries: '最大重试次数', max_fails: '最大连续失败次数', created_at: '创建时间', updated_at: '更新时间',
    next_run_at: '下次运行', last_fire_at: '上次触发', seq: '第几次', attempt: '尝试次数', fail_count: '连续失败',
    ack_url: '确认地址', ack_delay_ms: '确认延迟 (毫秒)', ack_attempt: '确认尝试', idempotency_key: '幂等键',
    every: '每 {d}', after: '创建后 {d}', at: '于 {time}',
  },
  form: {
    title: '新建任务', kind: '种类', kind_delayed: '延时', kind_interval: '周期（间隔）', kind_cron: '周期（cron）',
    when: '时间', afterDelay: '延迟一段时间', atTime: '指定时间', delay: '延迟', unit: '单位', runAt: '运行时间',
    localTime: '使用浏览器时区（{tz}）。', interval: '间隔', intervalHint: '固定速率；至少 1 秒。',
    cron: 'Cron 表达式', cronHint: '5 个字段（分 时 日 月 周），或 6 个字段（秒在最前）。', timezone: '时区',
    previewOnce: '触发时间（{tz}）', preview: '接下来的触发时间（{tz}）', noPreview: '填写调度后可预览触发时间。', callbackUrl: '回调地址',
    callbackHint: '以 JSON 形式 POST 负载。默认是本节点内置的测试端点。', payload: '负载 (JSON)',
    payloadInvalid: '负载不是合法的 JSON：{msg}', advanced: '更多选项', auto: '自动', create: '创建任务',
  },
  detail: {
    title: '任务', fields: '字段', lastResult: '上次结果', history: '执行历史', notFound: '该任务不存在（已删除或已过期）。',
    pause: '暂停', resume: '恢复', trigger: '立即触发', delete: '删除',
    confirm_pause: '暂停任务 {id}？恢复之前它将保持暂停。',
    confirm_resume: '恢复任务 {id}？将重新计算下次运行时间（已错过的延时任务会立即触发）。',
    confirm_trigger: '立即额外运行一次任务 {id}？',
    confirm_delete: '删除任务 {id} 及其全部历史？此操作无法撤销。',
    done_pause: '任务已暂停。', done_resume: '任务已恢复。', done_trigger: '已触发一次额外运行。',
  },
  exec: {
    firedAt: '触发时间', task: '任务', fireId: '触发 ID', result: '结果', status: 'HTTP 状态码', latency: '耗时',
    attempt: '尝试', worker: '执行节点', response: '响应', since: '开始', until: '结束', taskPlaceholder: '任务 ID',
    empty: '没有执行记录。',
  },
  lat: { window: '时间窗口', trend: '趋势', url: '回调地址', count: '调用次数', empty: '该时间窗口内没有回调。', noTrend: '暂无趋势数据。' },
  tw: {
    level: '层级', timers: '个定时器', bucket: '桶', overflow: '超出顶层', empty: '时间轮为空。',
    hoverHint: '将鼠标悬停在格子上查看时间窗口和数量。', unsupported: '本节点尚未提供时间轮分布数据。',
  },
  cluster: {
    node: '节点', role: '角色', commit: '提交索引', applied: '应用索引', match: '匹配索引', lag: '落后', fires: '触发次数',
    memory: '内存', contact: '上次联系', ago: '{d} 前', learner: '学习者', empty: '没有节点。',
  },
  login: {
    title: '登录', hint: '本节点需要 API 令牌（http.auth_token）。', token: 'API 令牌', remember: '在此设备上记住',
    submit: '登录', wrong: '令牌被拒绝。',
  },
  notFound: { title: '页面不存在', home: '返回概览' },
}
