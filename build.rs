//! Compiles `proto/` with protox (pure Rust: no system `protoc`) into the runtime's private
//! `protocol` module: tonic clients always, servers only with the `protocol` feature (the
//! development engine and this workspace's tests turn it on). The encoded descriptor set is
//! written to `$OUT_DIR/hatchet_descriptor.bin` so tests can enumerate every compiled method.

use prost::Message as _;

const PROTOS: &[&str] = &[
    "dispatcher/dispatcher.proto",
    "events/events.proto",
    "workflows/workflows.proto",
    "v1/dispatcher.proto",
    "v1/workflows.proto",
    "v1/shared/condition.proto",
    "v1/shared/trigger.proto",
    "otlp/trace_export.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    println!("cargo:rerun-if-changed=build.rs");
    let servers = std::env::var_os("CARGO_FEATURE_PROTOCOL").is_some();
    let fds = protox::compile(PROTOS, ["proto"])?;
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("hatchet_descriptor.bin"), fds.encode_to_vec())?;
    tonic_prost_build::configure()
        .build_server(servers)
        .build_client(true)
        .codec_path("crate::protocol::codec::WireCodec")
        .compile_fds(fds)?;
    Ok(())
}
