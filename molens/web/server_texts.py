"""The API's own texts in the request's language: error messages and history-event texts.

A response is in English unless the request's ``Accept-Language`` prefers a language this table
has (only ``zh`` today); then every ``error.message`` and every history event's
``execution_result`` (rows of kind ``event``) that matches one of the table's patterns is answered
translated, with ``Content-Language``. Codes, fields and everything else stay as they are: clients
branch on ``code``, never on text, and a text with no translation stays English.

The table, :data:`ZH`, is keyed by the English texts as the code writes them (``"task {} not found"``):
the most specific key that matches the whole text wins, its values filled into the Chinese text
(each value translated again when it is itself a known text, such as the reason of a skip).
``tests/unit/test_web_server_texts.py`` walks every message the API's modules raise and fails when
one has no key here. Epoch-millisecond ranges keep their ``[a, b) ms`` shape so a console can show
them as times.
"""

# ruff: noqa: RUF001  (the Chinese texts use full-width punctuation, as Chinese does)
from __future__ import annotations

import re
import string
from typing import Any

SUPPORTED = ("en", "zh")

ZH: dict[str, str] = {
    # history events (molens/fsm/machine.py): the [a, b) ms ranges keep their shape for the console
    "skipped the occurrences scheduled in [{}, {}) ms: {}": "跳过了计划在 [{0}, {1}) ms 内的执行：{2}",
    "version {}: {}": "修改为第 {0} 版：{1}",
    "backfill of the occurrences scheduled in [{}, {}) ms, the first at {}": "回填计划在 [{0}, {1}) ms 内的执行，第一次在 {2}",
    # why occurrences were skipped (the last group of the event above)
    "more than catchup_window_ms ago (catchup all)": "早于 catchup_window_ms（catchup all）",
    "came due while the task was paused (resume_from now)": "在任务暂停期间到期（resume_from now）",
    "missed (catchup none)": "已错过（catchup none）",
    "before the backfilled range, after which the schedule resumes": "在回填范围之前，回填之后按计划继续",
    "due before the occurrence started (catchup {})": "在本次执行开始之前到期（catchup {0}）",
    "due while the cluster was down, the task paused or an occurrence ran (catchup {})":
        "在集群停机、任务暂停或上一次执行进行期间到期（catchup {0}）",
    "{} occurrences still running (overlap allow)": "仍有 {0} 次执行在进行（overlap allow）",
    # schedules (molens/schedule/cron.py)
    "invalid cron_expr {}: the {} field {} is not valid ({})": "cron 表达式 {0} 无效：{1} 字段 {2} 不合法（{3}）",
    "invalid cron_expr {}: {}": "cron 表达式 {0} 无效：{1}",
    "the {} field's range {} runs backwards: a range goes low to high (write one that wraps around as two, such as 22-23,0-2)":
        "{0} 字段的范围 {1} 是倒序的：范围应从小到大（跨越边界的请写成两段，例如 22-23,0-2）",
    "cron_expr has {} fields; give 5 (minute hour day month weekday) or 6 with seconds first":
        "cron 表达式有 {0} 个字段；应为 5 个（分 时 日 月 周），或 6 个（秒在最前）",
    "cron_expr is longer than {}": "cron 表达式长于 {0}",
    "cron_expr is only for periodic tasks": "cron_expr 只用于周期任务",
    "cron_expr must be a string": "cron_expr 必须是字符串",
    "cron_expr {} never fires after {}": "cron 表达式 {0} 在 {1} 之后永不触发",
    "cron_expr {}: no fire time before the year 10000 after {}": "cron 表达式 {0} 在 {1} 之后、10000 年之前没有触发时间",
    "cron_expr: hashed (H) and random (R) values are not supported": "cron 表达式：不支持散列（H）和随机（R）值",
    "unknown cron macro {}; use one of {}": "未知的 cron 宏 {0}；请使用以下之一：{1}",
    "unknown time zone {}": "未知时区 {0}",
    "unknown time zone {}: use an IANA name such as Europe/Berlin": "未知时区 {0}：请使用 IANA 名称，例如 Europe/Berlin",
    "time zone {} {}: use an IANA name such as Europe/Berlin": "时区 {0} {1}：请使用 IANA 名称，例如 Europe/Berlin",
    "no next fire found after {} (time zone data?)": "{0} 之后找不到下一次触发时间（时区数据有误？）",
    "interval_ms must be a positive integer, got {}": "interval_ms 必须是正整数，收到 {0}",
    "give interval_ms or cron_expr, not both": "interval_ms 和 cron_expr 只能给一个",
    "a periodic schedule needs interval_ms or cron_expr": "周期调度需要 interval_ms 或 cron_expr",
    "a delayed preview needs interval_ms or run_at (one of them)": "延迟任务的预览需要 interval_ms 或 run_at（其一）",
    "a periodic preview needs interval_ms or cron_expr (one of them)": "周期任务的预览需要 interval_ms 或 cron_expr（其一）",
    "interval_ms must be at most {}": "interval_ms 最多为 {0}",
    "interval_ms must be in {}..{}": "interval_ms 必须在 {0} 到 {1} 之间",
    "interval_ms must be in {}..{}, got {}": "interval_ms 必须在 {0} 到 {1} 之间，收到 {2}",
    "run_at is only for delayed tasks": "run_at 只用于延迟任务",
    "run_at must be in 0..{}, got {}": "run_at 必须在 0 到 {0} 之间，收到 {1}",
    # request validation (molens/schema.py, molens/model.py, molens/web/)
    "{} is required": "缺少 {0}",
    "{} must be {}": "{0} 必须是 {1}",
    "{} must be {}, got {}": "{0} 必须是 {1}，收到 {2}",
    "{} must be in {}": "{0} 必须在 {1} 范围内",
    "{} must be in {}..{}": "{0} 必须在 {1} 到 {2} 之间",  # the range of "{} must be in {}" (molens/schema.py)
    "{} must be in {}, got {}": "{0} 必须在 {1} 范围内，收到 {2}",
    "{} must be {}..{} {}": "{0} 必须是 {1} 到 {2} {3}",
    "{} must match {}": "{0} 必须符合 {1}",
    "{} must be at least {} characters": "{0} 至少要 {1} 个字符",
    "{}: {}": "{0}：{1}",
    "unknown field {}": "未知字段 {0}",
    "unknown field {}; a filter has {}": "未知字段 {0}；筛选条件的字段有 {1}",
    "unknown field {}; a flow has {}": "未知字段 {0}；流控的字段有 {1}",
    "unknown parameter {}; this endpoint takes {}": "未知参数 {0}；此接口接受 {1}",
    "a task must be a JSON object, got {}": "任务必须是 JSON 对象，收到 {0}",
    "the body must be a JSON object (one task), got {}": "请求体必须是 JSON 对象（一个任务），收到 {0}",
    "the body must be a JSON object (a merge patch of the task)": "请求体必须是 JSON 对象（任务的合并补丁）",
    "the body must be a JSON object of flow limits": "请求体必须是流控限制的 JSON 对象",
    "the body must be a JSON object: a filter of dead letters": "请求体必须是 JSON 对象：死信的筛选条件",
    'the body must be an object {{"tasks": [...]}}': '请求体必须是对象 {{"tasks": [...]}}',
    'the body must be an object {{"to": "node id"}} (or empty)': '请求体必须是对象 {{"to": "节点 ID"}}（或为空）',
    'the body is optional: {{"resume_from": "now" | "schedule"}}': '请求体可省略：{{"resume_from": "now" | "schedule"}}',
    'the body is {{"start": epoch ms, "end": epoch ms}}': '请求体为 {{"start": 纪元毫秒, "end": 纪元毫秒}}',
    "tasks must be an array of task objects": "tasks 必须是任务对象的数组",
    "a batch holds at most {} tasks, got {}": "一批最多 {0} 个任务，收到 {1}",
    "idempotency_key {} is also the key of item {} of this batch": "idempotency_key {0} 也是本批第 {1} 项的键",
    "Idempotency-Key must be 1..{} characters": "Idempotency-Key 必须是 1 到 {0} 个字符",
    "Idempotency-Key must not hold a NUL character": "Idempotency-Key 不能包含 NUL 字符",
    "the Idempotency-Key header and the body's idempotency_key differ; give one, or both the same":
        "Idempotency-Key 请求头与请求体的 idempotency_key 不同；只给一个，或两者相同",
    "If-Match is longer than {} characters": "If-Match 长于 {0} 个字符",
    'If-Match must be a task version such as "3", got {}': 'If-Match 必须是任务版本号，例如 "3"，收到 {0}',
    "Content-Type must be application/json, got {}": "Content-Type 必须是 application/json，收到 {0}",
    "JSON bodies are UTF-8, got charset={}": "JSON 请求体必须是 UTF-8，收到 charset={0}",
    "a request body needs Content-Type: application/json": "请求体需要 Content-Type: application/json",
    "task {} is waiting for its ACK: ack_url cannot be removed until that ends (the callback was answered 2xx "
    "and would not be sent again)": "任务 {0} 正在等待 ACK：在此结束前不能删除 ack_url（回调已得到 2xx 应答，不会再次发送）",
    "the times are past the year 9999 in {}: no local time can show them": "这些时间在 {0} 已超过 9999 年：无法以本地时间显示",
    "request body is empty; expected JSON": "请求体为空；应为 JSON",
    "request body is more than {} bytes": "请求体超过 {0} 字节",
    "request body is {} bytes, more than {}": "请求体有 {0} 字节，超过 {1}",
    "request body is nested too deeply": "请求体嵌套过深",
    "request body is not valid JSON: {}": "请求体不是合法的 JSON：{0}",
    "request body nests arrays and objects more than {} levels deep": "请求体中数组和对象的嵌套超过 {0} 层",
    "{} on this route takes no request body; send none (or {{}})": "此路由的 {0} 不接受请求体；请不要发送（或发送 {{}}）",
    "a field name is not a JSON string (lone surrogate?)": "字段名不是 JSON 字符串（孤立的代理项？）",
    "the task is not JSON": "任务不是 JSON",
    "{} is not JSON: {}": "{0} 不是 JSON：{1}",
    "payload is not valid UTF-8 (byte {} of the payload)": "payload 不是合法的 UTF-8（payload 的第 {0} 字节）",
    "payload is {} bytes encoded, more than {}": "payload 编码后有 {0} 字节，超过 {1}",
    "{} is longer than {} characters": "{0} 长于 {1} 个字符",
    "{} must not be empty": "{0} 不能为空",
    "{} is empty; leave it out for the default": "{0} 为空；如需默认值请省略",
    "{} must be a string, got {}": "{0} 必须是字符串，收到 {1}",
    "{} must be a string of 1..300 characters": "{0} 必须是 1 到 300 个字符的字符串",
    "{} must be at most 300 characters": "{0} 最多 300 个字符",
    "{} must be an integer, got {}": "{0} 必须是整数，收到 {1}",
    "{} must be epoch ms": "{0} 必须是纪元毫秒",
    "{} must be an epoch ms in 0..{}": "{0} 必须是 0 到 {1} 之间的纪元毫秒",
    "{} must be epoch ms in 0..{} (up to year 9999), got {}": "{0} 必须是 0 到 {1} 之间的纪元毫秒（最晚 9999 年），收到 {2}",
    "{} is not valid UTF-8": "{0} 不是合法的 UTF-8",
    "{} holds a lone UTF-16 surrogate": "{0} 含有孤立的 UTF-16 代理项",
    "{} contains whitespace or control characters": "{0} 含有空白或控制字符",
    "{} contains a backslash; write %5C if the path needs one": "{0} 含有反斜杠；路径需要时请写 %5C",
    "{} is not a valid URL: {}": "{0} 不是合法的 URL：{1}",
    "{} must be an {} URL": "{0} 必须是 {1} URL",
    "{} must not hold credentials (user:password@host): they would be stored and shown with the task; "
    "let the receiver check X-Molens-Signature instead":
        "{0} 不能包含凭据（user:password@host）：它们会随任务保存并显示；请让接收方校验 X-Molens-Signature",
    "{} has no host": "{0} 没有主机",
    "{} has an invalid port 0": "{0} 的端口 0 无效",
    "{} must not contain a fragment": "{0} 不能包含片段（#）",
    "{} has an invalid host {}": "{0} 的主机 {1} 无效",
    "{} host {} is {}": "{0} 的主机 {1}：{2}",
    "denied by the callback host policy": "被回调主机策略拒绝",
    "not in the callback host allow list": "不在回调主机允许列表中",
    "{} cannot be changed; create a new task": "{0} 不能修改；请新建任务",
    "a task's idempotency_key cannot be changed": "任务的 idempotency_key 不能修改",
    "a task's namespace cannot be changed; create a new task": "任务的命名空间不能修改；请新建任务",
    "a task's type cannot be changed; create a new task": "任务的类型不能修改；请新建任务",
    "{} is only for periodic tasks": "{0} 只用于周期任务",
    "{} is only for {} tasks": "{0} 只用于 {1} 任务",
    "{} tasks need {} or {}": "{0} 任务需要 {1} 或 {2}",
    "give {} or {}, not both": "{0} 和 {1} 只能给一个",
    "{} takes {} only": "{0} 只接受 {1}",
    "end_at must be after now and after start_at": "end_at 必须晚于现在且晚于 start_at",
    "ack_url needs reliability {}": "ack_url 需要 reliability 为 {0}",
    "max_retries ({}) and retry.max_retries ({}) disagree; give one": "max_retries（{0}）与 retry.max_retries（{1}）不一致；只给一个",
    "retry.non_retryable_statuses must hold statuses in 300..599, got {}": "retry.non_retryable_statuses 只能包含 300 到 599 的状态码，收到 {0}",
    "traceparent has an all-zero trace id or parent id (W3C Trace Context)": "traceparent 的 trace id 或 parent id 全为零（W3C Trace Context）",
    "type must be 'delayed' or 'periodic'": "type 必须是 'delayed' 或 'periodic'",
    "scene must match {}": "scene 必须符合 {0}",
    "status is longer than {} characters": "status 长于 {0} 个字符",
    "q is longer than {}": "q 长于 {0}",
    "q searches in id order: order must be created or -created": "q 按 id 顺序搜索：order 必须是 created 或 -created",
    "status must be one of {}, got {}": "status 必须是以下之一：{0}，收到 {1}",
    "order must be one of {}, got {}": "order 必须是以下之一：{0}，收到 {1}",
    "result must be one of {}": "result 必须是以下之一：{0}",
    "kind must be one of {}": "kind 必须是以下之一：{0}",
    "action must be one of {}": "action 必须是以下之一：{0}",
    "range must be one of {}": "range 必须是以下之一：{0}",
    "url filter is longer than {}": "url 筛选长于 {0}",
    "url is longer than {} characters": "url 长于 {0} 个字符",
    "cursor is not a cursor this API issued": "cursor 不是本 API 签发的游标",
    "limit must be in 1..{}": "limit 必须在 1 到 {0} 之间",
    "local must be 1 or 0": "local 必须是 1 或 0",
    "level must be in 0..{}, got {}": "level 必须在 0 到 {0} 之间，收到 {1}",
    "consistency must be local or linearizable, got {}": "consistency 必须是 local 或 linearizable，收到 {0}",
    "task_id is not a task id": "task_id 不是任务 ID",
    "all must be true (or left out), got {}": "all 必须为 true（或省略），收到 {0}",
    "give a filter (task_id, flow, kind, since, until, namespace) or all=true":
        "请给出筛选条件（task_id、flow、kind、since、until、namespace）或 all=true",
    "the body must be an object with one field, url: an export's path and query": "请求体必须是只有一个字段 url 的对象：某个导出的路径和查询",
    "fire {} was not dispatched to worker {}": "执行 {0} 并未派发给工作节点 {1}",
    "format must be one of {}": "format 必须是以下之一：{0}",
    "an export (format={}) is every matching row: no cursor or limit": "导出（format={0}）包含所有匹配的行：不接受 cursor 或 limit",
    "url must be an export: /api/v1/tasks, /executions, /dead-letters, /audit or a task's /executions, then ?format=csv or ?format=jsonl first and the list's filters after it":
        "url 必须是导出：/api/v1/tasks、/executions、/dead-letters、/audit 或某个任务的 /executions，先是 ?format=csv 或 ?format=jsonl，列表的筛选条件在其后",
    "ticket is not a ticket this API issued": "ticket 不是本 API 签发的票据",
    "actor is a key id or name of at most 200 characters": "actor 是最多 200 个字符的密钥 ID 或名称",
    "resume_from must be 'now' or 'schedule', got {}": "resume_from 必须是 'now' 或 'schedule'，收到 {0}",
    "to must be a node id (a string) or null": "to 必须是节点 ID（字符串）或 null",
    "{} is not another voter of the cluster": "{0} 不是集群中的另一个投票成员",
    "leadership moved before this node handed it over ({}); this request transferred nothing":
        "在本节点移交领导权之前，领导权已转移（{0}）；本请求没有转移领导权",
    "a flow key must match {}, got {}": "流控键必须符合 {0}，收到 {1}",
    "{} needs rate_per_s{}": "{0} 需要 rate_per_s{1}",
    'namespaces must hold namespace names or "*", got {}': 'namespaces 只能包含命名空间名称或 "*"，收到 {0}',
    "namespace must match {}": "命名空间必须符合 {0}",
    "start must be before end": "start 必须早于 end",
    "start must be before end and end not after now ({})": "start 必须早于 end，且 end 不能晚于现在（{0}）",
    "end must not be after now ({}): a backfill fires past occurrences": "end 不能晚于现在（{0}）：回填只触发过去的执行",
    "[start, end) holds more than {} occurrences of the schedule; split the range": "[start, end) 内的计划执行超过 {0} 次；请拆分范围",
    "only a periodic task has a schedule to backfill": "只有周期任务才有可回填的计划",
    # objects and states (molens/fsm/machine.py, molens/web/)
    "task {} not found": "任务 {0} 不存在",
    "dead letter {} not found": "死信 {0} 不存在",
    "key {} not found": "密钥 {0} 不存在",
    "namespace {} not found": "命名空间 {0} 不存在",
    "node {} is not in the cluster": "节点 {0} 不在集群中",
    "node {} is not this node (local=1 answers for this node only)": "节点 {0} 不是本节点（local=1 只回答本节点）",
    "task {} is at version {}, not {}": "任务 {0} 的版本是 {1}，不是 {2}",
    "task {} kept changing under {} updates; try again": "任务 {0} 在 {1} 次更新期间一直在变化；请重试",
    "cannot backfill a task that is {}": "无法回填状态为 {0} 的任务",
    "cannot pause a task that is {}": "无法暂停状态为 {0} 的任务",
    "cannot resume a task that is {}": "无法恢复状态为 {0} 的任务",
    "cannot trigger a task that is {}": "无法触发状态为 {0} 的任务",
    "cannot trigger a task while a backfill runs": "回填进行期间无法触发任务",
    "cannot trigger a task while an occurrence planned for a later instant is on its way":
        "计划在更晚时刻的一次执行正在发送中，暂时无法触发任务",
    "task {} is {}, nothing to fire": "任务 {0} 的状态是 {1}，没有可触发的",
    "task {} is not due (due {}, now {})": "任务 {0} 未到期（到期 {1}，现在 {2}）",
    "task {} already has fire {} in flight": "任务 {0} 已有触发 {1} 在进行",
    "task {}: {} occurrences still running (overlap allow)": "任务 {0}：仍有 {1} 次执行在进行（overlap allow）",
    "task {}: {} occurrences still running; its own waits for one to end": "任务 {0}：仍有 {1} 次执行在进行；本次等待其中一次结束",
    "task {}: missed occurrences skipped (catchup)": "任务 {0}：错过的执行已跳过（catchup）",
    "task {} is paused; resume it before a redrive": "任务 {0} 已暂停；重新投递前请先恢复",
    "task {} is {}: only a failed task is redriven": "任务 {0} 的状态是 {1}：只有失败的任务可以重新投递",
    "task {} of dead letter {} no longer exists": "死信 {1} 的任务 {0} 已不存在",
    "task {} has {} redrives waiting already; retry later": "任务 {0} 已有 {1} 个重新投递在等待；请稍后重试",
    "occurrence {} is already being redriven": "执行 {0} 已在重新投递中",
    "task {} is redriving an older occurrence; backfill when it ends": "任务 {0} 正在重新投递更早的执行；结束后再回填",
    "task {} is still backfilling (up to {}); one backfill at a time": "任务 {0} 仍在回填（直到 {1}）；一次只能有一个回填",
    "fire {} is already in flight": "触发 {0} 已在进行",
    "fire {} is not due (due {}, now {})": "触发 {0} 未到期（到期 {1}，现在 {2}）",
    "stale fire {} attempt {}; expected attempt {}": "过期的触发 {0} 第 {1} 次尝试；应为第 {2} 次",
    "stale fire {} attempt {}; expected {} attempt {}": "过期的触发 {0} 第 {1} 次尝试；应为 {2} 第 {3} 次",
    "no {} fire {} attempt {} in flight (stale or duplicate result)": "没有进行中的 {0} 触发 {1} 第 {2} 次尝试（过期或重复的结果）",
    "flow {} has no settings": "流控 {0} 没有设置",
    "flow {} has no settings and no fires now": "流控 {0} 没有设置，当前也没有触发",
    "namespace {} exists": "命名空间 {0} 已存在",
    "namespace {} holds {} tasks; delete them first": "命名空间 {0} 有 {1} 个任务；请先删除",
    "namespace {} is named by API keys {}; delete them first": "命名空间 {0} 仍被 API 密钥 {1} 使用；请先删除这些密钥",
    "namespace {} holds {} unfinished tasks; {} more would pass its max_pending_tasks {}; nothing was created":
        "命名空间 {0} 有 {1} 个未完成任务；再加 {2} 个会超过其 max_pending_tasks {3}；未创建任何任务",
    "namespace {} holds {} unfinished tasks, its max_pending_tasks {}: task {} ({}) would be one more; nothing was changed":
        "命名空间 {0} 有 {1} 个未完成任务，即其 max_pending_tasks {2}：任务 {3}（{4}）会再多一个；未作任何更改",
    "cannot trigger a task before {} (epoch ms): an attempt sent ahead for that instant may still go out":
        "{0}（epoch 毫秒）之前不能触发该任务：为该时刻提前发出的尝试仍可能送达",
    "namespace {} has {} flows with settings, the most it may have; delete one first":
        "命名空间 {0} 已有 {1} 个设置了限制的流，已达上限；请先删除一个",
    "the default namespace's flows have bare keys (its tasks' flow_key): {}, not {}":
        "默认命名空间的流键不带前缀（即其任务的流键）：应为 {0}，而非 {1}",
    "namespace {} takes at most {} creates per second; nothing was created": "命名空间 {0} 每秒最多创建 {1} 个；未创建任何任务",
    "namespace {}: a payload of {} bytes, more than its max_payload_bytes {}; nothing was created":
        "命名空间 {0}：payload 有 {1} 字节，超过其 max_payload_bytes {2}；未创建任何任务",
    "namespace {}: a payload of {} bytes, more than its max_payload_bytes {}; nothing was changed":
        "命名空间 {0}：payload 有 {1} 字节，超过其 max_payload_bytes {2}；未作任何更改",
    "the default namespace always exists": "默认命名空间始终存在",
    "the default namespace has no settings to change": "默认命名空间没有可修改的设置",
    "the bootstrap key is http.auth_token: change the config to rotate it": "引导密钥是 http.auth_token：请修改配置来轮换",
    # keys and access (molens/web/access.py, molens/web/errors.py)
    "missing or wrong bearer token": "缺少或错误的 bearer 令牌",
    "this key may not do that": "此密钥无权执行该操作",
    "a {} key may not do this": "{0} 密钥无权执行此操作",
    'node-wide: only a key of every namespace ("*") may do this': '全节点操作：只有所有命名空间（"*"）的密钥可以执行',
    "this key may not act in namespace {}": "此密钥无权在命名空间 {0} 中操作",
    "too many bad keys from this address; wait": "此地址的错误密钥过多；请稍候",
    # the cluster and the node (molens/web/)
    "no leader is known (election in progress); retry shortly": "当前没有 leader（正在选举）；请稍后重试",
    "this node is not the leader (leader: {})": "本节点不是 leader（leader：{0}）",
    "leadership changed before the write applied; outcome unknown": "写入生效前 leader 发生了变化；结果未知",
    "proposal did not apply within {} s; outcome unknown": "提议在 {0} 秒内未生效；结果未知",
    "not ready: no leader is known": "未就绪：当前没有 leader",
    "not ready: this node was removed from the cluster": "未就绪：本节点已被移出集群",
    "not ready: {}": "未就绪：{0}",
    "this node was removed from the cluster; ask a member": "本节点已被移出集群；请询问其他成员",
    "node is stopping": "节点正在停止",
    "a single-process node has no other voter to hand leadership to": "单进程节点没有其他投票成员可以移交 leader",
    "the leader at {} did not answer: {}": "位于 {0} 的 leader 未响应：{1}",
    "the time wheel lives on the leader and no leader is known (or it is rebuilding)": "时间轮位于 leader 上，而当前没有 leader（或正在重建）",
    "method {} is not allowed here": "此处不允许 {0} 方法",
    "internal error; see the node log": "内部错误；请查看节点日志",
    "apply failed: {}": "应用失败：{0}",
    "the state machine failed: {}": "状态机失败：{0}",
    "the state machine answered a batch of the wrong size": "状态机返回的批次大小不对",
    "no result for the batch": "该批次没有结果",
}
"""English text (as the code writes it, each ``{}`` a value) -> Chinese (``{0}``, ``{1}``... the values in
English order). ``{{`` / ``}}`` are literal braces, as in :meth:`str.format`."""

_ZH_WORDS: dict[str, str] = {
    "an integer": "整数", "a string": "字符串", "a number": "数字", "a boolean": "布尔值", "an array": "数组",
    "an object": "对象", "characters": "个字符", "items": "项", "null": "null", "integer": "整数", "string": "字符串",
    "number": "数字", "boolean": "布尔值", "array": "数组", "object": "对象",
}
"""Values that are words, not data (the kinds and units of schema messages)."""

def _compile(template: str) -> re.Pattern[str]:
    """``template``'s texts escaped, each ``{}`` a lazy group (``{{``/``}}`` are the braces themselves)."""
    out = []
    for literal, field, _spec, _conv in string.Formatter().parse(template):
        out.append(re.escape(literal))
        if field is not None:
            out.append("(.*?)")
    return re.compile("".join(out), re.DOTALL)


def _fixed(pattern: re.Pattern[str]) -> int:
    return len(pattern.pattern.replace("(.*?)", ""))


# the most specific text first: more fixed characters win over "{}: {}"
_ZH: list[tuple[re.Pattern[str], str]] = sorted(
    ((_compile(en), zh) for en, zh in ZH.items()),
    key=lambda pz: -_fixed(pz[0]),
)


def negotiate(accept_language: str | None) -> str:
    """The language of :data:`SUPPORTED` the ``Accept-Language`` header prefers (``en`` by default).

    >>> negotiate("zh-CN,zh;q=0.9,en;q=0.8"), negotiate("en-GB,zh;q=0.5"), negotiate("fr, zh;q=0"), negotiate(None)
    ('zh', 'en', 'en', 'en')
    """
    best, best_q = "en", 0.0
    for i, part in enumerate((accept_language or "").split(",")):
        tag, _, params = part.strip().partition(";")
        q = 1.0
        m = re.search(r"q=([0-9.]+)", params)
        if m:
            try:
                q = float(m.group(1))
            except ValueError:
                continue
        lang = tag.strip().lower().split("-")[0]
        # earlier entries win ties, as the header lists them in order of preference
        if lang in SUPPORTED and q > 0 and q - i * 1e-6 > best_q:
            best, best_q = lang, q - i * 1e-6
    return best


def translate(text: str, lang: str, _depth: int = 0) -> str:
    """``text`` in ``lang`` when the table has it, else ``text`` unchanged; a value that is itself a
    known text (a skip reason, a cron error) or a word of :data:`_ZH_WORDS` is translated too."""
    if lang != "zh" or not text or _depth > 3:
        return text
    if text in _ZH_WORDS:
        return _ZH_WORDS[text]
    words = text.split(" or ")
    if len(words) > 1 and all(w in _ZH_WORDS for w in words):
        return " 或 ".join(_ZH_WORDS[w] for w in words)
    for pattern, template in _ZH:
        m = pattern.fullmatch(text)
        if m:
            return template.format(*(translate(g, lang, _depth + 1) for g in m.groups()))
    return text


def localize(body: Any, lang: str) -> bool:
    """Translate, in place, a JSON body's ``error.message`` (and a batch's per-item errors) and its
    history events' ``execution_result``; whether anything was translated."""
    if lang == "en" or not isinstance(body, dict):
        return False
    changed = False
    errors = [body.get("error"), *(body.get("errors") or [])]
    for err in errors:
        holder = err.get("error", err) if isinstance(err, dict) else None
        if isinstance(holder, dict) and isinstance(holder.get("message"), str):
            new = translate(holder["message"], lang)
            changed |= new != holder["message"]
            holder["message"] = new
    for row in body.get("items") or []:
        if isinstance(row, dict) and row.get("kind") == "event" and isinstance(row.get("execution_result"), str):
            new = translate(row["execution_result"], lang)
            changed |= new != row["execution_result"]
            row["execution_result"] = new
    return changed
