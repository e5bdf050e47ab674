#!/usr/bin/env bash
# Evidence from the real engine's tables for each run of a chaos suite run that did not come back
# right (scripts/chaos-real.sh calls it with its output folder): the run's lookup row, DAG, tasks,
# task events, runtime rows, unsatisfied matches (a DAG task not yet created waits on one), queue
# items, the read model's row, and the message queue's pending items; then the keys with more
# than one run in the engine's main tables, and the runs missing from its read model.
#
#   scripts/chaos-evidence.sh target/chaos/<tag>
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${1:?usage: $0 target/chaos/<tag>}"
TAG="$(basename "$OUT")"
q() { "$ROOT/scripts/real-engine.sh" psql -P pager=off -c "$1"; }

echo "== faults"
cat "$OUT/faults.log" 2>/dev/null | grep -v '^real-engine' || true
while IFS=$'\t' read -r end workflow key rest; do
  run="${rest%%$'\t'*}"
  echo
  echo "== $end $workflow $key run $run"
  echo "-- executions in the handlers (task, key, retry count, worker pid)"
  grep -P "\t$key\t" "$OUT/exec.log" || echo "(none)"
  [[ "$run" =~ ^[0-9a-f-]{36}$ ]] || continue
  q "select external_id, inserted_at, dag_id, task_id from v1_lookup_table where external_id = '$run'"
  q "select id, step_readable_id, retry_count, inserted_at, initial_state, concurrency_parent_strategy_ids
       from v1_task where workflow_run_id = '$run' order by id"
  q "select e.task_id, t.step_readable_id, e.retry_count, e.event_type, e.created_at, left(e.data::text, 120) data
       from v1_task_event e join v1_task t on t.id = e.task_id and t.inserted_at = e.task_inserted_at
      where t.workflow_run_id = '$run' order by e.created_at"
  q "select r.task_id, r.retry_count, r.worker_id, r.timeout_at from v1_task_runtime r
       join v1_task t on t.id = r.task_id and t.inserted_at = r.task_inserted_at where t.workflow_run_id = '$run'"
  q "select id, kind, is_satisfied, trigger_step_index, trigger_external_id from v1_match
      where trigger_workflow_run_id = '$run' or trigger_external_id = '$run'"
  q "select q.task_id, q.retry_count, q.queue, q.priority from v1_queue_item q
       join v1_task t on t.id = q.task_id and t.inserted_at = q.task_inserted_at where t.workflow_run_id = '$run'"
  q "select readable_status, inserted_at from v1_runs_olap where external_id = '$run'"
done <"$OUT/problems.tsv"

echo
echo "== keys of this run with more than one run in the engine's main tables"
q "select additional_metadata->>'k' k, count(distinct workflow_run_id) runs from v1_task
    where additional_metadata->>'chaos' = '$TAG' and step_readable_id in ('a', 't', 'd')
    group by 1 having count(distinct workflow_run_id) > 1"
echo "== runs in the main tables missing from the read model (the REST run list)"
q "select t.workflow_run_id, t.additional_metadata->>'k' k, t.inserted_at from v1_task t
    where t.additional_metadata->>'chaos' = '$TAG' and t.step_readable_id in ('a', 't', 'd')
      and not exists (select 1 from v1_runs_olap o where o.external_id = t.workflow_run_id)"
echo "== the message queue's items not yet consumed (ASSIGNED ones were read by a process that died"
echo "   before acking them: the engine never reads them again, and deletes them 5 minutes on)"
q "select \"queueId\", status, payload->>'id' as message, count(*), min(\"expiresAt\") from \"MessageQueueItem\" group by 1, 2, 3"
