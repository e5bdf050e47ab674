#!/usr/bin/env bash
# The conformance checks that matter where users scale, run against the reference deployment
# (scripts/real-cluster.sh: two gRPC replicas behind nginx, RabbitMQ, a controllers+scheduler
# process), through its proxy: a zombie worker's reopen, an actions stream the proxy refuses
# (`/ready` fails, then recovers), workers spreading onto a replica started after them (stream
# rotation), an idle worker's readiness, a durable wait in doubt after a
# cut, an assignment the engine never sends, and results through an engine restart. Each runs
# alone; one that fails runs once more and is reported FLAKY, as scripts/conformance-real.sh does.
#
#   scripts/conformance-cluster.sh        # starts the cluster if it is not running
set -uo pipefail
cd "$(dirname "$0")/.."
if [[ "$(scripts/real-cluster.sh status)" != *"proxy: running"* ]]; then
  timeout 1200 scripts/real-cluster.sh start >/dev/null || exit 1
fi
eval "$(scripts/real-cluster.sh env)"
export HATCHET_REAL_ENGINE=1 HATCHET_REAL_ENGINE_SCRIPT="$PWD/scripts/real-cluster.sh"
source scripts/lib-rerun.sh
for t in conformance::results::a_zombie_worker_reopens_its_stream_at_its_next_heartbeat_and_takes_work_again \
  conformance::results::cluster_a_worker_whose_actions_stream_cannot_be_reopened_is_not_ready \
  conformance::results::cluster_workers_spread_onto_a_replica_started_after_them \
  conformance::results::an_idle_worker_is_ready_within_seconds \
  conformance::durable::a_durable_wait_in_doubt_after_a_cut_restarts_from_the_log_without_a_retry \
  conformance::results::an_assignment_the_engine_never_sends_is_taken_back_and_run_once \
  conformance::results::results_survive_the_engine_restarting_mid_run; do
  run_alone "the cluster" "$t" 600
done
report_flaky
