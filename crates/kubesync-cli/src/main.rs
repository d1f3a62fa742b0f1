//! The `kubesync` executable.
#![forbid(unsafe_code)]

#[tokio::main]
async fn main() -> std::process::ExitCode {
    kubesync_cli::cli::main().await
}
