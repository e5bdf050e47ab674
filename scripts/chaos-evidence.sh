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
  "$ROOT/scripts/real-engine.sh" evidence "$run"
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
