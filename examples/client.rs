//! A client only: triggers a workflow by name and prints its result.
//!
//! `cargo run --example client -- <workflow> '<json input>' [--no-wait]` with the
//! `HATCHET_CLIENT_*` variables set. Exit code 1 (and the error, which says what to do) on failure.

use std::time::Duration;

use hatchet_runtime::RuntimeHandle;
use serde_json::Value;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(workflow) = args.first() else {
        eprintln!("usage: client <workflow> '<json input>' [--no-wait]");
        std::process::exit(2);
    };
    let input: Value = match serde_json::from_str(args.get(1).map(String::as_str).unwrap_or("{}")) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("the input is not JSON: {e}");
            std::process::exit(2);
        }
    };
    let rt = match RuntimeHandle::from_env().await {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    let code = match rt.run_no_wait(workflow, &input).await {
        Err(e) => {
            eprintln!("{e}");
            1
        }
        Ok(h) if args.iter().any(|a| a == "--no-wait") => {
            println!("{}", h.run_id());
            0
        }
        Ok(h) => match h.result_within::<Value>(Duration::from_secs(120)).await {
            Ok(v) => {
                println!("{v}");
                0
            }
            Err(e) => {
                eprintln!("workflow {workflow}: {e}");
                1
            }
        },
    };
    rt.shutdown(Duration::from_secs(1)).await;
    std::process::exit(code);
}
