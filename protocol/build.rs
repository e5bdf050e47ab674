//! Compiles `proto/` with protox (pure Rust: no system `protoc`) and generates tonic client and
//! server code. The encoded descriptor set is written to `$OUT_DIR/hatchet_descriptor.bin` so tests
//! can enumerate every compiled method.

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
    let fds = protox::compile(PROTOS, ["proto"])?;
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("hatchet_descriptor.bin"), fds.encode_to_vec())?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .codec_path("crate::codec::WireCodec")
        .compile_fds(fds)?;
    Ok(())
}
