//! `hatchet-dev-engine`: the embedded development engine as a standalone process.
//!
//! By hand: `hatchet-dev-engine [--grpc-port N] [--api-port N] [--virtual-time]
//! [--instant-timing]` prints the token
//! and the `HATCHET_CLIENT_*` lines a client needs, and serves until Ctrl-C. With
//! `--virtual-time` the engine's clock jumps over waits (see `DevEngineOptions::virtual_time`);
//! `POST /_dev/advance?seconds=N` on the REST port jumps by hand. With `--instant-timing`
//! (`--no-status-lag` is the same flag, its older name) none of the real engine's timing is
//! kept (`Timing::Instant`): timers are read when due, not at a 1 s poll; REST statuses are
//! published at once, not 1 to 2 s after a run's creation; a task's end and its run's end at
//! once, not 30 ms after it came; and a subscription of a run that had ended at once, not at
//! its stream's next 1 s tick (kindnesses for benchmarks).
//!
//! As the official Python SDK's embedded engine (`HATCHET_CLIENT_EMBEDDED_BINARY_PATH`): accepts
//! `-handshake-file F`, `-grpc-port N`, `-api-port N` (one or two dashes), ignores the database and
//! logging flags, writes `{token, tenant_id, grpc_address, api_url}` to F once serving, and exits
//! when its stdin closes.

use std::path::PathBuf;
use std::process::ExitCode;

use hatchet_dev_engine::{DevEngine, DevEngineOptions, Timing};
use tokio::io::AsyncReadExt as _;

/// Flags that take a value and are ignored (database, broker, logging).
const IGNORED_WITH_VALUE: &[&str] = &[
    "database-url",
    "rabbitmq-url",
    "postgres-data-dir",
    "log-level",
];
/// Flags without a value that are ignored.
const IGNORED_SWITCHES: &[&str] = &["no-api", "no-migrations"];

#[derive(Debug, Default)]
struct Args {
    grpc_port: u16,
    api_port: u16,
    handshake: Option<PathBuf>,
    virtual_time: bool,
    /// `--instant-timing` (or its older name `--no-status-lag`): `Timing::Instant`.
    instant_timing: bool,
}

fn parse(args: impl IntoIterator<Item = String>) -> Result<Args, String> {
    let mut out = Args::default();
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        let flag = a.trim_start_matches('-');
        let (name, inline) = match flag.split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (flag.to_string(), None),
        };
        let mut value = |n: &str| {
            inline
                .clone()
                .or_else(|| it.next())
                .ok_or_else(|| format!("-{n} needs a value"))
        };
        match name.as_str() {
            "grpc-port" => {
                out.grpc_port = value("grpc-port")?
                    .parse()
                    .map_err(|_| "-grpc-port takes a port number")?
            }
            "api-port" => {
                out.api_port = value("api-port")?
                    .parse()
                    .map_err(|_| "-api-port takes a port number")?
            }
            "handshake-file" => out.handshake = Some(PathBuf::from(value("handshake-file")?)),
            "virtual-time" => out.virtual_time = true,
            // `--no-status-lag` is the older name (scripts use it: benches/python/bench.py).
            "instant-timing" | "no-status-lag" => out.instant_timing = true,
            n if IGNORED_WITH_VALUE.contains(&n) => {
                value(n)?;
            }
            n if IGNORED_SWITCHES.contains(&n) => {}
            "h" | "help" => return Err(String::new()),
            other => return Err(format!("unknown flag -{other}")),
        }
    }
    Ok(out)
}

const USAGE: &str = "usage: hatchet-dev-engine [--grpc-port N] [--api-port N] [--handshake-file F] \
                     [--virtual-time] [--instant-timing]";

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("hatchet-dev-engine: {e}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let mut opts = DevEngineOptions::default()
        .grpc_port(args.grpc_port)
        .api_port(args.api_port);
    if args.virtual_time {
        opts = opts.virtual_time();
    }
    if args.instant_timing {
        // A kindness for benchmarks: none of the real engine's timing (`Timing::Instant`).
        opts = opts.timing(Timing::Instant);
    }
    let engine = match DevEngine::start(opts).await {
        Ok(e) => e,
        Err(e) => {
            eprintln!("hatchet-dev-engine: cannot bind: {e}");
            return ExitCode::from(1);
        }
    };
    let config = engine.client_config();
    match &args.handshake {
        Some(path) => {
            let token = config
                .env_lines()
                .into_iter()
                .next()
                .map(|(_, v)| v)
                .unwrap_or_default();
            let doc = serde_json::json!({
                "token": token,
                "tenant_id": engine.tenant_id(),
                "grpc_address": engine.grpc_addr().to_string(),
                "api_url": engine.api_url(),
            });
            // Write then rename, so a poller never reads half a file.
            let tmp = path.with_extension("tmp");
            if let Err(e) =
                std::fs::write(&tmp, doc.to_string()).and_then(|_| std::fs::rename(&tmp, path))
            {
                eprintln!("hatchet-dev-engine: cannot write {}: {e}", path.display());
                return ExitCode::from(1);
            }
            // Embedded mode: serve until stdin closes (or a signal).
            let mut stdin = tokio::io::stdin();
            let mut buf = [0u8; 256];
            loop {
                tokio::select! {
                    r = stdin.read(&mut buf) => if matches!(r, Ok(0) | Err(_)) { break },
                    _ = tokio::signal::ctrl_c() => break,
                }
            }
        }
        None => {
            println!(
                "hatchet development engine {}",
                hatchet_dev_engine::ENGINE_VERSION
            );
            println!(
                "gRPC on {}, REST on {}\n",
                engine.grpc_addr(),
                engine.api_url()
            );
            println!("export these to point a client at it:");
            for (k, v) in config.env_lines() {
                println!("export {k}={v}");
            }
            let _ = tokio::signal::ctrl_c().await;
        }
    }
    engine.shutdown().await;
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Result<Args, String> {
        parse(s.split_whitespace().map(String::from))
    }

    #[test]
    fn accepts_the_python_sdk_flags() {
        let a = args("-handshake-file /tmp/h.json -grpc-port 7077 -api-port 8080 -no-api -database-url x -log-level debug")
            .expect("parses");
        assert_eq!((a.grpc_port, a.api_port), (7077, 8080));
        assert_eq!(
            a.handshake.as_deref(),
            Some(std::path::Path::new("/tmp/h.json"))
        );
        let a = args("--grpc-port=1 --api-port 2").expect("parses");
        assert_eq!((a.grpc_port, a.api_port, a.virtual_time), (1, 2, false));
        assert!(args("--virtual-time").expect("parses").virtual_time);
        assert!(args("--instant-timing").expect("parses").instant_timing);
        assert!(!args("").expect("parses").instant_timing);
        assert!(
            args("--no-status-lag").expect("parses").instant_timing,
            "the older name"
        );
    }

    #[test]
    fn refuses_bad_flags_with_a_reason() {
        assert!(args("-grpc-port").unwrap_err().contains("needs a value"));
        assert!(args("-grpc-port x").unwrap_err().contains("port number"));
        assert!(args("--bogus").unwrap_err().contains("unknown flag"));
    }
}
