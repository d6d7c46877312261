export default {
  app: {
    language: 'Language',
    thisNode: 'this node',
    offline: 'The node does not answer. Retrying…',
    noLeader: 'No leader: waiting for an election. Writes are refused until a leader is elected; this page retries by itself.',
    leaderUnknownAddr: 'The leader is {id}, but its HTTP address is not known yet; retrying.',
  },
  nav: {
    menu: 'Menu', dashboard: 'Dashboard', tasks: 'Tasks', executions: 'Executions', latency: 'Latency',
    timewheel: 'Time wheel', cluster: 'Cluster',
  },
  common: {
    refresh: 'Refresh', any: 'Any', apply: 'Apply', reset: 'Reset', back: 'Back', cancel: 'Cancel', confirm: 'Confirm',
    loading: 'Loading…', more: 'Load more', next: 'Next', prev: 'Previous', page: 'Page {n}', saving: 'Saving…',
  },
  role: {
    leader: 'Leader', follower: 'Follower', candidate: 'Candidate', learner: 'Learner', joining: 'Joining',
    precandidate: 'Pre-candidate', 'pre-candidate': 'Pre-candidate', stopping: 'Stopping',
  },
  status: {
    pending: 'Pending', firing: 'Firing', awaiting_ack: 'Awaiting ACK', paused: 'Paused', done: 'Done',
    failed: 'Failed', inactive: 'Inactive',
  },
  result: {
    success: 'Success', failed: 'Failed', timeout: 'Timeout', network_error: 'Network error', not_found: 'Not found (404)',
    lost: 'Lost', unknown: 'Unknown', ack_success: 'ACK success', ack_failed: 'ACK failed',
  },
  type: { delayed: 'Delayed', periodic: 'Periodic' },
  reliability: { at_least_once: 'At least once', at_most_once: 'At most once' },
  dash: {
    updated: 'Updated {time}', tasksTotal: 'All tasks', firesPerS: 'Fires / s', successRate: 'Success rate',
    lateness: 'Fire lateness p99', leader: 'Leader', noLeader: 'none (election)', term: 'Term', thisNode: 'This node',
    cleanup: 'Cleanup', disk: 'Disk usage', replication: 'Replication', mode: 'Mode',
    notReported: 'Not reported by this node.',
  },
  stat: {
    expired_total: 'Expired tasks', deleted_total: 'Deleted tasks', last_run_at: 'Last run', pending: 'Waiting to expire',
    rate_limit_qps: 'Rate limit (/s)', data_bytes: 'Data', lmdb_bytes: 'Task store', history_bytes: 'History',
    raft_bytes: 'Raft log', snapshot_bytes: 'Snapshots', free_bytes: 'Free', total_bytes: 'Total', used_bytes: 'Used',
  },
  tasks: {
    title: 'Tasks', new: 'New task', id: 'ID', status: 'Status', type: 'Type', scene: 'Scene', schedule: 'Schedule',
    callback: 'Callback URL', nextRun: 'Next run', lastResult: 'Last result', urlSearch: 'URL contains',
    urlPlaceholder: 'e.g. example.com/hook', empty: 'No tasks match.',
  },
  task: {
    type: 'Type', schedule: 'Schedule', callback_url: 'Callback URL', scene: 'Scene', reliability: 'Reliability',
    timeout_ms: 'Timeout (ms)', max_retries: 'Max retries', max_fails: 'Max consecutive fails', created_at: 'Created',
    updated_at: 'Updated', next_run_at: 'Next run', last_fire_at: 'Last fired', seq: 'Occurrence', attempt: 'Attempt',
    fail_count: 'Consecutive fails', ack_url: 'ACK URL', ack_delay_ms: 'ACK delay (ms)', ack_attempt: 'ACK attempt',
    idempotency_key: 'Idempotency key', every: 'every {d}', after: '{d} after creation', at: 'at {time}',
  },
  form: {
    title: 'New task', kind: 'Kind', kind_delayed: 'Delayed', kind_interval: 'Periodic (interval)', kind_cron: 'Periodic (cron)',
    when: 'When', afterDelay: 'After a delay', atTime: 'At a time', delay: 'Delay', unit: 'Unit', runAt: 'Run at',
    localTime: 'In your browser’s time zone ({tz}).', interval: 'Interval', intervalHint: 'Fixed rate; at least 1 s.',
    cron: 'Cron expression', cronHint: '5 fields (min hour day month weekday), or 6 with seconds first.',
    previewOnce: 'Fires at ({tz})', timezone: 'Time zone', preview: 'Next fire times ({tz})', noPreview: 'Fill in the schedule to see the next fire times.',
    callbackUrl: 'Callback URL', callbackHint: 'POSTed with the payload as JSON. The default is this node’s built-in test endpoint.',
    payload: 'Payload (JSON)', payloadInvalid: 'Payload is not valid JSON: {msg}', advanced: 'More options',
    auto: 'auto', create: 'Create task',
  },
  detail: {
    title: 'Task', fields: 'Fields', lastResult: 'Last result', history: 'Execution history',
    notFound: 'This task does not exist (deleted or expired).',
    pause: 'Pause', resume: 'Resume', trigger: 'Trigger now', delete: 'Delete',
    confirm_pause: 'Pause task {id}? It stays paused until resumed.',
    confirm_resume: 'Resume task {id}? Its next run is recomputed (a missed delayed task fires now).',
    confirm_trigger: 'Run one extra occurrence of task {id} now?',
    confirm_delete: 'Delete task {id} and its whole history? This cannot be undone.',
    done_pause: 'Task paused.', done_resume: 'Task resumed.', done_trigger: 'Extra occurrence triggered.',
  },
  exec: {
    firedAt: 'Fired at', task: 'Task', fireId: 'Fire ID', result: 'Result', status: 'HTTP status', latency: 'Latency',
    attempt: 'Attempt', worker: 'Worker', response: 'Response', since: 'From', until: 'To',
    taskPlaceholder: 'task id', empty: 'No executions.',
  },
  lat: {
    window: 'Window', trend: 'Trend', url: 'Callback URL', count: 'Calls', empty: 'No callbacks in this window.',
    noTrend: 'No data for a trend yet.',
  },
  tw: {
    level: 'Level', timers: 'timers', bucket: 'bucket', overflow: 'Beyond the top level', empty: 'The wheel is empty.',
    hoverHint: 'Hover a cell for its window and count.',
    unsupported: 'This node does not serve the time-wheel distribution yet.',
  },
  cluster: {
    node: 'Node', role: 'Role', commit: 'Commit index', applied: 'Applied index', match: 'Match index', lag: 'Lag',
    fires: 'Fires', memory: 'Memory', contact: 'Last contact', ago: '{d} ago', learner: 'learner', empty: 'No nodes.',
  },
  login: {
    title: 'Sign in', hint: 'This node requires an API token (http.auth_token).', token: 'API token',
    remember: 'Remember on this device', submit: 'Sign in', wrong: 'The token was refused.',
  },
  notFound: { title: 'Page not found', home: 'Go to the dashboard' },
}
