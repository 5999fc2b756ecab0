//! Generates the gRPC messages and service of `proto/dist_bridge.proto` with the `protoc`
//! binary vendored in `protoc-bin-vendored`, so the build needs no system protobuf compiler.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    let mut config = tonic_prost_build::Config::new();
    // What setting `PROTOC` would do, without mutating the process environment.
    config.protoc_executable(protoc);
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_with_config(config, &["proto/dist_bridge.proto"], &["proto"])?;
    println!("cargo:rerun-if-changed=proto/dist_bridge.proto");
    Ok(())
}
