//! One conformance suite, two engines: every feature of the runtime driven through its public API,
//! against the engine the environment names.
//!
//! - By default: our development engine, embedded (`cargo test`).
//! - With the real engine's environment (`scripts/real-engine.sh start`, then
//!   `eval "$(scripts/real-engine.sh env)"`): the real Hatchet engine (`HATCHET_REAL_ENGINE=1`
//!   and the `HATCHET_CLIENT_*` variables). `cargo test --test suite conformance::` runs only
//!   this suite.
//!
//! Each test gets its own namespace, so tests run side by side on one real tenant, and again on a
//! tenant that kept the runs of earlier runs. Checks that need fault injection (a lost START, a
//! dropped ack) are ours-only and say so: [`Target::ours_only`] names them in the output.
//!
//! Timings are the real engine's: it polls its Postgres queue, so waits here are generous (a
//! wait ends as soon as its condition holds).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use crate::support::{counter, until, until_read};
use hatchet_dev_engine::DevEngine;
use hatchet_runtime::api::RunQuery;
use hatchet_runtime::config::ClientConfig;
use hatchet_runtime::durable::{Condition, any_of};
use hatchet_runtime::run::{BulkEvent, BulkRun, ChildOptions, PushOptions, RunFilter};
use hatchet_runtime::task::{Batch, Batching, DesiredLabel, StickyStrategy};
use hatchet_runtime::{
    Context, Error, Outcome, RunStatus, RuntimeHandle, RuntimeOptions, TaskError, TaskOptions,
    TriggerOptions, WorkerOptions, Workflow,
};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

mod api;
mod differential;
mod durable;
mod otel;
mod placement;
mod results;
mod runs;
mod traces;
mod triggers;

/// How long a result may take on either engine.
const RESULT: Duration = Duration::from_secs(90);

/// The process's OpenTelemetry globals (tracer provider, propagator): the test that sets them
/// holds this for writing and puts the no-op ones back before it lets go; a test whose runs must
/// carry no trigger span of ours (the engine's own `traceparent`) holds it for reading.
static OTEL_GLOBALS: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// The engine under test.
pub(crate) struct Target {
    ours: Option<DevEngine>,
    config: ClientConfig,
    script: Option<String>,
}

impl Target {
    /// The engine the environment names, with a fresh namespace for `test`.
    pub(crate) async fn new(test: &str) -> Target {
        let ns = format!(
            "conf_{}_{:x}",
            test,
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_micros())
                .unwrap_or(0)
                & 0xff_ffff_ffff
        );
        if Self::real_from_env() {
            let config = ClientConfig::from_lookup(|k| {
                if k == "HATCHET_CLIENT_NAMESPACE" {
                    Some(ns.clone())
                } else {
                    std::env::var(k).ok()
                }
            })
            .expect("the real engine's HATCHET_CLIENT_* environment (scripts/real-engine.sh env)");
            Target {
                ours: None,
                config,
                script: std::env::var("HATCHET_REAL_ENGINE_SCRIPT").ok(),
            }
        } else {
            Self::ours(&ns).await
        }
    }

    /// Our engine, embedded, with namespace `ns`.
    pub(crate) async fn ours(ns: &str) -> Target {
        let e = crate::support::engine().await;
        let config = ClientConfig::from_lookup(|k| {
            if k == "HATCHET_CLIENT_NAMESPACE" {
                return Some(ns.to_string());
            }
            e.client_config()
                .env_lines()
                .into_iter()
                .find(|(name, _)| name == k)
                .map(|(_, v)| v)
        })
        .expect("config");
        Target {
            ours: Some(e),
            config,
            script: None,
        }
    }

    /// Raw generated clients to this target's engine, for reading what the engine answers
    /// before the runtime reads it.
    pub(crate) fn raw(&self) -> hatchet_dev_engine::clients::RawClients {
        let env = self.config().env_lines();
        let token = env
            .iter()
            .find(|(k, _)| k == "HATCHET_CLIENT_TOKEN")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        hatchet_dev_engine::clients::RawClients::new(&self.config().grpc_uri(), &token)
            .expect("raw clients")
    }

    fn real_from_env() -> bool {
        std::env::var("HATCHET_REAL_ENGINE").is_ok_and(|v| v == "1" || v == "true")
    }

    /// Our engine, for a check that needs fault injection; `None` (and a line in the output
    /// naming the check) on the real engine.
    pub(crate) fn ours_only(&self, check: &str) -> Option<&DevEngine> {
        if self.ours.is_none() {
            eprintln!("conformance: ours-only (needs fault injection), skipped here: {check}");
        }
        self.ours.as_ref()
    }

    /// `period` on the real engine (a wait for one of its polling periods to pass), zero on
    /// ours, which has none.
    pub(crate) fn real_engine_period(&self, period: Duration) -> Duration {
        if self.ours.is_some() {
            Duration::ZERO
        } else {
            period
        }
    }

    pub(crate) fn config(&self) -> ClientConfig {
        self.config.clone()
    }

    pub(crate) async fn runtime(&self) -> RuntimeHandle {
        crate::support::runtime_from(self.config(), RuntimeOptions::new()).await
    }

    /// A runtime serving `workflows` with one worker of `slots`.
    pub(crate) async fn worker(&self, slots: usize, workflows: Vec<Workflow>) -> RuntimeHandle {
        self.worker_with(WorkerOptions::new("conformance", slots), workflows)
            .await
            .0
    }

    pub(crate) async fn worker_with(
        &self,
        opts: WorkerOptions,
        workflows: Vec<Workflow>,
    ) -> (RuntimeHandle, String) {
        let rt = self.runtime().await;
        for wf in workflows {
            rt.register(wf).await.expect("register");
        }
        let id = rt.start_worker(opts).await.expect("start worker");
        (rt, id)
    }

    /// Kills the engine and serves again: ours in process, the real one's processes through its
    /// script (SIGKILL, then a fresh start on the same database).
    pub(crate) async fn restart_engine(&self) {
        match (&self.ours, &self.script) {
            (Some(e), _) => e.restart().await.expect("restart"),
            (None, Some(script)) => {
                let script = script.clone();
                let st = tokio::task::spawn_blocking(move || {
                    std::process::Command::new(script)
                        .arg("restart-engine")
                        .status()
                })
                .await
                .expect("join")
                .expect("run the real engine's script");
                assert!(st.success(), "scripts/real-engine.sh restart-engine failed");
            }
            (None, None) => panic!("HATCHET_REAL_ENGINE_SCRIPT names no script to restart with"),
        }
    }

    /// The cluster's script, when the target is the cluster.
    pub(crate) fn script_is_cluster(&self) -> Option<&str> {
        self.script
            .as_deref()
            .filter(|s| s.ends_with("real-cluster.sh"))
    }

    /// Runs one of the cluster's fault verbs (`scripts/real-cluster.sh VERB`); `false` when the
    /// target is not the cluster (the check is then skipped, with a line naming it).
    pub(crate) async fn cluster_fault(&self, verb: &str, check: &str) -> bool {
        self.cluster_fault_with(&[verb], &[], check).await
    }

    /// [`Target::cluster_fault`] with arguments and environment (`CLUSTER_IDLE_TIMEOUT`, ...).
    pub(crate) async fn cluster_fault_with(
        &self,
        args: &[&str],
        env: &[(&str, &str)],
        check: &str,
    ) -> bool {
        let Some(script) = self.script_is_cluster().map(str::to_string) else {
            eprintln!("conformance: cluster only (needs its proxy), skipped here: {check}");
            return false;
        };
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let st = tokio::task::spawn_blocking(move || {
            std::process::Command::new(script)
                .args(&args)
                .envs(env)
                .status()
        })
        .await
        .expect("join")
        .expect("run the cluster's script");
        assert!(st.success(), "scripts/real-cluster.sh failed");
        true
    }

    /// One value read from the real engine's own tables (`scripts/real-engine.sh psql`), as
    /// evidence of what it holds; `None` on ours.
    pub(crate) async fn real_table_value(&self, sql: &str) -> Option<String> {
        let script = self.script.clone()?;
        let sql = sql.to_string();
        let out = tokio::task::spawn_blocking(move || {
            std::process::Command::new(script)
                .args(["psql", "-Atc", &sql])
                .output()
        })
        .await
        .expect("join")
        .expect("run the real engine's script");
        assert!(
            out.status.success(),
            "psql: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // The first line: a write's `RETURNING` row comes before its command tag.
        let text = String::from_utf8_lossy(&out.stdout);
        Some(text.lines().next().unwrap_or_default().trim().to_string())
    }

    /// What the real engine's tables hold of one run (`scripts/real-engine.sh evidence`): printed
    /// where a run did not end, to explain it from the engine's records; `None` on ours.
    pub(crate) async fn real_evidence(&self, run_id: &str) -> Option<String> {
        let script = self.script.clone()?;
        let run_id = run_id.to_string();
        let out = tokio::task::spawn_blocking(move || {
            std::process::Command::new(script)
                .args(["evidence", &run_id])
                .output()
        })
        .await
        .ok()?
        .ok()?;
        Some(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }

    /// The tenant the client's token is for.
    pub(crate) fn tenant_id(&self) -> String {
        self.config
            .env_lines()
            .into_iter()
            .find(|(k, _)| k == "HATCHET_CLIENT_TENANT_ID")
            .map(|(_, v)| v)
            .unwrap_or_default()
    }

    /// A REST read with the client's token (for reads the runtime has no typed call for yet).
    pub(crate) async fn rest_get(&self, path: &str) -> Value {
        match self.rest_read(path).await {
            Some(v) => v,
            None => panic!("GET {path}: 404 Not Found"),
        }
    }

    /// [`Target::rest_get`], with `None` for a 404: the real engine answers 404 for a task
    /// its read model has not written yet, a moment after the run's result is known.
    pub(crate) async fn rest_read(&self, path: &str) -> Option<Value> {
        let env: Vec<(String, String)> = self.config.env_lines();
        let get = |k: &str| {
            env.iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        let url = format!("{}{}", get("HATCHET_CLIENT_SERVER_URL"), path);
        let resp = reqwest::Client::new()
            .get(&url)
            .bearer_auth(get("HATCHET_CLIENT_TOKEN"))
            .send()
            .await
            .expect("REST read");
        if resp.status() == reqwest::StatusCode::NOT_FOUND {
            return None;
        }
        assert!(resp.status().is_success(), "GET {path}: {}", resp.status());
        Some(resp.json().await.expect("JSON"))
    }

    /// A `GET` as answered, whatever its status: the status and the body (`null` when it is
    /// not JSON).
    pub(crate) async fn rest_answer(&self, path: &str) -> (u16, Value) {
        // A raw client: the process may have no runtime yet to pick the TLS crypto provider.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let env: Vec<(String, String)> = self.config.env_lines();
        let get = |k: &str| {
            env.iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        let resp = reqwest::Client::new()
            .get(format!("{}{}", get("HATCHET_CLIENT_SERVER_URL"), path))
            .bearer_auth(get("HATCHET_CLIENT_TOKEN"))
            .send()
            .await
            .expect("REST answer");
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }
}

/// GetRunDetails of `run`, read raw (what an official SDK reads).
async fn raw_run_details(
    t: &Target,
    run: &str,
) -> Result<hatchet_runtime::protocol::v1::GetRunDetailsResponse, tonic::Status> {
    t.raw()
        .admin()
        .get_run_details(hatchet_runtime::protocol::v1::GetRunDetailsRequest {
            external_id: run.to_string(),
        })
        .await
        .map(|r| r.into_inner())
}

/// A run's status once its readable row exists: the real engine writes that row after the
/// trigger answers, so a first read may be a 404.
async fn status_once_written(api: &hatchet_runtime::api::Api, run_id: &str) -> RunStatus {
    until_read(
        "the run's readable row",
        || api.run_status(run_id),
        |s| !s.as_ref().is_err_and(|e| e.is_not_found()),
    )
    .await
    .expect("status")
}

#[derive(Debug, Serialize, Deserialize, PartialEq, Clone)]
struct Num {
    n: i64,
}
